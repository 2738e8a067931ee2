//! Lazy restart (`crum restart --lazy`): the program runs before its large private memory
//! has been read. Those regions are mapped empty and registered with a userfaultfd for
//! missing pages; a *page server* process serves each first touch from the image
//! (`UFFDIO_COPY` of the decompressed chunk, `UFFDIO_ZEROPAGE` for its zero pages) and
//! between faults prefetches every other chunk in order, so that the image is released soon
//! (CRIU's lazy-pages, Firecracker's uffd snapshot restore).
//!
//! Processes. The restorer (which becomes the program) forks, before it fills anything,
//! an intermediate that forks the *watchdog*, which forks the *server* and ends; the
//! restorer reaps the intermediate, so neither helper is the program's child (no SIGCHLD,
//! not taken by its `waitpid(-1)`). The server is a separate process: the program cannot
//! stop it, and it can never itself fault on lazy memory. It needs only the image reader
//! (a copy of the restorer's, with the image's files open: removing the image directory
//! meanwhile changes nothing) and the userfaultfd.
//!
//! Ends. When every page is in, the server unregisters every range still registered (found
//! by `um` in `/proc/PID/smaps`: ranges the program moved or grew included), writes `D` on
//! the *done* pipe the program holds and exits 0. If it ends otherwise (killed, an image
//! chunk that does not verify), the watchdog names the error on stderr and kills the program:
//! the program holds a copy of the userfaultfd, so its faults would otherwise wait forever
//! (without that copy the kernel would release the registrations and the missing pages
//! would read as zeros: silently wrong). A program that ends first ends both helpers.
//!
//! The program's side (`crum_ckpt::lazy`): a checkpoint, and a `fork` (whose child would not
//! inherit the registrations: its missing pages would be zeros), first wait for the done
//! byte. The program's own changes are followed through the userfaultfd's events:
//! `madvise(MADV_DONTNEED)` (`UFFD_EVENT_REMOVE`: those pages are zero from then on, never
//! the image's), `munmap` (`UFFD_EVENT_UNMAP`) and `mremap` (`UFFD_EVENT_REMAP`: the pages
//! not yet served moved with the mapping). A copy the kernel refuses while such an event is
//! unread (`EAGAIN`) is retried after reading it.
//!
//! Where it is not safe, the restart is eager and `--lazy` says why: no userfaultfd that
//! also handles the kernel's own accesses (a `read(2)` into a lazy buffer must wait, not
//! fail with EFAULT), a CUDA program's image (the interposer registers managed memory with
//! its own userfaultfd), a job, nothing large enough.
//!
//! # Safety
//! The ioctls get the structs of `linux/userfaultfd.h` (layouts checked by size in the
//! tests). The copies' sources are the server's own buffers; their destinations are in the
//! program's address space, which the kernel checks (an address outside a registered range
//! is refused with an error, never written). The forks are raw `clone`s of a single-threaded
//! restorer (nothing else runs: no lock can be held), and the helpers never return into it.
#![allow(unsafe_code)]

use std::io::Write;

use crum_ckpt::image::{ImageReader, RegionInfo};
use crum_ckpt::state::{is_process_memory, REGION_GROWSDOWN, REGION_SHARED_ANON, REGION_SHARED_FILE};

use crate::{Plan, RestartError};

/// When a restart is lazy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Every page read before the program runs.
    Eager,
    /// Lazily wherever a region can be (`--lazy`); why not said when it cannot be.
    Lazy,
    /// Lazily when it is safe and at least [`AUTO_MIN`] bytes would be served lazily
    /// (the default), silently eager otherwise.
    #[default]
    Auto,
}

/// Regions smaller than this are read eagerly (the cost is in the large ones).
const MIN_REGION: u64 = 1 << 20;
/// [`Mode::Auto`] restarts lazily from this many lazy bytes on.
pub const AUTO_MIN: u64 = 256 << 20;
/// Environment variable: a file the page server writes its counts to when it ends (pages
/// served on demand, prefetched, zero; faults; seconds), one line `key=value …`.
pub const STATS_ENV: &str = "CRUM_LAZY_STATS";
/// Environment variable (tests, benchmarks): the server prefetches nothing for this many
/// milliseconds, or until the program asks for everything (a checkpoint, a `fork`), and only
/// serves faults meanwhile.
pub const HOLD_ENV: &str = "CRUM_LAZY_PREFETCH_AFTER_MS";
/// Exit status of the server after an error it named.
const SERVER_FAILED: i32 = 3;

const PAGE: u64 = 4096;
const UFFD_API: u64 = 0xAA;
const UFFDIO_API: libc::c_ulong = 0xC018_AA3F;
const UFFDIO_REGISTER: libc::c_ulong = 0xC020_AA00;
const UFFDIO_UNREGISTER: libc::c_ulong = 0x8010_AA01;
const UFFDIO_WAKE: libc::c_ulong = 0x8010_AA02;
const UFFDIO_COPY: libc::c_ulong = 0xC028_AA03;
const UFFDIO_ZEROPAGE: libc::c_ulong = 0xC020_AA04;
/// `USERFAULTFD_IOC_NEW` of `/dev/userfaultfd`.
const USERFAULTFD_IOC_NEW: libc::c_ulong = 0xAA00;
const REGISTER_MODE_MISSING: u64 = 1;
const FEATURE_EVENT_REMAP: u64 = 1 << 2;
const FEATURE_EVENT_REMOVE: u64 = 1 << 3;
const FEATURE_EVENT_UNMAP: u64 = 1 << 6;
const FEATURES: u64 = FEATURE_EVENT_REMAP | FEATURE_EVENT_REMOVE | FEATURE_EVENT_UNMAP;
const EVENT_PAGEFAULT: u8 = 0x12;
const EVENT_REMAP: u8 = 0x14;
const EVENT_REMOVE: u8 = 0x15;
const EVENT_UNMAP: u8 = 0x16;
/// `_UFFDIO_COPY` and `_UFFDIO_ZEROPAGE` bits of the ioctls a registration allows.
const NEEDED_IOCTLS: u64 = (1 << 3) | (1 << 4);

#[repr(C)]
struct Api {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Range {
    start: u64,
    len: u64,
}

#[repr(C)]
struct Register {
    range: Range,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct Copy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

#[repr(C)]
struct ZeroPage {
    range: Range,
    mode: u64,
    zeropage: i64,
}

/// `struct uffd_msg`: the event, then three words of its arguments (pagefault: flags,
/// address; remap: from, to, len; remove and unmap: start, end).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Msg {
    event: u8,
    _r1: u8,
    _r2: u16,
    _r3: u32,
    a: u64,
    b: u64,
    c: u64,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn ioctl<T>(fd: i32, req: libc::c_ulong, arg: &mut T) -> Result<(), i32> {
    // SAFETY: `arg` is the struct this ioctl expects (see the module's Safety).
    if unsafe { libc::ioctl(fd, req, arg as *mut T) } == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// A userfaultfd whose registrations also catch the kernel's own accesses (a system call
/// reading into a lazy buffer waits for the page), with the events that follow the
/// program's changes to its mappings. Err: why there is none.
fn open_uffd() -> Result<i32, String> {
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: plain system call.
    let mut fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) } as i32;
    let first = std::io::Error::last_os_error();
    if fd < 0 {
        // /dev/userfaultfd gives the full kind to those allowed to open it.
        // SAFETY: NUL-terminated path.
        let dev = unsafe { libc::open(c"/dev/userfaultfd".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if dev >= 0 {
            // SAFETY: the device's ioctl takes the new descriptor's flags as its argument.
            fd = unsafe { libc::ioctl(dev, USERFAULTFD_IOC_NEW, flags) };
            // SAFETY: our descriptor.
            unsafe { libc::close(dev) };
        }
    }
    if fd < 0 {
        return Err(format!(
            "no userfaultfd that handles system calls' accesses ({first}; vm.unprivileged_userfaultfd is 0 and \
             /dev/userfaultfd is not open to this user): a read(2) into memory not yet restored would fail"
        ));
    }
    let mut api = Api { api: UFFD_API, features: FEATURES, ioctls: 0 };
    if ioctl(fd, UFFDIO_API, &mut api).is_err() || api.features & FEATURES != FEATURES {
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
        return Err("the kernel's userfaultfd lacks the remove, unmap and remap events".into());
    }
    Ok(fd)
}

/// Whether region `r` of `plan` may be served lazily: private anonymous memory with data
/// (not a file's pages, not shared, not a stack), large, with no advice or guard the
/// restorer applies to it, not holding what the restorer writes or runs before the program.
fn eligible(plan: &Plan, r: &RegionInfo, job_shm: &[(u64, u64, i32, u64)]) -> bool {
    let st = &plan.state;
    let (a, b) = (r.start, r.start + r.len);
    let inside = |x: u64| (a..b).contains(&x);
    let touches = |s: u64, e: u64| s < b && e > a;
    is_process_memory(r.flags)
        && r.has_data
        && r.len >= MIN_REGION
        && r.prot != 0
        && r.flags & (REGION_SHARED_ANON | REGION_SHARED_FILE | REGION_GROWSDOWN) == 0
        && !r.name.starts_with(b"/")
        && r.name != b"[stack]"
        && !job_shm.iter().any(|g| touches(g.0, g.1))
        && !inside(st.entry)
        && !inside(st.main_stack.saturating_sub(8))
        && !inside(st.restart_info)
        && !st.advice.iter().any(|&(s, e, _)| touches(s, e))
        && !st.guards.iter().any(|&(s, e)| touches(s, e))
}

/// A lazy restart being set up: the userfaultfd and the regions it serves.
pub struct Lazy {
    uffd: i32,
    /// Indices (in the image's region table) of the regions served lazily.
    pub regions: Vec<usize>,
    bytes: u64,
}

/// What the program gets of a lazy restart: its end of the socket to the server and its copy of the
/// userfaultfd (see the module's doc).
pub struct Handles {
    pub done_fd: i32,
    pub uffd: i32,
}

/// Decides whether this restart is lazy and opens the userfaultfd if so. `None`: eager
/// (said on stderr under [`Mode::Lazy`]).
/// The first process state version whose agent's restart block has the lazy restart's
/// fields (`crum_ckpt::agent::RestartInfo`).
const LAZY_STATE_VERSION: u32 = 17;

pub fn prepare(plan: &Plan, mode: Mode, job: bool, job_shm: &[(u64, u64, i32, u64)]) -> Option<Lazy> {
    if mode == Mode::Eager {
        return None;
    }
    let say = |why: &str| {
        if mode == Mode::Lazy {
            eprintln!("crum: restarting eagerly, not lazily: {why}");
        }
    };
    if plan.has_device() {
        say("the image holds a CUDA program (its managed memory has a userfaultfd of its own)");
        return None;
    }
    if job {
        say("a job's processes are restarted eagerly");
        return None;
    }
    // The agent of an older image has a shorter restart block, without the lazy restart's
    // fields: writing them would write past it into the program's memory.
    if plan.state().version < LAZY_STATE_VERSION {
        say(&format!("the image was written by an older crum (process state {})", plan.state().version));
        return None;
    }
    let regions: Vec<usize> =
        plan.reader.regions().iter().enumerate().filter(|(_, r)| eligible(plan, r, job_shm)).map(|(i, _)| i).collect();
    let bytes: u64 = regions.iter().map(|&i| plan.reader.regions()[i].nonzero_bytes()).sum();
    let enough = match mode {
        Mode::Lazy => bytes > 0,
        _ => bytes >= AUTO_MIN,
    };
    if !enough {
        say(&format!("no private memory region of {} MiB or more with data", MIN_REGION >> 20));
        return None;
    }
    match open_uffd() {
        Ok(uffd) => Some(Lazy { uffd, regions, bytes }),
        Err(why) => {
            say(&why);
            None
        }
    }
}

impl Lazy {
    /// Registers the (mapped, empty) regions for missing-page faults. Err: why not (the
    /// caller reads them eagerly instead; the descriptor is closed).
    pub fn register(&self, regions: &[RegionInfo]) -> Result<(), String> {
        for &i in &self.regions {
            let r = &regions[i];
            let mut reg = Register { range: Range { start: r.start, len: r.len }, mode: REGISTER_MODE_MISSING, ioctls: 0 };
            let res = ioctl(self.uffd, UFFDIO_REGISTER, &mut reg);
            if res.is_err() || reg.ioctls & NEEDED_IOCTLS != NEEDED_IOCTLS {
                let e = res.err().map_or("copies not allowed there".to_string(), |e| std::io::Error::from_raw_os_error(e).to_string());
                self.unregister_all(regions);
                return Err(format!("cannot register {:#x}+{:#x} with the userfaultfd ({e})", r.start, r.len));
            }
        }
        Ok(())
    }

    fn unregister_all(&self, regions: &[RegionInfo]) {
        for &i in &self.regions {
            let mut range = Range { start: regions[i].start, len: regions[i].len };
            let _ = ioctl(self.uffd, UFFDIO_UNREGISTER, &mut range);
        }
    }

    /// Gives up: closes the userfaultfd (nothing registered any more).
    pub fn abandon(self) {
        crate::sys::close(self.uffd);
    }

    /// Bytes of the image served lazily.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Starts the watchdog and the page server (see the module's doc) for this process,
    /// which is about to become the program. Must be called while the restorer is
    /// single-threaded, before anything touches a registered region.
    pub fn start(self, reader: &mut ImageReader) -> Result<Handles, RestartError> {
        let program = std::process::id() as i32;
        let mut done = [0i32; 2];
        // SAFETY: socketpair writes two descriptors into the live array.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, done.as_mut_ptr()) } != 0 {
            return Err(crate::sys_err("making the lazy restart's done socket"));
        }
        // SAFETY: pidfd_open of this process.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, program, 0) } as i32;
        if pidfd < 0 {
            crate::sys::close(done[0]);
            crate::sys::close(done[1]);
            return Err(crate::sys_err("pidfd_open of the restarting process"));
        }
        let stats = std::env::var_os(STATS_ENV);
        let hold = std::env::var(HOLD_ENV).ok().and_then(|v| v.parse::<u64>().ok()).map(std::time::Duration::from_millis);
        let fds = reader.page_fds();
        // SAFETY: raw forks of a single-threaded process (module Safety); the children run
        // their own code and end by _exit.
        let mid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as usize, 0usize, 0usize, 0usize, 0usize) };
        if mid == 0 {
            // SAFETY: as above.
            let w = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as usize, 0usize, 0usize, 0usize, 0usize) };
            if w == 0 {
                watchdog(self, reader, program, pidfd, done[1], &fds, (stats, hold));
            }
            // SAFETY: ends the intermediate.
            unsafe { libc::_exit(i32::from(w < 0)) };
        }
        crate::sys::close(done[1]);
        crate::sys::close(pidfd);
        if mid < 0 {
            crate::sys::close(done[0]);
            return Err(crate::sys_err("starting the lazy restart's page server"));
        }
        let mut st = 0;
        // SAFETY: reaps our own child.
        unsafe { libc::waitpid(mid as i32, &mut st, 0) };
        if !libc::WIFEXITED(st) || libc::WEXITSTATUS(st) != 0 {
            crate::sys::close(done[0]);
            return Err(RestartError::Invalid("the lazy restart's page server could not be started".into()));
        }
        Ok(Handles { done_fd: done[0], uffd: self.uffd })
    }
}

/// Closes every descriptor but `keep` (and stderr); stdin and stdout become /dev/null.
fn keep_only(keep: &[i32]) {
    // SAFETY: descriptors of this (helper) process only.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::close(null);
        }
    }
    let mut k: Vec<i32> = keep.to_vec();
    k.push(2);
    crate::sys::close_from_except(3, &k);
}

fn set_name(name: &std::ffi::CStr) {
    // SAFETY: PR_SET_NAME with a NUL-terminated name of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
}

/// The watchdog: starts the server, waits for it, and if it ended before every page was in,
/// says so and kills the program (see the module's doc). Never returns.
type Debug = (Option<std::ffi::OsString>, Option<std::time::Duration>);

fn watchdog(lazy: Lazy, reader: &mut ImageReader, program: i32, pidfd: i32, done_w: i32, fds: &[i32], debug: Debug) -> ! {
    // Out of the terminal's foreground group: Ctrl-C is for the program.
    // SAFETY: this process's own group.
    unsafe { libc::setpgid(0, 0) };
    set_name(c"crum-lazy-watch");
    // SAFETY: a raw fork of this single-threaded helper.
    let server = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as usize, 0usize, 0usize, 0usize, 0usize) } as i32;
    if server == 0 {
        set_name(c"crum-lazy-pages");
        let mut keep = fds.to_vec();
        keep.extend([lazy.uffd, done_w]);
        keep_only(&keep);
        // The reader is the restorer's copy, its files still open.
        let mut server = Server::new(lazy, program, reader, done_w);
        server.hold_until = debug.1.map(|d| std::time::Instant::now() + d);
        let code = server.run(debug.0);
        // SAFETY: ends the server.
        unsafe { libc::_exit(code) };
    }
    // Holds the userfaultfd (so the program's faults wait rather than read zeros) and the
    // program's pidfd.
    keep_only(&[lazy.uffd, pidfd]);
    if server < 0 {
        let _ = writeln!(std::io::stderr(), "crum: lazy restart: cannot start the page server ({}); the program is killed", std::io::Error::last_os_error());
        // SAFETY: signals the program through its pidfd.
        unsafe { libc::syscall(libc::SYS_pidfd_send_signal, pidfd, libc::SIGKILL, 0usize, 0u32) };
        // SAFETY: ends the watchdog.
        unsafe { libc::_exit(1) };
    }
    let mut st = 0;
    loop {
        // SAFETY: waits for our own child.
        let r = unsafe { libc::waitpid(server, &mut st, 0) };
        if r == server || (r < 0 && errno() != libc::EINTR) {
            break;
        }
    }
    let ok = libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0;
    if !ok {
        let how = if libc::WIFSIGNALED(st) {
            format!("was killed by signal {}", libc::WTERMSIG(st))
        } else if libc::WEXITSTATUS(st) == SERVER_FAILED {
            "failed (above)".to_string()
        } else {
            format!("exited with status {}", libc::WEXITSTATUS(st))
        };
        let _ = writeln!(
            std::io::stderr(),
            "crum: lazy restart: the page server (pid {server}) {how} before every page of the image was read; \
             the program (pid {program}) cannot go on without them and is killed"
        );
        // SAFETY: signals the program through its pidfd (a program that ended already is
        // not signalled: the pidfd still names it).
        unsafe { libc::syscall(libc::SYS_pidfd_send_signal, pidfd, libc::SIGKILL, 0usize, 0u32) };
    }
    // SAFETY: ends the watchdog.
    unsafe { libc::_exit(0) };
}

/// A run of lazy pages: `len` bytes now at `addr`, page `off / PAGE` on of region `ri`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Piece {
    addr: u64,
    len: u64,
    ri: usize,
    off: u64,
}

/// Where the image's lazy pages are now, and which of them are settled (served, or the
/// program removed or unmapped them: from then on never the image's).
#[derive(Debug, Default)]
struct Map {
    pieces: Vec<Piece>,
    /// Per region index, one flag per page.
    done: std::collections::HashMap<usize, Vec<bool>>,
    remaining: u64,
}

impl Map {
    fn new(regions: &[(usize, u64, u64)]) -> Map {
        let mut m = Map::default();
        for &(ri, start, len) in regions {
            m.pieces.push(Piece { addr: start, len, ri, off: 0 });
            m.done.insert(ri, vec![false; (len / PAGE) as usize]);
            m.remaining += len / PAGE;
        }
        m
    }

    /// The region and page at address `a` now, if it is a lazy page.
    fn find(&self, a: u64) -> Option<(usize, u64)> {
        self.pieces.iter().find(|p| (p.addr..p.addr + p.len).contains(&a)).map(|p| (p.ri, (p.off + (a - p.addr)) / PAGE))
    }

    /// Where page `page` of region `ri` is now (None: unmapped).
    fn addr_of(&self, ri: usize, page: u64) -> Option<u64> {
        let o = page * PAGE;
        self.pieces.iter().find(|p| p.ri == ri && (p.off..p.off + p.len).contains(&o)).map(|p| p.addr + (o - p.off))
    }

    fn is_done(&self, ri: usize, page: u64) -> bool {
        self.done.get(&ri).and_then(|d| d.get(page as usize).copied()).unwrap_or(true)
    }

    fn settle(&mut self, ri: usize, page: u64) {
        if let Some(f) = self.done.get_mut(&ri).and_then(|d| d.get_mut(page as usize)) {
            if !*f {
                *f = true;
                self.remaining -= 1;
            }
        }
    }

    /// Settles the lazy pages in `[start, end)` (removed or unmapped by the program).
    fn settle_range(&mut self, start: u64, end: u64) {
        let hits: Vec<(usize, u64, u64)> = self
            .pieces
            .iter()
            .filter(|p| p.addr < end && start < p.addr + p.len)
            .map(|p| {
                let (a, b) = (start.max(p.addr), end.min(p.addr + p.len));
                (p.ri, (p.off + (a - p.addr)) / PAGE, (p.off + (b - p.addr)).div_ceil(PAGE))
            })
            .collect();
        for (ri, first, last) in hits {
            for page in first..last {
                self.settle(ri, page);
            }
        }
    }

    /// Cuts `[start, end)` out of the pieces; the parts cut out are returned.
    fn cut(&mut self, start: u64, end: u64) -> Vec<Piece> {
        let mut out = Vec::new();
        let mut kept = Vec::new();
        for p in self.pieces.drain(..) {
            let (a, b) = (p.addr, p.addr + p.len);
            if b <= start || end <= a {
                kept.push(p);
                continue;
            }
            if a < start {
                kept.push(Piece { len: start - a, ..p });
            }
            if end < b {
                kept.push(Piece { addr: end, len: b - end, ri: p.ri, off: p.off + (end - a) });
            }
            let (ma, mb) = (a.max(start), b.min(end));
            out.push(Piece { addr: ma, len: mb - ma, ri: p.ri, off: p.off + (ma - a) });
        }
        self.pieces = kept;
        out
    }

    fn unmap(&mut self, start: u64, end: u64) {
        self.settle_range(start, end);
        self.cut(start, end);
    }

    /// The program moved `[from, from+len)` to `to` (`mremap`).
    fn remap(&mut self, from: u64, to: u64, len: u64) {
        // Whatever was at the destination is gone.
        self.unmap(to, to.saturating_add(len));
        let moved = self.cut(from, from.saturating_add(len));
        self.pieces.extend(moved.into_iter().map(|p| Piece { addr: p.addr - from + to, ..p }));
    }
}

/// Why serving stopped early.
enum Stop {
    /// A change of the program's mappings is waiting to be read: read events, retry.
    Changing,
    /// The program is gone.
    Gone,
    Failed(String),
}

struct Server<'a> {
    uffd: i32,
    program: i32,
    reader: &'a mut ImageReader,
    map: Map,
    buf: Vec<u8>,
    /// The next chunk to prefetch: (position in `order`, chunk).
    cursor: (usize, usize),
    order: Vec<usize>,
    faults: u64,
    on_demand: u64,
    prefetched: u64,
    zero: u64,
    /// Counting pages served as prefetched (else on demand).
    prefetching: bool,
    /// The socket to the program: `C` from it asks for everything now, `D` to it says all
    /// is in.
    sock: i32,
    /// No prefetching before then ([`HOLD_ENV`]).
    hold_until: Option<std::time::Instant>,
}

impl<'a> Server<'a> {
    fn new(lazy: Lazy, program: i32, reader: &'a mut ImageReader, sock: i32) -> Server<'a> {
        let regions: Vec<(usize, u64, u64)> = lazy.regions.iter().map(|&i| (i, reader.regions()[i].start, reader.regions()[i].len)).collect();
        Server {
            uffd: lazy.uffd,
            program,
            map: Map::new(&regions),
            buf: vec![0u8; reader.chunk_size() as usize],
            cursor: (0, 0),
            order: lazy.regions,
            reader,
            faults: 0,
            on_demand: 0,
            prefetched: 0,
            zero: 0,
            prefetching: false,
            sock,
            hold_until: None,
        }
    }

    /// Serves and prefetches until every page is in (0), or the program is gone (0), or
    /// an error ([`SERVER_FAILED`], said on stderr).
    fn run(mut self, stats: Option<std::ffi::OsString>) -> i32 {
        let t0 = std::time::Instant::now();
        let res = self.serve_all();
        let code = match res {
            Ok(()) => {
                // SAFETY: writes one byte from a live local to our pipe.
                unsafe { libc::write(self.sock, b"D".as_ptr().cast(), 1) };
                0
            }
            Err(Stop::Gone) => 0,
            Err(Stop::Changing) => unreachable!("handled in serve_all"),
            Err(Stop::Failed(e)) => {
                let _ = writeln!(std::io::stderr(), "crum: lazy restart: {e}");
                SERVER_FAILED
            }
        };
        if let Some(path) = stats {
            let line = format!(
                "faults={} on_demand_pages={} prefetched_pages={} zero_pages={} remaining_pages={} seconds={:.3} status={}\n",
                self.faults,
                self.on_demand,
                self.prefetched,
                self.zero,
                self.map.remaining,
                t0.elapsed().as_secs_f64(),
                code
            );
            let _ = std::fs::write(path, line);
        }
        code
    }

    fn serve_all(&mut self) -> Result<(), Stop> {
        loop {
            match self.events() {
                Err(Stop::Changing) => continue,
                r => r?,
            }
            if self.map.remaining == 0 {
                return self.finish();
            }
            if let Some(t) = self.hold_until {
                self.hold(t)?;
                continue;
            }
            self.prefetching = true;
            match self.prefetch_one() {
                Err(Stop::Changing) => continue,
                r => r?,
            }
        }
    }

    /// Holding off prefetching ([`HOLD_ENV`]): waits for a fault, the program's `C`, or
    /// time `t`.
    fn hold(&mut self, t: std::time::Instant) -> Result<(), Stop> {
        let left = t.saturating_duration_since(std::time::Instant::now());
        let mut fds = [
            libc::pollfd { fd: self.uffd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: self.sock, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: poll on a live array of two pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, left.as_millis().min(60_000) as i32) };
        let mut b = [0u8; 16];
        // SAFETY: a non-blocking read into a live local.
        let n = if fds[1].revents != 0 { unsafe { libc::recv(self.sock, b.as_mut_ptr().cast(), b.len(), libc::MSG_DONTWAIT) } } else { -1 };
        if n == 0 {
            // The program closed its end: it is gone.
            return Err(Stop::Gone);
        }
        if n > 0 || left.is_zero() {
            self.hold_until = None;
        }
        Ok(())
    }

    /// Reads and handles every waiting message.
    fn events(&mut self) -> Result<(), Stop> {
        let mut msgs = [Msg::default(); 32];
        loop {
            // SAFETY: reads whole messages into a live array of them.
            let n = unsafe { libc::read(self.uffd, msgs.as_mut_ptr().cast(), std::mem::size_of_val(&msgs)) };
            if n < 0 {
                return match errno() {
                    libc::EAGAIN => Ok(()),
                    libc::EINTR => continue,
                    e => Err(Stop::Failed(format!("reading the userfaultfd: {}", std::io::Error::from_raw_os_error(e)))),
                };
            }
            let count = n as usize / std::mem::size_of::<Msg>();
            if count == 0 {
                return Ok(());
            }
            for m in &msgs[..count] {
                match m.event {
                    EVENT_PAGEFAULT => {
                        self.faults += 1;
                        self.prefetching = false;
                        self.fault(m.b & !(PAGE - 1))?;
                    }
                    EVENT_REMOVE => self.map.settle_range(m.a, m.b),
                    EVENT_UNMAP => self.map.unmap(m.a, m.b),
                    EVENT_REMAP => self.map.remap(m.a, m.b, m.c),
                    _ => {}
                }
            }
        }
    }

    /// A thread of the program waits for the page at `addr`.
    fn fault(&mut self, addr: u64) -> Result<(), Stop> {
        loop {
            let r = match self.map.find(addr) {
                Some((ri, page)) if !self.map.is_done(ri, page) => {
                    let ci = (page * PAGE / u64::from(self.reader.chunk_size())) as usize;
                    self.serve_chunk(ri, ci)
                }
                // Settled (removed by the program: zero from then on) or not ours (a
                // mapping grown or moved into registered memory): a zero page.
                _ => self.zeropage(addr, PAGE).map(|_| ()),
            };
            match r {
                // Read the change first, then look again where the page is.
                Err(Stop::Changing) => {
                    self.events_without_faults()?;
                    continue;
                }
                r => {
                    r?;
                    break;
                }
            }
        }
        // The copy wakes the waiting thread; one whose page was there already waits still.
        let mut range = Range { start: addr, len: PAGE };
        let _ = ioctl(self.uffd, UFFDIO_WAKE, &mut range);
        Ok(())
    }

    /// Reads waiting messages while serving a fault: faults are kept for later.
    fn events_without_faults(&mut self) -> Result<(), Stop> {
        // Simplest correct order: handle everything now (a nested fault is served as well).
        match self.events() {
            Err(Stop::Changing) => Ok(()),
            r => r,
        }
    }

    /// Prefetches the next chunk that has unsettled pages.
    fn prefetch_one(&mut self) -> Result<(), Stop> {
        let cs = u64::from(self.reader.chunk_size());
        while self.cursor.0 < self.order.len() {
            let ri = self.order[self.cursor.0];
            let nchunks = self.reader.regions()[ri].chunks.len();
            while self.cursor.1 < nchunks {
                let ci = self.cursor.1;
                let first = ci as u64 * cs / PAGE;
                let pages = self.reader.chunk_len(ri, ci) as u64 / PAGE;
                if (first..first + pages).any(|p| !self.map.is_done(ri, p)) {
                    return self.serve_chunk(ri, ci);
                }
                self.cursor.1 += 1;
            }
            self.cursor = (self.cursor.0 + 1, 0);
        }
        // Everything passed: what is left unsettled has no address any more.
        let left: Vec<(usize, u64)> = self
            .map
            .done
            .iter()
            .flat_map(|(&ri, d)| d.iter().enumerate().filter(|(_, &f)| !f).map(move |(p, _)| (ri, p as u64)))
            .collect();
        for (ri, p) in left {
            if self.map.addr_of(ri, p).is_none() {
                self.map.settle(ri, p);
            }
        }
        if self.map.remaining > 0 {
            // Pages with an address the cursor passed (a copy refused meanwhile): again.
            self.cursor = (0, 0);
        }
        Ok(())
    }

    /// Puts every unsettled page of chunk `ci` of region `ri` in place.
    fn serve_chunk(&mut self, ri: usize, ci: usize) -> Result<(), Stop> {
        let cs = u64::from(self.reader.chunk_size());
        let clen = self.reader.chunk_len(ri, ci);
        let first = ci as u64 * cs / PAGE;
        let pages = clen as u64 / PAGE;
        let chunk = self.reader.regions()[ri].chunks[ci].clone();
        let zero_chunk = chunk.packed_len == 0;
        if !zero_chunk {
            let buf = &mut self.buf[..clen];
            self.reader.read_chunk_into(ri, ci, buf).map_err(|e| Stop::Failed(format!("cannot read the image: {e}")))?;
        }
        // Runs of pages that are unsettled, contiguous where they are now, and alike
        // (stored or zero).
        let mut p = 0;
        while p < pages {
            let page = first + p;
            let Some(addr) = self.map.addr_of(ri, page).filter(|_| !self.map.is_done(ri, page)) else {
                p += 1;
                continue;
            };
            let stored = !zero_chunk && chunk.present(p as usize);
            let mut n = 1;
            while p + n < pages {
                let q = first + p + n;
                let alike = (!zero_chunk && chunk.present((p + n) as usize)) == stored;
                if self.map.is_done(ri, q) || self.map.addr_of(ri, q) != Some(addr + n * PAGE) || !alike {
                    break;
                }
                n += 1;
            }
            let len = n * PAGE;
            let placed = if stored {
                let src = self.buf[(p * PAGE) as usize..].as_ptr() as u64;
                self.copy(addr, src, len)
            } else {
                self.zeropage(addr, len)
            };
            let placed = match placed {
                Ok(b) => b,
                Err(Stop::Changing) => return Err(Stop::Changing),
                Err(e) => return Err(e),
            };
            for k in 0..n {
                self.map.settle(ri, page + k);
            }
            let count = placed / PAGE;
            if stored {
                if self.prefetching {
                    self.prefetched += count;
                } else {
                    self.on_demand += count;
                }
            } else {
                self.zero += count;
            }
            p += n;
        }
        Ok(())
    }

    /// Maps a run of zero pages; bytes placed (pages already there are skipped).
    fn zeropage(&mut self, addr: u64, len: u64) -> Result<u64, Stop> {
        let mut z = ZeroPage { range: Range { start: addr, len }, mode: 0, zeropage: 0 };
        match ioctl(self.uffd, UFFDIO_ZEROPAGE, &mut z) {
            Ok(()) => Ok(len),
            Err(e) => self.partial(e, addr, len, z.zeropage, |s, a| {
                let mut z = ZeroPage { range: Range { start: a, len: PAGE }, mode: 0, zeropage: 0 };
                ioctl(s.uffd, UFFDIO_ZEROPAGE, &mut z)
            }),
        }
    }

    /// Copies a run of pages from `src` (our buffer) to `addr` in the program.
    fn copy(&mut self, addr: u64, src: u64, len: u64) -> Result<u64, Stop> {
        let mut c = Copy { dst: addr, src, len, mode: 0, copy: 0 };
        match ioctl(self.uffd, UFFDIO_COPY, &mut c) {
            Ok(()) => Ok(len),
            Err(e) => self.partial(e, addr, len, c.copy, |s, a| {
                let mut c = Copy { dst: a, src: src + (a - addr), len: PAGE, mode: 0, copy: 0 };
                ioctl(s.uffd, UFFDIO_COPY, &mut c)
            }),
        }
    }

    /// A copy or zero-page refused with `e` after `done` bytes (negative: none).
    fn partial(&mut self, e: i32, addr: u64, len: u64, done: i64, one: impl Fn(&Self, u64) -> Result<(), i32>) -> Result<u64, Stop> {
        match e {
            // A page is there already (placed while a fault was queued): page by page.
            libc::EEXIST => {
                let mut placed = 0;
                let mut a = addr + done.max(0) as u64;
                while a < addr + len {
                    match one(self, a) {
                        Ok(()) => placed += PAGE,
                        Err(libc::EEXIST) => {}
                        Err(libc::EAGAIN) => return Err(Stop::Changing),
                        Err(e) => return self.failed(e, a),
                    }
                    a += PAGE;
                }
                Ok(placed)
            }
            libc::EAGAIN => Err(Stop::Changing),
            e => self.failed(e, addr),
        }
    }

    fn failed(&self, e: i32, addr: u64) -> Result<u64, Stop> {
        match e {
            // The program's address space is gone (it ended, or executed another program).
            libc::ESRCH => Err(Stop::Gone),
            // No registered mapping there any more (unmapped; its event follows): settled.
            libc::ENOENT => Ok(0),
            e => Err(Stop::Failed(format!(
                "cannot place memory at {addr:#x} in process {}: {}",
                self.program,
                std::io::Error::from_raw_os_error(e)
            ))),
        }
    }

    /// Every page is in: unregisters what is still registered (wherever the program moved
    /// or grew it), so that later faults there are ordinary ones.
    fn finish(&mut self) -> Result<(), Stop> {
        for _ in 0..64 {
            let ranges = match registered(self.program) {
                Ok(r) => r,
                Err(_) => return Err(Stop::Gone),
            };
            if ranges.is_empty() {
                return Ok(());
            }
            for (start, end) in ranges {
                let mut range = Range { start, len: end - start };
                match ioctl(self.uffd, UFFDIO_UNREGISTER, &mut range) {
                    Ok(()) | Err(libc::ENOMEM) | Err(libc::EINVAL) => {}
                    Err(libc::ESRCH) => return Err(Stop::Gone),
                    Err(e) => return Err(Stop::Failed(format!("cannot unregister {start:#x}-{end:#x}: {}", std::io::Error::from_raw_os_error(e)))),
                }
            }
            // Faults that came meanwhile (none can be of an image page: every one is in).
            match self.events() {
                Err(Stop::Changing) | Ok(()) => {}
                Err(e) => return Err(e),
            }
        }
        Err(Stop::Failed("the program's registered memory did not settle".into()))
    }
}

/// The ranges of process `pid` registered for missing faults (`um` in its smaps).
fn registered(pid: i32) -> std::io::Result<Vec<(u64, u64)>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut out = Vec::new();
    let mut cur = None;
    for line in text.lines() {
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            if let Some(r) = cur.take() {
                if flags.split_whitespace().any(|f| f == "um") {
                    out.push(r);
                }
            }
        } else if let Some((range, _)) = line.split_once(' ') {
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                    cur = Some((a, b));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uapi_structs_have_the_kernels_sizes() {
        assert_eq!(std::mem::size_of::<Api>(), 24);
        assert_eq!(std::mem::size_of::<Register>(), 32);
        assert_eq!(std::mem::size_of::<Copy>(), 40);
        assert_eq!(std::mem::size_of::<ZeroPage>(), 32);
        assert_eq!(std::mem::size_of::<Msg>(), 32);
    }

    #[test]
    fn map_follows_a_remap_and_settles_removed_pages() {
        let mut m = Map::new(&[(3, 0x10000, 8 * PAGE)]);
        assert_eq!(m.remaining, 8);
        m.remap(0x10000 + 2 * PAGE, 0x90000, 2 * PAGE);
        assert_eq!(m.find(0x90000), Some((3, 2)));
        assert_eq!(m.addr_of(3, 3), Some(0x90000 + PAGE));
        assert_eq!(m.find(0x10000 + 2 * PAGE), None);
        m.settle_range(0x10000, 0x10000 + PAGE);
        assert!(m.is_done(3, 0));
        m.unmap(0x90000, 0x90000 + 2 * PAGE);
        assert_eq!(m.addr_of(3, 2), None);
        assert_eq!(m.remaining, 8 - 3);
        assert_eq!(m.find(0x10000 + 4 * PAGE), Some((3, 4)));
    }
}
