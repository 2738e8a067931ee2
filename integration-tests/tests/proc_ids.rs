//! The process's ids as the program sees them are those it started with, after a restart
//! and a restart of a restart: getpid, the main thread's gettid, process group and session,
//! kill/sigqueue/tgkill to its own pid, a forked child's getppid (`c/pid_identity.c`). And a
//! real program that depends on it: Python's asyncio, whose event loop is "not running" in
//! a process whose pid changed.
mod proc_common;
use proc_common::*;

#[test]
fn the_pid_and_the_ids_derived_from_it_stay_those_the_program_started_with() {
    // 120 steps: with 40, the program could end under load before the second checkpoint of
    // the scenario reached it (the client then found a zombie and said "not under crum").
    scenario("pid_identity", &["120", "40"]);
}

const ASYNCIO: &str = r#"
import asyncio, os
async def main():
    q = asyncio.Queue()
    pid = os.getpid()
    async def producer():
        for i in range(300):
            await q.put(i)
            await asyncio.sleep(0.01)
        await q.put(None)
    task = asyncio.get_running_loop().create_task(producer())
    total = 0
    while (x := await q.get()) is not None:
        assert os.getpid() == pid
        total += x
        print("item", x, "total", total, flush=True)
    await task
    print("done", total, flush=True)
asyncio.run(main())
"#;

#[test]
fn a_python_asyncio_program_runs_on_after_restart_and_restart_of_a_restart() {
    let Some(python) = ["/usr/bin/python3", "/usr/local/bin/python3"].into_iter().find(|p| std::path::Path::new(p).exists()) else {
        eprintln!("python3 is not installed: skipped");
        return;
    };
    let sb = Sandbox::new();
    std::fs::write(sb.path("run/aio.py"), ASYNCIO).unwrap();
    let python = std::path::Path::new(python);
    let mut p = run_under_crum(&sb, python, &["aio.py"], &[], "run.out");
    p.wait_lines(30);
    let img = checkpoint(&sb, p.pid());
    p.kill9();
    let mut r = restart(&sb, &img, "restart1.out");
    r.wait_lines(3);
    let img2 = checkpoint(&sb, r.pid());
    r.kill9();
    assert!(!r.output().contains("Traceback") && !r.stderr().contains("Traceback"), "{}{}", r.output(), r.stderr());
    let mut r2 = restart(&sb, &img2, "restart2.out");
    assert_eq!(r2.wait_exit(), 0, "{}{}", r2.output(), r2.stderr());
    assert!(r2.output().ends_with("done 44850\n"), "{}{}", r2.output(), r2.stderr());
}
