//! The checkpoint engine inside a live process (no restart): threads running, sleeping and
//! blocked in `read` are stopped and resumed without noticing, the hooks run in order, and
//! the image holds the process description, the hook's section and the memory. One test per
//! binary: stopping "every other thread" must not meet other tests' threads.
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Mutex;
use std::time::Duration;

use crum_ckpt::agent::{checkpoint_now, read_hook_section, set_hooks, Hold, Hooks, Piece, PieceFrom, SectionData};
use crum_ckpt::image::ImageReader;
use crum_ckpt::state::{ProcessState, SECTION_PROCESS};

static ORDER: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
static SPINS: AtomicU64 = AtomicU64::new(0);
static SLEEPS: AtomicU64 = AtomicU64::new(0);
static EINTRS: AtomicUsize = AtomicUsize::new(0);
static STOP: AtomicBool = AtomicBool::new(false);
static MARKER: AtomicU64 = AtomicU64::new(0x5eed_cafe_f00d_d00d);

/// Snapshots held by forked children for the gathered section, one per checkpoint:
/// (pid, address of its copy, write end of its hold pipe).
static HOLDERS: Mutex<Vec<(i32, u64, i32)>> = Mutex::new(Vec::new());
const REMOTE_LEN: usize = (5 << 20) + 3;

/// Forks a child that keeps `buf` as it is now until every copy of the returned pipe's write
/// end is closed (as the device proxy's snapshot does); the caller changes `buf` after.
fn holder(buf: &[u8]) -> (i32, u64, i32) {
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two fds into the array.
    assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the child only closes, reads and exits (async-signal-safe).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: raw system calls on our own descriptors, then _exit.
        unsafe {
            libc::close(p[1]);
            let mut b = [0u8; 1];
            while libc::read(p[0], b.as_mut_ptr().cast(), 1) != 0 {}
            libc::_exit(0);
        }
    }
    // SAFETY: our copy of the read end.
    unsafe { libc::close(p[0]) };
    (pid, buf.as_ptr() as u64, p[1])
}

fn order(what: &'static str) {
    ORDER.lock().unwrap().push(what);
}

#[test]
fn checkpoint_of_a_live_process_stops_and_resumes_threads_and_writes_a_complete_image() {
    set_hooks(Hooks {
        quiesce: || {
            order("quiesce");
            Ok(())
        },
        collect: || {
            order("collect");
            let (pid, addr, hold) = HOLDERS.lock().unwrap().remove(0);
            let local: Vec<u8> = (0..150u8).collect();
            let pieces = vec![
                Piece { len: 100, from: PieceFrom::Local(0) },
                Piece { len: REMOTE_LEN as u64, from: PieceFrom::Remote { pid, addr } },
                Piece { len: 50, from: PieceFrom::Local(100) },
            ];
            Ok(vec![
                ("test-device".to_string(), SectionData::Bytes(b"device state".to_vec())),
                ("test-gathered".to_string(), SectionData::Gathered { local, pieces, hold: Hold::new(hold) }),
            ])
        },
        resume: || order("resume"),
        restore: |_| Ok(()),
    });
    let spinner = std::thread::spawn(|| {
        while !STOP.load(Relaxed) {
            SPINS.fetch_add(1, Relaxed);
            std::hint::spin_loop();
        }
    });
    let sleeper = std::thread::spawn(|| {
        while !STOP.load(Relaxed) {
            let ts = libc::timespec { tv_sec: 0, tv_nsec: 30_000_000 };
            // SAFETY: nanosleep with a live request and no remainder pointer.
            if unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) } != 0 {
                EINTRS.fetch_add(1, Relaxed);
            }
            SLEEPS.fetch_add(1, Relaxed);
        }
    });
    let mut p = [0i32; 2];
    // SAFETY: pipe writes two fds into the array.
    assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
    let rfd = p[0];
    let reader = std::thread::spawn(move || {
        let mut b = [0u8; 16];
        // SAFETY: read into a live buffer.
        let n = unsafe { libc::read(rfd, b.as_mut_ptr() as *mut libc::c_void, b.len()) };
        (n, b)
    });
    std::thread::sleep(Duration::from_millis(100));

    // What the holders keep: the pattern of seed 1 (forked image) and 2 (synchronous image);
    // the buffer is changed after each holder forks, so the images must hold the snapshots.
    let pattern = |seed: u8| -> Vec<u8> { (0..REMOTE_LEN).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect() };
    let mut big = pattern(1);
    let h1 = holder(&big);
    big.copy_from_slice(&pattern(2));
    let h2 = holder(&big);
    big.copy_from_slice(&pattern(3));
    HOLDERS.lock().unwrap().extend([h1, h2]);

    let dir = tempfile::tempdir().unwrap();
    let forked = checkpoint_now(dir.path(), false).expect("forked checkpoint");
    let synced = checkpoint_now(dir.path(), true).expect("synchronous checkpoint");
    // Each holder was let go once its image was written: it ends (a copy of a hold descriptor
    // left open anywhere would keep it waiting here).
    for (pid, _, _) in [h1, h2] {
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "holder status {status:#x}");
    }
    let spins = SPINS.load(Relaxed);
    let sleeps = SLEEPS.load(Relaxed);

    // Threads go on: the spinner spins, the sleeper sleeps without EINTR, the reader reads.
    // (Waited for, not timed: a loaded machine may not run them for a while.)
    let t0 = std::time::Instant::now();
    while SPINS.load(Relaxed) <= spins || SLEEPS.load(Relaxed) <= sleeps {
        if t0.elapsed() > Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(SPINS.load(Relaxed) > spins, "the spinning thread did not resume");
    assert!(SLEEPS.load(Relaxed) > sleeps, "the sleeping thread did not resume");
    // SAFETY: write a live buffer to our pipe.
    assert_eq!(unsafe { libc::write(p[1], b"ping".as_ptr() as *const libc::c_void, 4) }, 4);
    let (n, b) = reader.join().unwrap();
    assert_eq!((n, &b[..4]), (4, &b"ping"[..]), "the thread blocked in read(2) lost its call");
    STOP.store(true, Relaxed);
    spinner.join().unwrap();
    sleeper.join().unwrap();
    assert_eq!(EINTRS.load(Relaxed), 0, "nanosleep returned EINTR after a checkpoint");
    assert_eq!(
        *ORDER.lock().unwrap(),
        ["quiesce", "collect", "resume", "quiesce", "collect", "resume"],
        "hooks ran out of order"
    );

    for (img, seed) in [(forked, 1u8), (synced, 2)] {
        let mut r = ImageReader::open(&img).unwrap();
        let gathered = read_hook_section(&mut r, "test-gathered").unwrap().expect("gathered section");
        let mut want: Vec<u8> = (0..100u8).collect();
        want.extend(pattern(seed));
        want.extend(100..150u8);
        assert!(gathered == want, "the gathered section is not the snapshot the holder kept (seed {seed})");
        let st = ProcessState::decode(&r.section(SECTION_PROCESS).unwrap().unwrap()).unwrap();
        // SAFETY: getpid cannot fail.
        assert_eq!(st.pid, unsafe { libc::getpid() });
        assert!(st.threads.len() >= 5, "threads missing from the image: {:?}", st.threads);
        assert_eq!(st.threads.iter().filter(|t| t.is_agent).count(), 1);
        assert!(st.specials.iter().any(|s| s.name == "[vdso]"));
        assert_eq!(r.section("test-device").unwrap().as_deref(), Some(&b"device state"[..]));
        // The memory holds this test's static at its address.
        let addr = MARKER.as_ptr() as u64;
        let idx = r.regions().iter().position(|g| g.start <= addr && addr < g.start + g.len).expect("region of a static");
        let data = r.read_region(idx).unwrap();
        let off = (addr - r.regions()[idx].start) as usize;
        assert_eq!(u64::from_ne_bytes(data[off..off + 8].try_into().unwrap()), MARKER.load(Relaxed));
    }
}
