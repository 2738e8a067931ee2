"""A python3 job: a multiprocessing pool of two forked workers (pipes, and semaphores in
shared memory whose files are removed at once) squares numbers; every 10th step the main
process also runs a shell through subprocess and prints what it said. Output is the same
on every run: a restart that loses or repeats work shows. Arguments: steps, and the pace
in seconds (each worker's task and each step of the main process take that long)."""
import multiprocessing as mp
import subprocess
import sys
import time


PACE = float(sys.argv[2]) if len(sys.argv) > 2 else 0.03


def work(x):
    time.sleep(PACE)
    return x * x + 1


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    mp.set_start_method("fork")
    with mp.Pool(2) as pool:
        for i, y in enumerate(pool.imap(work, range(n))):
            if y != i * i + 1:
                print(f"FAIL step {i}: got {y}", flush=True)
                sys.exit(1)
            line = f"step {i} got {y}"
            if i % 10 == 0:
                said = subprocess.run(["sh", "-c", 'echo "sub $0"', str(i)], capture_output=True, text=True).stdout.strip()
                line += f" ({said})"
            print(line, flush=True)
            time.sleep(PACE)
    print("done", flush=True)
