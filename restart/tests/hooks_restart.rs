//! A Rust process checkpoints itself with `checkpoint_now` (hooks installed), and a second
//! process restarts it with `crum_restart::restart`: after the restart the `restore` hook
//! sees the section its `collect` hook wrote, the process has a new pid, and it finishes its
//! work. The test binary plays all three parts, chosen by environment variables.
use std::process::Command;

use crum_ckpt::agent::{checkpoint_now, set_hooks, Hooks};

const CHILD: &str = "CRUM_HOOKS_TEST_CHILD";
const RESTORE: &str = "CRUM_HOOKS_TEST_RESTORE";
const TEST: &str = "restore_hook_sees_collected_sections_after_restart";

/// This test binary, running only this test, without descriptors leaked by whatever started
/// the tests (a restart refuses pipes to unknown processes).
fn self_cmd() -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", TEST, "--nocapture", "--test-threads", "1"]);
    // SAFETY: close_range is async-signal-safe and only touches the child's fd table.
    unsafe {
        c.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        });
    }
    c
}

fn child(dir: &str) {
    set_hooks(Hooks {
        quiesce: || Ok(()),
        collect: || Ok(vec![("test-device".into(), crum_ckpt::agent::SectionData::Bytes(b"device state 42".to_vec()))]),
        resume: || {},
        restore: |get| {
            let s = get("test-device").ok_or("no test-device section")?;
            println!("restore hook saw: {}", String::from_utf8_lossy(&s));
            Ok(())
        },
    });
    // SAFETY: getpid cannot fail.
    let pid_before = unsafe { libc::getpid() };
    let work: Vec<u64> = (0..1000).collect();
    let r = checkpoint_now(std::path::Path::new(dir), false).unwrap();
    // SAFETY: as above.
    let pid_now = unsafe { libc::getpid() };
    if r.as_os_str() == dir {
        // Restarted: a new process with our memory.
        println!("restarted: new pid {}, sum {}", pid_now != pid_before, work.iter().sum::<u64>());
    } else {
        println!("IMAGE {}", r.display());
        // The original leaves without finishing the test (its image does that).
        std::process::exit(0);
    }
}

#[test]
fn restore_hook_sees_collected_sections_after_restart() {
    if let Ok(dir) = std::env::var(CHILD) {
        return child(&dir);
    }
    if let Ok(img) = std::env::var(RESTORE) {
        let e = crum_restart::restart(std::path::Path::new(&img)).unwrap_err();
        panic!("restart failed: {e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = self_cmd().env(CHILD, dir.path()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // libtest prints "test <name> ... " before our line, without a newline.
    let img = text.split("IMAGE ").nth(1).and_then(|s| s.lines().next()).unwrap_or_else(|| panic!("no image: {text}"));
    let out = self_cmd()
        .env(RESTORE, img)
        .env_remove(CHILD)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "restarted process failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("restore hook saw: device state 42"), "restore hook did not run: {text}");
    assert!(text.contains("restarted: new pid true, sum 499500"), "restarted process did not continue: {text}");
}
