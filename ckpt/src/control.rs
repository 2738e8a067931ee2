//! The per-process control socket: how `crum checkpoint` and `crum ps` talk to the agent
//! inside a program running under crum.
//!
//! One Unix stream socket per process at `$XDG_RUNTIME_DIR/crum/<pid>.sock` (`CRUM_CONTROL_DIR`
//! overrides it). Without `XDG_RUNTIME_DIR` the directory is the first of `/tmp/crum-<uid>`,
//! `/run/user/<uid>/crum` and `$HOME/.crum-control` that is ours and private or does not exist
//! yet (the latter two only when their parent is ours and others cannot write it): another
//! user who pre-creates `/tmp/crum-<uid>` cannot take checkpoints away ([`socket_dir`]). The
//! directory is created 0700 and refused if it is not owned by us or is accessible to others;
//! the socket is 0600; the server checks every peer's uid with `SO_PEERCRED` and refuses
//! other users, and the client checks the server's the same way.
//!
//! Wire format: one JSON object per line in each direction.
//! Request: `{"op":"checkpoint","dir":"/abs/dir"|null,"exit":false}` or `{"op":"status"}`.
//! Reply: `{"ok":true,"path":"/abs/image"}`, `{"ok":false,"error":"…"}` or
//! `{"ok":true,"status":{…}}`.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};

/// Longest accepted message line.
const MAX_LINE: u64 = 64 * 1024;
/// How long the server waits for a connected client's request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors of the control socket, client and server side.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("process {pid} is not running")]
    NoProcess { pid: u32 },
    #[error("process {pid} belongs to another user")]
    OtherUser { pid: u32 },
    #[error("process {pid} is not running under crum (no control socket at {path}){waited}")]
    NotUnderCrum {
        pid: u32,
        path: PathBuf,
        /// How long the client waited for an agent that is loaded in the process, or what the
        /// process runs.
        waited: String,
    },
    #[error(
        "control directory {path} is not private to this user (owner uid {owner}, mode {mode:o}); \
         refusing to use it: remove it, or set XDG_RUNTIME_DIR or CRUM_CONTROL_DIR to a private directory"
    )]
    UnsafeDir { path: PathBuf, owner: u32, mode: u32 },
    #[error("process {pid} is stopped (state {state}); continue it (kill -CONT {pid}) and try again")]
    Stopped { pid: u32, state: char },
    #[error("process {pid} did not answer within {secs} s")]
    NoAnswer { pid: u32, secs: u64 },
    #[error("control socket peer has uid {uid}, not ours ({ours})")]
    Peer { uid: u32, ours: u32 },
    #[error("malformed control message: {0}")]
    Protocol(String),
    #[error("checkpoint of process {pid} failed: {message}")]
    Failed { pid: u32, message: String },
    #[error("control socket I/O on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ControlError + '_ {
    move |source| ControlError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A request received by the agent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// Write an image into `dir` (the agent's configured directory if None; always absolute
    /// when sent by [`request_checkpoint`]) and, with `exit`, end the program afterwards.
    /// With `strict`, write none if a restart could not restore the process exactly.
    Checkpoint {
        dir: Option<PathBuf>,
        exit: bool,
        #[serde(default)]
        strict: bool,
    },
    /// Report the agent's state.
    Status,
    /// Take part in a job's checkpoint as a member (`crate::job`): the connection stays open
    /// for the steps of the cut; the part is written into `parent`.
    JobMember {
        parent: PathBuf,
        #[serde(default)]
        strict: bool,
        /// The member was stopped by a signal and the root continued it with its threads
        /// held in crum's handler ([`crate::job::continue_held`]): what each was blocked in
        /// (tid, system call, pc).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        held: Vec<(i32, i64, u64)>,
        /// The signal to stop again with once the cut is made (0: it was running).
        #[serde(default, skip_serializing_if = "is_zero")]
        restop: i32,
    },
}

/// What the agent reports to a [`Request::Status`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatusReply {
    /// Completed checkpoints so far.
    pub checkpoints: u64,
    /// The newest image written, if any.
    pub last_image: Option<PathBuf>,
    /// The program's lineage (`crate::lineage`): a new one after every restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<String>,
    /// Where its checkpoints go (`crum run --dir`, `crum restart --dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Reply {
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<StatusReply>,
    /// What the image written cannot restore (a restart of it fails naming the same).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

/// A checkpoint written: its image and what in it a restart cannot restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpointed {
    pub path: PathBuf,
    /// One line per problem (e.g. "fd 5 (socket:[123]) cannot be restored"); empty when a
    /// restart restores everything.
    pub warnings: Vec<String>,
}

/// Answers one request; dropping it without replying closes the connection (the client
/// sees an error).
#[derive(Debug)]
pub struct Responder {
    stream: UnixStream,
}

impl Responder {
    /// The connection itself (a job member's link to the root).
    pub fn into_stream(self) -> UnixStream {
        self.stream
    }

    /// Replies to a checkpoint request with the image path or an error message.
    pub fn reply(self, result: Result<PathBuf, String>) -> io::Result<()> {
        self.reply_checkpoint(result.map(|p| (p, Vec::new())))
    }

    /// Replies to a checkpoint request with the image path and what it cannot restore, or
    /// an error message.
    pub fn reply_checkpoint(mut self, result: Result<(PathBuf, Vec<String>), String>) -> io::Result<()> {
        let r = match result {
            Ok((p, warnings)) => Reply {
                ok: true,
                path: Some(p),
                warnings,
                ..Default::default()
            },
            Err(e) => Reply {
                ok: false,
                error: Some(e),
                ..Default::default()
            },
        };
        send_line(&mut self.stream, &r)
    }

    /// Replies to a status request.
    pub fn reply_status(mut self, status: StatusReply) -> io::Result<()> {
        send_line(
            &mut self.stream,
            &Reply {
                ok: true,
                status: Some(status),
                ..Default::default()
            },
        )
    }
}

fn send_line<T: serde::Serialize>(s: &mut UnixStream, v: &T) -> io::Result<()> {
    let mut line = serde_json::to_vec(v).map_err(io::Error::other)?;
    line.push(b'\n');
    s.write_all(&line)
}

fn read_line(s: &UnixStream) -> io::Result<Option<Vec<u8>>> {
    let mut r = BufReader::new(s.take(MAX_LINE));
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message line too long or cut short",
        ));
    }
    line.pop();
    Ok(Some(line))
}

fn our_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Whether a peer with `peer` uid may use a socket owned by `ours`: the same user only.
pub fn peer_allowed(peer: u32, ours: u32) -> bool {
    peer == ours
}

/// The uid of the process at the other end of `s` (`SO_PEERCRED`).
pub fn peer_uid(s: &UnixStream) -> io::Result<u32> {
    let cred = getsockopt(s, PeerCredentials).map_err(io::Error::from)?;
    Ok(cred.uid())
}

/// The directory holding the control sockets (not created): `CRUM_CONTROL_DIR`, else
/// `$XDG_RUNTIME_DIR/crum`, else the first usable of [`fallback_dirs`].
pub fn socket_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CRUM_CONTROL_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("crum");
    }
    first_usable(&fallback_dirs())
}

/// Where the control sockets go without `XDG_RUNTIME_DIR`, in order: `/tmp/crum-<uid>`, then
/// `/run/user/<uid>/crum` and `$HOME/.crum-control` where their parent is ours and not
/// writable by others (so nobody else can pre-create them).
fn fallback_dirs() -> Vec<PathBuf> {
    let uid = our_uid();
    let mut v = vec![PathBuf::from(format!("/tmp/crum-{uid}"))];
    let ours_closed = |p: &Path| {
        std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0)
    };
    let run = PathBuf::from(format!("/run/user/{uid}"));
    if ours_closed(&run) {
        v.push(run.join("crum"));
    }
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute()) {
        if ours_closed(&home) {
            v.push(home.join(".crum-control"));
        }
    }
    v
}

/// The first of `dirs` that is ours and private, or absent (the server creates it private);
/// the first one when none is (binding there fails, naming it and why).
fn first_usable(dirs: &[PathBuf]) -> PathBuf {
    dirs.iter()
        .find(|d| match std::fs::symlink_metadata(d) {
            Err(e) => e.kind() == io::ErrorKind::NotFound,
            Ok(_) => check_private_dir(d).is_ok(),
        })
        .or(dirs.first())
        .cloned()
        .unwrap_or_default()
}

/// `path` made absolute (from the working directory) and normalised: no `.`, `..` or repeated
/// `/`. The part that exists is canonical (symbolic links resolved); `..` beyond it is
/// resolved by name.
pub fn absolute(path: &Path) -> io::Result<PathBuf> {
    use std::path::Component;
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let comps: Vec<Component<'_>> = abs.components().collect();
    let mut i = comps.len();
    let mut base = loop {
        let prefix: PathBuf = comps[..i].iter().collect();
        match prefix.canonicalize() {
            Ok(c) => break c,
            Err(_) if i > 1 => i -= 1,
            Err(e) => return Err(e),
        }
    };
    for c in &comps[i..] {
        match c {
            Component::ParentDir => {
                base.pop();
            }
            Component::Normal(n) => base.push(n),
            _ => {}
        }
    }
    Ok(base)
}

/// The control socket path of `pid` in `dir`.
pub fn socket_path_in(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.sock"))
}

/// Creates `dir` (0700) if needed and checks it is ours and private.
pub fn ensure_private_dir(dir: &Path) -> Result<(), ControlError> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = dir.parent() {
        if !parent.as_os_str().is_empty() && !parent.exists() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err(dir)(e)),
    }
    check_private_dir(dir)
}

fn check_private_dir(dir: &Path) -> Result<(), ControlError> {
    // symlink_metadata: a symlink planted in /tmp is refused, not followed.
    let md = std::fs::symlink_metadata(dir).map_err(io_err(dir))?;
    if !md.is_dir() || md.uid() != our_uid() || md.mode() & 0o077 != 0 {
        return Err(ControlError::UnsafeDir {
            path: dir.to_path_buf(),
            owner: md.uid(),
            mode: md.mode() & 0o7777,
        });
    }
    Ok(())
}

/// The agent's end: a listening socket for one process, removed when dropped.
#[derive(Debug)]
pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlServer {
    /// Binds the control socket of process `pid` in [`socket_dir`].
    pub fn bind(pid: u32) -> Result<ControlServer, ControlError> {
        Self::bind_in(&socket_dir(), pid)
    }

    /// Binds the control socket of process `pid` in `dir` (created private if missing).
    pub fn bind_in(dir: &Path, pid: u32) -> Result<ControlServer, ControlError> {
        ensure_private_dir(dir)?;
        let path = socket_path_in(dir, pid);
        if path.exists() {
            // A live listener for this pid cannot exist (pids are unique while alive), so
            // this is a stale socket of an earlier process with the same pid — unless it
            // answers, which would mean someone else bound it: then refuse.
            if UnixStream::connect(&path).is_ok() {
                return Err(io_err(&path)(io::Error::from(io::ErrorKind::AddrInUse)));
            }
            std::fs::remove_file(&path).map_err(io_err(&path))?;
        }
        // Above the program's fd range, close-on-exec (`crate::highfd`).
        let listener = crate::highfd::move_high(UnixListener::bind(&path).map_err(io_err(&path))?);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err(&path))?;
        Ok(ControlServer { listener, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for the next valid request from our own user. Connections from other users
    /// are answered with an error and dropped; connections that send nothing (probes by
    /// `crum ps`) or garbage are dropped; neither is returned.
    pub fn accept(&self) -> Result<(Request, Responder), ControlError> {
        loop {
            // Waits in poll, not in accept: a blocked accept holds the lowest free descriptor
            // number, which the program's next open would skip; the connection then moves
            // above the program's range (`crate::highfd`).
            crate::highfd::wait_readable(&self.listener);
            let (stream, _) = self.listener.accept().map_err(io_err(&self.path))?;
            let mut stream = crate::highfd::move_high(stream);
            let uid = match peer_uid(&stream) {
                Ok(u) => u,
                Err(_) => continue,
            };
            if !peer_allowed(uid, our_uid()) {
                let msg = format!("permission denied: uid {uid} may not control this process");
                let _ = send_line(
                    &mut stream,
                    &Reply {
                        ok: false,
                        error: Some(msg),
                        ..Default::default()
                    },
                );
                continue;
            }
            let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
            let line = match read_line(&stream) {
                Ok(Some(l)) => l,
                _ => continue,
            };
            match serde_json::from_slice::<Request>(&line) {
                Ok(req) => {
                    let _ = stream.set_read_timeout(None);
                    return Ok((req, Responder { stream }));
                }
                Err(e) => {
                    let msg = format!("malformed request: {e}");
                    let _ = send_line(
                        &mut stream,
                        &Reply {
                            ok: false,
                            error: Some(msg),
                            ..Default::default()
                        },
                    );
                }
            }
        }
    }

    /// The listener's descriptor (a forked child closes its copy of its parent's, and never
    /// drops the server: that would remove the parent's socket file).
    pub fn listener_fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.listener.as_raw_fd()
    }

    /// Removes the socket file now (before an `exit` that skips destructors).
    pub fn remove_socket(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.remove_socket();
    }
}

/// How long a client waits for the control socket of a process that has crum's agent loaded.
const AGENT_START_WAIT: Duration = Duration::from_secs(20);

/// Whether `pid` runs crum's agent: its control socket in `dir` takes connections (a socket
/// file alone may be a dead process's, its pid reused since; a restarted process's maps do
/// not name libcrum). The connection sends nothing: the agent drops it.
pub fn agent_running(dir: &Path, pid: u32) -> bool {
    let path = socket_path_in(dir, pid);
    path.exists() && UnixStream::connect(&path).is_ok()
}

/// Whether the socket file of `pid` in `dir` may be that process's own: it exists and was
/// made after the process started. A control socket outlives a process killed with SIGKILL,
/// and its pid is reused (often, with a small `pid_max`): an older file belongs to a dead
/// process and says nothing about this one (before, `crum checkpoint <crum run's pid>` took
/// the launcher for the program when an earlier process with its pid had left a socket).
pub fn socket_may_be_current(dir: &Path, pid: u32) -> bool {
    let Ok(meta) = std::fs::metadata(socket_path_in(dir, pid)) else { return false };
    let (Ok(made), Some(started)) = (meta.modified(), process_start(pid)) else { return true };
    // The start time is known to a clock tick or two.
    made + Duration::from_millis(50) >= started
}

/// When process `pid` started (wall clock), from its start in clock ticks since boot
/// (`/proc/<pid>/stat` field 22) and the time since boot (`/proc/uptime`).
fn process_start(pid: u32) -> Option<SystemTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks: u64 = stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime").ok()?.split_whitespace().next()?.parse().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    if hz <= 0 {
        return None;
    }
    let ago = uptime - ticks as f64 / hz as f64;
    SystemTime::now().checked_sub(Duration::from_secs_f64(ago.max(0.0)))
}

/// Whether `pid` runs with crum's agent (libcrum) loaded.
fn agent_loaded(pid: u32) -> bool {
    // A restarted program runs in the `crum restart` process, its libraries' mappings
    // anonymous copies: its agent is there too (its control socket comes back a moment later).
    // Until its agent gives the program's executable back, /proc/<pid>/exe names crum; after,
    // the program's environment (its own strings again) still says it runs under crum.
    let restarted = std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e.file_name().is_some_and(|n| n == "crum"))
        || std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|e| e.split(|&c| c == 0).any(|v| v == b"CRUM_RUN=1"));
    // (A library rebuilt or upgraded while the program runs shows as "… (deleted)".)
    restarted
        || std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .is_ok_and(|m| m.lines().any(|l| l.trim_end_matches(" (deleted)").ends_with("/libcrum.so")))
}

/// What a process runs, for an error that says it is not under crum: its executable, and
/// why its memory map could not be read if it could not (the load check's rare "no control
/// socket" failures name it).
fn not_loaded_detail(pid: u32) -> String {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map_or_else(|e| format!("unknown ({e})"), |p| p.display().to_string());
    match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        Ok(_) => format!("; it runs {exe} without crum's library"),
        Err(e) => format!("; it runs {exe}, its memory map cannot be read ({e})"),
    }
}

/// Whether `pid` exists, and whether it is ours (by the owner of `/proc/<pid>`).
fn pid_owner(pid: u32) -> Option<u32> {
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

/// Connects to `pid`'s control socket in `dir`, with clear errors for the usual cases.
fn connect(dir: &Path, pid: u32) -> Result<UnixStream, ControlError> {
    let path = socket_path_in(dir, pid);
    match pid_owner(pid) {
        None => {
            let _ = std::fs::remove_file(&path); // stale socket of a dead process
            return Err(ControlError::NoProcess { pid });
        }
        Some(uid) if uid != our_uid() => return Err(ControlError::OtherUser { pid }),
        Some(_) => {}
    }
    if dir.exists() {
        check_private_dir(dir)?;
    }
    // A program that has just started under crum has libcrum loaded before its agent's
    // control thread listens: wait for it (a while), instead of failing.
    let t0 = std::time::Instant::now();
    let stream = loop {
        match UnixStream::connect(&path) {
            Ok(s) => break s,
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused) => {
                let loaded = agent_loaded(pid);
                if t0.elapsed() < AGENT_START_WAIT && loaded {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                if !loaded {
                    // A program that has just exited (a zombie: no executable, an empty map)
                    // is "not running", not "not under crum".
                    check_can_answer(pid)?;
                }
                let waited = if loaded {
                    format!(
                        "; crum's library is loaded in it, and its agent did not listen within {} s ({})",
                        t0.elapsed().as_secs(),
                        io::Error::from(e.kind())
                    )
                } else {
                    not_loaded_detail(pid)
                };
                return Err(ControlError::NotUnderCrum { pid, path, waited });
            }
            Err(e) => return Err(io_err(&path)(e)),
        }
    };
    let uid = peer_uid(&stream).map_err(io_err(&path))?;
    if !peer_allowed(uid, our_uid()) {
        return Err(ControlError::Peer {
            uid,
            ours: our_uid(),
        });
    }
    Ok(stream)
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// Connects to job member `pid` and asks it to take part in a job checkpoint (`crate::job`);
/// `held` and `restop`: see [`Request::JobMember`].
pub fn connect_member(pid: u32, parent: &Path, strict: bool, held: Vec<(i32, i64, u64)>, restop: i32) -> Result<UnixStream, ControlError> {
    let dir = socket_dir();
    let path = socket_path_in(&dir, pid);
    let mut s = connect(&dir, pid)?;
    check_can_answer(pid)?;
    send_line(&mut s, &Request::JobMember { parent: parent.to_path_buf(), strict, held, restop }).map_err(io_err(&path))?;
    Ok(s)
}

/// The state letter of process `pid` (`/proc/<pid>/stat`: R, S, D, T stopped, t traced, Z
/// zombie, ...), None when it is gone.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Fails when `pid` cannot answer: gone, or stopped (SIGSTOP, a debugger), where its agent
/// thread is stopped too and a request would wait forever.
fn check_can_answer(pid: u32) -> Result<(), ControlError> {
    match proc_state(pid) {
        None | Some('Z') | Some('X') => Err(ControlError::NoProcess { pid }),
        Some(state @ ('T' | 't')) => Err(ControlError::Stopped { pid, state }),
        Some(_) => Ok(()),
    }
}

/// How often a waiting client looks at the state of the process it waits for.
const STATE_POLL_MS: u16 = 200;

/// Waits until `s` has a reply to read, for at most `limit` (None: as long as `pid` can
/// answer: a checkpoint of a large program takes as long as it takes), checking that `pid`
/// is neither gone nor stopped meanwhile.
fn wait_reply(s: &UnixStream, path: &Path, pid: u32, limit: Option<Duration>) -> Result<(), ControlError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let t0 = std::time::Instant::now();
    loop {
        let mut fds = [PollFd::new(s.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(STATE_POLL_MS)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => {}
            // Readable, or closed (the read reports it).
            Ok(_) => return Ok(()),
            Err(e) => return Err(io_err(path)(e.into())),
        }
        check_can_answer(pid)?;
        if let Some(l) = limit {
            if t0.elapsed() >= l {
                return Err(ControlError::NoAnswer { pid, secs: l.as_secs() });
            }
        }
    }
}

fn exchange(dir: &Path, pid: u32, req: &Request) -> Result<Reply, ControlError> {
    exchange_within(dir, pid, req, None)
}

fn exchange_within(dir: &Path, pid: u32, req: &Request, limit: Option<Duration>) -> Result<Reply, ControlError> {
    let path = socket_path_in(dir, pid);
    let mut s = connect(dir, pid)?;
    check_can_answer(pid)?;
    send_line(&mut s, req).map_err(io_err(&path))?;
    wait_reply(&s, &path, pid, limit)?;
    let line = read_line(&s)
        .map_err(io_err(&path))?
        .ok_or_else(|| ControlError::Failed {
            pid,
            message: "the agent closed the connection without replying".into(),
        })?;
    serde_json::from_slice(&line).map_err(|e| ControlError::Protocol(e.to_string()))
}

/// Asks process `pid` to checkpoint into `dir` (relative paths are taken from our working
/// directory), ending it afterwards with `exit`; returns the complete image's path.
pub fn request_checkpoint(
    pid: u32,
    dir: Option<&Path>,
    exit: bool,
    strict: bool,
) -> Result<Checkpointed, ControlError> {
    request_checkpoint_in(&socket_dir(), pid, dir, exit, strict)
}

/// [`request_checkpoint`] with an explicit socket directory.
pub fn request_checkpoint_in(
    sock_dir: &Path,
    pid: u32,
    dir: Option<&Path>,
    exit: bool,
    strict: bool,
) -> Result<Checkpointed, ControlError> {
    // Absolute (the agent's working directory is not ours) and normalised: the image path
    // the agent reports is printed.
    let dir = match dir {
        Some(d) => Some(absolute(d).map_err(io_err(d))?),
        None => None,
    };
    let reply = exchange(sock_dir, pid, &Request::Checkpoint { dir, exit, strict })?;
    match reply {
        Reply {
            ok: true,
            path: Some(path),
            warnings,
            ..
        } => Ok(Checkpointed { path, warnings }),
        Reply {
            ok: false, error, ..
        } => Err(ControlError::Failed {
            pid,
            message: error.unwrap_or_else(|| "no reason given".into()),
        }),
        _ => Err(ControlError::Protocol(
            "checkpoint reply without a path".into(),
        )),
    }
}

/// How long [`request_status_in`] waits for an answer.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks process `pid` (in `sock_dir`) for its status, waiting at most [`STATUS_TIMEOUT`].
pub fn request_status_in(sock_dir: &Path, pid: u32) -> Result<StatusReply, ControlError> {
    request_status_within(sock_dir, pid, STATUS_TIMEOUT)
}

/// [`request_status_in`] waiting at most `limit` (an agent answers once a checkpoint in
/// progress is over).
pub fn request_status_within(sock_dir: &Path, pid: u32, limit: Duration) -> Result<StatusReply, ControlError> {
    match exchange_within(sock_dir, pid, &Request::Status, Some(limit))? {
        Reply {
            ok: true,
            status: Some(s),
            ..
        } => Ok(s),
        Reply {
            ok: false, error, ..
        } => Err(ControlError::Failed {
            pid,
            message: error.unwrap_or_else(|| "no reason given".into()),
        }),
        _ => Err(ControlError::Protocol(
            "status reply without a status".into(),
        )),
    }
}

/// A program running under crum.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProcInfo {
    pub pid: u32,
    /// Its command line, arguments separated by spaces.
    pub cmdline: String,
    /// When its control socket was created (about when it started under crum).
    #[serde(serialize_with = "unix_secs")]
    pub since: SystemTime,
}

fn unix_secs<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    )
}

/// Programs running under crum for this user, by pid. Sockets of processes that are gone
/// (or no longer listening) are removed.
pub fn list() -> Result<Vec<ProcInfo>, ControlError> {
    list_in(&socket_dir())
}

/// [`list`] in an explicit socket directory.
pub fn list_in(dir: &Path) -> Result<Vec<ProcInfo>, ControlError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir)(e)),
    };
    check_private_dir(dir)?;
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(io_err(dir))?;
        let name = ent.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".sock"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let path = ent.path();
        let alive = pid_owner(pid).is_some();
        // A live pid whose socket refuses connections is a reused pid: the socket is stale.
        if !alive || UnixStream::connect(&path).is_err() {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                let s: Vec<String> = b
                    .split(|&c| c == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                s.join(" ")
            })
            .unwrap_or_default();
        let since = ent
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        out.push(ProcInfo {
            pid,
            cmdline,
            since,
        });
    }
    out.sort_by_key(|p| p.pid);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_of_another_uid_is_refused() {
        assert!(peer_allowed(1000, 1000));
        assert!(!peer_allowed(0, 1000));
        assert!(!peer_allowed(1001, 1000));
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("crum-control-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        d
    }

    #[test]
    fn a_socket_older_than_its_process_is_a_dead_ones() {
        let t = scratch("stale");
        let pid = std::process::id();
        assert!(!socket_may_be_current(&t, pid), "no file");
        let f = std::fs::File::create(socket_path_in(&t, pid)).unwrap();
        assert!(socket_may_be_current(&t, pid), "made now, after this process started");
        let started = process_start(pid).unwrap();
        assert!(started <= SystemTime::now() && SystemTime::now().duration_since(started).unwrap() < Duration::from_secs(3600));
        f.set_modified(started - Duration::from_secs(2)).unwrap();
        assert!(!socket_may_be_current(&t, pid), "made before this process started");
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn absolute_paths_are_normalised() {
        assert_eq!(absolute(Path::new("/nonexistent-crum//a/./b/../c/")).unwrap(), PathBuf::from("/nonexistent-crum/a/c"));
        let cwd = std::env::current_dir().unwrap().canonicalize().unwrap();
        assert_eq!(absolute(Path::new("./x/../y")).unwrap(), cwd.join("y"));
        assert_eq!(absolute(Path::new("/tmp/../tmp//")).unwrap(), PathBuf::from("/tmp"));
    }

    #[test]
    fn a_hostile_control_directory_is_passed_over_for_a_private_one() {
        let t = scratch("hostile");
        let planted = t.join("crum-planted");
        std::fs::create_dir(&planted).unwrap();
        // What another user's pre-created directory looks like to us: open to others (or
        // owned by them, which only root can arrange).
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
        let alt = t.join("alt");
        assert_eq!(first_usable(&[planted.clone(), alt.clone()]), alt);
        // Binding there works; binding in the planted one fails naming it.
        let server = ControlServer::bind_in(&alt, 1).unwrap();
        drop(server);
        let e = ControlServer::bind_in(&planted, 1).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(&planted.display().to_string()) && msg.contains("mode 777"), "{msg}");
        // None usable: the first, so that the error names it.
        std::fs::set_permissions(&alt, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(first_usable(&[planted.clone(), alt.clone()]), planted);
        std::fs::remove_dir_all(&t).unwrap();
    }

    /// A program that has just exited (a zombie its parent has not reaped) is "not running",
    /// not a program running without crum (a loaded machine's test got that message when its
    /// program ended before the checkpoint reached it).
    #[test]
    fn checkpoint_of_an_exited_process_says_it_is_not_running() {
        let t = scratch("exited");
        let dir = t.join("sock");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let t0 = std::time::Instant::now();
        while proc_state(pid) != Some('Z') {
            assert!(t0.elapsed() < Duration::from_secs(30), "process {pid} never became a zombie");
            std::thread::sleep(Duration::from_millis(5));
        }
        let e = request_checkpoint_in(&dir, pid, None, false, false).unwrap_err();
        assert!(matches!(e, ControlError::NoProcess { pid: p } if p == pid), "{e}");
        child.wait().unwrap();
        std::fs::remove_dir_all(&t).unwrap();
    }

    /// A process that is stopped (SIGSTOP) cannot answer: the client says so instead of
    /// waiting forever, whether it was stopped before the request or while it waited.
    #[test]
    fn checkpoint_of_a_stopped_process_fails_naming_the_state() {
        let t = scratch("stopped");
        let dir = t.join("sock");
        let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        let pid = child.id();
        // The socket carries the child's pid; nobody ever answers on it.
        let server = ControlServer::bind_in(&dir, pid).unwrap();
        let kill = move |sig: &str| {
            assert!(std::process::Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success());
        };
        let wait_state = |want: char| {
            let t0 = std::time::Instant::now();
            while proc_state(pid) != Some(want) {
                assert!(t0.elapsed() < Duration::from_secs(30), "process {pid} never reached state {want}");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        kill("-STOP");
        wait_state('T');
        let e = request_checkpoint_in(&dir, pid, None, false, false).unwrap_err();
        assert!(matches!(e, ControlError::Stopped { pid: p, state: 'T' } if p == pid), "{e}");
        assert!(e.to_string().contains("is stopped"), "{e}");
        kill("-CONT");
        wait_state('S');
        // Stopped while the request waits for its answer.
        let agent = std::thread::spawn(move || {
            let (_req, responder) = server.accept().unwrap();
            kill("-STOP");
            // Never answered: the connection stays open until the client gives up.
            responder
        });
        let e = request_checkpoint_in(&dir, pid, None, false, false).unwrap_err();
        assert!(matches!(e, ControlError::Stopped { .. }), "{e}");
        drop(agent.join().unwrap());
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn request_wire_format_is_tagged_json() {
        let r = Request::Checkpoint {
            dir: Some("/x".into()),
            exit: true,
            strict: false,
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(s, r#"{"op":"checkpoint","dir":"/x","exit":true,"strict":false}"#);
        // An older client's request (no `strict`) is still understood.
        assert_eq!(serde_json::from_str::<Request>(r#"{"op":"checkpoint","dir":"/x","exit":true}"#).unwrap(), r);
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"op":"status"}"#).unwrap(),
            Request::Status
        );
    }
}
