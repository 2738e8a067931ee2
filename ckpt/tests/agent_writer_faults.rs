//! A checkpoint whose image writer fails or is killed costs nothing: the failure names its
//! cause with the system's text (`No space left on device (os error 28)`), the partial image
//! is removed, and the next checkpoint works. Dead writers' leftovers of any process are
//! removed by the next checkpoint into the directory. One test per binary: stopping "every
//! other thread" must not meet other tests' threads.
mod common;
use common::noise;
use std::path::Path;
use std::time::{Duration, Instant};

use crum_ckpt::agent::checkpoint_now;
use crum_ckpt::image::ImageReader;


fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// A small tmpfs at `dir` (unmounted on drop), where mounting is allowed.
struct Tmpfs<'a>(&'a Path);

impl<'a> Tmpfs<'a> {
    fn mount(dir: &'a Path, bytes: u64) -> Option<Tmpfs<'a>> {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes},mode=0700"), "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.0).status();
    }
}

/// The checkpoint fails on a full file system (a 1 MiB tmpfs; where mounting is not allowed,
/// a 1 MiB file size limit, which fails the writer's writes with EFBIG instead).
fn full_disk_fails_with_the_cause_and_leaves_nothing(root: &Path) {
    let dir = root.join("full");
    std::fs::create_dir(&dir).unwrap();
    let fs = Tmpfs::mount(&dir, 1 << 20);
    let r = if fs.is_some() {
        checkpoint_now(&dir, false)
    } else {
        let lim = libc::rlimit { rlim_cur: 1 << 20, rlim_max: libc::RLIM_INFINITY };
        let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: plain system calls on this process; the limit is put back below.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            libc::getrlimit(libc::RLIMIT_FSIZE, &mut old);
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
        }
        let r = checkpoint_now(&dir, false);
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &old) };
        r
    };
    let e = r.expect_err("a checkpoint larger than the file system fails");
    let cause = if fs.is_some() { "No space left on device (os error 28)" } else { "File too large (os error 27)" };
    assert!(e.contains("cannot write pages file: ") && e.contains(cause), "the error names the write and its cause: {e}");
    assert_eq!(entries(&dir), Vec::<String>::new(), "the partial image is removed: {e}");
}

/// The writer is killed mid-write (the test hook stops it once its directory exists).
fn killed_writer_fails_and_leaves_nothing(root: &Path) {
    killed_writer_fails_and_leaves_nothing_in(&root.join("killed"), true);
}

/// [`killed_writer_fails_and_leaves_nothing`] in `dir`; `empty`: nothing was there before.
fn killed_writer_fails_and_leaves_nothing_in(dir: &Path, empty: bool) {
    let before = if empty { Vec::new() } else { entries(dir) };
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    std::env::set_var("CRUM_TEST_STOP_WRITER", "1");
    let killer = std::thread::spawn(move || {
        // The writer is a child of the thread that checkpoints; wait until it has stopped.
        let t0 = Instant::now();
        loop {
            let kids = std::fs::read_to_string(format!("/proc/self/task/{tid}/children")).unwrap_or_default();
            for k in kids.split_whitespace() {
                let stat = std::fs::read_to_string(format!("/proc/{k}/stat")).unwrap_or_default();
                let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
                if state == Some('T') {
                    let pid: i32 = k.parse().unwrap();
                    // SAFETY: kills the stopped writer, our own process's child.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    return pid;
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(120), "the writer never stopped");
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    let r = checkpoint_now(dir, false);
    std::env::remove_var("CRUM_TEST_STOP_WRITER");
    let pid = killer.join().unwrap();
    let e = r.expect_err("a checkpoint whose writer was killed fails");
    assert!(e.contains("killed by signal 9"), "writer {pid}: {e}");
    assert_eq!(entries(dir), before, "the partial image is removed: {e}");
}

/// A leftover of another program's dead writer (its lock free; the pid in its name alive, as
/// for a program that runs on) is removed by the next checkpoint, which succeeds.
fn next_checkpoint_removes_dead_writers_leftovers_and_succeeds(root: &Path) {
    let dir = root.join("free");
    std::fs::create_dir(&dir).unwrap();
    let stale = dir.join(format!(".tmp-ckpt-20260101T000000.000Z-{}-77", std::process::id()));
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("lock"), b"").unwrap();
    std::fs::write(stale.join("pages"), noise(1 << 20, 3)).unwrap();
    let img = checkpoint_now(&dir, false).expect("a checkpoint into a directory with room");
    ImageReader::open(&img).unwrap().verify().unwrap();
    // The image and the log of files written after it (`crum_ckpt::writes`).
    let name = img.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(entries(&dir), vec![format!("{}{name}", crum_ckpt::writes::PREFIX), name]);
}

/// A writer killed in the middle of a chain of incremental images loses no earlier link: the
/// images before it read whole, and the next image chains on to the last complete one.
fn killed_writer_in_a_chain_loses_no_earlier_link(root: &Path) {
    let dir = root.join("chain");
    let a = checkpoint_now(&dir, false).expect("the first image");
    let b = checkpoint_now(&dir, false).expect("an incremental image");
    let chain = |p: &Path| ImageReader::open(p).unwrap().chain().iter().map(|e| e.name.clone()).collect::<Vec<_>>();
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(chain(&b), [name(&a)]);
    killed_writer_fails_and_leaves_nothing_in(&dir, false);
    for img in [&a, &b] {
        ImageReader::open(img).unwrap().verify().unwrap();
    }
    let d = checkpoint_now(&dir, false).expect("the next image");
    assert_eq!(chain(&d), [name(&a), name(&b)]);
    ImageReader::open(&d).unwrap().verify().unwrap();
}

#[test]
fn failed_or_killed_writers_leave_no_partial_image_and_name_their_cause() {
    // Enough memory that the image cannot fit in 1 MiB (random: incompressible).
    let ballast = noise(8 << 20, 11);
    let root = tempfile::tempdir().unwrap();
    full_disk_fails_with_the_cause_and_leaves_nothing(root.path());
    killed_writer_fails_and_leaves_nothing(root.path());
    next_checkpoint_removes_dead_writers_leftovers_and_succeeds(root.path());
    killed_writer_in_a_chain_loses_no_earlier_link(root.path());
    assert_eq!(std::hint::black_box(&ballast)[..8], noise(8, 11)[..]);
}
