//! The description of a checkpointed process, stored in its image as the `process` section
//! (bincode) next to the memory regions. Written by the agent, read by the restorer.
//!
//! Thread registers are not here: each stopped thread's state is in the program's own memory
//! (its signal frame and the agent's thread slots), which the image holds byte for byte.
//!
//! The section is untrusted input: [`ProcessState::decode`] reads strings in place (their
//! length checked against the bytes left before one is copied), lists grow only as their
//! elements are actually read, and a limit on the whole decode backs both up.

use serde::{Deserialize, Serialize};

/// Name of the image section holding a [`ProcessState`].
pub const SECTION_PROCESS: &str = "process";
/// Version of the [`ProcessState`] encoding written. Version 2 added
/// [`ProcessState::hook_sections`] (at the end), version 3 [`ProcessState::locks`] and
/// [`ProcessState::pipe_sizes`] and [`ProcessState::pending_signals`], version 4 the
/// [`FdKind::Socket`] descriptors (same layout: a crum that reads only up to 3 refuses such an
/// image by its version instead of failing to decode it), version 5
/// [`ProcessState::posix_timers`], version 6 [`ProcessState::advice`], version 7 the
/// [`FdKind::Inotify`] descriptors (same layout), version 8 [`ProcessState::guards`], version 9 the [`FdKind::PidFd`] descriptors (same layout), version 10 a socket's classic BPF filter among its options (`SO_ATTACH_FILTER`, same layout), version 11 [`FdKind::JobPipe`], version 12 the sockets of a job ([`SocketRole::JobPair`], [`SocketRole::JobShared`], same layout), version 13 [`FdKind::Fifo`], [`FdKind::JobFile`] and [`ProcessState::file_contents`], version 14 [`ProcessState::fd_attrs`], version 15 [`ProcessState::deleted_extents`], [`ProcessState::fd_owners`] and [`SocketRole::Queued`], version 16 [`ProcessState::mm_layout`] and [`ProcessState::auxv`], version 17 [`FdKind::PidFdOf`] and [`ProcessState::sysv_shm`]; older versions are still read (with none of
/// those).
pub const PROCESS_STATE_VERSION: u32 = 17;
/// The oldest version a restorer still reads; it refuses any other.
pub const PROCESS_STATE_OLDEST: u32 = 1;
/// Most memory one decode may claim (a backstop: lengths are checked one by one first).
const DECODE_LIMIT: usize = 1 << 30;

/// Everything about a process, apart from memory contents, that a restart needs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessState {
    pub version: u32,
    /// The process id at checkpoint time (the restarted process gets a new one).
    pub pid: i32,
    /// Pids this program had before, oldest first (one per earlier restart).
    pub pid_history: Vec<i32>,
    #[serde(deserialize_with = "bounded::string")]
    pub exe: String,
    #[serde(deserialize_with = "bounded::strings")]
    pub cmdline: Vec<String>,
    #[serde(deserialize_with = "bounded::string")]
    pub cwd: String,
    /// Memory regions in address order, special ones (`[vdso]`, ...) excluded.
    pub regions: Vec<Region>,
    /// `[vvar]`, `[vvar_vclock]`, `[vdso]`: where the program expects them.
    pub specials: Vec<Special>,
    pub threads: Vec<ThreadInfo>,
    /// Address of the restored-side entry point in the program (`restored::restored_main`).
    pub entry: u64,
    /// Address of the agent's `RESTART_INFO`, which the restorer fills in.
    pub restart_info: u64,
    /// Slot index of the main thread (the one whose tid is the pid).
    pub main_slot: u32,
    /// Top of the stack the main thread restarts on (reserved by the agent).
    pub main_stack: u64,
    pub fds: Vec<FdState>,
    pub sigactions: Vec<SigAction>,
    /// ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF as (interval µs, value µs).
    pub itimers: [(u64, u64); 3],
    pub start_brk: u64,
    pub brk: u64,
    /// Linux `struct rlimit` values (cur, max) for every resource, indexed by resource.
    pub rlimits: Vec<(u64, u64)>,
    pub umask: u32,
    /// The hook sections (e.g. a CUDA program's `crum.device`, `crum.device.data`) this image
    /// was written with, each a metadata section or a [`REGION_BLOB`] region: a restart
    /// refuses the image if one is missing, even when it is gone from the inventory too.
    /// Empty in version 1 images (nothing known).
    #[serde(deserialize_with = "bounded::strings")]
    pub hook_sections: Vec<String>,
    /// File locks the process holds (version 3; none before).
    pub locks: Vec<FileLock>,
    /// Capacity of each pipe (by [`FdKind::Pipe`] id) whose size is not the default
    /// (version 3; none before).
    pub pipe_sizes: Vec<(u64, u32)>,
    /// Signals sent to the process and not yet taken, in queue order (version 3; none
    /// before).
    pub pending_signals: Vec<PendingSignal>,
    /// POSIX timers (`timer_create`), by id (version 5; none before).
    pub posix_timers: Vec<PosixTimer>,
    /// Advice and locks on memory (`madvise`, `mlock`), as (start, end, [`ADVICE`] bits) of
    /// regions that have any (version 6; none before).
    pub advice: Vec<(u64, u64, u32)>,
    /// Guard regions (`MADV_GUARD_INSTALL`) as (start, end): no bytes in the image, installed
    /// again at restart (version 8; none before).
    pub guards: Vec<(u64, u64)>,
    /// The contents of the regular files open for writing in place at the checkpoint
    /// (version 13; none before).
    pub file_contents: Vec<FileContent>,
    /// Attributes of the files behind descriptors that a restart creates anew (version 14;
    /// none before): deleted files and memfds, and the socket files of bound Unix sockets.
    pub fd_attrs: Vec<FdAttr>,
    /// Where each deleted file or memfd with holes has data, by [`FdKind::DeletedFile`] id:
    /// (offset, length) of each data extent (`SEEK_DATA`/`SEEK_HOLE`), so that a restart
    /// writes those and leaves the rest a hole (version 15; none before: written whole).
    pub deleted_extents: Vec<(u64, Vec<(u64, u64)>)>,
    /// The descriptors whose I/O signals go to the process itself (`F_SETOWN` of its own
    /// pid, which `F_SETLEASE` sets too) as (fd, owner type of `F_GETOWN_EX` or -1 for no
    /// owner, signal of `F_GETSIG`, 0 for `SIGIO`): set again to the restarted process
    /// (version 15; none before). An owner outside the job refuses the checkpoint.
    pub fd_owners: Vec<(i32, i32, i32)>,
    /// The kernel's bookkeeping of the program's memory layout, in the order of `struct
    /// prctl_mm_map` (start_code, end_code, start_data, end_data, start_brk, brk,
    /// start_stack, arg_start, arg_end, env_start, env_end; `capture::mm_layout`): given back
    /// with `PR_SET_MM_MAP` after a restart, so that /proc/self/cmdline and environ read the
    /// program's strings and its stack is `[stack]` again, not `crum restart`'s (version 16;
    /// none before: left as the restorer's).
    pub mm_layout: Vec<u64>,
    /// The program's auxiliary vector (/proc/self/auxv, as words, up to its `AT_NULL`): given
    /// back with the layout (version 16; none before).
    pub auxv: Vec<u64>,
    /// The program's System V shared memory attachments (`shmat`), attached again to the same
    /// segment after a restart (version 17; none before: restored as plain shared memory).
    pub sysv_shm: Vec<SysvShm>,
}

/// An attachment of a System V shared memory segment (`shmat`), whole, at `start` (the
/// region there, with its protection, is in [`ProcessState::regions`]). Its bytes are in the
/// image like any shared memory's; a restart attaches segment `id` again at
/// `start` when it still exists with the same `key` and `size` (its bytes at the checkpoint
/// written back into it), or, for a segment already removed (`IPC_RMID`: nobody can attach
/// it again, it lives while attached), a new private segment removed at once; otherwise it
/// fails, naming the segment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SysvShm {
    pub start: u64,
    pub id: i32,
    pub key: i32,
    /// The segment's size (`shm_segsz`), which need not be a multiple of the page size.
    pub size: u64,
    /// The segment's permission bits (`shm_perm.mode & 0o777`).
    pub mode: u32,
    /// Removed (`IPC_RMID`) but still attached.
    pub removed: bool,
}

/// The mode and times of a file a restart creates anew for descriptor `fd`
/// ([`ProcessState::fd_attrs`]): given back after it is made (`fchmod`/`chmod`, `futimens`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct FdAttr {
    pub fd: i32,
    /// Permission bits (`st_mode & 07777`).
    pub mode: u32,
    /// (seconds, nanoseconds) of the last access and modification; None for a socket file.
    pub times: Option<[(i64, i64); 2]>,
    /// Owner (uid, gid).
    pub owner: (u32, u32),
}

/// Largest file contents a restart reads from an image ([`FileContent`]).
pub const MAX_FILE_CONTENTS: u64 = 1 << 32;

/// The bytes of a regular file the process had open for writing other than by appending
/// (`O_RDWR`, `O_WRONLY` without `O_APPEND`: a database, a file rewritten in place), kept in
/// hook section `section`: a restart that finds the file changed since the checkpoint
/// writes them back, so that what the program wrote into it after the checkpoint — in
/// place, where cutting the file back cannot undo it — is undone.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileContent {
    /// The (first) descriptor it is open at.
    pub fd: i32,
    #[serde(deserialize_with = "bounded::string")]
    pub section: String,
}

/// What `/proc/self/smaps` says of a mapping (its `VmFlags` token) and how a restart gives
/// it again: bit i of an [`ProcessState::advice`] entry is `ADVICE[i]`. `madvise` advice
/// (`MADV_*`), or for "lo"/"lf" `mlock`/`mlock2(MLOCK_ONFAULT)` (passed as -1/-2), or for
/// "nr" `MAP_NORESERVE` (-3) and "dp" `MAP_DROPPABLE` (-4), which only the `mmap` of a private
/// region at restart can give:
/// without it a restart mapped every private region so, and the program's own mappings showed
/// the flag afterwards (zdtm `thp_disable`, `maps02`).
pub const ADVICE: [(&str, i32); 12] = [
    ("dd", libc::MADV_DONTDUMP),
    ("dc", libc::MADV_DONTFORK),
    ("wf", libc::MADV_WIPEONFORK),
    ("hg", libc::MADV_HUGEPAGE),
    ("nh", libc::MADV_NOHUGEPAGE),
    ("mg", libc::MADV_MERGEABLE),
    ("lo", -1),
    ("lf", -2),
    ("nr", ADVICE_NORESERVE),
    ("sr", libc::MADV_SEQUENTIAL),
    ("rr", libc::MADV_RANDOM),
    ("dp", ADVICE_DROPPABLE),
];

/// The [`ADVICE`] code of `MAP_NORESERVE`, and its bit.
pub const ADVICE_NORESERVE: i32 = -3;
pub const ADVICE_NORESERVE_BIT: u32 = 1 << 8;
/// The [`ADVICE`] code of a `MAP_DROPPABLE` mapping (Linux 6.11: pages the kernel may drop,
/// read back as zeros), and its bit: like `MAP_NORESERVE`, given by the `mmap` at restart.
pub const ADVICE_DROPPABLE: i32 = -4;
pub const ADVICE_DROPPABLE_BIT: u32 = 1 << 11;
/// `MAP_DROPPABLE` (a mapping type, not in every libc's headers yet).
pub const MAP_DROPPABLE: i32 = 0x08;

/// A POSIX timer: created again at restart with the same id, clock, notification and value,
/// and armed with the time that was left (as if the program had been paused).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PosixTimer {
    pub id: i32,
    pub clock: i32,
    /// `SIGEV_SIGNAL`, `SIGEV_NONE`, or `SIGEV_SIGNAL | SIGEV_THREAD_ID` aimed at the main
    /// thread.
    pub notify: i32,
    pub signo: i32,
    /// `sigev_value`.
    pub value: u64,
    pub value_ns: u64,
    pub interval_ns: u64,
}

/// A process-directed signal waiting in the queue: its number and its `siginfo_t` bytes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PendingSignal {
    pub sig: i32,
    pub info: Vec<u8>,
}

/// Which kind of lock a [`FileLock`] is.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum LockKind {
    /// `flock`: owned by the open file description.
    Flock,
    /// `fcntl(F_SETLK)`: owned by the process.
    Posix,
    /// `fcntl(F_OFD_SETLK)`: owned by the open file description.
    Ofd,
    /// `fcntl(F_SETLEASE)`.
    Lease,
}

/// A lock the process holds on the file open at `fd`, taken again at restart (a restart
/// whose lock is held by someone else by then fails naming it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileLock {
    pub fd: i32,
    pub kind: LockKind,
    pub write: bool,
    /// Byte range (POSIX and OFD): first byte, and last byte (None: to the end of file).
    pub start: u64,
    pub end: Option<u64>,
}

/// One mapping of the address space.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    /// PROT_* bits.
    pub prot: u32,
    pub kind: RegionKind,
    /// The path or pseudo-name from /proc/self/maps (informational, and for shared files).
    #[serde(deserialize_with = "bounded::string")]
    pub name: String,
    /// Whether the image holds this region's bytes.
    pub has_data: bool,
    /// The main thread's stack: restored as a mapping that grows down on demand.
    pub growsdown: bool,
}

/// Region flag bits as stored in the image's region table.
pub const REGION_SHARED_ANON: u32 = 1;
pub const REGION_SHARED_FILE: u32 = 2;
pub const REGION_GROWSDOWN: u32 = 4;
/// Not process memory: a large hook section (e.g. a CUDA program's device memory) stored as a
/// chunked, compressed region named after the section, at address 0. Never mapped at restart.
pub const REGION_BLOB: u32 = 8;

/// Whether an image region is process memory (not a [`REGION_BLOB`]).
pub fn is_process_memory(flags: u32) -> bool {
    flags & REGION_BLOB == 0
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum RegionKind {
    /// Private memory (anonymous, heap, stack, or a private copy of a file): restored as an
    /// anonymous mapping filled from the image.
    Private,
    /// Shared anonymous memory (or a deleted/memfd shared mapping): restored as a new shared
    /// anonymous mapping filled from the image, or, in a job's part, from the job's object
    /// where other processes of the job map it too (`crate::job::SharedSeg`).
    SharedAnon,
    /// A shared mapping of a regular file: mapped from the file again; bytes live in the file.
    SharedFile {
        #[serde(deserialize_with = "bounded::string")]
        path: String,
        offset: u64,
    },
}

/// A kernel special mapping the program's C library refers to by address.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Special {
    #[serde(deserialize_with = "bounded::string")]
    pub name: String,
    pub start: u64,
    pub end: u64,
}

/// Informational per-thread data (the resumable state is in program memory).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ThreadInfo {
    pub tid: i32,
    pub slot: u32,
    pub fs_base: u64,
    pub is_agent: bool,
}

/// An open file descriptor.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FdState {
    pub fd: i32,
    /// open(2) flags as /proc/self/fdinfo reports them (O_CLOEXEC included).
    pub flags: u32,
    pub kind: FdKind,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum FdKind {
    /// stdin/stdout/stderr: taken from the restarting process.
    Stdio,
    /// A regular file or directory, reopened by path and checked for changes.
    File {
        #[serde(deserialize_with = "bounded::string")]
        path: String,
        pos: u64,
        size: u64,
        mtime_ns: i128,
        dev: u64,
        ino: u64,
        dir: bool,
    },
    /// A character device (reopened by path), e.g. /dev/null.
    CharDev {
        #[serde(deserialize_with = "bounded::string")]
        path: String,
    },
    /// A terminal: taken from the restarting terminal.
    Tty,
    /// One end of a pipe whose both ends are in the process, or a write end whose read end
    /// is closed everywhere (made again with its read end closed); `id` pairs the ends; the
    /// read end carries the bytes that were buffered in the pipe.
    Pipe { id: u64, read: bool, data: Vec<u8> },
    /// Another open file of the same open file description (dup'd): restored with dup.
    Dup { of: i32 },
    /// The agent's control socket: re-created under the restarted process's pid.
    ControlListener,
    /// Something crum cannot restore; named when the image is written (an error under
    /// `--strict`), and the restart fails naming it.
    Unsupported {
        #[serde(deserialize_with = "bounded::string")]
        what: String,
    },
    /// A descriptor the program inherited when `crum run` started it (not created by the
    /// program) that crum cannot restore itself, e.g. a pipe from the launching shell or
    /// batch system: `crum restart` passes its own descriptor of the same number, or
    /// /dev/null with a warning.
    Inherited {
        #[serde(deserialize_with = "bounded::string")]
        what: String,
    },
    /// An eventfd: its counter and whether it counts as a semaphore.
    EventFd { count: u64, semaphore: bool },
    /// A timerfd, re-armed at restart with the time that was left (as if the program had
    /// been paused; an absolute `CLOCK_REALTIME` timer keeps its wall-clock deadline), and
    /// the expirations not read yet.
    TimerFd {
        clock: i32,
        /// `TFD_TIMER_ABSTIME` on `CLOCK_REALTIME`: `deadline_ns` (since the epoch) is kept.
        realtime_deadline: bool,
        cancel_on_set: bool,
        value_ns: u64,
        interval_ns: u64,
        ticks: u64,
        deadline_ns: u64,
    },
    /// A signalfd and the signals it takes.
    SignalFd { mask: u64 },
    /// An epoll instance and what it watches (added again once every descriptor is back).
    Epoll { watches: Vec<EpollWatch> },
    /// A regular file deleted while open, or a memfd: its contents are in the image (with
    /// the first descriptor of the file, `id`; later ones of the same file open it again).
    DeletedFile {
        /// Its path when it was deleted (a memfd: its name).
        #[serde(deserialize_with = "bounded::string")]
        path: String,
        memfd: bool,
        id: u64,
        pos: u64,
        /// The contents (with the first descriptor of `id` only).
        data: Option<Vec<u8>>,
        /// A memfd's seals (`F_GET_SEALS`).
        seals: u32,
    },
    /// A Unix, IPv4 or IPv6 socket (stream, datagram or seqpacket).
    Socket(Box<SocketState>),
    /// An inotify instance and its watches ([`crate::inotify`]); `lost` names what a restart
    /// does not bring back (events not read yet), empty if nothing.
    Inotify {
        watches: Vec<InotifyWatch>,
        #[serde(deserialize_with = "bounded::string")]
        lost: String,
    },
    /// A pidfd of the process itself (`thread`: of its main thread, `PIDFD_THREAD`): opened
    /// again on the restarted process (version 9).
    PidFd { thread: bool },
    /// A pidfd of another process of the job (`pid`: as its program knows it; `thread`: of
    /// its main thread, `PIDFD_THREAD`): opened again on that process once the job's restart
    /// has made it (version 17). The capture holds the kernel's pid here until the job's
    /// members are known (`agent::member_pidfds`).
    PidFdOf { pid: i32, thread: bool },
    /// One end of a pipe between processes of a job (`crate::job`): made once by the job's
    /// restart, with its capacity `size`; `data` (the bytes buffered in it) is carried by
    /// one read end in the whole job (version 11).
    JobPipe { id: u64, read: bool, size: u32, data: Vec<u8> },
    /// An open file description shared by several processes of a job — a regular file's
    /// (one offset and one set of status flags for all: a shell's stdout redirected to a
    /// file and written by its children too), an eventfd's (one counter) or a timerfd's (one
    /// timer) — made once by the job's restart from `file` (the [`FdKind::File`],
    /// [`FdKind::EventFd`] or [`FdKind::TimerFd`] of the first process holding it) and
    /// handed to each (version 13). `id` names it in the job.
    JobFile { id: u64, file: Box<FdKind> },
    /// A named pipe (FIFO), opened again by `path` with its access mode without waiting for
    /// the other end (version 13). `id` (device and inode at the checkpoint) pairs the ends;
    /// `size` is its capacity; `data`, the bytes buffered in it, is carried by one read end
    /// when the process — or the job — holds both ends (else `lost` says how many bytes
    /// were in it, named when the image is written).
    Fifo {
        #[serde(deserialize_with = "bounded::string")]
        path: String,
        id: u64,
        size: u32,
        data: Vec<u8>,
        #[serde(deserialize_with = "bounded::string")]
        lost: String,
    },
}

/// A watch of an inotify instance: added again by `path` with `mask` (plus `IN_DONT_FOLLOW`
/// where it watches the link itself), in the order of `wd`, so that it gets `wd` again.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InotifyWatch {
    pub wd: i32,
    pub mask: u32,
    #[serde(deserialize_with = "bounded::string")]
    pub path: String,
    /// The watched file's identity at the checkpoint (`st_dev`, `st_ino`).
    pub dev: u64,
    pub ino: u64,
    pub dont_follow: bool,
}

/// A socket as a restart makes it again: created with its domain, type and protocol, its
/// options set, bound to its address, then according to its [`SocketRole`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SocketState {
    pub domain: i32,
    /// `SOCK_STREAM`, `SOCK_DGRAM` or `SOCK_SEQPACKET`.
    pub ty: i32,
    pub protocol: i32,
    /// The address it was bound to (raw `struct sockaddr` bytes); empty: not bound.
    pub local: Vec<u8>,
    /// The address it was connected to; empty: not connected.
    pub peer: Vec<u8>,
    /// Options that differ from a new socket's are set again (before the bind).
    pub options: Vec<SockOpt>,
    /// A Unix socket's shutdown state (bit 0: no more receiving, bit 1: no more sending).
    pub shutdown: u8,
    pub role: SocketRole,
    /// What a restart does not bring back as it was (empty: nothing): named when the image
    /// is written.
    #[serde(deserialize_with = "bounded::string")]
    pub lost: String,
    /// Why a restart could not bring it back as it was, so that no image is written (empty:
    /// nothing). Decided at the checkpoint, never in the image.
    #[serde(skip)]
    pub refuse: String,
}

/// One socket option as `getsockopt` returned it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SockOpt {
    pub level: i32,
    pub name: i32,
    pub value: Vec<u8>,
}

/// What a restored socket is besides its address and options.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum SocketRole {
    /// Neither listening nor connected (bound again if it was bound).
    Unconnected,
    /// Listening (connections that waited to be accepted are not carried: see `lost`).
    Listening { backlog: u32 },
    /// One end of a connected Unix socket whose other end is open in the process too: the
    /// ends are made again as a socket pair (`id` pairs them, `first` tells them apart),
    /// and the messages waiting at this end (a stream's bytes as one) are sent to it again.
    Pair { id: u64, first: bool, queued: Vec<Vec<u8>> },
    /// A datagram socket connected to an address: connected to it again.
    Connected,
    /// A connection to something outside the process: it comes back closed, as after a
    /// network failure — the bytes that had arrived and were not read yet are read first,
    /// then end of file.
    Closed { queued: Vec<u8> },
    /// One end of a connection between processes of a job (`crate::job`), or of a Unix
    /// socket pair held by several of them: both ends are made once by the job's restart —
    /// a Unix socket pair, or a connection through a listener with both ends' addresses (TCP,
    /// and a Unix stream or seqpacket socket with a name) — and the messages that waited at
    /// this end (`queued`, a stream's bytes as one) are sent to it again (version 12).
    JobPair { id: u64, first: bool, queued: Vec<Vec<u8>> },
    /// A socket held by several processes of a job that is not an end of a connection
    /// between them (a listener shared by forked workers): made once by the job's restart,
    /// as `role` says, and handed to each (version 12). `id`: its inode at the checkpoint.
    JobShared { id: u64, role: Box<SocketRole> },
    /// A bound Unix datagram socket with datagrams waiting (version 15): made as `role`
    /// says, then each datagram (`queued`: sender's address, bytes; in order) is sent to it
    /// again from a socket with its sender's address — the process's own socket of that
    /// name, a socket bound to an abstract name for the moment, or an unnamed one.
    Queued { role: Box<SocketRole>, queued: Vec<(Vec<u8>, Vec<u8>)> },
}

/// One entry of an epoll interest list: the watched descriptor (the number it was added by,
/// checked to still name that file), the events and the user data.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct EpollWatch {
    pub fd: i32,
    pub events: u32,
    pub data: u64,
}

impl FdKind {
    /// Why the descriptor cannot be restored as it was, if so.
    pub fn problem(&self) -> Option<&str> {
        match self {
            FdKind::Unsupported { what } => Some(what),
            _ => None,
        }
    }

    /// What a restart restores differently from how it was (the descriptor does come back),
    /// if anything: named when the image is written.
    pub fn loss(&self) -> Option<&str> {
        match self {
            FdKind::Socket(s) if !s.lost.is_empty() => Some(&s.lost),
            FdKind::Inotify { lost, .. } if !lost.is_empty() => Some(lost),
            FdKind::Fifo { lost, .. } if !lost.is_empty() => Some(lost),
            _ => None,
        }
    }
}

impl SocketState {
    /// "unix stream socket /run/x.sock", "tcp socket 127.0.0.1:5000 connected to 10.0.0.1:80".
    pub fn describe(&self) -> String {
        let ty = match self.ty {
            libc::SOCK_STREAM if self.domain != libc::AF_UNIX => "tcp",
            libc::SOCK_DGRAM if self.domain != libc::AF_UNIX => "udp",
            libc::SOCK_STREAM => "unix stream",
            libc::SOCK_DGRAM => "unix datagram",
            libc::SOCK_SEQPACKET => "unix seqpacket",
            _ => "other",
        };
        let mut out = format!("{ty} socket");
        if !self.local.is_empty() {
            out += &format!(" {}", sockaddr_text(&self.local));
        }
        if !self.peer.is_empty() {
            out += &format!(" connected to {}", sockaddr_text(&self.peer));
        }
        out
    }
}

/// A raw `struct sockaddr` as text: a path, `@abstract`, `1.2.3.4:80`, `[::1]:80`.
pub fn sockaddr_text(b: &[u8]) -> String {
    let fam = b.get(..2).map_or(0, |f| u16::from_ne_bytes([f[0], f[1]])) as i32;
    match fam {
        libc::AF_UNIX => {
            let p = &b[2..];
            match p.first() {
                None => "(unnamed)".into(),
                Some(0) => format!("@{}", String::from_utf8_lossy(&p[1..])),
                Some(_) => String::from_utf8_lossy(p.split(|&c| c == 0).next().unwrap_or(p)).into_owned(),
            }
        }
        libc::AF_INET if b.len() >= 8 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            format!("{}.{}.{}.{}:{port}", b[4], b[5], b[6], b[7])
        }
        libc::AF_INET6 if b.len() >= 24 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[8..24]);
            format!("[{}]:{port}", std::net::Ipv6Addr::from(a))
        }
        _ => format!("(address family {fam})"),
    }
}

/// A signal disposition as the kernel's `struct sigaction` (rt_sigaction ABI).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct SigAction {
    pub sig: i32,
    pub handler: u64,
    pub flags: u64,
    pub restorer: u64,
    pub mask: u64,
}

impl ProcessState {
    /// Encodes for the image.
    pub fn encode(&self) -> Vec<u8> {
        bincode::serde::encode_to_vec(self, bincode::config::standard())
            .expect("encoding plain data into a Vec cannot fail")
    }

    /// Decodes and checks the version (versions [`PROCESS_STATE_OLDEST`] to
    /// [`PROCESS_STATE_VERSION`]). No length in the bytes makes it allocate more than the
    /// bytes can fill.
    pub fn decode(bytes: &[u8]) -> Result<ProcessState, String> {
        let cfg = bincode::config::standard().with_limit::<DECODE_LIMIT>();
        let corrupt = |e: bincode::error::DecodeError| format!("corrupt process section: {e}");
        // The version is the first field.
        let (version, _): (u32, usize) = bincode::serde::decode_from_slice(bytes, cfg).map_err(corrupt)?;
        if !(PROCESS_STATE_OLDEST..=PROCESS_STATE_VERSION).contains(&version) {
            return Err(format!(
                "process section version {version} is not supported (this crum reads {PROCESS_STATE_OLDEST} to {PROCESS_STATE_VERSION})"
            ));
        }
        // Each older version is the next one without its last fields (version 1 lacks
        // `hook_sections`, version 2 `locks`, `pipe_sizes` and `pending_signals`, versions 3
        // and 4 `posix_timers`, version 5 `advice`, versions 6 and 7 `guards`, versions 9 to
        // 12 `file_contents`, versions 9 to 13 `fd_attrs`, versions 9 to 14
        // `deleted_extents` and `fd_owners`, versions 1 to 15 `mm_layout` and `auxv`, versions 1
        // to 16 `sysv_shm`): an empty list is the single byte 0.
        let owned;
        let missing = match version {
            1 => 14,
            2 => 13,
            3 | 4 => 10,
            5 => 9,
            6..=8 => 8,
            9..=12 => 7,
            13 => 6,
            14 => 5,
            15 => 3,
            16 => 1,
            _ => 0,
        };
        let bytes = if missing > 0 {
            owned = [bytes, &[0u8; 16][..missing]].concat();
            &owned[..]
        } else {
            bytes
        };
        let (s, used): (ProcessState, usize) = bincode::serde::decode_from_slice(bytes, cfg).map_err(corrupt)?;
        if used != bytes.len() {
            return Err("corrupt process section: trailing bytes".into());
        }
        Ok(s)
    }
}

/// Serde readers of strings that borrow from the input (bincode checks the length against
/// the bytes left) instead of allocating the length first.
mod bounded {
    use serde::de::{Deserialize, Deserializer, Error, Visitor};

    struct Str;

    impl Visitor<'_> for Str {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_owned())
        }
    }

    pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        d.deserialize_str(Str)
    }

    #[derive(serde::Deserialize)]
    struct One(#[serde(deserialize_with = "string")] String);

    pub fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        Ok(Vec::<One>::deserialize(d)?.into_iter().map(|o| o.0).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(regions: Vec<Region>, fds: Vec<FdState>) -> ProcessState {
        ProcessState {
            version: PROCESS_STATE_VERSION,
            pid: 42,
            pid_history: vec![7, 9],
            exe: "/bin/x".into(),
            cmdline: vec!["x".into(), "-v".into()],
            cwd: "/tmp".into(),
            regions,
            specials: vec![Special { name: "[vdso]".into(), start: 0x7000, end: 0x9000 }],
            threads: vec![ThreadInfo { tid: 42, slot: 1, fs_base: 0x1234, is_agent: false }],
            entry: 0xdead,
            restart_info: 0xbeef,
            main_slot: 1,
            main_stack: 0x8000,
            fds,
            sigactions: vec![SigAction { sig: 10, handler: 1, flags: 2, restorer: 3, mask: 4 }],
            itimers: [(1, 2), (3, 4), (5, 6)],
            start_brk: 0x10000,
            brk: 0x20000,
            rlimits: vec![(1, 2)],
            umask: 0o022,
            hook_sections: vec!["crum.device".into(), "crum.device.data".into()],
            locks: vec![FileLock { fd: 5, kind: LockKind::Posix, write: true, start: 10, end: Some(19) }],
            pipe_sizes: vec![(77, 1 << 20)],
            pending_signals: vec![PendingSignal { sig: 10, info: vec![1; 128] }],
            posix_timers: vec![PosixTimer { id: 3, clock: 1, notify: 0, signo: 14, value: 9, value_ns: 5, interval_ns: 6 }],
            advice: vec![(0x1000, 0x3000, 5)],
            guards: vec![(0x2000, 0x3000)],
            file_contents: vec![FileContent { fd: 7, section: "crum.file.7".into() }],
            fd_attrs: vec![FdAttr { fd: 4, mode: 0o645, times: Some([(1, 2), (3, 4)]), owner: (5, 6) }],
            deleted_extents: vec![(4, vec![(0, 4096), (8192, 4096)])],
            fd_owners: vec![(4, 1, 0)],
            mm_layout: vec![0x400000, 0x401000, 0x402000, 0x403000, 0x404000, 0x405000, 0x7ffd0000, 0x7ffd1000, 0x7ffd1010, 0x7ffd1010, 0x7ffd1100],
            auxv: vec![6, 4096, 0, 0],
            sysv_shm: vec![SysvShm { start: 0x7f00_0000_0000, id: 5, key: 0x1234, size: 5000, mode: 0o600, removed: true }],
        }
    }

    fn region() -> impl Strategy<Value = Region> {
        (any::<u32>(), 1u64..1 << 20, 0u32..8, ".{0,40}", any::<bool>(), 0u8..3).prop_map(|(s, l, prot, name, d, k)| {
            let start = (s as u64) << 12;
            let kind = match k {
                0 => RegionKind::Private,
                1 => RegionKind::SharedAnon,
                _ => RegionKind::SharedFile { path: name.clone(), offset: l },
            };
            Region { start, end: start + (l << 12), prot, kind, name, has_data: d, growsdown: !d }
        })
    }

    fn fd() -> impl Strategy<Value = FdState> {
        (0i32..1024, any::<u32>(), proptest::collection::vec(any::<u8>(), 0..64), ".{0,20}").prop_map(|(fd, flags, data, path)| {
            let kind = match fd % 15 {
                0 => FdKind::Pipe { id: flags as u64, read: true, data },
                1 => FdKind::File { path, pos: 3, size: 9, mtime_ns: -5, dev: 1, ino: 2, dir: false },
                2 => FdKind::Dup { of: fd / 2 },
                3 => FdKind::Unsupported { what: path },
                4 => FdKind::Inherited { what: path },
                5 => FdKind::EventFd { count: flags as u64, semaphore: fd % 3 == 0 },
                6 => FdKind::TimerFd {
                    clock: 1,
                    realtime_deadline: fd % 3 == 0,
                    cancel_on_set: false,
                    value_ns: 5,
                    interval_ns: flags as u64,
                    ticks: 2,
                    deadline_ns: 9,
                },
                7 => FdKind::SignalFd { mask: flags as u64 },
                8 => FdKind::Epoll { watches: vec![EpollWatch { fd: 3, events: flags, data: 7 }] },
                9 => FdKind::DeletedFile { path, memfd: fd % 3 == 0, id: 4, pos: 1, data: Some(data), seals: 0 },
                10 => FdKind::Socket(Box::new(SocketState {
                    domain: 1,
                    ty: 2,
                    protocol: 0,
                    local: data.clone(),
                    peer: Vec::new(),
                    options: vec![SockOpt { level: 1, name: 9, value: vec![1, 0, 0, 0] }],
                    shutdown: (flags % 4) as u8,
                    role: match flags % 4 {
                        0 => SocketRole::Pair { id: 7, first: true, queued: vec![data, Vec::new()] },
                        1 => SocketRole::Closed { queued: data },
                        2 => SocketRole::Listening { backlog: flags },
                        _ => SocketRole::Connected,
                    },
                    lost: path,
                    refuse: String::new(),
                })),
                11 => FdKind::Inotify {
                    watches: vec![InotifyWatch { wd: fd, mask: flags, path: path.clone(), dev: 3, ino: 4, dont_follow: fd % 2 == 0 }],
                    lost: path,
                },
                12 => FdKind::PidFd { thread: fd % 2 == 0 },
                13 => FdKind::PidFdOf { pid: flags as i32, thread: fd % 2 == 0 },
                _ => FdKind::ControlListener,
            };
            FdState { fd, flags, kind }
        })
    }

    proptest! {
        #[test]
        fn process_state_round_trips(regions in proptest::collection::vec(region(), 0..20),
                                     fds in proptest::collection::vec(fd(), 0..20)) {
            let s = sample(regions, fds);
            prop_assert_eq!(ProcessState::decode(&s.encode()).unwrap(), s);
        }
    }

    #[test]
    fn decode_rejects_other_versions_and_trailing_bytes() {
        let mut s = sample(vec![], vec![]);
        let mut b = s.encode();
        b.push(0);
        assert!(ProcessState::decode(&b).unwrap_err().contains("trailing"));
        s.version = PROCESS_STATE_VERSION + 1;
        assert!(ProcessState::decode(&s.encode()).unwrap_err().contains("not supported"));
    }

    #[test]
    fn decode_rejects_truncated_bytes() {
        let b = sample(vec![], vec![]).encode();
        assert!(ProcessState::decode(&b[..b.len() / 2]).is_err());
    }

    #[test]
    fn version_1_sections_still_decode_with_no_hook_sections() {
        // A version 1 section is a version 2 one without its last field.
        let mut s = sample(vec![], vec![]);
        s.version = 1;
        s.hook_sections.clear();
        s.locks.clear();
        s.pipe_sizes.clear();
        s.pending_signals.clear();
        s.posix_timers.clear();
        s.advice.clear();
        s.guards.clear();
        s.file_contents.clear();
        s.fd_attrs.clear();
        s.deleted_extents.clear();
        s.fd_owners.clear();
        s.mm_layout.clear();
        s.auxv.clear();
        s.sysv_shm.clear();
        let mut b = s.encode();
        for _ in 0..14 {
            assert_eq!(b.pop(), Some(0), "an empty list is one zero byte");
        }
        assert_eq!(ProcessState::decode(&b).unwrap(), s);
        // ... and a version 1 section with bytes left over is still refused.
        b.push(7);
        b.push(0);
        assert!(ProcessState::decode(&b).is_err());
    }

    #[test]
    fn version_2_sections_still_decode_with_no_locks() {
        let mut s = sample(vec![], vec![]);
        s.version = 2;
        s.locks.clear();
        s.pipe_sizes.clear();
        s.pending_signals.clear();
        s.posix_timers.clear();
        s.advice.clear();
        s.guards.clear();
        s.file_contents.clear();
        s.fd_attrs.clear();
        s.deleted_extents.clear();
        s.fd_owners.clear();
        s.mm_layout.clear();
        s.auxv.clear();
        s.sysv_shm.clear();
        let mut b = s.encode();
        b.truncate(b.len() - 13);
        assert_eq!(ProcessState::decode(&b).unwrap(), s);
    }

    #[test]
    fn version_3_to_7_sections_still_decode_without_the_later_lists() {
        for v in [3, 4, 5, 6, 7] {
            let mut s = sample(vec![], vec![]);
            s.version = v;
            s.guards.clear();
            s.file_contents.clear();
            s.fd_attrs.clear();
            s.deleted_extents.clear();
            s.fd_owners.clear();
            s.mm_layout.clear();
            s.auxv.clear();
            s.sysv_shm.clear();
            let mut cut = 8;
            if v < 6 {
                s.advice.clear();
                cut = 9;
            }
            if v < 5 {
                s.posix_timers.clear();
                cut = 10;
            }
            let mut b = s.encode();
            b.truncate(b.len() - cut);
            assert_eq!(ProcessState::decode(&b).unwrap(), s);
        }
    }

    /// bincode's varint for `v`.
    fn varint(v: u64) -> Vec<u8> {
        bincode::serde::encode_to_vec(v, bincode::config::standard()).unwrap()
    }

    #[test]
    fn version_9_to_12_sections_still_decode_without_file_contents() {
        for v in 9..=12 {
            let mut s = sample(vec![], vec![]);
            s.version = v;
            s.file_contents.clear();
            s.fd_attrs.clear();
            s.deleted_extents.clear();
            s.fd_owners.clear();
            s.mm_layout.clear();
            s.auxv.clear();
            s.sysv_shm.clear();
            let mut b = s.encode();
            b.truncate(b.len() - 7);
            assert_eq!(ProcessState::decode(&b).unwrap(), s);
        }
    }

    #[test]
    fn version_13_sections_still_decode_without_fd_attrs() {
        let mut s = sample(vec![], vec![]);
        s.version = 13;
        s.fd_attrs.clear();
        s.deleted_extents.clear();
        s.fd_owners.clear();
        s.mm_layout.clear();
        s.auxv.clear();
        s.sysv_shm.clear();
        let mut b = s.encode();
        b.truncate(b.len() - 6);
        assert_eq!(ProcessState::decode(&b).unwrap(), s);
    }

    #[test]
    fn version_14_sections_still_decode_without_deleted_extents_and_fd_owners() {
        let mut s = sample(vec![], vec![]);
        s.version = 14;
        s.deleted_extents.clear();
        s.fd_owners.clear();
        s.mm_layout.clear();
        s.auxv.clear();
        s.sysv_shm.clear();
        let mut b = s.encode();
        b.truncate(b.len() - 5);
        assert_eq!(ProcessState::decode(&b).unwrap(), s);
    }

    #[test]
    fn version_15_sections_still_decode_without_the_memory_layout() {
        let mut s = sample(vec![], vec![]);
        s.version = 15;
        s.mm_layout.clear();
        s.auxv.clear();
        s.sysv_shm.clear();
        let mut b = s.encode();
        b.truncate(b.len() - 3);
        assert_eq!(ProcessState::decode(&b).unwrap(), s);
    }

    #[test]
    fn version_16_sections_still_decode_without_sysv_attachments() {
        let mut s = sample(vec![], vec![]);
        s.version = 16;
        s.sysv_shm.clear();
        let mut b = s.encode();
        b.truncate(b.len() - 1);
        assert_eq!(ProcessState::decode(&b).unwrap(), s);
    }

    #[test]
    fn a_string_or_list_length_beyond_the_input_is_refused_before_allocating() {
        let s = sample(vec![], vec![]);
        let good = s.encode();
        // `exe` ("/bin/x", length byte 6) and `cmdline` (2 strings) follow pid and history.
        let at = good.windows(7).position(|w| w == b"\x06/bin/x").unwrap();
        for huge in [u64::MAX, 1 << 40, 1 << 29] {
            for field in [at, at + 7] {
                let mut b = good.clone();
                b.splice(field..field + 1, varint(huge));
                let e = ProcessState::decode(&b).unwrap_err();
                assert!(e.starts_with("corrupt process section"), "{huge}: {e}");
            }
        }
    }
}
