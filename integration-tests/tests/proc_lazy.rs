//! Lazy restart (issue 15, `crum restart --lazy`, `crum_restart::lazy`): the program runs
//! before its large memory is read; a page server process fills each page on first touch
//! and prefetches the rest. The program (`lazy_mem.c`) checks every word of one region each
//! step, `read(2)`s a file into the other (a system call writing memory not yet served) and
//! checks that other region whole only at its end. The servers are held off prefetching
//! (`CRUM_LAZY_PREFETCH_AFTER_MS`) so that pages are served on demand and are still missing
//! when the program is checkpointed or forks; their counts (`CRUM_LAZY_STATS`) show what
//! they served.
mod proc_common;
use proc_common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// `crum restart --lazy IMAGE` with a stats file and the server held off prefetching for
/// `hold_ms` (None: prefetching at once).
fn restart_lazy(sb: &Sandbox, image: &Path, name: &str, stats: &Path, hold_ms: Option<u64>) -> Proc {
    let mut cmd = Command::new(crum_bin());
    cmd.args(["restart", "--lazy"])
        .arg(image)
        .current_dir(sb.path("run"))
        .env("CRUM_CONTROL_DIR", sb.sock())
        .env("CRUM_LAZY_STATS", stats);
    if let Some(ms) = hold_ms {
        cmd.env("CRUM_LAZY_PREFETCH_AFTER_MS", ms.to_string());
    }
    spawn_cmd(&mut cmd, sb.path(name))
}

/// The page server's counts once it has ended (it writes them last).
fn stats(path: &Path) -> std::collections::HashMap<String, f64> {
    let t0 = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if s.ends_with('\n') {
                return s
                    .split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.parse().unwrap_or(f64::NAN)))
                    .collect();
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "the page server never wrote {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A long hold: the server prefetches only when the program asks for everything.
const HOLD: Option<u64> = Some(600_000);

#[test]
fn lazy_restart_serves_pages_on_touch_and_a_checkpoint_while_lazy_brings_in_the_rest() {
    let sb = Sandbox::new();
    let prog = build_c("lazy_mem");
    let args = ["40", "100", "48", "0"];
    let mut p = run_under_crum(&sb, &prog, &args, &[], "run.out");
    p.wait_lines(2);
    let img = checkpoint(&sb, p.pid());
    p.wait_lines(p.lines() + 1);
    p.kill9();
    let expected = expected_output(&sb, &prog, &args);

    let s1 = sb.path("stats1");
    let mut r = restart_lazy(&sb, &img, "r1.out", &s1, HOLD);
    r.wait_lines(2);
    // The image may go once the program runs: the server holds its files open.
    std::fs::remove_dir_all(&img).unwrap();
    // Most of region B has not been touched: the checkpoint must bring it in, not write
    // zeros (the restarted program checks B at its end).
    let d = checkpoint(&sb, r.pid());
    r.wait_lines(r.lines() + 1);
    r.kill9();
    let at = assert_continues(&expected, 0, &p.output(), &r.output(), false, "lazy restart");
    let st = stats(&s1);
    assert_eq!(st["status"], 0.0, "{st:?}\n{}", r.stderr());
    assert_eq!(st["remaining_pages"], 0.0, "{st:?}");
    assert!(st["faults"] > 0.0 && st["on_demand_pages"] > 0.0, "region A was served on demand: {st:?}");
    assert!(st["prefetched_pages"] > 0.0, "the checkpoint had region B brought in: {st:?}");

    // Restart of the restart's image, lazily again, prefetching at once: runs to its end
    // (B checked whole) as the uninterrupted run.
    let s2 = sb.path("stats2");
    let mut r2 = restart_lazy(&sb, &d, "r2.out", &s2, None);
    assert_eq!(r2.wait_exit(), 0, "{}", r2.stderr());
    assert_continues(&expected, at, &r.output(), &r2.output(), true, "lazy restart of a lazy restart's image");
    assert!(r2.output().contains("B ok"), "{}", r2.output());
    let st = stats(&s2);
    assert_eq!(st["status"], 0.0, "{st:?}");
    assert_eq!(st["remaining_pages"], 0.0, "{st:?}");
}

#[test]
fn a_fork_while_lazy_gives_the_child_every_page() {
    let sb = Sandbox::new();
    let prog = build_c("lazy_mem");
    let args = ["30", "100", "32", "1"];
    let mut p = run_under_crum(&sb, &prog, &args, &[], "run.out");
    p.wait_lines(3);
    let img = checkpoint(&sb, p.pid());
    p.kill9();
    let expected = expected_output(&sb, &prog, &args);
    std::fs::write(sb.path("run/lazy_mem.fork"), b"").unwrap();
    let s = sb.path("stats");
    // Each step forks a child that checks all of region B, which the server (held off)
    // has not prefetched: the fork waits until every page is in.
    let mut r = restart_lazy(&sb, &img, "r.out", &s, HOLD);
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert_continues(&expected, 0, &p.output(), &r.output(), true, "lazy restart of a program that forks");
    assert!(!r.output().contains("BAD"), "{}", r.output());
    let st = stats(&s);
    assert_eq!(st["status"], 0.0, "{st:?}");
    assert!(st["prefetched_pages"] > 0.0, "the fork had the rest brought in: {st:?}");
}

/// The page server of the restart whose stats file is `stats` (its environment is the
/// restorer's): found among the processes named `crum-lazy-pages`.
fn server_of(stats: &Path) -> Option<i32> {
    let want = format!("CRUM_LAZY_STATS={}", stats.display());
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() != "crum-lazy-pages" {
            continue;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            return Some(pid);
        }
    }
    None
}

#[test]
fn a_killed_page_server_ends_the_program_with_an_error_rather_than_a_hang() {
    let sb = Sandbox::new();
    let prog = build_c("lazy_mem");
    let args = ["60", "100", "32", "0"];
    let mut p = run_under_crum(&sb, &prog, &args, &[], "run.out");
    p.wait_lines(2);
    let img = checkpoint(&sb, p.pid());
    p.kill9();
    let s = sb.path("stats");
    let mut r = restart_lazy(&sb, &img, "r.out", &s, HOLD);
    r.wait_lines(1);
    let t0 = Instant::now();
    let server = loop {
        if let Some(pid) = server_of(&s) {
            break pid;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no page server found");
        std::thread::sleep(Duration::from_millis(10));
    };
    // SAFETY: kill(2) of the page server found above.
    assert_eq!(unsafe { libc::kill(server, libc::SIGKILL) }, 0);
    // Region B is still missing: the program must not wait forever for it.
    let code = r.wait_exit();
    assert_eq!(code, -1, "killed by a signal: {}", r.stderr());
    let err = r.stderr();
    assert!(err.contains("page server") && err.contains("was killed by signal 9") && err.contains("is killed"), "{err}");
    assert!(!r.output().contains("B ok") && !r.output().contains("BAD"), "{}", r.output());
}

#[test]
fn lazy_restart_falls_back_to_eager_and_says_why() {
    let sb = Sandbox::new();
    let prog = build_c("counter");
    let args = ["30", "50"];
    let mut p = run_under_crum(&sb, &prog, &args, &[], "run.out");
    p.wait_lines(2);
    let img = checkpoint(&sb, p.pid());
    p.kill9();
    let s = sb.path("stats");
    let mut r = restart_lazy(&sb, &img, "r.out", &s, None);
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert!(r.stderr().contains("restarting eagerly, not lazily: no private memory region"), "{}", r.stderr());
    let expected = expected_output(&sb, &prog, &args);
    assert_continues(&expected, 0, &p.output(), &r.output(), true, "eager fallback");
    assert!(!s.exists(), "no page server ran");
}

/// `crum restart --eager` of an image a default restart would serve lazily.
#[test]
fn eager_restart_of_a_large_image_starts_no_page_server() {
    let sb = Sandbox::new();
    let prog = build_c("lazy_mem");
    let args = ["20", "100", "160", "0"];
    let mut p = run_under_crum(&sb, &prog, &args, &[], "run.out");
    p.wait_lines(2);
    let img: PathBuf = checkpoint(&sb, p.pid());
    p.kill9();
    let s = sb.path("stats");
    let mut cmd = Command::new(crum_bin());
    cmd.args(["restart", "--eager"]).arg(&img).current_dir(sb.path("run")).env("CRUM_CONTROL_DIR", sb.sock()).env("CRUM_LAZY_STATS", &s);
    let mut r = spawn_cmd(&mut cmd, sb.path("r.out"));
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    let expected = expected_output(&sb, &prog, &args);
    assert_continues(&expected, 0, &p.output(), &r.output(), true, "eager restart");
    assert!(!s.exists(), "no page server ran");
    // The same image restarted by default (320 MiB: lazily) ends the same way.
    let mut cmd = Command::new(crum_bin());
    cmd.arg("restart").arg(&img).current_dir(sb.path("run")).env("CRUM_CONTROL_DIR", sb.sock()).env("CRUM_LAZY_STATS", &s);
    let mut r2 = spawn_cmd(&mut cmd, sb.path("r2.out"));
    assert_eq!(r2.wait_exit(), 0, "{}", r2.stderr());
    assert_continues(&expected, 0, &p.output(), &r2.output(), true, "default (lazy) restart");
    let st = stats(&s);
    assert_eq!(st["status"], 0.0, "{st:?}");
}

/// Pages the program drops while they are still missing (`MADV_DONTNEED`: the server hears
/// of it as a remove event) read as zeros afterwards, never as the image's bytes:
/// `inc_memory.c` drops a 64 KiB piece each step and prints a checksum of all its memory.
#[test]
fn pages_dropped_while_lazy_read_as_zeros_not_the_images() {
    let sb = Sandbox::new();
    let prog = build_c("inc_memory");
    let args = ["30", "100", "64"];
    let mut p = run_under_crum(&sb, &prog, &args, &[], "run.out");
    p.wait_lines(2);
    let img = checkpoint(&sb, p.pid());
    p.kill9();
    let expected = expected_output(&sb, &prog, &args);
    let s = sb.path("stats");
    let mut r = restart_lazy(&sb, &img, "r.out", &s, HOLD);
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert_continues(&expected, 0, &p.output(), &r.output(), true, "lazy restart of a program dropping pages");
    let st = stats(&s);
    assert_eq!(st["status"], 0.0, "{st:?}");
    assert!(st["faults"] > 0.0, "{st:?}");
}
