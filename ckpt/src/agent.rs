//! The checkpoint agent: a thread inside the application, started by the preloaded library
//! when the program runs under `crum run` (`CRUM_RUN=1`).
//!
//! It takes requests from the control socket ([`crate::control`]), from the `--interval`
//! timer and from the configured signal (`CRUM_CKPT_SIGNAL`). A checkpoint runs:
//! `hooks.quiesce` → stop every other thread ([`crate::threads`]) → `hooks.collect` →
//! capture ([`crate::capture`]) → [`ImageWriter::prepare`] → raw `clone` (a fork whose exit
//! signal is 0, with a pidfd: see [`fork_and_write`]) → the child writes the image without
//! locks and exits; the parent releases the threads at once (`hooks.resume`), reaps the child
//! through its pidfd, rotates old images and replies with the path. A writer that fails or is
//! killed leaves no partial image: the agent removes it, and every checkpoint first removes
//! what dead writers (of any process) left in its directory.
//!
//! The same code continues in a restored process: the fork point was saved with
//! [`threads::agent_call_saved`], so after `crum restart` the agent wakes up there, removes
//! the restorer's leftover mappings, restores the timers, runs `hooks.restore` and releases
//! the program's threads. A restored process can be checkpointed again.
//!
//! # Safety
//! The forked child uses only the preallocated [`ImageWriter`] and raw system calls; the
//! context it reads is owned by the agent's stack frame, which stays live until the child
//! has been reaped. Restart information is written by the restorer into [`RESTART_INFO`]
//! before any program thread runs.
#![allow(unsafe_code)]

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::capture::{self, Own};
use crate::control::{ControlServer, Request, StatusReply};
use crate::image::{clean_leftovers, keep_newest_of, ImageError, ImageReader, ImageWriter, RegionMeta, WriterOptions};
use crate::state::{
    FdKind, FdState, ProcessState, SocketRole, Region, RegionKind, ThreadInfo, PROCESS_STATE_VERSION, REGION_GROWSDOWN,
    REGION_BLOB, REGION_SHARED_ANON, REGION_SHARED_FILE, SECTION_PROCESS,
};
use crate::threads;

/// How the interposer plugs external (device) state into checkpoints.
#[derive(Clone, Copy)]
#[allow(clippy::type_complexity)] // the agreed interface (API-CONTRACTS.md)
pub struct Hooks {
    /// Before threads are stopped: hold new CUDA calls at the gate, drain in-flight calls.
    pub quiesce: fn() -> Result<(), String>,
    /// After threads are stopped, before fork: extra image sections (name, bytes) e.g. device state.
    /// Every one is required (an image without it is refused) and listed in the process
    /// state's `hook_sections`; a restorer must name them as understood.
    /// Runs while the program's threads are stopped: its Rust allocations come from the
    /// agent's arena (`crate::alloc`); it must not call C library functions that `malloc`.
    /// State it cannot save goes to [`name_unsaved`], named with the checkpoint's problems.
    pub collect: fn() -> Result<Vec<(String, SectionData)>, String>,
    /// In the parent after fork (and after a failed checkpoint): release the gate.
    pub resume: fn(),
    /// In a restarted process, before app threads run: rebuild external state from the sections.
    /// Like `collect`, its Rust allocations come from the agent's arena (they stay) and it must
    /// not call C library functions that `malloc`; the sections it reads are given back after.
    pub restore: fn(&dyn Fn(&str) -> Option<Vec<u8>>) -> Result<(), String>,
}

/// The contents of a hook section.
#[derive(Debug)]
pub enum SectionData {
    /// Bytes in this process's memory.
    Bytes(Vec<u8>),
    /// Bytes the image writer gathers piece by piece, in order, after the program runs again:
    /// from `local`, or from another process's memory by cross-memory attach (a snapshot that
    /// process holds for the writer, e.g. the device proxy's copy-on-write fork of device
    /// memory). Stored as a [`REGION_BLOB`] region, read back by [`read_hook_section`].
    Gathered { local: Vec<u8>, pieces: Vec<Piece>, hold: Hold },
}

impl SectionData {
    /// The section's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            SectionData::Bytes(b) => b.len() as u64,
            SectionData::Gathered { pieces, .. } => pieces.iter().map(|p| p.len).sum(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One piece of a [`SectionData::Gathered`] section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub len: u64,
    pub from: PieceFrom,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceFrom {
    /// At this offset of the section's `local` bytes.
    Local(u64),
    /// At this address in process `pid`'s memory.
    Remote { pid: i32, addr: u64 },
}

/// A descriptor whose open copies keep a remote snapshot alive: the holder lets the snapshot
/// go when the last one closes. The image writer keeps its copy until it has written the
/// section; the agent closes its own as soon as the writer runs (so no process the program
/// starts later inherits it), or when the checkpoint fails (drop).
#[derive(Debug)]
pub struct Hold(i32);

impl Hold {
    pub fn new(fd: i32) -> Hold {
        Hold(fd)
    }
    /// Closes this process's copy (raw system call: callable while threads are stopped).
    pub fn close(&mut self) {
        if self.0 >= 0 {
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(self.0) };
            self.0 = -1;
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hooks { .. }")
    }
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks { quiesce: || Ok(()), collect: || Ok(Vec::new()), resume: || {}, restore: |_| Ok(()) }
    }
}

static HOOKS: Mutex<Option<Hooks>> = Mutex::new(None);
static EXCLUDED_FDS: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// Descriptors the program inherited when `crum run` started it, as (fd, st_dev, st_ino):
/// the launching environment's (a shell's or batch system's pipe), not the program's own.
/// One crum cannot restore is saved as [`FdKind::Inherited`]: `crum restart` passes its own
/// descriptor of that number, or /dev/null with a warning. Updated after a restart.
static INHERITED: Mutex<Vec<(i32, u64, u64)>> = Mutex::new(Vec::new());
/// What the last `collect` hook could not save ([`name_unsaved`]).
static HOOK_UNSAVED: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// The problems named by the last checkpoint started by the agent itself (timer, signal),
/// printed on the program's stderr only when they change.
static LAST_WARNED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// For the `collect` hook: state of the program that this checkpoint does not save (device
/// state a backend cannot read out). It is named like every other problem: a warning, and no
/// image under `--strict`.
pub fn name_unsaved(what: String) {
    HOOK_UNSAVED.lock().unwrap_or_else(|e| e.into_inner()).push(what);
}

/// (st_dev, st_ino) of an open descriptor.
fn fd_identity(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: fstat into a live local.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Records the descriptors open now (above 2, not crum's own) as inherited.
fn record_inherited() {
    let skip = EXCLUDED_FDS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let fds: Vec<(i32, u64, u64)> = capture::numeric_entries(c"/proc/self/fd")
        .into_iter()
        .filter(|&fd| fd > 2 && !skip.contains(&fd))
        .filter_map(|fd| fd_identity(fd).map(|(d, i)| (fd, d, i)))
        .collect();
    *INHERITED.lock().unwrap_or_else(|e| e.into_inner()) = fds;
}

/// In a restored process: the inherited descriptors are now what `crum restart` passed on
/// (or /dev/null, or gone). Allocates nothing (the program's threads may be stopped).
fn refresh_inherited() {
    let mut g = INHERITED.lock().unwrap_or_else(|e| e.into_inner());
    g.retain_mut(|(fd, d, i)| match fd_identity(*fd) {
        Some((nd, ni)) => {
            (*d, *i) = (nd, ni);
            true
        }
        None => false,
    });
}

/// The sockets whose state a restart could not bring back exactly (descriptors in flight,
/// datagrams whose senders cannot send again, connections waiting to be accepted, a half-closed TCP
/// connection, …), each named with its fd: the checkpoint is refused for them.
fn socket_refusals(fds: &[FdState]) -> Vec<String> {
    fds.iter()
        .filter_map(|f| match &f.kind {
            FdKind::Socket(s) if !s.refuse.is_empty() => Some(format!("fd {} ({}): {}", f.fd, s.describe(), s.refuse)),
            _ => None,
        })
        .collect()
}

/// The System V shared memory segment attached at region `r` (`/SYSV<key>` in the map, whose
/// inode is the segment's id), when it is attached whole from its start: what a restart needs
/// to attach it again ([`crate::state::SysvShm`]); otherwise why not.
fn sysv_attachment(r: &crate::state::Region, maps: &[capture::MapsEntry]) -> Result<crate::state::SysvShm, String> {
    let m = maps.iter().find(|m| m.start == r.start && m.end == r.end).ok_or("it is mapped in several pieces")?;
    if m.offset != 0 {
        return Err("only part of it is attached".into());
    }
    let id = i32::try_from(m.inode).map_err(|_| "its id is out of range".to_string())?;
    // SAFETY: shmid_ds is plain data; IPC_STAT writes one into the live local.
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::shmctl(id, libc::IPC_STAT, &mut ds) } != 0 {
        return Err(format!("its segment {id} cannot be read: {}", std::io::Error::last_os_error()));
    }
    let size = ds.shm_segsz as u64;
    if size.next_multiple_of(4096) != r.end - r.start {
        return Err("only part of it is attached".into());
    }
    Ok(crate::state::SysvShm {
        start: r.start,
        id,
        key: ds.shm_perm.__key,
        size,
        mode: u32::from(ds.shm_perm.mode) & 0o777,
        // SHM_DEST
        removed: u32::from(ds.shm_perm.mode) & 0o1000 != 0,
    })
}

/// The pidfds of other processes ([`FdKind::PidFdOf`], captured with the kernel's pid): kept,
/// with the pid the program knows, when that process is in the image too (`in_job`: the
/// kernel pids of the job's processes and of the exited children it holds), for the job's
/// restart to open them on it again; otherwise a restart could open them on nothing, and the
/// descriptor is named like any other it cannot restore.
fn member_pidfds(fds: &mut [FdState], in_job: &[i32]) {
    // A restart opens them last, after every epoll instance is filled: one an interest list
    // watches is named.
    let watched: Vec<i32> = fds
        .iter()
        .filter_map(|f| match &f.kind {
            FdKind::Epoll { watches } => Some(watches.iter().map(|w| w.fd)),
            _ => None,
        })
        .flatten()
        .collect();
    for f in fds.iter_mut() {
        if let FdKind::PidFdOf { pid, thread } = f.kind {
            f.kind = if watched.contains(&f.fd) {
                FdKind::Unsupported { what: format!("anon_inode:[pidfd] of process {pid} in an epoll interest list") }
            } else if in_job.contains(&pid) {
                FdKind::PidFdOf { pid: program_pid_of(pid), thread }
            } else {
                FdKind::Unsupported { what: format!("anon_inode:[pidfd] of process {pid}, which is not in the image") }
            };
        }
    }
}

/// The pid the program knows for the kernel's `pid` (`libcrum_libc.so`'s translation: other
/// processes of a restarted job have new pids; the same before any restart).
fn program_pid_of(pid: i32) -> i32 {
    let f = PID_TO_PROGRAM.load(Relaxed);
    if f == 0 {
        return pid;
    }
    // SAFETY: `crum_pid_to_program` of `libcrum_libc.so` (looked up at start): atomics only.
    unsafe { std::mem::transmute::<usize, extern "C" fn(i32) -> i32>(f)(pid) }
}

/// The descriptors of `fds` whose I/O signals go to this process (`F_SETOWN` of its own
/// pid; `F_SETLEASE` sets it too), as [`crate::state::ProcessState::fd_owners`], and each
/// one whose owner is another process, thread or group, named (a restart cannot aim it at
/// them again). A signal set with `F_SETSIG` without an owner is kept too.
///
/// A description shared with another process of the job (`others`, kernel pids) that is its
/// owner is left to that process's part, which sets it to itself again.
fn fd_owners(fds: &[FdState], others: &[i32]) -> (Vec<(i32, i32, i32)>, Vec<String>) {
    let link = |fd: i32| {
        std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    let me = threads::real_pid();
    let (mut owners, mut refused) = (Vec::new(), Vec::new());
    for f in fds
        .iter()
        .filter(|f| !matches!(f.kind, FdKind::Dup { .. } | FdKind::ControlListener))
    {
        // struct f_owner_ex { int type; pid_t pid; } (F_GETOWN_EX = 16, F_GETSIG = 11; the
        // libc crate has neither).
        let mut own = [0i32; 2];
        // The system call itself: the C library's `fcntl` is libcrum_libc.so's after a
        // restart, which answers with the program's pids.
        // SAFETY: F_GETOWN_EX writes one struct f_owner_ex into the live local; F_GETSIG
        // takes no argument.
        let (r, sig) = unsafe {
            (libc::syscall(libc::SYS_fcntl, f.fd, 16, own.as_mut_ptr()) as i32, libc::syscall(libc::SYS_fcntl, f.fd, 11) as i32)
        };
        if r != 0 {
            continue;
        }
        let sig = sig.max(0);
        if own[1] != me && others.contains(&own[1]) && capture::holds_file(own[1], f.fd) {
            continue;
        }
        // F_OWNER_PID (1) of this process: aimed at the restarted process again.
        if own[1] == me && own[0] == 1 || own[1] == 0 && sig > 0 {
            owners.push((f.fd, if own[1] == me { own[0] } else { -1 }, sig));
        } else if own[1] != 0 {
            let whose = match own[0] {
                0 => "thread",
                2 => "process group",
                _ => "process",
            };
            refused.push(format!(
                "fd {} ({}) sends its I/O signals to {whose} {} (F_SETOWN), not to this process nor to a process of the job holding it: a restart cannot aim them there again",
                f.fd,
                link(f.fd),
                own[1]
            ));
        }
    }
    (owners, refused)
}

/// Whether process `pid` runs crum's control thread but answers on no control socket.
fn crum_threads_without_agent(pid: i32) -> bool {
    let control_thread = capture::numeric_entries(
        &std::ffi::CString::new(format!("/proc/{pid}/task")).unwrap_or_default(),
    )
    .into_iter()
    .any(|t| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm"))
            .is_ok_and(|c| c.trim() == "crum-control")
    });
    control_thread && !crate::job::has_agent(pid)
}

/// Whether child `pid` has crum's library mapped (a copy of a process under crum), runs no
/// agent and has existed for more than 300 ms (an agent starting after a fork has had
/// its time).
fn raw_copy_without_agent(pid: i32) -> bool {
    let mapped = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|m| m.lines().any(|l| l.trim_end_matches(" (deleted)").ends_with("/libcrum.so")));
    if !mapped || crate::job::has_agent(pid) {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Field 22: start time, in clock ticks since boot.
    let start = stat.rfind(')').and_then(|b| stat[b + 1..].split_whitespace().nth(19)).and_then(|v| v.parse::<f64>().ok());
    let up = std::fs::read_to_string("/proc/uptime").ok().and_then(|u| u.split_whitespace().next()?.parse::<f64>().ok());
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    matches!((start, up), (Some(s), Some(u)) if u - s / hz > 0.3)
}

/// The processes this one shares its descriptor table with (`clone(CLONE_FILES)` without
/// `CLONE_VM`: its children, or its parent), each named: a restart gives every process a
/// table of its own, so a descriptor one opens or closes would no longer be the other's.
fn shared_fd_tables() -> Vec<String> {
    let me = threads::real_pid();
    // The kernel's id (not the C library's `getppid`, which libcrum_libc.so answers with
    // the program's after a restart).
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::syscall(libc::SYS_getppid) } as i32;
    let mut out = Vec::new();
    let others = capture::children()
        .into_iter()
        .map(|(pid, comm, _)| (pid, comm, "child"))
        .chain(std::iter::once((parent, String::new(), "parent")));
    for (pid, comm, rel) in others {
        // SAFETY: kcmp compares two processes' tables; no memory is passed.
        let same = unsafe {
            libc::syscall(libc::SYS_kcmp, me, pid, 2 /* KCMP_FILES */, 0, 0)
        } == 0;
        if same && pid != me {
            let comm = if comm.is_empty() {
                String::new()
            } else {
                format!(" ({comm})")
            };
            out.push(format!(
                "process {me} shares its file descriptor table with its {rel} {pid}{comm} (clone with CLONE_FILES): a restart cannot make a shared table again"
            ));
        }
    }
    out
}

/// Marks the unrestorable descriptors the program inherited at `crum run` as
/// [`FdKind::Inherited`], and names what remains that a restart cannot restore.
fn classify_fds(fds: &mut [FdState]) -> Vec<String> {
    let inherited = INHERITED.lock().unwrap_or_else(|e| e.into_inner());
    let mut problems = Vec::new();
    for f in fds.iter_mut() {
        let inherited_here = || fd_identity(f.fd).is_some_and(|(d, i)| inherited.contains(&(f.fd, d, i)));
        match &f.kind {
            FdKind::Unsupported { what } if inherited_here() => f.kind = FdKind::Inherited { what: what.clone() },
            FdKind::Unsupported { what } => {
                problems.push(format!("fd {} ({what}) cannot be restored: a restart of this image will fail", f.fd))
            }
            // A socket the launching environment passed (not one of the program's): passed on
            // like the other inherited descriptors, not re-created.
            // (A socket of the job, e.g. passed by a parent of the job to this executed
            // process, is the job's.)
            FdKind::Socket(s)
                if inherited_here() && !matches!(s.role, SocketRole::JobPair { .. } | SocketRole::JobShared { .. }) =>
            {
                f.kind = FdKind::Inherited { what: s.describe() }
            }
            FdKind::Socket(s) => {
                if let Some(lost) = f.kind.loss() {
                    problems.push(format!("fd {} ({}): {lost}", f.fd, s.describe()));
                }
            }
            FdKind::Inotify { lost, .. } if !lost.is_empty() => problems.push(format!("fd {} (inotify): {lost}", f.fd)),
            _ => {}
        }
    }
    problems
}
static STATUS: Mutex<Option<StatusReply>> = Mutex::new(None);
static CHECKPOINTS: AtomicU64 = AtomicU64::new(0);
/// Checkpoints requested and not yet answered (or, for timed ones, not yet finished): a
/// program that ends meanwhile waits for them at exit, so the requester gets its image path.
static IN_PROGRESS: AtomicU64 = AtomicU64::new(0);

fn progress_done() {
    let _ = IN_PROGRESS.fetch_update(SeqCst, SeqCst, |v| Some(v.saturating_sub(1)));
}

/// At program exit (atexit): let a checkpoint in progress finish and answer first. Not in
/// a child the program forked (it has no agent; `after_fork_child` clears its count too).
extern "C" fn wait_for_checkpoints() {
    if !is_owner() {
        return;
    }
    let t0 = Instant::now();
    while IN_PROGRESS.load(SeqCst) != 0 && t0.elapsed() < Duration::from_secs(600) {
        std::thread::sleep(Duration::from_millis(2));
    }
}
/// Duration of the last program-visible pause (threads stopped), in microseconds.
pub static LAST_PAUSE_US: AtomicU64 = AtomicU64::new(0);
/// Set by the quiesce hook: microseconds of it spent draining the device (for the log).
pub static PHASE_DRAIN_US: AtomicU64 = AtomicU64::new(0);
/// Set by the collect hook: bytes of device memory it saved (for the log).
pub static PHASE_DEVICE_BYTES: AtomicU64 = AtomicU64::new(0);
/// Set by the collect hook: of those, the bytes copied while the program was stopped (the
/// rest is read from a snapshot by the writer).
pub static PHASE_DEVICE_COPIED: AtomicU64 = AtomicU64::new(0);

/// Installs the hooks used by every later checkpoint and restart.
pub fn set_hooks(h: Hooks) {
    *HOOKS.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
}

fn hooks() -> Hooks {
    HOOKS.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or_default()
}

/// Marks `fd` as private to crum (e.g. the proxy channel): it is neither saved nor restored.
pub fn exclude_fd(fd: i32) {
    let mut g = EXCLUDED_FDS.lock().unwrap_or_else(|e| e.into_inner());
    if !g.contains(&fd) {
        g.push(fd);
    }
}

/// Makes room for `n` more [`exclude_fd`]s, before the program's threads stop: what grows
/// while they are stopped lives in the agent's arena, given back after the cut.
fn reserve_excluded(n: usize) {
    EXCLUDED_FDS.lock().unwrap_or_else(|e| e.into_inner()).reserve(n);
}

/// The descriptors that are crum's own ([`exclude_fd`], the logs of written files).
pub(crate) fn own_fds() -> Vec<i32> {
    let mut v = EXCLUDED_FDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    v.extend(crate::writes::own_fds());
    v
}

/// Takes back an [`exclude_fd`] (the descriptor was closed; its number may be reused).
pub fn include_fd(fd: i32) {
    EXCLUDED_FDS.lock().unwrap_or_else(|e| e.into_inner()).retain(|&f| f != fd);
}

static EXCLUDED_REGIONS: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// Marks the mappings inside `[start, start+len)` as private to crum (e.g. the proxy
/// channel, whose replacement the restore hook maps): they are neither saved nor restored.
pub fn exclude_region(start: u64, len: u64) {
    EXCLUDED_REGIONS.lock().unwrap_or_else(|e| e.into_inner()).push((start, start.saturating_add(len)));
}

static SCRATCH_REGIONS: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// Marks the mappings inside `[start, start+len)` as crum's scratch memory (the proxy
/// channel, which a restart replaces): saved without contents and restored as private
/// memory of zeros at the same place (so nothing else is mapped there after a restart while
/// stale references into it may remain). Shared memory so marked is not copied during the
/// pause either.
pub fn scratch_region(start: u64, len: u64) {
    SCRATCH_REGIONS.lock().unwrap_or_else(|e| e.into_inner()).push((start, start.saturating_add(len)));
}

/// Takes back an [`exclude_region`].
pub fn include_region(start: u64) {
    EXCLUDED_REGIONS.lock().unwrap_or_else(|e| e.into_inner()).retain(|r| r.0 != start);
}

/// Written by the restorer before the restored program runs: magic, old pid, image path,
/// and for a CUDA program the channel to the fresh proxy the restorer started.
#[repr(C)]
pub struct RestartInfo {
    pub magic: u64,
    pub old_pid: i64,
    pub path_len: u64,
    pub path: [u8; 4096],
    /// Channel memfd of the new proxy (-1: none was started).
    pub channel_fd: i64,
    /// A job's pid table (`crate::job::PidTable`), filled by the restorers of its processes
    /// (-1: not a job).
    pub job_table_fd: i64,
    /// A lazy restart (`crate::lazy`): the page server's done pipe and this process's copy
    /// of the userfaultfd (-1: the restart was eager).
    pub lazy_done_fd: i64,
    pub lazy_uffd: i64,
}

/// The directory for new images named by `crum restart --dir` (None: the one `crum run`
/// gave).
static NEW_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);
/// Where checkpoints go when no directory is asked for (`crum run --dir`), for `crum ps`.
static DEFAULT_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Value of [`RestartInfo::magic`] once the restorer has filled it.
pub const RESTART_MAGIC: u64 = 0x4352_554d_5253_5452;

#[no_mangle]
#[used]
static mut RESTART_INFO: RestartInfo =
    RestartInfo {
    magic: 0,
    old_pid: 0,
    path_len: 0,
    path: [0; 4096],
    channel_fd: -1,
    job_table_fd: -1,
    lazy_done_fd: -1,
    lazy_uffd: -1,
};

/// In a restarted process: the channel memfd of the proxy `crum restart` started for it.
pub fn restart_channel_fd() -> Option<i32> {
    // SAFETY: written by the restorer before any program thread ran; read-only afterwards.
    let info = unsafe { &*std::ptr::addr_of!(RESTART_INFO) };
    (info.magic == RESTART_MAGIC && info.channel_fd >= 0).then_some(info.channel_fd as i32)
}

/// The exit code of a program ended after a checkpoint (`crum checkpoint --exit`, `crum run
/// --on-signal SIG --exit`): EX_TEMPFAIL, "stopped, restart it", told apart from finishing.
pub const EXIT_CHECKPOINTED: i32 = 75;

/// Agent configuration (from `crum run`'s environment variables).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub dir: PathBuf,
    pub interval: Option<Duration>,
    pub keep: usize,
    pub signal: Option<i32>,
    /// Write synchronously while the threads are stopped (benchmark baseline).
    pub sync: bool,
    /// Refuse to write an image a restart could not restore exactly (`crum run --strict`,
    /// `CRUM_STRICT=1`): what it names is an error instead of a warning.
    pub strict: bool,
    /// End the program ([`EXIT_CHECKPOINTED`]) after a checkpoint the signal triggered was
    /// written (`crum run --on-signal SIG --exit`, `CRUM_CKPT_EXIT=1`).
    pub exit_on_signal: bool,
    /// Every how many checkpoints an image is full (`crum run --full-every N`,
    /// `CRUM_CKPT_FULL_EVERY`; default [`FULL_EVERY`]); the ones between keep the memory
    /// unchanged since the program's previous image in the same directory in that image
    /// (incremental images, `crate::image::Base`). 1: every image is full.
    pub full_every: usize,
    /// Bytes of memory per image chunk (`crum run --chunk-size`, `CRUM_CKPT_CHUNK_KIB`;
    /// default 4 MiB): the unit an incremental image keeps in an earlier one or stores.
    /// Smaller chunks keep more of a program that changes memory here and there, at some
    /// cost in compression and in the size of the chunk table.
    pub chunk_size: u32,
}

/// Default of [`Config::full_every`].
pub const FULL_EVERY: usize = 8;
/// Default of [`Config::chunk_size`].
pub const DEFAULT_CHUNK: u32 = 4 << 20;

impl Config {
    /// Reads `CRUM_CKPT_DIR`, `CRUM_CKPT_INTERVAL`, `CRUM_CKPT_KEEP`, `CRUM_CKPT_SIGNAL`,
    /// `CRUM_CKPT_SYNC`, `CRUM_STRICT`, `CRUM_CKPT_EXIT`, `CRUM_CKPT_FULL_EVERY` through `get`.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let dir = PathBuf::from(get("CRUM_CKPT_DIR").unwrap_or_else(|| "crum-images".into()));
        // Absolute and normalised (no `.`, `..` or `//`): image paths are printed.
        let dir = crate::control::absolute(&dir).map_err(|e| format!("cannot read the working directory: {e}"))?;
        let interval = match get("CRUM_CKPT_INTERVAL") {
            Some(v) if !v.is_empty() => {
                let s: f64 = v.parse().map_err(|_| format!("CRUM_CKPT_INTERVAL={v} is not a number of seconds"))?;
                if !(s > 0.0 && s.is_finite()) {
                    return Err(format!("CRUM_CKPT_INTERVAL={v} must be positive"));
                }
                Some(Duration::from_secs_f64(s))
            }
            _ => None,
        };
        let keep = match get("CRUM_CKPT_KEEP") {
            Some(v) if !v.is_empty() => match v.parse() {
                Ok(0) => return Err(format!("CRUM_CKPT_KEEP={v} must be at least 1 (unset: keep every image)")),
                Ok(n) => n,
                Err(_) => return Err(format!("CRUM_CKPT_KEEP={v} is not a count")),
            },
            _ => 0,
        };
        let signal = match get("CRUM_CKPT_SIGNAL") {
            Some(v) if !v.is_empty() => {
                let s: i32 = v.parse().map_err(|_| format!("CRUM_CKPT_SIGNAL={v} is not a signal number"))?;
                if let Some(why) = trigger_signal_problem(s) {
                    return Err(format!("CRUM_CKPT_SIGNAL={v} {why}"));
                }
                Some(s)
            }
            _ => None,
        };
        let sync = get("CRUM_CKPT_SYNC").is_some_and(|v| v == "1");
        let strict = get("CRUM_STRICT").is_some_and(|v| v == "1");
        let exit_on_signal = get("CRUM_CKPT_EXIT").is_some_and(|v| v == "1");
        if exit_on_signal && signal.is_none() {
            return Err("CRUM_CKPT_EXIT=1 needs CRUM_CKPT_SIGNAL (crum run --exit needs --on-signal)".into());
        }
        let full_every = match get("CRUM_CKPT_FULL_EVERY") {
            Some(v) if !v.is_empty() => match v.parse::<usize>() {
                Ok(n) if (1..=crate::image::MAX_CHAIN + 1).contains(&n) => n,
                _ => return Err(format!("CRUM_CKPT_FULL_EVERY={v} is not a count from 1 to 256")),
            },
            _ => FULL_EVERY,
        };
        let chunk_size = match get("CRUM_CKPT_CHUNK_KIB") {
            Some(v) if !v.is_empty() => match v.parse::<u32>() {
                Ok(k) if k.is_power_of_two() && (64..=65536).contains(&k) => k * 1024,
                _ => return Err(format!("CRUM_CKPT_CHUNK_KIB={v} is not a power of two from 64 to 65536")),
            },
            _ => DEFAULT_CHUNK,
        };
        Ok(Config { dir, interval, keep, signal, sync, strict, exit_on_signal, full_every, chunk_size })
    }
}

/// Why signal `sig` cannot be the checkpoint trigger (`crum run --on-signal`,
/// `CRUM_CKPT_SIGNAL`), or None when it can: KILL and STOP cannot be caught, and the fault
/// signals are raised by faults (crum's managed memory handles SIGSEGV itself).
pub fn trigger_signal_problem(sig: i32) -> Option<&'static str> {
    match sig {
        libc::SIGKILL | libc::SIGSTOP => Some("cannot be caught"),
        libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGTRAP => {
            Some("is a fault signal, not a trigger")
        }
        s if !(1..=64).contains(&s) => Some("is not a signal number"),
        _ => None,
    }
}

/// Takes a checkpoint now, from the calling thread, which plays the agent's part: every
/// other thread of the process is stopped while the image of the whole process is taken.
/// `sync` writes the image before the threads resume instead of in a forked child. Returns
/// the image path. For tools and tests; programs under `crum run` use the agent thread. If
/// the image is restarted, this call returns there too (with `dir`).
pub fn checkpoint_now(dir: &Path, sync: bool) -> Result<PathBuf, String> {
    let _crum = crate::writes::CrumScope::enter();
    threads::probe_libc()?;
    resolve_restart_symbols();
    threads::install_handler()?;
    let cfg =
        Config {
            dir: dir.to_path_buf(),
            interval: None,
            keep: 0,
            signal: None,
            sync,
            strict: false,
            exit_on_signal: false,
            full_every: FULL_EVERY,
            chunk_size: DEFAULT_CHUNK,
        };
    match checkpoint(&cfg, dir, false, false) {
        Outcome::Written(p, _) | Outcome::Held(p, _) => Ok(p),
        Outcome::Failed(e) => Err(e),
        Outcome::Restarted => Ok(dir.to_path_buf()),
    }
}

enum Reply {
    /// The image and the problems it names (see [`classify_fds`]), or why there is none.
    Done(Result<(PathBuf, Vec<String>), String>),
    /// The request was in flight in the process an image was taken of; this is the restored
    /// process and the requester's connection does not exist here.
    Restarted,
}

struct Job {
    dir: Option<PathBuf>,
    /// `crum checkpoint --strict`: no image if a restart could not restore it exactly.
    strict: bool,
    /// Sent by the checkpoint signal's thread.
    signal: bool,
    /// `crum checkpoint --exit`: the requester, answered by the agent itself, which then
    /// ends the process with the program's threads still stopped.
    exit_reply: Option<crate::control::Responder>,
    reply: Option<mpsc::Sender<Reply>>,
    /// Not a checkpoint: the agent thread is to end ([`suspend_threads`]).
    quit: bool,
    /// A job member's part of its root's checkpoint (`crate::job`): the link to the root and
    /// the directory the part goes into.
    member: Option<(std::os::unix::net::UnixStream, PathBuf)>,
}

/// The process whose agent this is (the restored process's pid after a restart): a child the
/// program forked has no crum threads, whatever its copy of this memory says.
static OWNER_PID: AtomicI32 = AtomicI32::new(0);

fn is_owner() -> bool {
    OWNER_PID.load(SeqCst) == threads::real_pid()
}

/// crum's threads: the control thread, the agent thread, the checkpoint-signal thread.
const CONTROL: usize = 0;
const ENGINE: usize = 1;
const SIGNAL: usize = 2;
const THREAD_NAMES: [&str; 3] = ["crum-control", "crum-agent", "crum-signal"];
/// Which of crum's threads run (set by the starter, cleared by the thread as it ends).
static RUNNING: [AtomicBool; 3] = [AtomicBool::new(false), AtomicBool::new(false), AtomicBool::new(false)];
/// The kernel tid of each thread that has ended (0: running or never started), so that
/// [`suspend_threads`] can wait until it has left the thread group.
static EXIT_TID: [AtomicI32; 3] = [AtomicI32::new(0), AtomicI32::new(0), AtomicI32::new(0)];
/// Set while crum's threads are to end ([`suspend_threads`]).
static SUSPEND: AtomicBool = AtomicBool::new(false);
/// Nesting of [`suspend_threads`]/[`resume_threads`].
static SUSPENDED: Mutex<u32> = Mutex::new(0);

/// What crum's threads are started from, kept so that they can be started again after
/// [`suspend_threads`].
struct Runtime {
    cfg: Config,
    server: std::sync::Arc<ControlServer>,
    tx: mpsc::Sender<Job>,
    /// The agent thread's queue; taken by the agent thread while it runs.
    rx: Option<mpsc::Receiver<Job>>,
    /// Read end of the checkpoint-signal pipe (-1: no `--on-signal`).
    trigger_r: i32,
}

static RUNTIME: Mutex<Option<Runtime>> = Mutex::new(None);

fn runtime() -> std::sync::MutexGuard<'static, Option<Runtime>> {
    RUNTIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts one of crum's threads with every signal blocked from its first instruction: the
/// creating thread blocks them all around `pthread_create`, so the new thread inherits a full
/// mask (it then unblocks only the stop signal, [`block_all_signals`]). A process-directed
/// signal can never land on a crum thread.
fn spawn_blocked(which: usize, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    // SAFETY: sigfillset/pthread_sigmask on live locals; the old mask is restored below.
    let old = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        old
    };
    EXIT_TID[which].store(0, SeqCst);
    RUNNING[which].store(true, SeqCst);
    let r = std::thread::Builder::new().name(THREAD_NAMES[which].into()).spawn(move || {
        crate::writes::mark_crum_thread();
        f();
        // The thread's last word: it leaves the thread group right after.
        RUNNING[which].store(false, SeqCst);
        EXIT_TID[which].store(threads::gettid(), SeqCst);
    });
    // SAFETY: restores the caller's own mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    if let Err(e) = r {
        RUNNING[which].store(false, SeqCst);
        return Err(format!("cannot start the {} thread: {e}", THREAD_NAMES[which]));
    }
    Ok(())
}

/// Starts those of crum's threads that do not run (all of them at start).
fn spawn_threads(rt: &mut Runtime) -> Result<(), String> {
    if !RUNNING[CONTROL].load(SeqCst) {
        let (server, tx) = (rt.server.clone(), rt.tx.clone());
        spawn_blocked(CONTROL, move || control_loop(&server, tx))?;
    }
    if !RUNNING[ENGINE].load(SeqCst) {
        if let Some(rx) = rt.rx.take() {
            let (cfg, tx) = (rt.cfg.clone(), rt.tx.clone());
            spawn_blocked(ENGINE, move || {
                engine_loop(cfg, &rx, tx);
                if let Some(rt) = runtime().as_mut() {
                    rt.rx = Some(rx);
                }
            })?;
        }
    }
    if rt.trigger_r >= 0 && !RUNNING[SIGNAL].load(SeqCst) {
        let (rfd, tx) = (rt.trigger_r, rt.tx.clone());
        spawn_blocked(SIGNAL, move || signal_loop(rfd, tx))?;
    }
    Ok(())
}

/// Ends crum's threads (control, agent, signal) and waits until they have left the thread
/// group, so that the program is single-threaded again if it was before crum: `unshare` and
/// `setns` of a user or mount namespace require that (`libcrum_libc.so` wraps them). A
/// checkpoint in progress finishes first. Returns whether threads were ended (`false` in a
/// child the program forked, which has none, or without an agent). Pair with
/// [`resume_threads`].
pub fn suspend_threads() -> bool {
    let mut depth = SUSPENDED.lock().unwrap_or_else(|e| e.into_inner());
    if !is_owner() || runtime().is_none() {
        return false;
    }
    *depth += 1;
    if *depth > 1 {
        return true;
    }
    SUSPEND.store(true, SeqCst);
    let t0 = Instant::now();
    // The threads that hand the agent work end first (a request they took is answered),
    // then the agent thread, after the work queued before its quit job.
    for which in [CONTROL, SIGNAL, ENGINE] {
        if RUNNING[which].load(SeqCst) {
            match which {
                CONTROL => wake_control(),
                SIGNAL => {
                    let b = [TRIGGER_QUIT];
                    // SAFETY: write(2) of a live byte to our own pipe.
                    unsafe { libc::write(TRIGGER_W, b.as_ptr() as *const libc::c_void, 1) };
                }
                _ => {
                    let tx = runtime().as_ref().map(|rt| rt.tx.clone());
                    if let Some(tx) = tx {
                        let _ = tx.send(Job { dir: None, strict: false, signal: false, exit_reply: None, reply: None, quit: true, member: None });
                    }
                }
            }
        }
        loop {
            let tid = EXIT_TID[which].load(SeqCst);
            let gone = if RUNNING[which].load(SeqCst) {
                false
            } else {
                tid == 0 || !Path::new(&format!("/proc/self/task/{tid}")).exists()
            };
            if gone {
                break;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                eprintln!("crum: the {} thread did not end within 60 s; the program stays multithreaded", THREAD_NAMES[which]);
                break;
            }
            // One nanosleep, not std's sleep, which restarts after each signal: in a program
            // that keeps signals coming it would never return.
            let ts = libc::timespec { tv_sec: 0, tv_nsec: 200_000 };
            // SAFETY: nanosleep with a live timespec and no remainder pointer.
            unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
        }
    }
    true
}

/// Starts crum's threads again after [`suspend_threads`].
pub fn resume_threads() {
    let mut depth = SUSPENDED.lock().unwrap_or_else(|e| e.into_inner());
    if *depth == 0 || !is_owner() {
        return;
    }
    *depth -= 1;
    if *depth > 0 {
        return;
    }
    SUSPEND.store(false, SeqCst);
    if let Some(rt) = runtime().as_mut() {
        if let Err(e) = spawn_threads(rt) {
            eprintln!("crum: checkpoints disabled: {e}");
        }
    }
}

/// Wakes the control thread out of `accept` with a status request through its own socket;
/// returns once it is answered or the control thread has ended (after another request).
fn wake_control() {
    use std::io::{Read, Write};
    let pid = threads::real_pid() as u32;
    let path = crate::control::socket_path_in(&crate::control::socket_dir(), pid);
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(&path) else { return };
    let Ok(mut line) = serde_json::to_vec(&Request::Status) else { return };
    line.push(b'\n');
    if s.write_all(&line).is_err() || s.set_read_timeout(Some(Duration::from_millis(20))).is_err() {
        return;
    }
    let mut b = [0u8; 256];
    while RUNNING[CONTROL].load(SeqCst) {
        match s.read(&mut b) {
            Ok(_) => return,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted) => {}
            Err(_) => return,
        }
    }
}

/// The writer's error pipe of the checkpoint in progress (read end, write end; -1: none)
/// and its inode: a child the program forks meanwhile closes its copies
/// ([`after_fork_child`]) instead of holding the pipe open for as long as it lives.
static WRITER_PIPE: [AtomicI32; 2] = [AtomicI32::new(-1), AtomicI32::new(-1)];
static WRITER_PIPE_INO: AtomicU64 = AtomicU64::new(0);

fn publish_writer_pipe(r: i32, w: i32) {
    let ino = if r >= 0 { fd_inode(r) } else { 0 };
    WRITER_PIPE_INO.store(ino, SeqCst);
    WRITER_PIPE[0].store(r, SeqCst);
    WRITER_PIPE[1].store(w, SeqCst);
}

/// The inode of `fd` (0: not open). Async-signal-safe.
fn fd_inode(fd: i32) -> u64 {
    // SAFETY: fstat into a live local.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO {
        st.st_ino
    } else {
        0
    }
}

/// In a child the program forked (pthread_atfork): it takes no part in the parent's
/// checkpoint. Clears the checkpoint-in-progress count (its `exit` must not wait for a
/// checkpoint that is not its own) and closes its copies of the writer's descriptors; then
/// it becomes a member of the job with an agent of its own ([`start_in_child`]).
extern "C" fn after_fork_child() {
    IN_PROGRESS.store(0, SeqCst);
    for r in &RUNNING {
        r.store(false, SeqCst);
    }
    let ino = WRITER_PIPE_INO.swap(0, SeqCst);
    for slot in &WRITER_PIPE {
        let fd = slot.swap(-1, SeqCst);
        // The number is checked against the pipe's inode: the parent may have closed it (and
        // the program reused the number) just before the fork.
        if fd >= 0 && ino != 0 && fd_inode(fd) == ino {
            // SAFETY: the parent's writer pipe, copied into this child by fork; this child
            // never uses it.
            unsafe { libc::close(fd) };
        }
    }    start_in_child();
}

/// In a child just forked: closes the descriptors of its parent's crum that the fork copied
/// (the pidfd of an image writer, above the program's range; a control connection or a
/// job's link to a member, at any number: one just made is below the range until it is
/// moved), which would otherwise be saved in the child's image as its own.
fn close_inherited_crum_fds() {
    let base = crate::highfd::base();
    let dir = crate::control::socket_dir();
    let dir = dir.as_os_str().as_encoded_bytes();
    for fd in capture::numeric_entries(c"/proc/self/fd") {
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap_or_default();
        let crum = if link.as_os_str() == "anon_inode:[pidfd]" {
            fd >= base
        } else if link.to_str().is_some_and(|l| l.starts_with("socket:")) {
            // A Unix socket whose own or peer address lies in crum's control directory.
            let named_in_dir = |peer: bool| {
                // SAFETY: sockaddr_un is plain data; the kernel writes at most `len` bytes.
                let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
                let mut len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
                let p = &mut sa as *mut libc::sockaddr_un as *mut libc::sockaddr;
                // SAFETY: as above, on our own descriptor.
                let r = unsafe { if peer { libc::getpeername(fd, p, &mut len) } else { libc::getsockname(fd, p, &mut len) } };
                let path: Vec<u8> = sa.sun_path.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
                r == 0 && sa.sun_family as i32 == libc::AF_UNIX && !dir.is_empty() && path.starts_with(dir)
            };
            named_in_dir(false) || named_in_dir(true)
        } else {
            false
        };
        if crum {
            // SAFETY: a copy of the parent's crum descriptor, closed once here.
            unsafe { libc::close(fd) };
        }
    }
}

/// Whether a lock is free in a child just forked (held by a thread of the parent at the
/// fork, it never is: that thread does not exist here).
fn free<T>(m: &Mutex<T>) -> bool {
    !matches!(m.try_lock(), Err(std::sync::TryLockError::WouldBlock))
}

/// Starts crum's threads in a child the program forked (without exec), so that it is
/// checkpointed with its job (`crate::job`): a control socket under its own pid, an agent
/// without device hooks (a forked child has no CUDA context), no timer or signal of its
/// own. Not when the parent had no agent, nor when a lock the agent needs was held by one of
/// the parent's threads at the fork (the child then runs without: its parent names it at a
/// checkpoint, as before).
fn start_in_child() {
    let Ok(mut guard) = RUNTIME.try_lock() else { return };
    let Some(old) = guard.take() else { return };
    let locks_free = free(&HOOKS)
        && free(&EXCLUDED_FDS)
        && free(&INHERITED)
        && free(&LAST_WARNED)
        && free(&STATUS)
        && free(&EXCLUDED_REGIONS)
        && free(&NEW_DIR)
        && free(&PID_HISTORY)
        && free(&SUSPENDED)
        && crate::lineage::unlocked()
        && crate::inotify::unlocked();
    let Runtime { mut cfg, server, trigger_r, .. } = old;
    // The parent's listener and checkpoint-signal pipe are the parent's.
    // SAFETY: this child's copy of the parent's listener; the server is never dropped here.
    unsafe { libc::close(server.listener_fd()) };
    std::mem::forget(server);
    if trigger_r >= 0 {
        // SAFETY: this child's copies of the parent's pipe; the handler is the default again.
        unsafe {
            libc::close(trigger_r);
            libc::close(TRIGGER_W);
            TRIGGER_W = -1;
            let sig = TRIGGER_SIG.load(SeqCst);
            if sig > 0 && !TRIGGER_TAKEN.load(SeqCst) {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
    }
    if !locks_free {
        return;
    }
    close_inherited_crum_fds();
    let pid = threads::real_pid();
    OWNER_PID.store(pid, SeqCst);
    *HOOKS.lock().unwrap_or_else(|e| e.into_inner()) = None;
    PID_HISTORY.lock().unwrap_or_else(|e| e.into_inner()).clear();
    *STATUS.lock().unwrap_or_else(|e| e.into_inner()) = None;
    CHECKPOINTS.store(0, Relaxed);
    cfg.interval = None;
    cfg.signal = None;
    let Ok(server) = ControlServer::bind(pid as u32) else { return };
    let (tx, rx) = mpsc::channel::<Job>();
    let rt = guard.insert(Runtime { cfg, server: std::sync::Arc::new(server), tx, rx: Some(rx), trigger_r: -1 });
    let _ = spawn_threads(rt);
}

/// Starts the agent if this process runs under `crum run` (its environment says so);
/// otherwise does nothing. Called once from the preloaded library's constructor.
pub fn start_from_env() {
    if std::env::var("CRUM_RUN").as_deref() != Ok("1") {
        return;
    }
    if let Err(e) = start(Config::from_vars(|k| std::env::var(k).ok())) {
        // The program runs on without checkpoints; say why once.
        eprintln!("crum: checkpoints disabled: {e}");
    }
}

fn start(cfg: Result<Config, String>) -> Result<(), String> {
    let mut cfg = cfg?;
    // A process of a job (a descendant of a process running crum's agent) is checkpointed
    // with the job, by its root: no timer or signal of its own (its images would be taken
    // for the job's).
    let me = threads::real_pid();
    if crate::job::root_of(me, crate::job::has_agent) != me {
        cfg.interval = None;
        cfg.signal = None;
    }
    *DEFAULT_DIR.lock().unwrap_or_else(|e| e.into_inner()) = Some(cfg.dir.clone());
    // The proxy channel (`crum run`'s, moved above the program's fds by the interposer's
    // constructor) belongs to the interposer, whose restore hook builds a new one: it is
    // excluded there (never saved or restored).
    threads::probe_libc()?;
    resolve_restart_symbols();
    threads::install_handler()?;
    // Before crum opens anything of its own (the channel is already excluded).
    record_inherited();
    let pid = threads::real_pid();
    OWNER_PID.store(pid, SeqCst);
    let server = ControlServer::bind(pid as u32).map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel::<Job>();
    let trigger_r = match cfg.signal {
        Some(sig) => install_trigger(sig)?,
        None => -1,
    };
    // SAFETY: registers plain functions without arguments; the first only sleeps and reads
    // atomics, the second only stores atomics and closes descriptors (async-signal-safe).
    unsafe {
        libc::atexit(wait_for_checkpoints);
        libc::pthread_atfork(None, None, Some(after_fork_child));
    }
    let mut guard = runtime();
    let rt = guard.insert(Runtime { cfg, server: std::sync::Arc::new(server), tx, rx: Some(rx), trigger_r });
    spawn_threads(rt)
}

/// Sets a crum thread's mask to every signal but the stop signal (crum threads are stopped
/// and restored like the program's). The thread starts with all of them blocked
/// ([`spawn_blocked`]).
fn block_all_signals() {
    // SAFETY: sigfillset/pthread_sigmask on a live local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::sigdelset(&mut set, threads::stop_signal());
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

static mut TRIGGER_W: i32 = -1;
/// Written into the checkpoint-signal pipe by [`suspend_threads`]: the signal thread ends.
const TRIGGER_QUIT: u8 = 0xff;

extern "C" fn on_trigger(_sig: libc::c_int) {
    let b = [1u8];
    // SAFETY: write(2) is async-signal-safe; TRIGGER_W is set before the handler is installed.
    unsafe { libc::write(TRIGGER_W, b.as_ptr() as *const libc::c_void, 1) };
}

/// The signal crum checkpoints on (`--on-signal`; 0: none), once its handler is installed.
static TRIGGER_SIG: AtomicI32 = AtomicI32::new(0);
static TRIGGER_TAKEN: AtomicBool = AtomicBool::new(false);

/// `libcrum_libc.so`'s `sigaction`/`signal` wrappers: the program is about to set its own
/// disposition for `sig`. If crum checkpoints on that signal, says once on stderr that it no
/// longer will (the program's handler replaces crum's). Async-signal-safe: raw `write`.
pub fn program_sets_handler(sig: i32) {
    if sig <= 0 || TRIGGER_SIG.load(Relaxed) != sig || !is_owner() || TRIGGER_TAKEN.swap(true, Relaxed) {
        return;
    }
    let name: &[u8] = match sig {
        libc::SIGUSR1 => b"SIGUSR1",
        libc::SIGUSR2 => b"SIGUSR2",
        libc::SIGTERM => b"SIGTERM",
        libc::SIGINT => b"SIGINT",
        libc::SIGHUP => b"SIGHUP",
        libc::SIGALRM => b"SIGALRM",
        libc::SIGQUIT => b"SIGQUIT",
        libc::SIGXCPU => b"SIGXCPU",
        _ => b"the --on-signal signal",
    };
    let parts: [&[u8]; 3] = [
        b"crum: warning: the program installs its own handler for ",
        name,
        b", the signal crum checkpoints on (--on-signal): from now on it is the program's and \
          crum no longer checkpoints on it (use another --on-signal signal, or crum checkpoint)\n",
    ];
    for p in parts {
        // SAFETY: write(2) of live bytes to stderr; async-signal-safe.
        unsafe { libc::write(2, p.as_ptr() as *const libc::c_void, p.len()) };
    }
}

/// Installs the checkpoint-signal handler; returns the read end of its pipe.
fn install_trigger(sig: i32) -> Result<i32, String> {
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two fds into the live array; the handler is installed after
    // TRIGGER_W is set, and only reads it.
    unsafe {
        if libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err("cannot create the signal pipe".into());
        }
        // Above the program's fd range (`crate::highfd`).
        p[0] = crate::highfd::move_high_raw(p[0]);
        p[1] = crate::highfd::move_high_raw(p[1]);
        TRIGGER_W = p[1];
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_trigger as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
            return Err(format!("cannot install the checkpoint signal handler for {sig}"));
        }
    }
    TRIGGER_SIG.store(sig, Relaxed);
    Ok(p[0])
}

/// The checkpoint-signal thread: one checkpoint per byte the handler writes.
fn signal_loop(rfd: i32, tx: mpsc::Sender<Job>) {
    block_all_signals();
    let mut b = [0u8; 64];
    loop {
        // SAFETY: read into the live buffer.
        let n = unsafe { libc::read(rfd, b.as_mut_ptr() as *mut libc::c_void, b.len()) };
        if n == 0 {
            return;
        }
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        if b[..n as usize].contains(&TRIGGER_QUIT) && SUSPEND.load(SeqCst) {
            return;
        }
        if tx.send(Job { dir: None, strict: false, signal: true, exit_reply: None, reply: None, quit: false, member: None }).is_err() {
            return;
        }
    }
}

fn control_loop(server: &ControlServer, tx: mpsc::Sender<Job>) {
    block_all_signals();
    loop {
        serve_one(server, &tx);
        // After each request: `suspend_threads` sends one to wake this thread.
        if SUSPEND.load(SeqCst) {
            return;
        }
    }
}

/// Accepts and answers one control request.
fn serve_one(server: &ControlServer, tx: &mpsc::Sender<Job>) {
    let r = server.accept();
    let (req, responder) = match r {
        Ok(r) => r,
        Err(_) => {
            std::thread::sleep(Duration::from_millis(50));
            return;
        }
    };
    match req {
        Request::Status => {
            let mut st = STATUS.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default();
            st.checkpoints = CHECKPOINTS.load(Relaxed);
            st.lineage = Some(crate::lineage::current().id);
            st.dir = NEW_DIR.lock().unwrap_or_else(|e| e.into_inner()).clone().or_else(|| DEFAULT_DIR.lock().unwrap_or_else(|e| e.into_inner()).clone());
            let _ = responder.reply_status(st);
        }
        Request::JobMember { parent, strict, held, restop } => {
            // For the member's stop (`member_checkpoint`), which runs next on the agent thread.
            threads::set_held(&held);
            RESTOP_NEXT.store(restop, SeqCst);
            IN_PROGRESS.fetch_add(1, SeqCst);
            let job = Job {
                dir: None,
                strict,
                signal: false,
                exit_reply: None,
                reply: None,
                quit: false,
                member: Some((responder.into_stream(), parent)),
            };
            if tx.send(job).is_err() {
                progress_done();
            }
        }
        Request::Checkpoint { dir, exit: true, strict } => {
            // The agent answers and ends the process (see `EXIT_CHECKPOINTED`).
            IN_PROGRESS.fetch_add(1, SeqCst);
            let job = Job { dir, strict, signal: false, exit_reply: Some(responder), reply: None, quit: false, member: None };
            if let Err(mpsc::SendError(job)) = tx.send(job) {
                if let Some(r) = job.exit_reply {
                    let _ = r.reply(Err("the checkpoint agent is not running".into()));
                }
                progress_done();
            }
        }
        Request::Checkpoint { dir, exit: false, strict } => {
            let (rtx, rrx) = mpsc::channel();
            IN_PROGRESS.fetch_add(1, SeqCst);
            if tx.send(Job { dir, strict, signal: false, exit_reply: None, reply: Some(rtx), quit: false, member: None }).is_err() {
                let _ = responder.reply(Err("the checkpoint agent is not running".into()));
                progress_done();
                return;
            }
            let answer = rrx.recv();
            let answered = |resp: &Result<Reply, mpsc::RecvError>| !matches!(resp, Ok(Reply::Restarted));
            if !answered(&answer) {
                // A restored process: nobody waits for this request here.
                IN_PROGRESS.store(0, SeqCst);
            }
            match answer {
                Ok(Reply::Done(r)) => {
                    let _ = responder.reply_checkpoint(r);
                    progress_done();
                }
                // The connection belongs to the process the image was taken of.
                Ok(Reply::Restarted) => std::mem::forget(responder),
                Err(_) => {
                    let _ = responder.reply(Err("the checkpoint agent stopped".into()));
                    progress_done();
                }
            }
        }
    }
}

fn engine_loop(cfg: Config, rx: &mpsc::Receiver<Job>, _keepalive: mpsc::Sender<Job>) {
    block_all_signals();
    if let Err(e) = threads::probe_libc() {
        eprintln!("crum: checkpoints disabled: {e}");
        return;
    }
    crate::program_end::resolve();
    let mut next = cfg.interval.map(|i| Instant::now() + i);
    loop {
        // Woken every `program_end::WATCH` to look whether the program's last thread has
        // left without ending the process (a raw `exit`): crum's threads must not keep it.
        let wait = next.map_or(crate::program_end::WATCH, |t| t.saturating_duration_since(Instant::now()).min(crate::program_end::WATCH));
        let job = match rx.recv_timeout(wait) {
            Ok(j) => Some(j),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if is_owner() && crate::program_end::program_gone() {
                    if let Some(rt) = runtime().as_ref() {
                        rt.server.remove_socket();
                    }
                    crate::program_end::end(crate::program_end::status());
                }
                if next.is_none_or(|t| Instant::now() < t) {
                    continue;
                }
                None
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        // `crum restart --dir` moves the default (it outlives further restarts: memory).
        let default_dir = NEW_DIR.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_else(|| cfg.dir.clone());
        let job = match job {
            Some(Job { member: Some((stream, parent)), strict, .. }) => {
                let outcome = member_checkpoint(&cfg, crate::job::Link::new(stream), &parent, strict || cfg.strict);
                if matches!(outcome, Outcome::Restarted) {
                    IN_PROGRESS.store(0, SeqCst);
                } else {
                    if let Outcome::Failed(e) = &outcome {
                        tracing::info!("job checkpoint: {e}");
                    }
                    progress_done();
                }
                continue;
            }
            j => j,
        };
        let (dir, strict, signal, exit_reply, reply) = match job {
            Some(j) if j.quit => return,
            Some(j) => (j.dir.unwrap_or(default_dir), j.strict, j.signal, j.exit_reply, j.reply),
            None => (default_dir, false, false, None, None),
        };
        let timed = reply.is_none() && exit_reply.is_none();
        if timed {
            IN_PROGRESS.fetch_add(1, SeqCst);
        }
        let exit_after = exit_reply.is_some() || (signal && cfg.exit_on_signal);
        let outcome = checkpoint(&cfg, &dir, strict, exit_after);
        if let Outcome::Held(p, problems) = outcome {
            // The program's threads are stopped and stay so; the agent allocates from its
            // arena. Answer, then end the process: nothing the program would do after the
            // image (output) happens twice once it is restarted.
            if let Some(rt) = runtime().as_ref() {
                rt.server.remove_socket();
            }
            match exit_reply {
                Some(r) => {
                    let _ = r.reply_checkpoint(Ok((p, problems)));
                }
                None => eprintln!(
                    "crum: checkpointed to {} on signal {}; stopping (exit {EXIT_CHECKPOINTED})",
                    p.display(),
                    cfg.signal.unwrap_or(0)
                ),
            }
            // SAFETY: ends the process; the image is complete (its writer was reaped).
            unsafe { libc::_exit(EXIT_CHECKPOINTED) };
        }
        if matches!(outcome, Outcome::Restarted) {
            IN_PROGRESS.store(0, SeqCst);
            // The requester's connection belongs to the process the image was taken of.
            std::mem::forget(exit_reply);
        } else if timed {
            progress_done();
        } else if let Some(r) = exit_reply {
            // Not written: the program goes on.
            let _ = r.reply_checkpoint(match &outcome {
                Outcome::Failed(e) => Err(e.clone()),
                _ => Err("the checkpoint ended without an image".into()),
            });
            progress_done();
        }
        if let Some(i) = cfg.interval {
            next = Some(Instant::now() + i);
        }
        let msg = match outcome {
            Outcome::Written(p, problems) => {
                CHECKPOINTS.fetch_add(1, Relaxed);
                *STATUS.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(StatusReply { checkpoints: 0, last_image: Some(p.clone()), lineage: None, dir: None });
                if reply.is_none() {
                    // Nobody asked: say it on the program's stderr, once per change.
                    let mut last = LAST_WARNED.lock().unwrap_or_else(|e| e.into_inner());
                    if *last != problems {
                        for w in &problems {
                            eprintln!("crum: warning: image {}: {w}", p.display());
                        }
                        *last = problems.clone();
                    }
                }
                Reply::Done(Ok((p, problems)))
            }
            Outcome::Failed(e) => {
                if reply.is_none() {
                    eprintln!("crum: checkpoint failed: {e}");
                }
                Reply::Done(Err(e))
            }
            Outcome::Restarted => Reply::Restarted,
            Outcome::Held(..) => unreachable!("a held outcome ends the process above"),
        };
        if let Some(r) = reply {
            let _ = r.send(msg);
        }
    }
}

enum Outcome {
    /// The image, and what in it a restart cannot restore ([`classify_fds`]).
    Written(PathBuf, Vec<String>),
    /// As `Written`, for a process to end now (`exit_after`): the program's threads are still
    /// stopped and the agent still allocates from its arena.
    Held(PathBuf, Vec<String>),
    Failed(String),
    Restarted,
}

/// Everything the forked child needs, built before the fork.
struct ForkCtx {
    /// What a restart of this image cannot restore ([`classify_fds`]); arena memory.
    problems: Vec<String>,
    writer: ImageWriter,
    state_bytes: Vec<u8>,
    /// The optional `crum.lineage` section (`crate::lineage`).
    lineage: Vec<u8>,
    sections: Vec<(String, SectionData)>,
    /// One chunk of room for the writer to gather [`SectionData::Gathered`] sections in
    /// (empty when there are none).
    gather_buf: Vec<u8>,
    regions: Vec<Region>,
    sync: bool,
    /// The writer's pid (sync: its exit code; negative: the fork's errno).
    child: i64,
    /// The writer's pidfd (-1: none, the kernel has no `CLONE_PIDFD`).
    pidfd: i32,
    /// Test hook (`CRUM_TEST_STOP_WRITER=1`): the writer stops itself (SIGSTOP) once its
    /// temporary directory exists, so a test can kill it mid-write.
    stop_writer: bool,
    err_r: i32,
    err_w: i32,
    maps_buf: Vec<u8>,
    /// The agent's scratch arena: mapped again at restart, contents not saved.
    arena: (u64, u64),
    /// (start, end, prot) of the child's fresh memory map.
    ranges: Vec<(u64, u64, u32)>,
    /// Memory a fork would not copy as it is (`MADV_DONTFORK`: absent in the child,
    /// `MADV_WIPEONFORK`: zeros there), as [`ProcessState::advice`] entries: copied as it is
    /// for the writer's fork, the advice given back right after.
    fork_advice: Vec<(u64, u64, u32)>,
    /// Guard regions ([`ProcessState::guards`]): recorded without bytes (reading faults).
    guards: Vec<(u64, u64)>,
    /// A job part's shared memory mappings (`crate::job::ShmMap`).
    shared: Vec<crate::job::ShmMap>,
    /// Copies of the shared memory made during the pause ([`snapshot_shared`]).
    shared_copies: Vec<(u64, u64, u64)>,
}

/// `ADVICE` bits of `MADV_DONTFORK` and `MADV_WIPEONFORK`.
const FORK_ADVICE: u32 = 0b110;

/// Lifts (`lift`) or gives back the fork advice of `ctx`'s memory. Raw system calls only:
/// the program's threads are stopped and cannot see it.
fn fork_advice(ctx: &ForkCtx, lift: bool) {
    for &(start, end, bits) in &ctx.fork_advice {
        let (p, len) = (start as *mut libc::c_void, (end - start) as usize);
        // SAFETY: advice on the program's own mappings; no bytes change.
        unsafe {
            if bits & 0b010 != 0 {
                libc::madvise(p, len, if lift { libc::MADV_DOFORK } else { libc::MADV_DONTFORK });
            }
            if bits & 0b100 != 0 {
                libc::madvise(p, len, if lift { libc::MADV_KEEPONFORK } else { libc::MADV_WIPEONFORK });
            }
        }
    }
}

static SEQ: AtomicU64 = AtomicU64::new(0);

fn checkpoint(cfg: &Config, dir: &Path, strict: bool, exit_after: bool) -> Outcome {
    // A lazy restart's missing pages first: the forked writer would see them as zeros.
    if let Err(e) = crate::lazy::complete() {
        return Outcome::Failed(e);
    }
    match checkpoint_inner(cfg, dir, strict || cfg.strict, exit_after) {
        // Copied after `alloc::leave`: the message may live in the agent's bump arena.
        Outcome::Failed(e) => Outcome::Failed(e.as_str().to_owned()),
        o => o,
    }
}

/// How long a checkpoint waits for the program to take what a cut would lose ([`unsettled`]).
const SETTLE: Duration = Duration::from_millis(200);

/// Whether the program, stopped now, holds something a cut would lose and that it is about
/// to take by itself.
fn unsettled() -> bool {
    crate::inotify::events_waiting()
}

/// `exit_after`: the process ends after a successful image; it is written while the
/// program's threads stay stopped ([`Outcome::Held`]).
fn checkpoint_inner(cfg: &Config, dir: &Path, strict: bool, exit_after: bool) -> Outcome {
    // What failed or killed writers left here (of this process or any other) first: on a
    // full disk their partial images would make this checkpoint fail too.
    if let Err(e) = clean_leftovers(dir) {
        tracing::warn!("cannot remove partial images: {e}");
    }
    {
        let members = job_members();
        if !members.is_empty() || wants_job() {
            return job_checkpoint(cfg, dir, strict, exit_after, &members, 0);
        }
    }
    let h = hooks();
    // Before the threads stop: its lock is never taken while they are stopped.
    let lineage = crate::lineage::current().encode();
    // Read before the pause too: the image this one may keep unchanged memory in.
    let base = incremental_base(cfg, dir);
    let tq = Instant::now();
    PHASE_DRAIN_US.store(0, Relaxed);
    PHASE_DEVICE_BYTES.store(0, Relaxed);
    PHASE_DEVICE_COPIED.store(0, Relaxed);
    // From here until the threads run again the agent allocates only from its own arena.
    let t0 = match stop_program(&h) {
        Ok(t) => t,
        Err(e) => return Outcome::Failed(e),
    };
    // A child forked (or ended) since the look above: the job's cut takes it (its image, or
    // the exit status of one not reaped yet) instead of naming it lost.
    if wants_job() {
        resume_program(&h);
        return job_checkpoint(cfg, dir, strict, exit_after, &job_members(), 0);
    }
    let t_stopped = Instant::now();
    let mut device_time = Duration::ZERO;
    let prepared = prepare(cfg, dir, &h, &mut device_time, strict, None, base);
    let mut ctx = match prepared {
        Ok(mut c) => {
            c.lineage = lineage;
            c
        }
        Err(e) => {
            threads::release_all();
            crate::alloc::leave();
            (h.resume)();
            return Outcome::Failed(e);
        }
    };
    if exit_after {
        ctx.sync = true;
    }
    // Published while the threads are stopped (no fork of the program is under way).
    publish_writer_pipe(ctx.err_r, ctx.err_w);
    let r = threads::agent_call_saved(fork_and_write, &mut *ctx as *mut ForkCtx as u64);
    if r == 1 {
        let out = after_restart(&h);
        // The writer's and pipes' fds belong to the process the image was taken of.
        std::mem::forget(ctx);
        return out;
    }
    let t_forked = Instant::now();
    // The cut: files the program opens from here on are logged for this image too (its
    // threads are still stopped).
    let log_problem = crate::writes::begin_pending(ctx.writer.final_path()).err();
    if exit_after && ctx.child == 0 {
        // Written while the threads were stopped; they stay so (the caller ends the process).
        publish_writer_pipe(-1, -1);
        let path = ctx.writer.final_path().to_path_buf();
        crate::writes::commit();
        crate::lineage::written(&path);
        if cfg.keep > 0 {
            if let Ok(removed) = keep_newest_of(dir, cfg.keep, crate::lineage::may_remove) {
                crate::lineage::removed(&removed);
            }
        }
        let problems = std::mem::take(&mut ctx.problems);
        return Outcome::Held(path, problems);
    }
    threads::release_all();
    crate::alloc::leave();
    // Out of the arena (which `alloc::release` below gives back) into ordinary memory.
    let problems: Vec<String> = ctx.problems.iter().map(|p| p.as_str().to_owned()).collect();
    if let Some(p) = log_problem {
        eprintln!("crum: warning: {}", p.as_str());
    }
    let pause = t0.elapsed();
    LAST_PAUSE_US.store(pause.as_micros() as u64, Relaxed);
    (h.resume)();
    let us = |d: Duration| d.as_micros() as u64;
    let quiesce = t0 - tq;
    let drain = PHASE_DRAIN_US.load(Relaxed);
    tracing::info!(
        quiesce_us = us(quiesce).saturating_sub(drain),
        drain_us = drain,
        stop_us = us(t_stopped - t0),
        device_us = us(device_time),
        fork_us = us((t_forked - t_stopped).saturating_sub(device_time)),
        pause_us = us(tq.elapsed()),
        threads_stopped_us = us(pause),
        device_bytes = PHASE_DEVICE_BYTES.load(Relaxed),
        device_copied_bytes = PHASE_DEVICE_COPIED.load(Relaxed),
        "checkpoint pause"
    );
    let result = finish_writer(&ctx);
    let path = ctx.writer.final_path().to_path_buf();
    let partial = result.is_err().then(|| ctx.writer.remove_partial());
    drop(ctx);
    crate::alloc::release();
    match result {
        Ok(()) => {
            crate::writes::commit();
            crate::lineage::written(&path);
            if cfg.keep > 0 {
                // Only the program's own line (`crate::lineage`): never images newer than the
                // one it was restarted from, nor other programs'.
                match keep_newest_of(dir, cfg.keep, crate::lineage::may_remove) {
                    Ok(removed) => crate::lineage::removed(&removed),
                    Err(e) => tracing::warn!("cannot remove old images: {e}"),
                }
            }
            Outcome::Written(path, problems)
        }
        Err(e) => {
            crate::writes::abort(&path);
            match partial {
                Some(Err(r)) => Outcome::Failed(format!("{e} (and its partial image could not be removed: {r})")),
                _ => Outcome::Failed(e),
            }
        }
    }
}

/// The image a new image in `dir` may keep unchanged memory in: the program's last image
/// (or the one it was restarted from) when it is in `dir`, complete, and the new image's
/// chain would be at most `full_every - 1` long — and with `--keep N` at most `N - 1`, so
/// that rotation can remove what the N newest images no longer need; else None (a full
/// image). Reads image metadata only.
fn incremental_base(cfg: &Config, dir: &Path) -> Option<std::sync::Arc<crate::image::Base>> {
    let max_chain = match cfg.keep {
        0 => cfg.full_every - 1,
        k => (cfg.full_every - 1).min(k - 1),
    };
    if max_chain == 0 {
        return None;
    }
    let last = crate::lineage::last_image()?;
    let same_dir = match (last.parent().map(std::fs::canonicalize), std::fs::canonicalize(dir)) {
        (Some(Ok(a)), Ok(b)) => a == b,
        _ => false,
    };
    if !same_dir {
        return None;
    }
    match crate::image::Base::from_image(&last, max_chain) {
        Ok(b) => b.map(std::sync::Arc::new),
        Err(e) => {
            tracing::info!("full image: the last one ({}) cannot be a base: {e}", last.display());
            None
        }
    }
}

/// The pid the program knows: the one its lineage started with.
fn program_pid() -> i32 {
    PID_HISTORY.lock().unwrap_or_else(|e| e.into_inner()).first().copied().unwrap_or_else(threads::real_pid)
}

/// Quiesces the device and stops the program's threads; on success the agent allocates
/// from its arena until [`resume_program`]. On failure everything runs again. A cut that
/// would lose something the program is about to take by itself (inotify events it has not
/// read yet, [`unsettled`]) waits a little for it: the threads run again for a millisecond
/// and are stopped again, for up to [`SETTLE`]; what is still there then is named.
fn stop_program(h: &Hooks) -> Result<Instant, String> {
    if let Err(e) = (h.quiesce)() {
        (h.resume)();
        return Err(format!("quiesce hook failed: {e}"));
    }
    let mut t0 = Instant::now();
    crate::alloc::enter();
    if let Err(e) = threads::stop_all(Duration::from_secs(5)) {
        crate::alloc::leave();
        (h.resume)();
        return Err(e);
    }
    let settle_until = t0 + SETTLE;
    while unsettled() && Instant::now() < settle_until {
        threads::release_all();
        crate::alloc::leave();
        std::thread::sleep(Duration::from_millis(1));
        t0 = Instant::now();
        crate::alloc::enter();
        if let Err(e) = threads::stop_all(Duration::from_secs(5)) {
            crate::alloc::leave();
            (h.resume)();
            return Err(e);
        }
    }
    Ok(t0)
}

/// Lets the program's threads and the device run again after [`stop_program`].
fn resume_program(h: &Hooks) {
    threads::release_all();
    crate::alloc::leave();
    (h.resume)();
}

/// Waits for the image writer of `ctx` and says whether its image is complete.
fn finish_writer(ctx: &ForkCtx) -> Result<(), String> {
    let r = if ctx.sync {
        if ctx.child == 0 {
            Ok(())
        } else {
            Err(read_child_error(ctx.err_r, ctx.err_w))
        }
    } else if ctx.child < 0 {
        // SAFETY: our own pipe fds, closed once here (no child holds them).
        unsafe {
            libc::close(ctx.err_r);
            libc::close(ctx.err_w);
        }
        Err(format!("cannot start the image writer: {}", std::io::Error::from_raw_os_error(-ctx.child as i32)))
    } else {
        reap(ctx.child as i32, ctx.pidfd, ctx.err_r, ctx.err_w)
    };
    publish_writer_pipe(-1, -1);
    r
}

/// The signal a member stopped by one stops again with after the cut (0: none), as the
/// root asked in its `JobMember` request; taken by [`member_checkpoint`].
static RESTOP_NEXT: AtomicI32 = AtomicI32::new(0);
/// The signal this process stops again with before its program runs (0: none): set at the
/// cut of a process that was stopped by a signal, in static memory, so that a restarted one
/// stops again too ([`restop_self`]).
static RESTOP: AtomicI32 = AtomicI32::new(0);
/// Children of this process that were stopped by a signal, continued for the cut and stop
/// again after it (in static memory: the image has them): (program pid, kernel pid at the
/// cut, whether the program had not taken the stop's report from `waitpid` yet).
const MAX_RESTOPPED: usize = 64;
static RESTOPPED: [[AtomicI32; 3]; MAX_RESTOPPED] = [const { [AtomicI32::new(0), AtomicI32::new(0), AtomicI32::new(0)] }; MAX_RESTOPPED];
static NRESTOPPED: AtomicUsize = AtomicUsize::new(0);

/// Records, at the cut, the children of this process that the cut continued and that stop
/// again (`restopped`: (kernel pid, program pid) of every such member; `reports`: this
/// process's stopped children and the reports waiting for its `waitpid`, read when it
/// stopped).
fn record_restopped(restopped: &[(i32, i32)], reports: &[(i32, i32)]) {
    let mut n = 0;
    for &(k, v) in restopped {
        if let Some(&(_, sig)) = reports.iter().find(|r| r.0 == k) {
            if n < MAX_RESTOPPED {
                RESTOPPED[n][0].store(v, SeqCst);
                RESTOPPED[n][1].store(k, SeqCst);
                RESTOPPED[n][2].store(i32::from(sig != 0), SeqCst);
                n += 1;
            }
        }
    }
    NRESTOPPED.store(n, SeqCst);
}

/// Before this process's program runs again after a cut (or a restart): waits until each
/// child the cut continued is stopped again, then takes what that made the kernel tell this
/// process and the program had not been told: the stop's report for `waitpid(WUNTRACED)`
/// where the program had taken it already, and a `SIGCHLD` (CLD_CONTINUED, CLD_STOPPED) where
/// none was waiting at the cut. `kernel_pid`: a child's kernel pid now, from its program pid.
fn settle_restopped(kernel_pid: impl Fn(i32, i32) -> i32) {
    let n = NRESTOPPED.swap(0, SeqCst).min(MAX_RESTOPPED);
    if n == 0 {
        return;
    }
    let mut kids = Vec::new();
    for e in RESTOPPED.iter().take(n) {
        let k = kernel_pid(e[0].load(SeqCst), e[1].load(SeqCst));
        let deadline = Instant::now() + Duration::from_secs(120);
        // Stopped again by itself, once its part is written (or, restarted, once restored):
        // its report is there once its last thread has stopped (each thread stops on its own:
        // the state letter says so earlier). Taken if the program had taken the old one.
        let options = libc::WSTOPPED | libc::WNOHANG | if e[2].load(SeqCst) == 0 { 0 } else { libc::WNOWAIT };
        loop {
            // SAFETY: waitid with WNOHANG into a live siginfo, for a child of ours.
            let got = unsafe {
                let mut si: libc::siginfo_t = std::mem::zeroed();
                libc::syscall(libc::SYS_waitid, libc::P_PID, k, &mut si as *mut libc::siginfo_t, options, 0) == 0
                    && si.si_pid() == k
            };
            if got {
                break;
            }
            if !crate::job::alive(k) || Instant::now() > deadline {
                tracing::warn!("child process {k} did not stop again after the checkpoint");
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        kids.push(k);
    }
    let was_pending = threads::pending_signals().0.iter().any(|s| s.0 == libc::SIGCHLD);
    if !was_pending {
        // SAFETY: rt_sigtimedwait with a zero timeout into a live siginfo (8: the kernel's
        // sigset size): takes a waiting SIGCHLD, if any.
        unsafe {
            let set: u64 = 1 << (libc::SIGCHLD - 1);
            let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            let mut si: libc::siginfo_t = std::mem::zeroed();
            let r = libc::syscall(libc::SYS_rt_sigtimedwait, &set as *const u64, &mut si as *mut libc::siginfo_t, &zero, 8);
            if r == libc::SIGCHLD as i64
                && !(kids.contains(&si.si_pid()) && matches!(si.si_code, libc::CLD_CONTINUED | libc::CLD_STOPPED))
            {
                // Not ours: back in the queue (the kernel lets only the main thread queue it with
                // its own code; said if it cannot).
                if libc::syscall(libc::SYS_rt_sigqueueinfo, threads::real_pid(), libc::SIGCHLD, &si as *const libc::siginfo_t) != 0 {
                    tracing::warn!("a SIGCHLD that arrived during the checkpoint was lost");
                }
            }
        }
    }
}

/// Stops this process again with the signal that had stopped it before the cut, before its
/// program runs ([`RESTOP`]); the caller releases the program's threads once it is continued.
/// A restarted process first waits until its parent has queued its waiting signals again
/// (its other threads exist only after that, `threads::restored_main`): the stop's `SIGCHLD`
/// must not be merged into one of those.
fn restop_self(restarted: bool) {
    let sig = RESTOP.swap(0, SeqCst);
    if sig == 0 {
        return;
    }
    if restarted {
        // SAFETY: getppid cannot fail.
        let parent = unsafe { libc::syscall(libc::SYS_getppid) } as i32;
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::fs::read_dir(format!("/proc/{parent}/task")).map(|d| d.count()).unwrap_or(2) < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    // SAFETY: a stop signal to our own process: every thread stops, this one included, until
    // someone continues it.
    unsafe { libc::syscall(libc::SYS_kill, threads::real_pid(), sig) };
}

/// A job member's part of its root's checkpoint (`crate::job`): stop, report, cut on the
/// root's word, run again on its word, report the part complete.
fn member_checkpoint(cfg: &Config, mut link: crate::job::Link, parent: &Path, strict: bool) -> Outcome {
    use crate::job::{Msg, STEP_TIMEOUT};
    let h = hooks();
    let pid = program_pid();
    let lineage = crate::lineage::current().encode();
    // Stopped by a signal before the root continued it for this cut: stopped again before
    // its program runs, whatever the outcome.
    let restop = RESTOP_NEXT.swap(0, SeqCst);
    let resume = |h: &Hooks| {
        RESTOP.store(restop, SeqCst);
        restop_self(false);
        resume_program(h);
    };
    if let Err(e) = stop_program(&h) {
        let _ = link.send(&Msg::Failed(e.clone()));
        if restop != 0 {
            RESTOP.store(restop, SeqCst);
            restop_self(false);
        }
        return Outcome::Failed(e);
    }
    let reports = crate::job::own_stopped_children();
    let stopped = Msg::Stopped {
        pid,
        pipes: crate::job::own_pipes(),
        socks: crate::job::own_sockets(),
        files: crate::job::own_files(),
        stopped: reports.clone(),
    };
    let pipes = match link.send(&stopped).ok().and(link.recv(Some(STEP_TIMEOUT))) {
        Some(Msg::GoCut { pipes, zombies, socks, files, restopped }) => {
            record_restopped(&restopped, &reports);
            (pipes, zombies, socks, files)
        }
        _ => {
            // Closed first: the root waits for it to end before it tries again.
            drop(link);
            resume(&h);
            return Outcome::Failed("the job's checkpoint was given up".into());
        }
    };
    // In the image: a restart stops it again too.
    RESTOP.store(restop, SeqCst);
    let mut device_time = Duration::ZERO;
    let (pipes, zombies, socks, files) = pipes;
    let part = Part { name: format!("p-{pid}"), others: &zombies, pipes: &pipes, socks: &socks, files: &files, pid };
    let mut ctx = match prepare(cfg, parent, &h, &mut device_time, strict, Some(part), None) {
        Ok(mut c) => {
            c.lineage = lineage;
            c
        }
        Err(e) => {
            let _ = link.send(&Msg::Failed(e.as_str().to_owned()));
            drop(link);
            resume(&h);
            return Outcome::Failed(e.as_str().to_owned());
        }
    };
    publish_writer_pipe(ctx.err_r, ctx.err_w);
    let r = threads::agent_call_saved(fork_and_write, &mut *ctx as *mut ForkCtx as u64);
    if r == 1 {
        let out = after_restart(&h);
        std::mem::forget(ctx);
        // The connection belongs to the process the image was taken of.
        std::mem::forget(link);
        return out;
    }
    let log_problem = crate::writes::begin_pending(ctx.writer.final_path()).err();
    let problems: Vec<String> = ctx.problems.iter().map(|p| p.as_str().to_owned()).collect();
    let writer = if ctx.sync { 0 } else { ctx.child as i32 };
    let cut = Msg::Cut { problems, shared: ctx.shared.clone(), writer };
    let next = if link.send(&cut).is_ok() { link.recv(Some(STEP_TIMEOUT)) } else { None };
    if next == Some(Msg::GoExit) {
        // Nothing of the program runs again here: the part is completed, then the process ends.
        match finish_writer(&ctx) {
            Ok(()) => {
                crate::writes::commit();
                let _ = link.send(&Msg::Written);
                if let Some(rt) = runtime().as_ref() {
                    rt.server.remove_socket();
                }
                // SAFETY: ends the process; its part is complete.
                unsafe { libc::_exit(EXIT_CHECKPOINTED) };
            }
            Err(e) => {
                let e = e.as_str().to_owned();
                let _ = ctx.writer.remove_partial();
                let _ = link.send(&Msg::Failed(e.clone()));
                drop(link);
                resume(&h);
                return Outcome::Failed(e);
            }
        }
    }
    let go = next == Some(Msg::GoResume);
    // A process that stops again does so once its part is written (its agent answers the
    // root until then); its program runs only once it is continued.
    let late = restop != 0 && go;
    if !late {
        // Children of its that stop again have done so first (`settle_restopped`).
        settle_restopped(|_, k| k);
        resume(&h);
    }
    if let Some(p) = log_problem {
        eprintln!("crum: warning: {}", p.as_str());
    }
    let result = finish_writer(&ctx).and_then(|()| if go { Ok(()) } else { Err("the job's checkpoint was given up".into()) });
    let path = ctx.writer.final_path().to_path_buf();
    if result.is_err() {
        let _ = ctx.writer.remove_partial();
    }
    if late {
        match &result {
            Ok(()) => {
                crate::writes::commit();
                let _ = link.send(&Msg::Written);
            }
            Err(e) => {
                crate::writes::abort(&path);
                let _ = link.send(&Msg::Failed(e.clone()));
            }
        }
        settle_restopped(|_, k| k);
        resume(&h);
        drop(ctx);
        crate::alloc::release();
        return match result {
            Ok(()) => Outcome::Written(path, Vec::new()),
            Err(e) => Outcome::Failed(e),
        };
    }
    drop(ctx);
    crate::alloc::release();
    match result {
        Ok(()) => {
            crate::writes::commit();
            let _ = link.send(&Msg::Written);
            Outcome::Written(path, Vec::new())
        }
        Err(e) => {
            crate::writes::abort(&path);
            let _ = link.send(&Msg::Failed(e.clone()));
            Outcome::Failed(e)
        }
    }
}

/// The root's checkpoint of a job: `members` are its descendants running crum's agent
/// (pid, parent pid, command name, as the kernel knows them). See `crate::job`.
/// With `exit_after` nothing of the job runs after the cut: the members end once their parts
/// are written, and the root's threads stay stopped ([`Outcome::Held`]).
/// `attempt`: a cut that finds a child of the job's processes just forked (its agent not up
/// yet) is given up and made again, a few times, so that the child is in it.
fn job_checkpoint(
    cfg: &Config,
    dir: &Path,
    strict: bool,
    exit_after: bool,
    members: &[(i32, i32, String)],
    attempt: u32,
) -> Outcome {
    use crate::job::{Link, Msg, STEP_TIMEOUT};
    let h = hooks();
    let me = threads::real_pid();
    let my_pid = program_pid();
    let lineage = crate::lineage::current().encode();
    let seq = SEQ.load(Relaxed) + 1;
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let name = format!("{}{}-{me}-{seq}", crate::image::IMAGE_PREFIX, crate::image::utc_stamp(ms));
    let tmp = dir.join(format!("{}{name}", crate::image::TEMP_PREFIX));
    let final_path = dir.join(&name);
    if let Err(e) = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&tmp) {
        return Outcome::Failed(format!("cannot create {}: {e}", tmp.display()));
    }
    let give_up = |links: &mut Vec<(i32, Link)>, why: String| -> Outcome {
        for (_, l) in links.iter_mut() {
            include_fd(l.fd());
            let _ = l.send(&Msg::Abort);
        }
        // Each member removes its own part; then the directory goes.
        for (_, l) in links.iter_mut() {
            let _ = l.recv(Some(STEP_TIMEOUT));
        }
        // Closed now (a cut made again must not find them open as the program's).
        links.clear();
        let _ = std::fs::remove_dir_all(&tmp);
        Outcome::Failed(why)
    };
    // 1. Every member stops.
    let mut links: Vec<(i32, Link)> = Vec::new();
    let mut known: Vec<(i32, i32)> = Vec::new(); // (kernel pid, program pid)
    let mut held: Vec<(i32, Vec<(u64, bool)>)> = Vec::new(); // (program pid, pipe ends)
    let mut held_socks: Vec<(i32, Vec<crate::job::SockEnd>)> = Vec::new(); // (program pid, its sockets)
    let mut held_shm: Vec<(i32, Vec<crate::job::ShmMap>)> = Vec::new(); // (program pid, its shared mappings)
    let mut held_files: Vec<crate::job::HeldFiles> = Vec::new();
    // The job's processes' children stopped by a signal: (kernel pid, the stop signal their
    // parent's `waitpid(WUNTRACED)` would report, or 0).
    let mut reports: Vec<(i32, i32)> = Vec::new();
    // Members stopped by a signal, continued for the cut: (kernel pid, program pid).
    let mut restopped: Vec<(i32, i32)> = Vec::new();
    // A process that has exited by now is not in the job (its parent's part names it if
    // it is not reaped).
    let gone = |pid: i32| !crate::job::alive(pid);
    // Every member is asked at once, then each answer read: they stop side by side.
    let mut comms: Vec<String> = Vec::new();
    // Members stopped by a signal (state T): continued, held, once every other is stopped.
    let mut stopped_members: Vec<(i32, String)> = Vec::new();
    for (pid, _, comm) in members {
        if crate::job::state_of(*pid) == 'T' {
            if let Some(e) = crate::job::hold_refusal(*pid, *pid) {
                return give_up(&mut links, format!("a restart could not restore this job exactly: {e}"));
            }
            stopped_members.push((*pid, comm.clone()));
            continue;
        }
        let stream = match crate::control::connect_member(*pid as u32, &tmp, strict, Vec::new(), 0) {
            Ok(s) => s,
            Err(_) if gone(*pid) => continue,
            // Executing another program (its agent is starting): the cut is made again.
            Err(_) if attempt < JOB_EXEC_RETRIES && crate::job::may_get_agent(*pid) => {
                let _ = give_up(&mut links, String::new());
                std::thread::sleep(Duration::from_millis(5 << attempt.min(4)));
                return job_checkpoint(cfg, dir, strict, exit_after, &job_members(), attempt + 1);
            }
            Err(e) => return give_up(&mut links, format!("process {pid} ({comm}) of the job: {e}")),
        };
        // Above the program's range, and not part of its image.
        let l = Link::new(crate::highfd::move_high(stream));
        exclude_fd(l.fd());
        links.push((*pid, l));
        comms.push(comm.clone());
    }
    let mut i = 0;
    while i < links.len() {
        let (pid, comm) = (links[i].0, comms[i].clone());
        match links[i].1.recv(Some(STEP_TIMEOUT)) {
            Some(Msg::Stopped { pid: p, pipes, socks, files, stopped }) => {
                reports.extend(stopped);
                held_files.push((pid, p, files));
                known.push((pid, p));
                held.push((p, pipes));
                held_socks.push((p, socks));
                i += 1;
            }
            Some(Msg::Failed(e)) => return give_up(&mut links, format!("process {pid} ({comm}) of the job: {e}")),
            None if gone(pid) => {
                let (_, l) = links.remove(i);
                comms.remove(i);
                include_fd(l.fd());
            }
            // Its agent went away with the process still there: it executed another program
            // (a shell's child becoming `sleep`), whose agent is starting. The cut is made
            // again, a few times.
            None if attempt < JOB_EXEC_RETRIES => {
                let _ = give_up(&mut links, String::new());
                std::thread::sleep(Duration::from_millis(5 << attempt.min(4)));
                return job_checkpoint(cfg, dir, strict, exit_after, &job_members(), attempt + 1);
            }
            _ => return give_up(&mut links, format!("process {pid} ({comm}) of the job did not stop")),
        }
    }
    // (Made before the stop: what is allocated while the threads are stopped lives in the
    // agent's arena, given back before the manifest is written. The stopped members join
    // `links` and `known`, read after that: room for them now.)
    links.reserve(stopped_members.len());
    known.reserve(stopped_members.len());
    reserve_excluded(stopped_members.len());
    let mut kernel_pids: Vec<i32> = Vec::with_capacity(links.len() + stopped_members.len());
    kernel_pids.extend(links.iter().map(|l| l.0));
    let t0 = match stop_program(&h) {
        Ok(t) => t,
        Err(e) => return give_up(&mut links, e),
    };
    let own_reports = crate::job::own_stopped_children();
    reports.extend(own_reports.iter().copied());
    // Members stopped by a signal, parents first (each one's report of its own stopped
    // children is read before they are continued, which clears it): continued with their
    // threads held in crum's handler, asked to stop as the others were, and told what
    // signal to stop again with after the cut.
    for (pid, comm) in &stopped_members {
        let sig = reports.iter().find(|r| r.0 == *pid).map(|r| r.1).filter(|&s| s != 0).unwrap_or(libc::SIGSTOP);
        let fail = |links: &mut Vec<(i32, Link)>, e: String| {
            // SAFETY: the stop signal again, to a process of the job that we continued.
            unsafe { libc::syscall(libc::SYS_kill, *pid, sig) };
            resume_program(&h);
            give_up(links, format!("process {pid} ({comm}) of the job, stopped by a signal: {e}"))
        };
        let stream = match crate::job::continue_held(*pid)
            .and_then(|held| crate::control::connect_member(*pid as u32, &tmp, strict, held, sig).map_err(|e| e.to_string()))
        {
            Ok(s) => s,
            Err(e) => return fail(&mut links, e),
        };
        let mut l = Link::new(crate::highfd::move_high(stream));
        exclude_fd(l.fd());
        match l.recv(Some(STEP_TIMEOUT)) {
            Some(Msg::Stopped { pid: p, pipes, socks, files, stopped }) => {
                reports.extend(stopped);
                held_files.push((*pid, p, files));
                known.push((*pid, p));
                held.push((p, pipes));
                held_socks.push((p, socks));
                restopped.push((*pid, p));
                kernel_pids.push(*pid);
                links.push((*pid, l));
                comms.push(comm.clone());
            }
            Some(Msg::Failed(e)) => {
                links.push((*pid, l));
                resume_program(&h);
                return give_up(&mut links, format!("process {pid} ({comm}) of the job: {e}"));
            }
            _ => {
                include_fd(l.fd());
                return fail(&mut links, "did not stop".into());
            }
        }
    }
    held.push((my_pid, crate::job::own_pipes()));
    held_socks.push((my_pid, crate::job::own_sockets()));
    let pipes = crate::job::job_pipes(&held);
    let socks = crate::job::job_sockets(&held_socks);
    held_files.push((me, my_pid, crate::job::own_files()));
    let files = crate::job::job_files(&held_files);
    if let Some(e) = crate::job::shared_deleted_files(&held_files) {
        resume_program(&h);
        return give_up(&mut links, e);
    }
    // Exited children of the job's processes, made again at restart.
    let parents: Vec<i32> = std::iter::once(me).chain(kernel_pids.iter().copied()).collect();
    let zombies = crate::job::zombie_children(&parents);
    // Groups and sessions at the cut (the program may change them when it runs again).
    // The launcher's group and session: the root's own where it leads neither (it was started
    // in them; its parent may have exited since), else its parent's.
    let root_ids = crate::job::group_ids(&[me]).first().map_or((0, 0), |x| (x.1, x.2));
    let parent_ids = crate::job::group_ids(&[crate::job::parent_of(me)]).first().map_or((0, 0), |x| (x.1, x.2));
    let launcher = (
        if root_ids.0 != me { root_ids.0 } else { parent_ids.0 },
        if root_ids.1 != me { root_ids.1 } else { parent_ids.1 },
    );
    let (groups, group_problems) = crate::job::job_groups(&crate::job::group_ids(&parents), launcher, |k| {
        if k == me {
            my_pid
        } else {
            known.iter().find(|x| x.0 == k).map_or(k, |x| x.1)
        }
    });
    let coming = crate::job::other_children(&parents, &kernel_pids).into_iter().any(crate::job::may_get_agent);
    if attempt < JOB_RETRIES && coming {
        resume_program(&h);
        let _ = give_up(&mut links, String::new());
        // What was allocated while the threads were stopped lives in the agent's arena,
        // which the next attempt's stop reuses: dropped after it, these lists would be read
        // from memory written over since (a panic that aborted the program, seen with
        // children made by a raw `clone`, which keep crum's library without an agent).
        // Freeing arena memory is nothing; system memory among it is left (a few lists).
        std::mem::forget((held, held_socks, pipes, socks, held_files, files, parents, zombies, groups, group_problems));
        // Members continued for this cut are stopped again before it is made again.
        for &(k, _) in &restopped {
            let deadline = std::time::Instant::now() + STEP_TIMEOUT;
            while crate::job::alive(k) && crate::job::state_of(k) != 'T' && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        std::mem::forget((reports, restopped, own_reports));
        std::thread::sleep(Duration::from_millis(20 << attempt.min(4)));
        return job_checkpoint(cfg, dir, strict, exit_after, &job_members(), attempt + 1);
    }
    let zombie_pids: Vec<i32> = zombies.iter().map(|z| z.0).collect();
    let mut gone = crate::job::escaped(&parents.iter().chain(&zombie_pids).copied().collect::<Vec<_>>());
    // An exited child comes back in its parent's group and session: one in a group or
    // session of its own, or of a leader that has exited (CRIU's zombie01: the group of the
    // child that made it with CLONE_PARENT), would come back in another.
    for (z, pgid, sid) in crate::job::group_ids(&zombie_pids) {
        let parent = zombies.iter().find(|x| x.0 == z).map_or(0, |x| x.1);
        let same = crate::job::group_ids(&[parent]).first().map(|x| (x.1, x.2));
        for (what, id, its) in [("process group", pgid, same.map(|x| x.0)), ("session", sid, same.map(|x| x.1))] {
            if Some(id) != its {
                gone.push(format!(
                    "exited child process {z} of process {} is in {what} {id}, not its parent's: a restart would bring it back in its parent's",
                    known.iter().find(|k| k.0 == parent).map_or(parent, |k| k.1)
                ));
            }
        }
    }
    if !gone.is_empty() {
        resume_program(&h);
        return give_up(&mut links, format!("a restart could not restore this job exactly: {}", gone.join("; ")));
    }
    // The job's processes and exited children, in the image: not named as missing children
    // by any member's part (a member's children may be members too).
    let in_image: Vec<i32> = kernel_pids.iter().chain(&zombie_pids).chain(std::iter::once(&me)).copied().collect();
    // 2. Every member cuts, and this process with them.
    let mut problems: Vec<String> = group_problems;
    let mut failed = None;
    // Each member's image writer (kernel pids).
    let mut writers: Vec<(i32, i32)> = Vec::new();
    // Every member is told to cut (capture, fork of its writer); this process cuts while they
    // do, then each answer is read.
    let vpid_of = |pid: i32| known.iter().find(|k| k.0 == pid).map_or(pid, |k| k.1);
    for (pid, l) in links.iter_mut() {
        let go = Msg::GoCut {
            pipes: pipes.clone(),
            zombies: in_image.clone(),
            socks: socks.clone(),
            files: files.clone(),
            restopped: restopped.clone(),
        };
        if l.send(&go).is_err() {
            failed = Some(format!("process {} of the job went away", vpid_of(*pid)));
            break;
        }
    }
    if let Some(e) = failed {
        resume_program(&h);
        return give_up(&mut links, e);
    }
    let mut device_time = Duration::ZERO;
    let others: Vec<i32> = kernel_pids.iter().chain(zombie_pids.iter()).copied().collect();
    let part = Part { name: format!("p-{my_pid}"), others: &others, pipes: &pipes, socks: &socks, files: &files, pid: my_pid };
    record_restopped(&restopped, &own_reports);
    let mut ctx = match prepare(cfg, &tmp, &h, &mut device_time, strict, Some(part), None) {
        Ok(mut c) => {
            c.lineage = lineage;
            c
        }
        Err(e) => {
            let e = e.as_str().to_owned();
            resume_program(&h);
            return give_up(&mut links, e);
        }
    };
    publish_writer_pipe(ctx.err_r, ctx.err_w);
    let r = threads::agent_call_saved(fork_and_write, &mut *ctx as *mut ForkCtx as u64);
    if r == 1 {
        let out = after_restart(&h);
        std::mem::forget(ctx);
        std::mem::forget(links);
        return out;
    }
    for (pid, l) in links.iter_mut() {
        if failed.is_some() {
            break;
        }
        let vpid = vpid_of(*pid);
        match l.recv(Some(STEP_TIMEOUT)) {
            Some(Msg::Cut { problems: p, shared, writer }) => {
                problems.extend(p.into_iter().map(|p| format!("process {vpid}: {p}")));
                held_shm.push((vpid, shared));
                writers.push((*pid, writer));
            }
            Some(Msg::Failed(e)) => failed = Some(format!("process {vpid} of the job: {e}")),
            _ => failed = Some(format!("process {vpid} of the job did not answer")),
        }
    }
    if let Some(e) = failed {
        // This process's writer is stopped and its part removed with the job's directory.
        if !ctx.sync && ctx.child > 0 {
            // SAFETY: our own writer, not reaped yet.
            unsafe { libc::kill(ctx.child as i32, libc::SIGKILL) };
        }
        let _ = finish_writer(&ctx);
        let _ = ctx.writer.remove_partial();
        drop(ctx);
        resume_program(&h);
        return give_up(&mut links, e);
    }
    // The log of files written from here on goes with the root's part (its restart rolls
    // them back), renamed with the job's directory.
    let log_problem = crate::writes::begin_pending(ctx.writer.final_path()).err();
    problems.extend(ctx.problems.iter().map(|p| p.as_str().to_owned()));
    held_shm.push((my_pid, ctx.shared.clone()));
    let shared = crate::job::shared_segments(&held_shm);
    if exit_after {
        // 3'. Nobody runs again: every part is completed, then the job ends.
        let mut result = finish_writer(&ctx);
        for (pid, l) in links.iter_mut() {
            let vpid = known.iter().find(|k| k.0 == *pid).map_or(*pid, |k| k.1);
            let answer = l.send(&Msg::GoExit).ok().and_then(|()| l.recv(None));
            match answer {
                Some(Msg::Written) => {}
                Some(Msg::Failed(e)) => result = result.and(Err(format!("process {vpid} of the job: {e}"))),
                _ => result = result.and(Err(format!("process {vpid} of the job ended before its part was written"))),
            }
        }
        let manifest = job_manifest(me, my_pid, &known, members, &kernel_pids, &zombies, &groups, shared);
        match result.and_then(|()| commit_job(&tmp, &final_path, &manifest)) {
            Ok(()) => {
                publish_writer_pipe(-1, -1);
                crate::writes::commit();
                crate::lineage::written(&final_path);
                if cfg.keep > 0 {
                    if let Ok(removed) = keep_newest_of(dir, cfg.keep, crate::lineage::may_remove) {
                        crate::lineage::removed(&removed);
                    }
                }
                for (_, l) in &links {
                    include_fd(l.fd());
                }
                return Outcome::Held(final_path.clone(), problems.iter().map(|p| p.as_str().to_owned()).collect());
            }
            Err(e) => {
                // The members that wrote their parts have ended: the job cannot go on whole.
                let e = e.as_str().to_owned();
                crate::writes::abort(ctx.writer.final_path());
                drop(ctx);
                resume_program(&h);
                let _ = std::fs::remove_dir_all(&tmp);
                return Outcome::Failed(format!("{e} (processes of the job that had written their parts have ended)"));
            }
        }
    }
    // 3. Everyone runs again; the parts are completed by their writers. (Told first: this
    // process's children that stop again do so before its program runs.)
    for (_, l) in links.iter_mut() {
        let _ = l.send(&Msg::GoResume);
    }
    settle_restopped(|_, k| k);
    resume_program(&h);
    // Out of the arena (given back below) into ordinary memory.
    let part_path = PathBuf::from(ctx.writer.final_path().as_os_str().to_owned());
    let problems: Vec<String> = problems.iter().map(|p| p.as_str().to_owned()).collect();
    let log_problem: Option<String> = log_problem.map(|p| p.as_str().to_owned());
    let zombies: Vec<(i32, i32, i32)> = zombies.to_vec();
    let groups: Vec<(i32, i32, i32)> = groups.to_vec();
    let writers: Vec<(i32, i32)> = writers.to_vec();
    let shared: Vec<crate::job::SharedSeg> = shared.to_vec();
    LAST_PAUSE_US.store(t0.elapsed().as_micros() as u64, Relaxed);
    if let Some(p) = log_problem {
        eprintln!("crum: warning: {}", p.as_str());
    }
    let mut result = finish_writer(&ctx);
    drop(ctx);
    crate::alloc::release();
    for (pid, l) in links.iter_mut() {
        let vpid = known.iter().find(|k| k.0 == *pid).map_or(*pid, |k| k.1);
        match l.recv(None) {
            Some(Msg::Written) => {}
            Some(Msg::Failed(e)) => result = result.and(Err(format!("process {vpid} of the job: {e}"))),
            // Ended after the cut (the program exited) before saying so: its writer, which
            // outlives it, completes the part.
            _ if crate::job::part_completed(
                &tmp.join(format!("p-{vpid}")),
                writers.iter().find(|w| w.0 == *pid).map_or(0, |w| w.1),
            ) => {}
            _ => result = result.and(Err(format!("process {vpid} of the job ended before its part was written"))),
        }
    }
    for (_, l) in &links {
        include_fd(l.fd());
    }
    let manifest = job_manifest(me, my_pid, &known, members, &kernel_pids, &zombies, &groups, shared);
    let result = result.and_then(|()| commit_job(&tmp, &final_path, &manifest));
    match result {
        Ok(()) => {
            SEQ.fetch_add(1, Relaxed);
            crate::writes::commit();
            crate::lineage::written(&final_path);
            if cfg.keep > 0 {
                match keep_newest_of(dir, cfg.keep, crate::lineage::may_remove) {
                    Ok(removed) => crate::lineage::removed(&removed),
                    Err(e) => tracing::warn!("cannot remove old images: {e}"),
                }
            }
            Outcome::Written(final_path, problems)
        }
        Err(e) => {
            crate::writes::abort(&part_path);
            let _ = std::fs::remove_dir_all(&tmp);
            Outcome::Failed(e)
        }
    }
}

/// The manifest of a job image: this process (kernel pid `me`, program pid `my_pid`), the
/// `members` that took part (`kernel_pids`; `known`: their (kernel, program) pids) and the
/// exited children (kernel pid, kernel parent, wait status), all under their program pids;
/// `groups`: each process's (program pid, group, session) ([`crate::job::job_groups`]).
#[allow(clippy::too_many_arguments)]
fn job_manifest(
    me: i32,
    my_pid: i32,
    known: &[(i32, i32)],
    members: &[(i32, i32, String)],
    kernel_pids: &[i32],
    zombies: &[(i32, i32, i32)],
    groups: &[(i32, i32, i32)],
    shared: Vec<crate::job::SharedSeg>,
) -> crate::job::Manifest {
    use crate::job::{Member, Zombie};
    let program = |k: i32| if k == me { my_pid } else { known.iter().find(|x| x.0 == k).map_or(k, |x| x.1) };
    let member = |pid: i32, ppid: i32, comm: String| {
        let (pgid, sid) = groups.iter().find(|g| g.0 == pid).map_or((0, 0), |g| (g.1, g.2));
        Member { pid, ppid, part: format!("p-{pid}"), comm, pgid, sid }
    };
    let mut list = vec![member(my_pid, 0, String::new())];
    for (pid, ppid, comm) in members.iter().filter(|m| kernel_pids.contains(&m.0)) {
        list.push(member(program(*pid), program(*ppid), comm.clone()));
    }
    let zombies = zombies.iter().map(|&(pid, ppid, status)| Zombie { pid, ppid: program(ppid), status }).collect();
    crate::job::Manifest { version: crate::job::VERSION, root: my_pid, members: list, zombies, shared }
}

/// The descendants of this process running crum's agent: (pid, parent pid, command name).
/// Whether this process's checkpoint must be a job's although no child runs crum's agent:
/// a child has exited and is not reaped yet (the job's manifest brings its exit status back,
/// so that the program's `waitpid` finds it after a restart), or one is about to get an agent
/// (just forked).
fn wants_job() -> bool {
    let me = threads::real_pid();
    !crate::job::zombie_children(&[me]).is_empty()
        || crate::job::other_children(&[me], &[]).into_iter().any(crate::job::may_get_agent)
}

fn job_members() -> Vec<(i32, i32, String)> {
    crate::job::descendants().into_iter().filter(|d| d.3 != 'Z' && crate::job::has_agent(d.0)).map(|d| (d.0, d.1, d.2)).collect()
}

/// How many times a job's cut is made again for a member that executed another program
/// while it was asked to stop.
const JOB_EXEC_RETRIES: u32 = 4;

/// How many times a job's cut is made again for a child whose agent is not up yet.
/// (One: a program forking without pause always has a child just forked, and every retry
/// costs a whole stop of the job.)
const JOB_RETRIES: u32 = 1;

/// Writes the manifest into the job's temporary directory, makes it durable and renames it
/// into place (never over an existing name).
fn commit_job(tmp: &Path, final_path: &Path, manifest: &crate::job::Manifest) -> Result<(), String> {
    use std::io::Write as _;
    let path = tmp.join(crate::job::MANIFEST);
    let mut f = std::fs::File::create(&path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.write_all(&manifest.encode()).and_then(|()| f.sync_all()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    std::fs::File::open(tmp).and_then(|d| d.sync_all()).map_err(|e| format!("cannot sync {}: {e}", tmp.display()))?;
    if final_path.exists() {
        return Err(format!("{} exists already", final_path.display()));
    }
    std::fs::rename(tmp, final_path).map_err(|e| format!("cannot rename the job image into place: {e}"))?;
    if let Some(parent) = final_path.parent() {
        let _ = std::fs::File::open(parent).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// A process's part of a job image.
struct Part<'a> {
    /// Its directory name in the job image.
    name: String,
    /// The job's other processes, as the kernel knows them (not named as children missing
    /// from the image).
    others: &'a [i32],
    /// The pipes between processes of the job, with the pid whose part carries the bytes.
    pipes: &'a [(u64, i32)],
    /// The open file descriptions the job's processes share (`crate::job::job_files`).
    files: &'a [(u64, i32, i32)],
    /// The job's sockets (`crate::job::job_sockets`).
    socks: &'a [(u64, u64)],
    /// The pid the program knows.
    pid: i32,
}

fn prepare(
    cfg: &Config,
    dir: &Path,
    h: &Hooks,
    device_time: &mut Duration,
    strict: bool,
    part: Option<Part<'_>>,
    base: Option<std::sync::Arc<crate::image::Base>>,
) -> Result<Box<ForkCtx>, String> {
    let tc = Instant::now();
    HOOK_UNSAVED.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let mut sections = (h.collect)().map_err(|e| format!("collect hook failed: {e}"))?;
    let unsaved = std::mem::take(&mut *HOOK_UNSAVED.lock().unwrap_or_else(|e| e.into_inner()));
    *device_time = tc.elapsed();
    threads::prepare_restart_stacks()?;
    let pid = threads::real_pid();
    let mut own = Vec::new();
    let control_path = crate::control::socket_path_in(&crate::control::socket_dir(), pid as u32);
    let mut skip = EXCLUDED_FDS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    skip.extend(crate::writes::own_fds());
    // Hold descriptors of gathered sections are crum's, closed once the writer runs.
    skip.extend(sections.iter().filter_map(|(_, d)| match d {
        SectionData::Gathered { hold, .. } => Some(hold.0),
        SectionData::Bytes(_) => None,
    }));
    let mut fds = capture::fds(&skip, Some(&control_path), &mut own, part.as_ref().map_or(&[], |p| p.socks));
    crate::attrs::capture();
    // Before the classification: a pipe from the parent is the job's, not inherited.
    let pipe_problems = part.as_ref().map(|p| crate::job::mark_pipes(&mut fds, p.pipes, p.pid)).unwrap_or_default();
    if let Some(p) = part.as_ref() {
        crate::job::mark_files(&mut fds, p.files, p.pid);
    }
    member_pidfds(&mut fds, part.as_ref().map_or(&[][..], |p| p.others));
    let mut problems = classify_fds(&mut fds);
    problems.extend(pipe_problems);
    problems.extend(unsaved);
    problems.extend(capture::controlling_terminal_problem());
    // What a restart would bring back wrong: no image, whatever `--strict` says.
    let socket_refusals = socket_refusals(&fds);
    if !socket_refusals.is_empty() {
        return Err(format!("a restart could not restore this process exactly: {}", socket_refusals.join("; ")));
    }
    // Child processes are not in a process's image (one process is): named, not dropped
    // silently — after a restart the program's waitpid would fail, its pipes to them hang.
    let in_job = part.as_ref().map(|p| p.others).unwrap_or(&[]);
    let job_part = part.is_some();
    // What a restart would bring back wrong without being able to tell: no image, whatever
    // `--strict` says.
    let mut refusals: Vec<String> = Vec::new();
    for (child, comm, state) in capture::children().into_iter().filter(|c| !in_job.contains(&c.0)) {
        // A child whose agent runs (its control thread is there) but does not answer: it
        // closed crum's descriptors (a daemon closing every descriptor it inherited). It is
        // not in the image, and nothing about it warns its parent.
        if state != 'Z' && crum_threads_without_agent(child) {
            refusals.push(format!(
                "child process {child} ({comm}) closed crum's control socket, so it cannot be checkpointed with its parent: a restart would not bring it back"
            ));
            continue;
        }
        // A stopped child (SIGSTOP before its agent ran, or one started without crum): its
        // parent would find it gone after a restart (its `waitpid(WUNTRACED)` fails with
        // ECHILD), as for a stopped member of the job, whose agent cannot answer.
        if state == 'T' || state == 't' {
            refusals.push(format!(
                "child process {child} ({comm}) is stopped (state {state}) and not in the image: a restart would not bring it back; continue it (kill -CONT {child}) and try again"
            ));
            continue;
        }
        // A copy of the program made without the C library's `fork` (a raw `clone`, as
        // CRIU's zdtm library and some runtimes do): crum's library is mapped in it but its
        // agent never starts. The program knows it (it made it) and may wait for it: after
        // a restart it was silently gone (zdtm session02, session03). One that just forked
        // and whose agent is starting is younger than 300 ms, and named as before.
        if state != 'Z' && raw_copy_without_agent(child) {
            refusals.push(format!(
                "child process {child} ({comm}) is a copy of this program made without the C library's fork (a raw clone), so crum's agent does not run in it: a restart would not bring it back"
            ));
            continue;
        }
        problems.push(if state == 'Z' {
            format!("child process {child} ({comm}) has exited and is not reaped yet: a restart does not bring its exit status back")
        } else {
            format!("child process {child} ({comm}) is not in the image: a restart does not bring it back")
        });
    }
    // The files it may have changed in place: their bytes now, for a restart to undo what
    // it writes into them from here on.
    let (locks, lock_problems) = capture::locks(&fds, in_job);
    // Said at once: reading the files below could open a file whose lease is being broken,
    // and wait for the stopped program to give it up.
    if !lock_problems.is_empty() {
        return Err(format!("a restart could not restore this process exactly: {}", lock_problems.join("; ")));
    }
    let (file_contents, file_sections, content_problems) = capture::file_contents(&fds, &locks, FILE_CONTENTS_MAX);
    let fd_attrs = capture::fd_attrs(&fds);
    let deleted_extents = capture::deleted_extents(&fds);
    sections.extend(file_sections.into_iter().map(|(n, b)| (n, SectionData::Bytes(b))));
    problems.extend(content_problems);
    refusals.extend(shared_fd_tables());
    refusals.extend(threads::rseq_refusals());
    if !job_part {
        // (A job's root looks for the whole job: `job_checkpoint`.)
        let own: Vec<i32> = std::iter::once(pid).chain(capture::children().into_iter().map(|c| c.0)).collect();
        refusals.extend(crate::job::escaped(&own));
    }
    let (fd_owners, owner_refusals) = fd_owners(&fds, in_job);
    refusals.extend(owner_refusals);
    let pipe_sizes = capture::pipe_sizes(&fds);
    if strict && !problems.is_empty() {
        return Err(format!("--strict: a restart could not restore this process exactly: {}", problems.join("; ")));
    }
    if let Some(&(fd, _)) = own.iter().find(|(_, k)| *k == Own::Listener) {
        // Close-on-exec, like every descriptor of crum's (`crate::highfd`).
        fds.push(FdState { fd, flags: libc::O_CLOEXEC as u32, kind: FdKind::ControlListener });
    }
    let (start_brk, brk) = capture::brk();
    let slots = threads::live_slots();
    let program_tids: Vec<i32> = slots.iter().filter(|s| !s.3).map(|s| s.1).collect();
    // (Taken and put back by the main thread when it stopped, before the interval timers
    // are read here: taking a periodic SIGALRM re-arms its timer.)
    let (pending_signals, signal_problems) = capture::pending_signals(&program_tids);
    problems.extend(signal_problems);
    let (posix_timers, timer_problems) = capture::posix_timers();
    problems.extend(timer_problems);
    let main_slot = slots.iter().find(|s| s.1 == pid).map(|s| s.0).ok_or("the main thread has exited; crum needs it")?;
    let threads_info =
        slots.into_iter().map(|(slot, tid, fs_base, is_agent)| ThreadInfo { tid, slot: slot as u32, fs_base, is_agent }).collect();
    let mut pid_history = PID_HISTORY.lock().unwrap_or_else(|e| e.into_inner()).clone();
    pid_history.retain(|&p| p != pid);
    let mut state = ProcessState {
        version: PROCESS_STATE_VERSION,
        pid,
        pid_history,
        exe: std::fs::read_link("/proc/self/exe").map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
        cmdline: std::fs::read("/proc/self/cmdline")
            .map(|b| {
                b.split(|&c| c == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
            })
            .unwrap_or_default(),
        cwd: std::fs::read_link("/proc/self/cwd")
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|e| format!("cannot read the working directory: {e}"))?,
        regions: Vec::new(),
        specials: Vec::new(),
        threads: threads_info,
        entry: threads::restored_main as *const () as u64,
        restart_info: std::ptr::addr_of!(RESTART_INFO) as u64,
        main_slot: main_slot as u32,
        main_stack: threads::restart_stack_top(main_slot),
        fds,
        sigactions: capture::sigactions(),
        itimers: capture::itimers(),
        start_brk,
        brk,
        rlimits: capture::rlimits(),
        umask: capture::umask(),
        hook_sections: sections.iter().map(|(n, _)| n.clone()).collect(),
        locks,
        pipe_sizes,
        pending_signals,
        posix_timers,
        advice: Vec::new(),
        guards: Vec::new(),
        deleted_extents,
        fd_owners,
        fd_attrs,
        file_contents,
        mm_layout: capture::mm_layout().map(|f| f.to_vec()).unwrap_or_default(),
        auxv: capture::auxv(),
        sysv_shm: Vec::new(),
    };
    // Read before the writer allocates its buffers, so that they (separate mappings when
    // large) are not saved. Memory freed between here and the fork (which the allocator
    // may give back) is handled by the child, which clips every region to its own map.
    let maps = capture::own_maps()?;
    let (mut regions, specials) = capture::classify(&maps, threads::SLOTS[main_slot].rsp.load(Relaxed));
    {
        let ex = EXCLUDED_REGIONS.lock().unwrap_or_else(|e| e.into_inner());
        regions.retain(|r| !ex.iter().any(|&(a, b)| r.start >= a && r.end <= b));
        let scratch = SCRATCH_REGIONS.lock().unwrap_or_else(|e| e.into_inner());
        for r in regions.iter_mut().filter(|r| scratch.iter().any(|&(a, b)| r.start >= a && r.end <= b)) {
            r.kind = RegionKind::Private;
            r.has_data = false;
        }
    }
    // Shared memory with an identity beyond its bytes comes back as new shared memory with
    // the same bytes: said, where the program could notice.
    let mut shared = Vec::new();
    for r in regions.iter().filter(|r| matches!(r.kind, RegionKind::SharedAnon)) {
        let name = r.name.as_str();
        if name.starts_with("/SYSV") {
            match sysv_attachment(r, &maps) {
                Ok(a) => {
                    if a.removed {
                        problems.push(format!(
                            "SysV shared memory segment {} at {:#x}-{:#x} was removed (IPC_RMID) while attached: a restart attaches a new segment, whose id differs",
                            a.id, r.start, r.end
                        ));
                    }
                    state.sysv_shm.push(a);
                }
                Err(why) => problems.push(format!(
                    "SysV shared memory {:#x}-{:#x} ({name}) comes back as unnamed shared memory ({why}): its id means nothing after a restart",
                    r.start, r.end
                )),
            }
            continue;
        }
        let base = name.strip_suffix(" (deleted)").unwrap_or(name);
        let (memfd, path) = match base.strip_prefix("/memfd:") {
            Some(n) => (true, n),
            None => (false, base),
        };
        if name.starts_with("/[aio]") {
            refusals.push(format!(
                "{:#x}-{:#x} is the ring of an asynchronous I/O context (io_setup): crum cannot make the context again",
                r.start, r.end
            ));
        } else if let Some(f) = state.fds.iter().find(|f| {
            matches!(&f.kind, FdKind::DeletedFile { path: p, memfd: m, .. } if p == path && *m == memfd)
        }) {
            refusals.push(format!(
                "shared mapping {:#x}-{:#x} of {name} is also open at fd {}: after a restart the mapping and the fd would be separate copies",
                r.start, r.end, f.fd
            ));
        } else if job_part && !name.starts_with("/memfd:crum") {
            // Made shared again between the processes of the job that map it (the root
            // picks them: `crate::job::shared_segments`).
            if let Some(m) = maps.iter().find(|m| m.start == r.start && m.end == r.end) {
                shared.push(crate::job::ShmMap { start: r.start, end: r.end, dev: m.dev.clone(), ino: m.inode, offset: m.offset });
            }
        }
    }
    // A private mapping of a deleted file or memfd also open at a descriptor: the pages the
    // program has not written follow the file (writes through the descriptor show in them);
    // a restart makes the mapping a private copy that no longer does.
    for r in regions
        .iter()
        .filter(|r| matches!(r.kind, RegionKind::Private))
    {
        let Some(base) = r.name.strip_suffix(" (deleted)") else {
            continue;
        };
        let (memfd, path) = match base.strip_prefix("/memfd:") {
            Some(n) => (true, n),
            None => (false, base),
        };
        if let Some(f) = state.fds.iter().find(|f| {
            matches!(&f.kind, FdKind::DeletedFile { path: p, memfd: m, .. } if p == path && *m == memfd)
        }) {
            refusals.push(format!(
                "private mapping {:#x}-{:#x} of {} is also open at fd {}: after a restart the mapping would no longer see what is written through the fd",
                r.start, r.end, r.name, f.fd
            ));
        }
    }
    if !refusals.is_empty() {
        return Err(format!(
            "a restart could not restore this process exactly: {}",
            refusals.join("; ")
        ));
    }
    if strict && !problems.is_empty() {
        return Err(format!("--strict: a restart could not restore this process exactly: {}", problems.join("; ")));
    }
    state.advice = capture::advice(&mut regions);
    state.guards = guard_regions(&regions);
    state.regions = regions;
    state.specials = specials;
    let seq = SEQ.fetch_add(1, Relaxed) + 1;
    let opts = WriterOptions {
        pid: pid as u32,
        seq,
        max_sections: sections.len() + 4,
        chunk_size: cfg.chunk_size,
        dir_name: part.map(|p| p.name),
        base,
        ..Default::default()
    };
    let writer =
        ImageWriter::prepare(dir, &opts).map_err(|e| format!("cannot prepare the image in {}: {e}", dir.display()))?;
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two fds into the live array.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err("cannot create the writer's error pipe".into());
    }
    // Above the program's range: the program runs on while the writer writes.
    let p = [crate::highfd::move_high_raw(p[0]), crate::highfd::move_high_raw(p[1])];
    let state_bytes = state.encode();
    let fork_advice = state.advice.iter().filter(|a| a.2 & FORK_ADVICE != 0).copied().collect();
    let shared_copies = snapshot_shared(&state.regions)?;
    let gathers = sections.iter().any(|(_, d)| matches!(d, SectionData::Gathered { .. }));
    let gather_buf = if gathers { vec![0u8; writer.chunk_size()] } else { Vec::new() };
    Ok(Box::new(ForkCtx {
        gather_buf,
        shared_copies,
        shared,
        fork_advice,
        guards: state.guards,
        problems,
        writer,
        state_bytes,
        lineage: Vec::new(),
        sections,
        regions: state.regions,
        sync: cfg.sync,
        child: 0,
        pidfd: -1,
        // SAFETY: getenv with a NUL-terminated name; the pointer is only tested for NULL and
        // read at once (no lock: a stopped thread may hold std's environment lock).
        stop_writer: unsafe {
            let v = libc::getenv(c"CRUM_TEST_STOP_WRITER".as_ptr());
            !v.is_null() && *v == b'1' as libc::c_char
        },
        err_r: p[0],
        err_w: p[1],
        maps_buf: Vec::with_capacity(MAPS_BUF),
        arena: crate::alloc::arena().unwrap_or((0, 0)),
        ranges: Vec::with_capacity(MAX_RANGES),
    }))
}

/// Room for the child's fresh copy of /proc/self/maps and the ranges parsed from it.
const MAPS_BUF: usize = 8 << 20;
const MAX_RANGES: usize = 1 << 17;

static PID_HISTORY: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Most bytes of files open for writing in place one image carries
/// ([`capture::file_contents`]).
const FILE_CONTENTS_MAX: u64 = 64 << 20;

/// Hook sections at least this large are stored as [`REGION_BLOB`] regions.
const BLOB_MIN: usize = 64 << 10;

/// A hook section of an image: a metadata section, or a [`REGION_BLOB`] region of that name.
pub fn read_hook_section(reader: &mut ImageReader, name: &str) -> Result<Option<Vec<u8>>, String> {
    if let Some(b) = reader.section(name).map_err(|e| e.to_string())? {
        return Ok(Some(b));
    }
    let Some(idx) = reader.regions().iter().position(|r| r.flags & REGION_BLOB != 0 && r.name_lossy() == name) else {
        return Ok(None);
    };
    reader.read_region(idx).map(Some).map_err(|e| format!("section `{name}`: {e}"))
}

/// Starts the image writer: a raw `clone` without `CLONE_VM` (a fork, but no atfork
/// handlers run: the program's threads are stopped, possibly holding the locks those would
/// take) with exit signal 0 and `CLONE_PIDFD`. Exit signal 0 makes the writer invisible to the
/// program's own child handling: no SIGCHLD reaches it, `waitpid(-1)`/`wait` without
/// `__WALL`/`__WCLONE` do not see the writer (a shell's or mpirun's reaping handler cannot take
/// it), and `SIGCHLD` set to `SIG_IGN` does not make the kernel reap it (auto-reaping applies
/// only to children whose exit signal is SIGCHLD). The agent waits on the pidfd. Kernels
/// without `CLONE_PIDFD` (before 5.2) get the same clone without it, waited for by pid.
extern "C" fn fork_and_write(arg: u64) -> u64 {
    // SAFETY: `arg` is the ForkCtx owned by checkpoint(), live for this call.
    let ctx = unsafe { &mut *(arg as *mut ForkCtx) };
    if ctx.sync {
        ctx.child = child_write(ctx) as i64;
        release_shared_copies(ctx);
        release_holds(ctx);
        return 0;
    }
    let mut pidfd: libc::c_int = -1;
    // The writer must see this memory as it is (it was silently missing or zero in images).
    fork_advice(ctx, true);
    // SAFETY: clone without CLONE_VM and without a new stack is a fork: the child runs on its
    // own copy of this stack and returns here with 0; only child_write and exit follow. The
    // pidfd is written into the live local (parent_tid argument of CLONE_PIDFD).
    let mut pid = unsafe {
        libc::syscall(libc::SYS_clone, libc::CLONE_PIDFD as libc::c_ulong, 0usize, &mut pidfd as *mut libc::c_int, 0usize, 0usize)
    };
    if pid < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        pidfd = -1;
        // SAFETY: as above, without CLONE_PIDFD.
        pid = unsafe { libc::syscall(libc::SYS_clone, 0usize, 0usize, 0usize, 0usize, 0usize) };
    }
    if pid == 0 {
        let code = child_write(ctx);
        // SAFETY: leave without running any destructor or atexit handler.
        unsafe { libc::syscall(libc::SYS_exit_group, code) };
    }
    fork_advice(ctx, false);
    release_shared_copies(ctx);
    release_holds(ctx);
    // Above the program's fd range before its threads run again (`crate::highfd`: raw
    // system calls, no allocation).
    ctx.pidfd = if pid > 0 { crate::highfd::move_high_raw(pidfd) } else { -1 };
    ctx.child = if pid < 0 { -(std::io::Error::last_os_error().raw_os_error().unwrap_or(1) as i64) } else { pid };
    0
}

/// Shared memory (`MAP_SHARED` anonymous memory, deleted files, memfds) is not copied on
/// write by the writer's fork: the program (or another process of its job) changes it
/// while the writer reads it, and the image would hold bytes from after the cut next to
/// private memory from the cut. So it is copied during the pause into private memory of
/// the agent's, which the writer reads instead: (start, end, copy).
fn snapshot_shared(regions: &[Region]) -> Result<Vec<(u64, u64, u64)>, String> {
    let mut out = Vec::new();
    for r in regions.iter().filter(|r| matches!(r.kind, RegionKind::SharedAnon) && r.has_data) {
        let len = (r.end - r.start) as usize;
        // SAFETY: a new private mapping at an address the kernel picks.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if p == libc::MAP_FAILED {
            release_copies(&out);
            return Err(format!("cannot copy shared memory {:#x}-{:#x}: {}", r.start, r.end, std::io::Error::last_os_error()));
        }
        let readable = r.prot & libc::PROT_READ as u32 != 0;
        // SAFETY: the program's threads are stopped; [start, end) is its mapping (read from its
        // map during this pause), made readable for the copy and given its protection back.
        unsafe {
            if !readable {
                libc::mprotect(r.start as *mut libc::c_void, len, r.prot as i32 | libc::PROT_READ);
            }
            std::ptr::copy_nonoverlapping(r.start as *const u8, p as *mut u8, len);
            if !readable {
                libc::mprotect(r.start as *mut libc::c_void, len, r.prot as i32);
            }
        }
        out.push((r.start, r.end, p as u64));
    }
    Ok(out)
}

fn release_copies(copies: &[(u64, u64, u64)]) {
    for &(s, e, p) in copies {
        // SAFETY: our own copy, unmapped once.
        unsafe { libc::munmap(p as *mut libc::c_void, (e - s) as usize) };
    }
}

impl Drop for ForkCtx {
    fn drop(&mut self) {
        release_shared_copies(self);
    }
}

/// Unmaps the copies of shared memory once the writer has its own (raw system calls).
fn release_shared_copies(ctx: &mut ForkCtx) {
    release_copies(&ctx.shared_copies);
    ctx.shared_copies.clear();
}

/// Room for one error report of the writer (errno + text; one atomic pipe write).
const ERR_RECORD: usize = 512;

/// Reports a failure through the error pipe: the errno behind it (0: none) as 4 bytes, then
/// `what` and the error's operation. No allocation (the record is built on the stack); the
/// parent turns the errno into its text ([`read_child_error`]).
fn child_fail(ctx: &ForkCtx, what: &[u8], err: Option<&ImageError>) -> i32 {
    let (detail, errno) = err.map_or(("", 0), error_detail);
    let mut rec = [0u8; ERR_RECORD];
    rec[..4].copy_from_slice(&errno.to_le_bytes());
    let mut n = 4;
    for part in [what, if err.is_some() && errno != 0 { b"cannot ".as_slice() } else { b"" }, detail.as_bytes()] {
        let k = part.len().min(ERR_RECORD - n);
        rec[n..n + k].copy_from_slice(&part[..k]);
        n += k;
    }
    // SAFETY: raw write of a live stack buffer to the error pipe.
    unsafe { libc::write(ctx.err_w, rec.as_ptr() as *const libc::c_void, n) };
    1
}

/// The failed operation's description and the errno behind it (0: none), without allocating.
fn error_detail(e: &ImageError) -> (&'static str, i32) {
    match e {
        ImageError::Write { op, source } => (op, source.raw_os_error().unwrap_or(0)),
        ImageError::Invalid(s) | ImageError::Capacity(s) | ImageError::Compress(s) => (s, 0),
        _ => ("image error", 0),
    }
}

/// Reads this process's memory map into the preallocated buffers as sorted (start, end)
/// ranges: raw system calls, no allocation (the capacity was reserved before the fork).
fn child_read_ranges(ctx: &mut ForkCtx) -> bool {
    // SAFETY: open/read/close with a NUL-terminated path and the spare capacity of a Vec
    // that is never reallocated here.
    unsafe {
        let fd = libc::open(c"/proc/self/maps".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        ctx.maps_buf.set_len(0);
        loop {
            let len = ctx.maps_buf.len();
            let room = ctx.maps_buf.capacity() - len;
            if room == 0 {
                libc::close(fd);
                return false;
            }
            let n = libc::read(fd, ctx.maps_buf.as_mut_ptr().add(len) as *mut libc::c_void, room);
            if n < 0 {
                libc::close(fd);
                return false;
            }
            if n == 0 {
                break;
            }
            ctx.maps_buf.set_len(len + n as usize);
        }
        libc::close(fd);
    }
    ctx.ranges.clear();
    for line in ctx.maps_buf.split(|&c| c == b'\n') {
        let Some(dash) = line.iter().position(|&c| c == b'-') else { continue };
        let Some(sp) = line.iter().position(|&c| c == b' ') else { continue };
        let (Some(s), Some(e)) = (hex(&line[..dash]), hex(&line[dash + 1..sp])) else { continue };
        let perms = &line[sp + 1..];
        if perms.len() < 3 {
            continue;
        }
        let mut prot = 0u32;
        if perms[0] == b'r' {
            prot |= libc::PROT_READ as u32;
        }
        if perms[1] == b'w' {
            prot |= libc::PROT_WRITE as u32;
        }
        if perms[2] == b'x' {
            prot |= libc::PROT_EXEC as u32;
        }
        if ctx.ranges.len() == ctx.ranges.capacity() {
            return false;
        }
        ctx.ranges.push((s, e, prot));
    }
    true
}

fn hex(b: &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    if b.is_empty() || b.len() > 16 {
        return None;
    }
    for &c in b {
        let d = (c as char).to_digit(16)?;
        v = (v << 4) | d as u64;
    }
    Some(v)
}

/// Writes one clipped piece of a region. No allocation.
#[allow(clippy::too_many_arguments)]
fn child_add_piece(
    writer: &mut ImageWriter,
    sync: bool,
    r: &Region,
    start: u64,
    end: u64,
    prot: u32,
    scratch: bool,
    flags: u32,
    offset: u64,
    copy: Option<u64>,
) -> Result<(), crate::image::ImageError> {
    let len = end - start;
    let meta = RegionMeta { start, len, prot, flags, offset: offset + (start - r.start), name: r.name.as_bytes() };
    if let Some(base) = copy {
        // Shared memory: its copy made during the pause ([`snapshot_shared`]).
        // SAFETY: the copy covers the whole region, readable; nothing unmaps it in the writer.
        let data = unsafe { std::slice::from_raw_parts((base + (start - r.start)) as *const u8, len as usize) };
        return writer.add_region(&meta, data);
    }
    if scratch || !r.has_data || matches!(r.kind, RegionKind::SharedFile { .. }) {
        return writer.add_region(&meta, &[]);
    }
    // A private PROT_NONE piece (memory a program or allocator made inaccessible, perhaps
    // with data in it) is read only where the kernel has pages: a large reservation never
    // touched costs nothing and is recorded without contents. (The forked writer has the
    // program's page tables for private memory with anonymous pages. Not for shared memory,
    // read whole; nor for a private file mapping never written, whose pages then come back
    // as zeros: see docs/checkpoint.md.)
    let pm = if prot == 0 && matches!(r.kind, RegionKind::Private) { pagemap_open() } else { -1 };
    let r = add_piece_data(writer, sync, &meta, pm);
    if pm >= 0 {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(pm) };
    }
    r
}

/// [`child_add_piece`] for memory with contents; `pm`: the pagemap for a PROT_NONE piece.
fn add_piece_data(writer: &mut ImageWriter, sync: bool, meta: &RegionMeta<'_>, pm: i32) -> Result<(), crate::image::ImageError> {
    let (start, len, prot) = (meta.start, meta.len, meta.prot);
    if pm >= 0 && !any_resident(pm, start, len) {
        return writer.add_region(meta, &[]);
    }
    let readable = prot & libc::PROT_READ as u32 != 0;
    if !readable {
        // Forked: this child's own copy of the mapping; making it readable changes nothing
        // in the program. Synchronous: the program's threads are stopped until the image is
        // written, and the protection is put back below.
        // SAFETY: [start, end) is mapped (just read from the map); only its protection changes.
        if unsafe { libc::mprotect(start as *mut libc::c_void, len as usize, prot as i32 | libc::PROT_READ) } != 0 {
            return Err(crate::image::ImageError::Write {
                op: "making a region readable",
                source: std::io::Error::last_os_error(),
            });
        }
    }
    // SAFETY: [start, end) is mapped in this address space (just read from its map) and
    // readable; nothing unmaps it while the writer runs.
    let data = unsafe { std::slice::from_raw_parts(start as *const u8, len as usize) };
    let r = if pm >= 0 {
        let mut mask = |p: *const u8, n: usize, m: &mut [u8]| resident_mask(pm, p as u64, n, m);
        writer.add_region_sparse(meta, data, Some(&mut mask))
    } else {
        writer.add_region(meta, data)
    };
    if !readable && sync {
        // SAFETY: as above; the program's own protection again.
        unsafe { libc::mprotect(start as *mut libc::c_void, len as usize, prot as i32) };
    }
    r
}

/// `/proc/self/pagemap`, to be closed by the caller (it is not kept: the synchronous path
/// runs in the program, whose descriptors the next image lists). Raw system calls: no
/// allocation. -1 if it cannot be read (then PROT_NONE memory is read whole).
fn pagemap_open() -> i32 {
    // SAFETY: raw system call with a NUL-terminated path.
    unsafe { libc::open(c"/proc/self/pagemap".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) }
}

/// Pagemap entries of `n` pages from `addr` into `out`. False if the pagemap cannot be read.
fn pagemap_read(pm: i32, addr: u64, out: &mut [u64]) -> bool {
    let bytes = out.len() * 8;
    // SAFETY: pread into the live buffer of `bytes` bytes.
    let n = unsafe { libc::pread(pm, out.as_mut_ptr() as *mut libc::c_void, bytes, ((addr >> 12) * 8) as libc::off_t) };
    n == bytes as isize
}

const PM_PRESENT: u64 = 1 << 63;
const PM_SWAPPED: u64 = 1 << 62;

/// `struct pm_scan_arg` of the `PAGEMAP_SCAN` ioctl (Linux 6.7): the ranges of pages with
/// given properties, found by a page-table walk that skips what was never mapped (a 1 TiB
/// reservation costs microseconds, where reading its pagemap entries costs 2 GiB).
#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 = (3 << 30) | ((std::mem::size_of::<PmScanArg>() as u64) << 16) | ((b'f' as u64) << 8) | 16;
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;

/// Calls `f` with each range of [start, end) whose pages are present or swapped out, in
/// order; `f` returns false to stop. None: the kernel has no `PAGEMAP_SCAN`.
fn scan_resident(pm: i32, start: u64, end: u64, f: &mut dyn FnMut(u64, u64) -> bool) -> Option<()> {
    scan_pages(pm, start, end, PAGE_IS_PRESENT | PAGE_IS_SWAPPED, f)
}

/// `PAGE_IS_GUARD` (Linux 6.14): a guard region's pages (`MADV_GUARD_INSTALL`).
const PAGE_IS_GUARD: u64 = 1 << 8;
/// `MADV_GUARD_INSTALL` (Linux 6.13).
pub const MADV_GUARD_INSTALL: i32 = 102;

/// The guard regions (`MADV_GUARD_INSTALL`) in `regions`, as (start, end). Reading one
/// faults, in the program and in the forked writer alike (fork keeps them): the writer
/// records them without bytes and a restart installs them again. Empty where the kernel
/// cannot tell (before 6.14, which has none but on 6.13).
fn guard_regions(regions: &[Region]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let pm = pagemap_open();
    if pm < 0 {
        return out;
    }
    for r in regions.iter().filter(|r| !matches!(r.kind, RegionKind::SharedAnon)) {
        let _ = scan_pages(pm, r.start, r.end, PAGE_IS_GUARD, &mut |a, b| {
            match out.last_mut() {
                Some((_, e)) if *e == a => *e = b,
                _ => out.push((a, b)),
            }
            true
        });
    }
    // SAFETY: our own descriptor, closed once.
    unsafe { libc::close(pm) };
    out
}

/// Calls `f` with each range of [start, end) whose pages have any of the `categories`
/// (`PAGE_IS_*`), in order; `f` returns false to stop. None: the kernel has no
/// `PAGEMAP_SCAN` or does not know one of the categories.
fn scan_pages(pm: i32, start: u64, end: u64, categories: u64, f: &mut dyn FnMut(u64, u64) -> bool) -> Option<()> {
    let mut vec = [PageRegion::default(); 32];
    let mut at = start;
    while at < end {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            flags: 0,
            start: at,
            end,
            walk_end: 0,
            vec: vec.as_mut_ptr() as u64,
            vec_len: vec.len() as u64,
            max_pages: 0,
            category_inverted: 0,
            category_mask: 0,
            category_anyof_mask: categories,
            return_mask: categories,
        };
        // SAFETY: the ioctl reads `arg` and writes at most `vec_len` regions into `vec`.
        let n = unsafe { libc::ioctl(pm, PAGEMAP_SCAN as _, &mut arg as *mut PmScanArg) };
        if n < 0 {
            return None;
        }
        for r in &vec[..n as usize] {
            if !f(r.start, r.end) {
                return Some(());
            }
        }
        if arg.walk_end <= at {
            return None;
        }
        at = arg.walk_end;
    }
    Some(())
}

/// Does any page of [start, start+len) have memory behind it? (true when unsure)
fn any_resident(pm: i32, start: u64, len: u64) -> bool {
    let mut any = false;
    if scan_resident(pm, start, start + len, &mut |_, _| {
        any = true;
        false
    })
    .is_some()
    {
        return any;
    }
    // Older kernels: the pagemap entries themselves.
    let mut buf = [0u64; 512];
    let mut a = start;
    while a < start + len {
        let n = (((start + len - a) >> 12) as usize).min(buf.len());
        if !pagemap_read(pm, a, &mut buf[..n]) {
            return true;
        }
        if buf[..n].iter().any(|&e| e & (PM_PRESENT | PM_SWAPPED) != 0) {
            return true;
        }
        a += (n as u64) << 12;
    }
    false
}

/// Sets the bit of each of the `n` pages from `addr` that has memory behind it (all of them
/// when the pagemap cannot be read).
fn resident_mask(pm: i32, addr: u64, n: usize, mask: &mut [u8]) {
    let end = addr + ((n as u64) << 12);
    let mut set = |s: u64, e: u64| {
        for j in ((s.max(addr) - addr) >> 12) as usize..((e.min(end) - addr) >> 12) as usize {
            mask[j / 8] |= 1 << (j % 8);
        }
        true
    };
    if scan_resident(pm, addr, end, &mut set).is_some() {
        return;
    }
    mask.fill(0);
    let mut buf = [0u64; 512];
    let mut j = 0;
    while j < n {
        let k = (n - j).min(buf.len());
        let ok = pagemap_read(pm, addr + ((j as u64) << 12), &mut buf[..k]);
        for (i, &e) in buf[..k].iter().enumerate() {
            if !ok || e & (PM_PRESENT | PM_SWAPPED) != 0 {
                mask[(j + i) / 8] |= 1 << ((j + i) % 8);
            }
        }
        j += k;
    }
}

/// Fills `out` with the bytes at offset `at` of a gathered section: copies of `local`, and
/// cross-memory reads of the remote pieces. No allocation (the image writer's child).
fn gather(local: &[u8], pieces: &[Piece], at: u64, out: &mut [u8]) -> Result<(), ImageError> {
    let end = at + out.len() as u64;
    let mut base = 0u64;
    for p in pieces {
        let (ps, pe) = (base, base + p.len);
        base = pe;
        if pe <= at || ps >= end {
            continue;
        }
        let (s, e) = (ps.max(at), pe.min(end));
        let dst = &mut out[(s - at) as usize..(e - at) as usize];
        let off = s - ps;
        match p.from {
            PieceFrom::Local(o) => {
                let from = (o + off) as usize;
                let src = local.get(from..from + dst.len()).ok_or(ImageError::Invalid("gathered piece outside its bytes"))?;
                dst.copy_from_slice(src);
            }
            PieceFrom::Remote { pid, addr } => {
                let mut done = 0usize;
                while done < dst.len() {
                    let local_iov = libc::iovec { iov_base: dst[done..].as_mut_ptr().cast(), iov_len: dst.len() - done };
                    let remote_iov =
                        libc::iovec { iov_base: (addr + off + done as u64) as *mut libc::c_void, iov_len: dst.len() - done };
                    // SAFETY: reads another process's memory into our live buffer (the kernel
                    // checks the remote range and our right to read it).
                    let n = unsafe { libc::process_vm_readv(pid, &local_iov, 1, &remote_iov, 1, 0) };
                    if n <= 0 {
                        let errno = if n == 0 { libc::EIO } else { std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO) };
                        return Err(ImageError::Write {
                            op: "read a snapshot held by another process (the device proxy)",
                            source: std::io::Error::from_raw_os_error(errno),
                        });
                    }
                    done += n as usize;
                }
            }
        }
    }
    Ok(())
}

/// Closes the agent's copies of the hold descriptors of gathered sections (the forked writer
/// has its own; a synchronous one has written them): raw system calls only.
fn release_holds(ctx: &mut ForkCtx) {
    for (_, d) in ctx.sections.iter_mut() {
        if let SectionData::Gathered { hold, .. } = d {
            hold.close();
        }
    }
}

/// Writes the image. In the forked child: no allocation, no locks.
fn child_write(ctx: &mut ForkCtx) -> i32 {
    if !child_read_ranges(ctx) {
        return child_fail(ctx, b"reading the memory map", None);
    }
    // A forked writer holds the program's System V attachments too: the program's
    // `shm_nattch` would count it. It writes their bytes from its copies (`snapshot_shared`),
    // so it detaches them at once (after reading its map, where they are still listed).
    if !ctx.sync {
        for r in ctx.regions.iter().filter(|r| matches!(r.kind, RegionKind::SharedAnon) && r.name.starts_with("/SYSV")) {
            // SAFETY: detaches this forked writer's own attachment (a raw system call).
            unsafe { libc::syscall(libc::SYS_shmdt, r.start) };
        }
    }
    if let Err(e) = ctx.writer.add_section(SECTION_PROCESS, true, &ctx.state_bytes) {
        return child_fail(ctx, b"writing the process section: ", Some(&e));
    }
    if !ctx.lineage.is_empty() {
        // Optional: what the image's program descends from, for people and rotation.
        if let Err(e) = ctx.writer.add_section(crate::lineage::SECTION_LINEAGE, false, &ctx.lineage) {
            return child_fail(ctx, b"writing the lineage section: ", Some(&e));
        }
    }
    if ctx.stop_writer && !ctx.sync {
        // Test hook: stop here, mid-write (the temporary directory exists and is locked).
        // SAFETY: raw system calls on this process only.
        unsafe { libc::syscall(libc::SYS_kill, libc::syscall(libc::SYS_getpid), libc::SIGSTOP) };
    }
    for i in 0..ctx.sections.len() {
        // Large sections go through the memory path: chunked, zero chunks skipped, compressed.
        // Hook sections are required: a restart without them would be wrong (the process
        // state lists them too, so that one missing from the inventory is noticed as well).
        let r = match &ctx.sections[i].1 {
            SectionData::Bytes(data) if data.len() >= BLOB_MIN => {
                let name = ctx.sections[i].0.as_bytes();
                let meta = RegionMeta { start: 0, len: data.len() as u64, prot: 0, flags: REGION_BLOB, offset: 0, name };
                ctx.writer.add_region(&meta, data)
            }
            SectionData::Bytes(data) => ctx.writer.add_section(&ctx.sections[i].0, true, data),
            SectionData::Gathered { local, pieces, .. } => {
                let name = ctx.sections[i].0.as_bytes();
                let len = pieces.iter().map(|p| p.len).sum();
                let meta = RegionMeta { start: 0, len, prot: 0, flags: REGION_BLOB, offset: 0, name };
                ctx.writer.add_region_filled(&meta, &mut ctx.gather_buf, &mut |at, out| gather(local, pieces, at, out))
            }
        };
        if let Err(e) = r {
            return child_fail(ctx, b"writing a hook section: ", Some(&e));
        }
    }
    let mut k = 0;
    for i in 0..ctx.regions.len() {
        let r = &ctx.regions[i];
        let flags = match r.kind {
            RegionKind::Private => 0,
            RegionKind::SharedAnon => REGION_SHARED_ANON,
            RegionKind::SharedFile { .. } => REGION_SHARED_FILE,
        } | if r.growsdown { REGION_GROWSDOWN } else { 0 };
        let offset = if let RegionKind::SharedFile { offset, .. } = r.kind { offset } else { 0 };
        // Clip to what is mapped now (memory the allocator returned since the map was read
        // is free memory of the program: nothing to save), with the protection it has now
        // (an allocator may have made reserved memory usable since).
        while k < ctx.ranges.len() && ctx.ranges[k].1 <= r.start {
            k += 1;
        }
        let mut j = k;
        while j < ctx.ranges.len() && ctx.ranges[j].0 < r.end {
            let start = r.start.max(ctx.ranges[j].0);
            let end = r.end.min(ctx.ranges[j].1);
            let prot = ctx.ranges[j].2;
            j += 1;
            // The agent's scratch arena (possibly merged with a neighbouring mapping) is
            // recorded without its bytes.
            let (a0, a1) = ctx.arena;
            let cuts = [start, a0.clamp(start, end), a1.clamp(start, end), end];
            for w in 0..3 {
                let (ps, pe) = (cuts[w], cuts[w + 1]);
                if ps >= pe {
                    continue;
                }
                let scratch = w == 1;
                // Guard regions inside the piece are recorded without bytes too.
                let mut at = ps;
                let mut g = 0;
                while at < pe {
                    while g < ctx.guards.len() && ctx.guards[g].1 <= at {
                        g += 1;
                    }
                    let (guard, next) = match ctx.guards.get(g) {
                        Some(&(gs, ge)) if gs <= at => (true, ge.min(pe)),
                        Some(&(gs, _)) => (false, gs.min(pe)),
                        None => (false, pe),
                    };
                    let copy = ctx.shared_copies.iter().find(|c| c.0 == r.start).map(|c| c.2);
                    let skip = scratch || guard;
                    if let Err(e) = child_add_piece(&mut ctx.writer, ctx.sync, r, at, next, prot, skip, flags, offset, copy) {
                        return child_fail(ctx, b"writing memory: ", Some(&e));
                    }
                    at = next;
                }
            }
        }
    }
    if let Err(e) = ctx.writer.commit() {
        return child_fail(ctx, b"committing the image: ", Some(&e));
    }
    0
}

/// Closes the error pipe and returns what the writer reported into it (see [`child_fail`]):
/// `the image writer failed writing memory: cannot write pages file: No space left on device
/// (os error 28)`.
fn read_child_error(err_r: i32, err_w: i32) -> String {
    let mut buf = [0u8; ERR_RECORD];
    // SAFETY: our own pipe fds, each closed once here; read into the live buffer.
    let n = unsafe {
        libc::close(err_w);
        // The writer has ended: what it reported is in the pipe. Not waiting for end of file:
        // a child the program forked may still hold a copy of the write end.
        libc::fcntl(err_r, libc::F_SETFL, libc::O_NONBLOCK);
        let n = libc::read(err_r, buf.as_mut_ptr() as *mut libc::c_void, buf.len());
        libc::close(err_r);
        n
    };
    let n = n.max(0) as usize;
    if n < 4 {
        return "the image writer failed".into();
    }
    let errno = i32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let text = String::from_utf8_lossy(&buf[4..n]);
    if errno != 0 {
        format!("the image writer failed {text}: {}", std::io::Error::from_raw_os_error(errno))
    } else {
        format!("the image writer failed {text}")
    }
}

/// Waits for the writer: through its pidfd (`waitid(P_PIDFD, …, __WALL)`: the writer's exit
/// signal is 0, so only `__WALL`/`__WCLONE` waits see it), or by pid without one.
fn reap(child: i32, pidfd: i32, err_r: i32, err_w: i32) -> Result<(), String> {
    // SAFETY: siginfo_t is plain data; all-zero is valid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let (id_type, id) = if pidfd >= 0 { (libc::P_PIDFD, pidfd as libc::id_t) } else { (libc::P_PID, child as libc::id_t) };
    let waited = loop {
        // SAFETY: waits for our own child, writing into the live siginfo.
        let r = unsafe { libc::waitid(id_type, id, &mut info, libc::WEXITED | libc::__WALL) };
        if r == 0 {
            break Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            break Err(e);
        }
    };
    if pidfd >= 0 {
        // SAFETY: the pidfd is ours, closed once here.
        unsafe { libc::close(pidfd) };
    }
    let msg = read_child_error(err_r, err_w);
    if let Err(e) = waited {
        return Err(format!("cannot wait for the image writer: {e}"));
    }
    // SAFETY: waitid filled the CLD_* fields of the live siginfo.
    let status = unsafe { info.si_status() };
    match info.si_code {
        libc::CLD_EXITED if status == 0 => Ok(()),
        libc::CLD_EXITED => Err(msg),
        _ => Err(format!("the image writer was killed by signal {status}")),
    }
}

/// The restored process: tidy up after the restorer and let the program go. Reads what it
/// needs from the image, not from memory allocated during the checkpoint (that memory may
/// postdate the memory map the image was cut along).
/// Tells `libcrum_libc.so` (when preloaded) that the program's pid is `first_pid`, the one
/// it started with, while the kernel's is another now (`preload/src/pid.rs`).
fn set_pid_identity(first_pid: i32) {
    let f = SET_PID_IDENTITY.load(Relaxed);
    if f != 0 {
        // SAFETY: `crum_set_pid_identity` of `libcrum_libc.so`, which has this signature
        // (looked up by [`resolve_restart_symbols`]; the library is where it was).
        unsafe { std::mem::transmute::<usize, extern "C" fn(i32, i32)>(f)(first_pid, threads::real_pid()) };
    }
}

/// Addresses the restored process needs before its threads run, looked up when the agent
/// starts (statics: program memory, the same after a restart, as are the libraries). The
/// restore must not call `dlsym` itself: it takes the dynamic linker's load lock, which a
/// thread the checkpoint stopped may hold (inside `dlopen`, `dlsym`, a thread's start or
/// exit), and the restored process would wait for it forever (seen once under load: the
/// agent waiting on a lock, every other thread waiting to be released).
static SET_PID_IDENTITY: AtomicUsize = AtomicUsize::new(0);
/// `libcrum_libc.so`'s `crum_set_pid_table`.
static SET_PID_TABLE: AtomicUsize = AtomicUsize::new(0);
/// `libcrum_libc.so`'s `crum_set_thread_ids`.
static SET_THREAD_IDS: AtomicUsize = AtomicUsize::new(0);
/// `libcrum_libc.so`'s `crum_pid_to_program` (used while the program's threads are stopped,
/// so looked up at start too).
static PID_TO_PROGRAM: AtomicUsize = AtomicUsize::new(0);

/// Tells `libcrum_libc.so` the restored threads' tids: `pairs` of (the kernel's tid when the
/// image was cut, the kernel's tid now). Called by the restored main thread before any
/// program thread runs; allocates nothing.
pub fn set_thread_ids(pairs: &[i32]) {
    let f = SET_THREAD_IDS.load(Relaxed);
    if f != 0 {
        // SAFETY: `crum_set_thread_ids` of `libcrum_libc.so` (looked up at start, the library
        // where it was), given `pairs.len() / 2` pairs.
        unsafe { std::mem::transmute::<usize, extern "C" fn(*const i32, i32)>(f)(pairs.as_ptr(), (pairs.len() / 2) as i32) };
    }
}
/// glibc's `__curbrk` ([`fix_curbrk`]).
static CURBRK: AtomicUsize = AtomicUsize::new(0);

fn resolve_restart_symbols() {
    // SAFETY: dlsym in the global scope with NUL-terminated names (0 where absent).
    unsafe {
        SET_PID_IDENTITY.store(libc::dlsym(libc::RTLD_DEFAULT, c"crum_set_pid_identity".as_ptr()) as usize, Relaxed);
        SET_PID_TABLE.store(libc::dlsym(libc::RTLD_DEFAULT, c"crum_set_pid_table".as_ptr()) as usize, Relaxed);
        SET_THREAD_IDS.store(libc::dlsym(libc::RTLD_DEFAULT, c"crum_set_thread_ids".as_ptr()) as usize, Relaxed);
        PID_TO_PROGRAM.store(libc::dlsym(libc::RTLD_DEFAULT, c"crum_pid_to_program".as_ptr()) as usize, Relaxed);
        CURBRK.store(libc::dlsym(libc::RTLD_DEFAULT, c"__curbrk".as_ptr()) as usize, Relaxed);
    }
}

fn after_restart(h: &Hooks) -> Outcome {
    // The program's threads are stopped where the image caught them, some perhaps inside
    // malloc holding its locks: until they run again the agent allocates from its arena, and
    // what the restore allocates there stays (`alloc::keep`).
    crate::alloc::enter_restored();
    // SAFETY: RESTART_INFO was written by the restorer before this thread ran.
    let info = unsafe { &*std::ptr::addr_of!(RESTART_INFO) };
    if info.magic != RESTART_MAGIC {
        fatal("restarted without restart information");
    }
    let n = (info.path_len as usize).min(info.path.len());
    let image = PathBuf::from(std::ffi::OsStr::from_bytes(&info.path[..n]));
    // `crum restart --dir`: after the image path, NUL-separated.
    if let Some(rest) = info.path.get(n + 1..) {
        let d = &rest[..rest.iter().position(|&c| c == 0).unwrap_or(rest.len())];
        if !d.is_empty() {
            *NEW_DIR.lock().unwrap_or_else(|e| e.into_inner()) = Some(PathBuf::from(std::ffi::OsStr::from_bytes(d)));
        }
    }
    let first_pid = {
        let mut h = PID_HISTORY.lock().unwrap_or_else(|e| e.into_inner());
        h.push(info.old_pid as i32);
        h[0]
    };
    OWNER_PID.store(threads::real_pid(), SeqCst);
    set_pid_identity(first_pid);
    // (program pid, kernel pid now) of every process of the job.
    let mut pids_now: Vec<(i32, i32)> = Vec::new();
    if info.job_table_fd >= 0 {
        let fd = info.job_table_fd as i32;
        // Every process of the job restored (its slot filled) before any program runs.
        let table = crate::job::PidTable::wait_complete(fd, Duration::from_secs(600));
        pids_now.extend(table.iter().copied());
        if let Some(&(v, _)) = table.iter().find(|&&(_, r)| r < 0) {
            eprintln!("crum: process {v} of the job could not be restarted (see above): process {first_pid} ends too");
            // SAFETY: ends the process before anything of the program runs again.
            unsafe { libc::_exit(1) };
        }
        let f = SET_PID_TABLE.load(Relaxed);
        if f != 0 {
            let pairs: Vec<i32> = table.iter().flat_map(|&(v, r)| [v, r]).collect();
            // SAFETY: `crum_set_pid_table` of `libcrum_libc.so` (looked up at start), given
            // `pairs.len() / 2` pairs.
            unsafe {
                std::mem::transmute::<usize, extern "C" fn(*const i32, i32)>(f)(pairs.as_ptr(), (pairs.len() / 2) as i32)
            };
        }
        // SAFETY: the restorer's descriptor of the table, ours to close once.
        unsafe {
            libc::close(fd);
            (*std::ptr::addr_of_mut!(RESTART_INFO)).job_table_fd = -1;
        }
        if table.iter().any(|&(_, r)| r == 0) {
            eprintln!("crum: warning: not every process of the job was restarted");
        }
    }
    if info.lazy_done_fd >= 0 {
        crate::lazy::adopt(info.lazy_done_fd as i32, info.lazy_uffd as i32);
        // SAFETY: the program's threads are stopped; nothing else reads RESTART_INFO now.
        unsafe {
            (*std::ptr::addr_of_mut!(RESTART_INFO)).lazy_done_fd = -1;
            (*std::ptr::addr_of_mut!(RESTART_INFO)).lazy_uffd = -1;
        }
    }
    if info.channel_fd >= 0 {
        // The new proxy's channel, opened by the restorer at the lowest free number: above
        // the program's range, close-on-exec, like `crum run`'s (`crate::highfd`).
        let fd = crate::highfd::move_high_raw(info.channel_fd as i32);
        // SAFETY: the program's threads are stopped; nothing else reads RESTART_INFO now.
        unsafe { (*std::ptr::addr_of_mut!(RESTART_INFO)).channel_fd = fd as i64 };
    }
    let reader = ImageReader::open(&image).unwrap_or_else(|e| fatal(&format!("cannot reopen the image: {e}")));
    let state = reader
        .section(SECTION_PROCESS)
        .ok()
        .flatten()
        .and_then(|b| ProcessState::decode(&b).ok())
        .unwrap_or_else(|| fatal("cannot read the process section again"));
    let kept: Vec<(u64, u64)> = reader
        .regions()
        .iter()
        .filter(|r| crate::state::is_process_memory(r.flags))
        .map(|r| (r.start, r.start + r.len))
        .collect();
    unmap_leftovers(&kept, true);
    let mm_problem = restore_mm_layout(&state);
    if mm_problem.is_none() {
        // The program's argument strings are its own again: the restorer's can go.
        unmap_leftovers(&kept, false);
    }
    restore_itimers(&state.itimers);
    // (The waiting signals were queued again by the main thread: `threads::restored_main`.)
    let lost_signals = threads::pending_signals().1;
    refresh_inherited();
    fix_curbrk();
    // Before any program thread runs (and opens a file): see `crate::writes`.
    let log_problem = crate::writes::restarted(&image).err();
    let reader = std::cell::RefCell::new(reader);
    // The sections handed to the hook (device memory: possibly large), to give back after.
    let buffers = std::cell::RefCell::new(Vec::new());
    let read = |name: &str| -> Option<Vec<u8>> {
        match read_hook_section(&mut reader.borrow_mut(), name) {
            Ok(v) => {
                if let Some(b) = &v {
                    buffers.borrow_mut().push((b.as_ptr() as usize, b.capacity()));
                }
                v
            }
            Err(e) => fatal(&format!("cannot read the image: {e}")),
        }
    };
    if let Err(e) = (h.restore)(&read) {
        fatal(&format!("restore hook: {e}"));
    }
    drop(reader);
    for (p, len) in buffers.into_inner() {
        crate::alloc::discard(p, len);
    }
    crate::alloc::keep();
    // Children that were stopped by a signal at the cut stop again before this program runs
    // (and what that tells this process is taken); then this process, if it was one.
    settle_restopped(|v, k| pids_now.iter().find(|p| p.0 == v).map_or(k, |p| p.1));
    restop_self(true);
    threads::release_all();
    crate::alloc::leave();
    // A new lineage (its threads run again: normal allocation, no lock held by a stopped
    // thread), so that rotation never removes images newer than `image`.
    crate::lineage::begin_restarted(&image);
    if let Some(p) = log_problem {
        eprintln!("crum: warning: {p}");
    }
    if let Some(p) = mm_problem {
        eprintln!("crum: warning: {p}");
    }
    for p in crate::attrs::refused() {
        eprintln!("crum: warning: {p}");
    }
    if lost_signals > 0 {
        eprintln!("crum: warning: {lost_signals} signal(s) waiting at the checkpoint are not waiting again");
    }
    Outcome::Restarted
}

fn fatal(msg: &str) -> ! {
    eprintln!("crum: restart failed: {msg}");
    // SAFETY: the program cannot continue; leave without running its exit handlers.
    unsafe { libc::_exit(125) }
}

/// Reconciles glibc's cached program break with the kernel's, where the restorer could not
/// point the kernel's heap at the program's (`PR_SET_MM_MAP` refused: a kernel without
/// CONFIG_CHECKPOINT_RESTORE); the kernel's break is then the restorer's. Above glibc's
/// `__curbrk`, glibc would take a failed `brk` for a success (the kernel answers with its
/// higher break) and use memory that is not there; pointing `__curbrk` at the kernel's break
/// makes glibc grow its heap there instead (a non-contiguous extension). Below it, a trim
/// would shrink to the kernel's break (glibc stores the break the kernel answers) and take
/// the difference for memory given back: a corrupt heap. Pointing `__curbrk` there too stops
/// trimming (glibc trims only when its break is its heap's end), and a guard page at the
/// kernel's break makes every later `brk` fail cleanly (glibc grows with mmap instead), so
/// neither needs the allocator's lock, which a thread stopped inside malloc may hold.
fn fix_curbrk() {
    // SAFETY: brk(0) only reports; `__curbrk` is glibc's exported `void *` and no other
    // thread runs yet. The guard is a new PROT_NONE mapping where nothing is mapped.
    unsafe {
        let k = libc::syscall(libc::SYS_brk, 0) as usize;
        let p = CURBRK.load(Relaxed) as *mut usize;
        if p.is_null() || k == *p {
            return;
        }
        if k < *p {
            let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
            let at = k.next_multiple_of(page);
            let g = libc::mmap(
                at as *mut libc::c_void,
                page,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            );
            if g != libc::MAP_FAILED && g as usize != at {
                // A kernel older than MAP_FIXED_NOREPLACE placed it elsewhere: useless there.
                libc::munmap(g, page);
            }
        }
        *p = k;
    }
}

/// Unmaps what the restorer left behind: every mapping that is not one of the image's —
/// except, with `keep_args`, the one holding the process's argument strings, so that
/// /proc/<pid>/cmdline (and `ps`) show `crum restart <image>` rather than nothing where the
/// program's own layout could not be given back ([`restore_mm_layout`]).
fn unmap_leftovers(kept: &[(u64, u64)], keep_args: bool) {
    let Ok(maps) = capture::own_maps() else { return };
    let arg_start = capture::arg_start();
    for m in &maps {
        if m.name == "[vsyscall]" || capture::SPECIAL_NAMES.contains(&m.name.as_str()) {
            continue;
        }
        if keep_args && (m.start..m.end).contains(&arg_start) {
            continue;
        }
        // Parts of [m.start, m.end) not covered by image regions.
        let mut cur = m.start;
        for &(rs, re) in kept.iter().filter(|&&(rs, re)| re > m.start && rs < m.end) {
            if rs > cur {
                // SAFETY: a restorer mapping no program code refers to.
                unsafe { libc::munmap(cur as *mut libc::c_void, (rs - cur) as usize) };
            }
            cur = cur.max(re);
        }
        if cur < m.end {
            // SAFETY: as above.
            unsafe { libc::munmap(cur as *mut libc::c_void, (m.end - cur) as usize) };
        }
    }
}

/// Gives the kernel the program's memory layout back (`PR_SET_MM_MAP`): where its argument
/// and environment strings are (/proc/self/cmdline and environ read them; they were
/// `crum restart`'s), its code, data and stack (`[stack]` in /proc/self/maps), its auxiliary
/// vector (/proc/self/auxv) and its executable (/proc/self/exe, which named crum's binary;
/// possible only now that the restorer's mappings of that binary are gone, and only with
/// `CAP_CHECKPOINT_RESTORE` or `CAP_SYS_ADMIN`: without, the rest is given back and the
/// warning names the exe). The break stays the kernel's (set by the restorer). None when
/// everything was given back, or the image has no layout (before process state 16).
fn restore_mm_layout(state: &ProcessState) -> Option<String> {
    let Ok(mut fields) = <[u64; 11]>::try_from(state.mm_layout.as_slice()) else { return None };
    let now = capture::mm_layout()?;
    (fields[4], fields[5]) = (now[4], now[5]);
    // The program's binary, if it is still the file the image's mappings name (same path).
    let exe = std::ffi::CString::new(state.exe.as_str()).ok();
    let exe_fd = exe
        .as_ref()
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        .map_or(-1, |p| unsafe { libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) });
    let auxv = &state.auxv[..state.auxv.len().min(2 * 64)];
    let r = crate::capture::set_mm_map(fields, auxv, exe_fd);
    let problem = match r {
        Ok(()) => None,
        Err(e) if exe_fd >= 0 => match crate::capture::set_mm_map(fields, auxv, -1) {
            Ok(()) => Some(format!(
                "/proc/self/exe names crum's binary, not {}: the kernel refused to change it ({})",
                state.exe,
                std::io::Error::from_raw_os_error(e)
            )),
            Err(e2) => Some(format!(
                "the program's memory layout was not given back (PR_SET_MM_MAP: {}): /proc/self/cmdline, environ, auxv and exe are crum restart's",
                std::io::Error::from_raw_os_error(e2)
            )),
        },
        Err(e) => Some(format!(
            "the program's memory layout was not given back (PR_SET_MM_MAP: {}): /proc/self/cmdline, environ, auxv and exe are crum restart's",
            std::io::Error::from_raw_os_error(e)
        )),
    };
    if exe_fd >= 0 {
        // SAFETY: our own descriptor, opened above.
        unsafe { libc::close(exe_fd) };
    }
    problem
}

fn restore_itimers(t: &[(u64, u64); 3]) {
    for (i, w) in [libc::ITIMER_REAL, libc::ITIMER_VIRTUAL, libc::ITIMER_PROF].into_iter().enumerate() {
        let tv = |us: u64| libc::timeval { tv_sec: (us / 1_000_000) as i64, tv_usec: (us % 1_000_000) as i64 };
        let v = libc::itimerval { it_interval: tv(t[i].0), it_value: tv(t[i].1) };
        if t[i].1 != 0 {
            // SAFETY: setitimer reads the live local.
            unsafe { libc::setitimer(w, &v, std::ptr::null_mut()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(kv: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| kv.iter().find(|(a, _)| *a == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn config_reads_all_variables() {
        let c = Config::from_vars(vars(&[
            ("CRUM_CKPT_DIR", "/x/imgs"),
            ("CRUM_CKPT_INTERVAL", "1.5"),
            ("CRUM_CKPT_KEEP", "3"),
            ("CRUM_CKPT_SIGNAL", "10"),
        ]))
        .unwrap();
        assert_eq!(c.dir, PathBuf::from("/x/imgs"));
        assert_eq!(c.interval, Some(Duration::from_millis(1500)));
        assert_eq!(c.keep, 3);
        assert_eq!(c.signal, Some(10));
        assert!(!c.sync);
    }

    #[test]
    fn config_defaults_to_relative_dir_and_no_timer() {
        let c = Config::from_vars(vars(&[])).unwrap();
        assert!(c.dir.is_absolute() && c.dir.ends_with("crum-images"));
        assert_eq!(c.interval, None);
        assert_eq!(c.keep, 0);
    }

    #[test]
    fn config_rejects_bad_values() {
        assert!(Config::from_vars(vars(&[("CRUM_CKPT_INTERVAL", "-1")])).is_err());
        assert!(Config::from_vars(vars(&[("CRUM_CKPT_SIGNAL", "9")])).is_err());
        assert!(Config::from_vars(vars(&[("CRUM_CKPT_KEEP", "x")])).is_err());
    }

    #[test]
    fn config_refuses_keep_zero_and_untriggerable_signals() {
        let e = Config::from_vars(vars(&[("CRUM_CKPT_KEEP", "0")])).unwrap_err();
        assert!(e.contains("at least 1"), "{e}");
        for sig in ["9", "19"] {
            let e = Config::from_vars(vars(&[("CRUM_CKPT_SIGNAL", sig)])).unwrap_err();
            assert!(e.contains("cannot be caught"), "{e}");
        }
        let e = Config::from_vars(vars(&[("CRUM_CKPT_SIGNAL", "11")])).unwrap_err();
        assert!(e.contains("fault signal"), "{e}");
    }

    #[test]
    fn config_directory_is_normalised() {
        let c = Config::from_vars(vars(&[("CRUM_CKPT_DIR", "/x//y/./z/../imgs")])).unwrap();
        assert_eq!(c.dir, PathBuf::from("/x/y/imgs"));
        let c = Config::from_vars(vars(&[("CRUM_CKPT_DIR", "./imgs")])).unwrap();
        assert_eq!(c.dir, std::env::current_dir().unwrap().canonicalize().unwrap().join("imgs"));
    }
}
