//! Restart: rebuild a process from an image at its original addresses and hand over to the
//! agent inside it.
//!
//! The restorer is the `crum` binary itself. [`restart`] validates the whole image and the
//! files it refers to first (a bad image or a changed file is a one-line error and nothing
//! is started), checks that none of its own mappings collide with the image (else it
//! re-executes itself: address-space randomisation gives a new layout), maps every region
//! at its original address and fills it, restores file descriptors, working directory,
//! limits and signal dispositions, moves `[vvar]`/`[vvar_vclock]`/`[vdso]` to where the
//! program expects them, and finally switches to the program's main-thread TLS and stack and
//! calls the agent's restored-side entry (`crum_ckpt::threads::restored_main`), which
//! re-creates the other threads. This process becomes the program (same pid as the
//! `crum restart` that was started). The restorer's own mappings are removed later by the
//! agent in the restored program.
#![deny(unsafe_code)]

pub mod check;
pub mod lazy;
mod layout;
mod sys;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crum_ckpt::image::{ImageError, ImageReader};
use crum_ckpt::state::{is_process_memory, FdKind, FdState, ProcessState, SocketRole, SECTION_PROCESS};

/// Why a restart did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RestartError {
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error("{0}")]
    Invalid(String),
    #[error("file {path} (fd {fd}) {problem} since the checkpoint; refusing to restart")]
    FileChanged { path: String, fd: i32, problem: &'static str },
    #[error("cannot restore fd {fd}: {what}")]
    Unsupported { fd: i32, what: String },
    #[error("{what} failed")]
    Sys {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no address-space layout without collisions after {tries} tries ({detail})")]
    Layout { tries: u32, detail: String },
}

fn sys_err(what: impl Into<String>) -> RestartError {
    RestartError::Sys { what: what.into(), source: std::io::Error::last_os_error() }
}

/// Environment variable counting re-executions after layout collisions.
pub const ATTEMPT_VAR: &str = "CRUM_RESTART_ATTEMPT";
const MAX_ATTEMPTS: u32 = 16;

/// A validated image, ready to restore.
pub struct Plan {
    reader: ImageReader,
    state: ProcessState,
    dir: PathBuf,
}

impl Plan {
    pub fn state(&self) -> &ProcessState {
        &self.state
    }

    /// Whether the image holds a CUDA program's device state.
    pub fn has_device(&self) -> bool {
        matches!(check::find_hook(&self.reader, crum_wire::ckpt::SECTION_DEVICE), Ok(Some(_)))
    }
}

/// Starts `crum proxy` on a new channel (after the program's descriptors are restored, so
/// the channel takes a free number) and returns the channel's descriptor, which stays open
/// for the program. The proxy is not the program's child ([`sys::spawn_detached`]: a double
/// fork), so the program never meets it — no SIGCHLD when it ends, not taken by the
/// program's `waitpid(-1)`, not reaped under `SIGCHLD = SIG_IGN`. It watches this process
/// (the program) through a pidfd (`--watch-pid`) and ends with it; the program's interposer
/// watches the proxy the same way, so a dead proxy gives CUDA errors, never a hang.
fn start_proxy(exe: &Path, device: &str) -> Result<i64, RestartError> {
    let ch = crum_wire::Channel::create()
        .map_err(|e| RestartError::Sys { what: "creating the device proxy channel".into(), source: e })?;
    let fd = ch.raw_fd();
    let args = ["proxy", "--channel-fd", &fd.to_string(), "--device", device, "--watch-pid", &std::process::id().to_string()]
        .map(String::from);
    sys::spawn_detached(exe, &args).map_err(|e| match e {
        RestartError::Sys { source, .. } => {
            RestartError::Sys { what: format!("starting the device proxy {}", exe.display()), source }
        }
        e => e,
    })?;
    // The descriptor belongs to the program from now on; the mapping is a leftover the
    // agent removes.
    std::mem::forget(ch);
    Ok(fd as i64)
}

/// Opens and checks an image and everything a restart of it needs; starts nothing and
/// changes nothing. Every section is read and checked here, the device sections included
/// (by [`check::image`], as `crum inspect --verify`), except process memory, whose chunks
/// are checked as they are mapped: still before any file of the program is touched.
pub fn validate(dir: &Path) -> Result<Plan, RestartError> {
    let dir = std::fs::canonicalize(dir).map_err(|_| ImageError::Missing { path: dir.to_path_buf() })?;
    let mut reader = ImageReader::open(&dir)?;
    let bytes = reader
        .section(SECTION_PROCESS)?
        .ok_or_else(|| ImageError::MissingSection { name: SECTION_PROCESS.to_string() })?;
    let state = ProcessState::decode(&bytes).map_err(RestartError::Invalid)?;
    check::required_sections(&reader, &state)?;
    check_regions(&reader, &state)?;
    check::hook_sections(&reader, &state)?;
    check::image(&mut reader, false)?;
    check_files(&state)?;
    if !Path::new(&state.cwd).is_dir() {
        return Err(RestartError::Invalid(format!("working directory {} no longer exists", state.cwd)));
    }
    Ok(Plan { reader, state, dir })
}

fn check_regions(reader: &ImageReader, st: &ProcessState) -> Result<(), RestartError> {
    let page = 4096u64;
    let mut prev_end = 0u64;
    for r in reader.regions() {
        check::region_flags(r)?;
    }
    for r in reader.regions().iter().filter(|r| is_process_memory(r.flags)) {
        if r.start % page != 0 || r.len % page != 0 || r.len == 0 {
            return Err(RestartError::Invalid(format!("image region {:#x}+{:#x} is not page aligned", r.start, r.len)));
        }
        if r.start < prev_end {
            return Err(RestartError::Invalid(format!("image regions overlap at {:#x}", r.start)));
        }
        prev_end = r.start + r.len;
        if prev_end > 0x7fff_ffff_f000 {
            return Err(RestartError::Invalid(format!("image region {:#x} is outside user space", r.start)));
        }
    }
    let covered =
        |a: u64| reader.regions().iter().any(|r| is_process_memory(r.flags) && (r.start..r.start + r.len).contains(&a));
    if !covered(st.entry) || !st.main_stack.checked_sub(8).is_some_and(covered) || !covered(st.restart_info) {
        return Err(RestartError::Invalid("image lacks the agent's memory (entry, stack or restart block)".into()));
    }
    if st.main_slot as usize >= crum_ckpt::threads::MAX_THREADS {
        return Err(RestartError::Invalid(format!("the main thread's slot {} does not exist", st.main_slot)));
    }
    for s in &st.specials {
        if s.start % page != 0 || s.end % page != 0 || s.start >= s.end || s.end > 0x7fff_ffff_f000 {
            return Err(RestartError::Invalid(format!("special mapping {} at {:#x}-{:#x} is impossible", s.name, s.start, s.end)));
        }
    }
    Ok(())
}

fn writable(flags: u32) -> bool {
    flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32
}

/// Why the file of a [`FdKind::File`] descriptor cannot be reopened as it was, if so.
/// `carried`: the image holds the file's contents ([`ProcessState::file_contents`]): a
/// file that shrank is written back whole.
fn file_problem(f: &FdState, carried: bool) -> Option<&'static str> {
    let FdKind::File { path, size, mtime_ns, dev, ino, dir, .. } = &f.kind else { return None };
    let Ok((s, m, d, i)) = crum_ckpt::capture::file_identity(path) else {
        // Removed after the checkpoint (a transaction's journal): made again from its bytes.
        return (!carried).then_some("vanished");
    };
    if *dir || ((*dev, *ino) == (0, 0) && path.starts_with("/proc/self/")) {
        // A directory, or a file of the process's own /proc directory (the restarted
        // process's, made by the kernel).
        return None;
    }
    if (d, i) != (*dev, *ino) {
        // Carried: another file there may be one the program made after the checkpoint,
        // which the restart removes (`crum_ckpt::writes`); checked again when reopened.
        return (!carried).then_some("was replaced");
    }
    if writable(f.flags) {
        // The program may have written more after the checkpoint: that tail is cut off at
        // restart (it will be written again). Less is damage.
        if s < *size && !carried {
            return Some("shrank");
        }
    } else if s != *size || m != *mtime_ns {
        return Some("changed");
    }
    None
}

/// What stops a job's shared file description `f` (its `file`, a regular file's) from being
/// opened again as it was: (path, problem).
fn job_file_problem(f: &FdState, file: &FdKind) -> Option<(String, &'static str)> {
    let FdKind::File { path, .. } = file else { return None };
    file_problem(&FdState { fd: f.fd, flags: f.flags, kind: file.clone() }, false).map(|p| (path.clone(), p))
}

/// Whether the image holds the contents of the file open at `fd`.
fn carried(st: &ProcessState, fd: i32) -> bool {
    st.file_contents.iter().any(|c| c.fd == fd)
}

fn check_files(st: &ProcessState) -> Result<(), RestartError> {
    for f in &st.fds {
        match &f.kind {
            // stdin, stdout and stderr fall back to the restarting process's ([`restore_stdio`]).
            FdKind::File { .. } if f.fd <= 2 => {}
            FdKind::File { path, .. } => {
                if let Some(problem) = file_problem(f, carried(st, f.fd)) {
                    return Err(RestartError::FileChanged { path: path.clone(), fd: f.fd, problem });
                }
            }
            FdKind::CharDev { path } if !Path::new(path).exists() => {
                return Err(RestartError::Unsupported { fd: f.fd, what: format!("device {path} does not exist here") });
            }
            FdKind::Fifo { path, .. } if !is_fifo(path) => {
                return Err(RestartError::Unsupported { fd: f.fd, what: format!("named pipe {path} is not there any more") });
            }
            FdKind::JobFile { file, .. } if f.fd > 2 => {
                if let Some((path, problem)) = job_file_problem(f, file) {
                    return Err(RestartError::FileChanged { path, fd: f.fd, problem });
                }
            }
            FdKind::Unsupported { what } => return Err(RestartError::Unsupported { fd: f.fd, what: what.clone() }),
            _ => {}
        }
    }
    Ok(())
}

/// Whether `path` names a named pipe.
fn is_fifo(path: &str) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// Everything that would stop a restart of `st` here and now (descriptors crum cannot restore,
/// files changed since the checkpoint, a working directory gone), one line each; empty: none.
/// `crum inspect` says it as "restartable: no".
pub fn problems(st: &ProcessState) -> Vec<String> {
    let mut out = Vec::new();
    for f in &st.fds {
        match &f.kind {
            FdKind::File { .. } if f.fd <= 2 => {}
            FdKind::File { path, .. } => {
                if let Some(problem) = file_problem(f, carried(st, f.fd)) {
                    out.push(format!("file {path} (fd {}) {problem} since the checkpoint", f.fd));
                }
            }
            FdKind::CharDev { path } if !Path::new(path).exists() => {
                out.push(format!("fd {}: device {path} does not exist here", f.fd))
            }
            FdKind::Fifo { path, .. } if !is_fifo(path) => out.push(format!("fd {}: named pipe {path} is not there any more", f.fd)),
            FdKind::JobFile { file, .. } if f.fd > 2 => {
                if let Some((path, problem)) = job_file_problem(f, file) {
                    out.push(format!("file {path} (fd {}) {problem} since the checkpoint", f.fd));
                }
            }
            FdKind::Unsupported { what } => out.push(format!("fd {} ({what}) cannot be restored", f.fd)),
            _ => {}
        }
    }
    if !Path::new(&st.cwd).is_dir() {
        out.push(format!("the working directory {} does not exist here", st.cwd));
    }
    out
}

/// How a restart starts the device proxy of a CUDA program's image.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The `crum` binary (run as `crum proxy --channel-fd N --device D`) and the device.
    /// Needed for images with device state; `None` refuses them.
    pub proxy: Option<(PathBuf, String)>,
    /// Where the restarted program writes its images from now on (`crum restart --dir`);
    /// None: where it wrote them before.
    pub new_dir: Option<PathBuf>,
    /// A job's pid table (`crum_ckpt::job::PidTable`) this process of the job fills and
    /// hands to its agent; None: not a job.
    pub job_table_fd: Option<i32>,
    /// The pipes between processes of the job, made by the root's restorer: (id, read end,
    /// write end), inherited.
    pub job_pipes: Vec<(u64, i32, i32)>,
    /// The sockets of the job ([`SocketRole::JobPair`], [`SocketRole::JobShared`]), made by
    /// the root's restorer: (id, first end or the shared socket, second end or -1), inherited.
    pub job_socks: Vec<(u64, i32, i32)>,
    /// The open file descriptions of regular files the job's processes share
    /// ([`FdKind::JobFile`]), made by the root's restorer: (id, fd, -1), inherited.
    pub job_files: Vec<(u64, i32, i32)>,
    /// This process's slot in the job's pid table: filled once its part is restored, just
    /// before it becomes the program (each restored agent waits for every slot, so no
    /// program of the job runs while another process's restore still changes shared
    /// files, e.g. cuts back the stdout they share).
    pub job_slot: Option<usize>,
    /// This process's mappings of the job's shared memory (`crum_ckpt::job::SharedSeg`),
    /// made by the root's restorer: (start, end, memfd, offset), inherited.
    pub job_shm: Vec<(u64, u64, i32, u64)>,
    /// The slots (in the job's pid table) of the leaders of the process group and session
    /// this process had, when another process of the job led them: it joins that group once
    /// its leader is restored (the leader made it at its start), and checks the session it
    /// inherited, before it fills its own slot. (program pid, slot) each.
    pub job_group: Option<(i32, usize)>,
    pub job_session: Option<(i32, usize)>,
    /// The pids the programs of the job know, in the order of the slots of its pid table
    /// (members, then exited children): where a pidfd of one of them is opened again.
    pub job_pids: Vec<i32>,
    /// Eager, lazy (`--lazy`) or lazy where it is safe and worth it (`crate::lazy`).
    pub lazy: lazy::Mode,
}

/// Restarts the image in `dir`: on success this process becomes the program and the
/// function never returns. May re-execute the current executable to get another layout.
pub fn restart(dir: &Path) -> Result<std::convert::Infallible, RestartError> {
    restart_with(dir, &Options::default())
}

/// [`restart`] with options: a CUDA program's image (it holds device state) gets a fresh
/// device proxy, started after the program's memory and files are in place; the program's
/// restore hook connects to it through the channel descriptor in its restart information.
pub fn restart_with(dir: &Path, opts: &Options) -> Result<std::convert::Infallible, RestartError> {
    let plan = validate(dir)?;
    if plan.has_device() && opts.proxy.is_none() {
        return Err(RestartError::Invalid(format!(
            "{} holds a CUDA program's device state; restart it with `crum restart`",
            plan.dir.display()
        )));
    }
    let attempt: u32 = std::env::var(ATTEMPT_VAR).ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    if let Err(detail) = layout::check(&plan) {
        if attempt + 1 >= MAX_ATTEMPTS {
            return Err(RestartError::Layout { tries: attempt + 1, detail });
        }
        tracing::info!(attempt, %detail, "layout collision; re-executing");
        return Err(sys::reexec(attempt + 1));
    }
    restore(plan, attempt, opts)
}

/// Environment of a job's restorers: the pid table's descriptor.
const JOB_TABLE_VAR: &str = "CRUM_JOB_TABLE";
/// Environment of a job's restorers: the pipes between its processes (`id:r:w,…`).
const JOB_PIPES_VAR: &str = "CRUM_JOB_PIPES";
/// Environment of a job's restorers: its sockets (`id:a:b,…`, b = -1 for a shared one).
const JOB_SOCKS_VAR: &str = "CRUM_JOB_SOCKS";
/// Environment of a job's restorers: the shared file descriptions (`id:fd:-1,…`).
const JOB_FILES_VAR: &str = "CRUM_JOB_FILES";
/// Environment of a job's restorers: its shared memory objects (`obj:fd,…`).
const JOB_SHM_VAR: &str = "CRUM_JOB_SHM";
/// Set once a restorer has started the restorers of its children (a re-execution for
/// another layout must not start them again).
const JOB_SPAWNED_VAR: &str = "CRUM_JOB_SPAWNED";

/// Restarts process `member` (None: the root) of the job image `dir` (`crum_ckpt::job`):
/// starts the restorers of its children first (`crum restart --job-member PID`, executed
/// by `exe` with `args` before the image), each forked from this process so that the tree
/// is the job's, then becomes the process itself. Never returns on success.
pub fn restart_job(
    dir: &Path,
    member: Option<i32>,
    exe: &Path,
    args: &[String],
    opts: &Options,
) -> Result<std::convert::Infallible, RestartError> {
    use crum_ckpt::job::{Manifest, PidTable};
    let manifest = Manifest::read(dir).map_err(RestartError::Invalid)?;
    let me = member.unwrap_or(manifest.root);
    let (Some(index), Some(m)) = (manifest.index(me), manifest.member(me)) else {
        return Err(RestartError::Invalid(format!("{}: process {me} is not in the job", dir.display())));
    };
    let part = dir.join(&m.part);
    let table = match std::env::var(JOB_TABLE_VAR).ok().and_then(|v| v.parse::<i32>().ok()) {
        Some(fd) if member.is_some() || std::env::var_os(JOB_SPAWNED_VAR).is_some() => fd,
        _ => {
            // The root, first time: validate every part before anything starts.
            let mut plans = manifest.members.iter().map(|p| validate(&dir.join(&p.part))).collect::<Result<Vec<_>, _>>()?;
            std::env::set_var(JOB_SHM_VAR, make_job_shm(&manifest, &mut plans)?);
            let states: Vec<&ProcessState> = plans.iter().map(|p| p.state()).collect();
            let fd = PidTable::create(&manifest.table_pids()).map_err(RestartError::Invalid)?;
            std::env::set_var(JOB_TABLE_VAR, fd.to_string());
            std::env::set_var(JOB_PIPES_VAR, make_job_pipes(&states)?);
            std::env::set_var(JOB_SOCKS_VAR, make_job_sockets(&states)?);
            std::env::set_var(JOB_FILES_VAR, make_job_files(&states)?);
            fd
        }
    };
    if std::env::var_os(JOB_SPAWNED_VAR).is_none() {
        std::env::remove_var(ATTEMPT_VAR);
        // A child keeps the group and session it got at its fork when it did not change
        // them: the children that were not in the session or group this process leads
        // (forked before it made them) are started before it makes them again.
        let (own_sid, own_pgid) = (m.sid == me, m.pgid == me);
        let mut children: Vec<&crum_ckpt::job::Member> = manifest.children(me).collect();
        children.sort_by_key(|c| !((own_sid && c.sid != me) || (own_pgid && c.pgid == 0)));
        let first = children.iter().take_while(|c| (own_sid && c.sid != me) || (own_pgid && c.pgid == 0)).count();
        for (i, child) in children.iter().enumerate() {
            if i == first {
                lead_groups(me, own_sid, own_pgid);
            }
            let mut argv: Vec<std::ffi::CString> = vec![c"crum".to_owned(), c"restart".to_owned()];
            for a in args {
                argv.push(std::ffi::CString::new(a.as_str()).map_err(|_| RestartError::Invalid("NUL in an argument".into()))?);
            }
            for a in ["--job-member".to_string(), child.pid.to_string()] {
                argv.push(std::ffi::CString::new(a).unwrap_or_default());
            }
            argv.push(
                std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
                    .map_err(|_| RestartError::Invalid("NUL in the image path".into()))?,
            );
            let exe_c = std::ffi::CString::new(exe.as_os_str().as_encoded_bytes())
                .map_err(|_| RestartError::Invalid("NUL in the crum path".into()))?;
            sys::fork_exec(&exe_c, &argv).map_err(|_| sys_err(format!("cannot start the restorer of process {}", child.pid)))?;
        }
        if first == children.len() {
            lead_groups(me, own_sid, own_pgid);
        }
        // Its children that had exited and were not reaped: children again, that end at
        // once the same way (their slots follow the members').
        for (i, z) in manifest.zombies.iter().enumerate() {
            if z.ppid != me {
                continue;
            }
            let pid = sys::fork_ended(z.status).map_err(|_| sys_err(format!("cannot make exited child {} again", z.pid)))?;
            PidTable::fill(table, manifest.members.len() + i, pid).map_err(RestartError::Invalid)?;
        }
        std::env::set_var(JOB_SPAWNED_VAR, "1");
    }
    let triples = |var: &str| -> Vec<(u64, i32, i32)> {
        std::env::var(var)
            .unwrap_or_default()
            .split(',')
            .filter_map(|e| {
                let mut it = e.split(':');
                Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?, it.next()?.parse().ok()?))
            })
            .collect()
    };
    let objs: Vec<(u32, i32)> = std::env::var(JOB_SHM_VAR)
        .unwrap_or_default()
        .split(',')
        .filter_map(|e| {
            let (o, f) = e.split_once(':')?;
            Some((o.parse().ok()?, f.parse().ok()?))
        })
        .collect();
    let mut job_shm = Vec::new();
    for g in manifest.shared.iter().filter(|g| g.pid == me) {
        let Some(&(_, fd)) = objs.iter().find(|o| o.0 == g.obj) else {
            return Err(RestartError::Invalid(format!("shared memory object {} of the job was not made", g.obj)));
        };
        job_shm.push((g.start, g.end, fd, g.offset));
    }
    let opts = Options {
        job_shm,
        job_table_fd: Some(table),
        job_pipes: triples(JOB_PIPES_VAR),
        job_socks: triples(JOB_SOCKS_VAR),
        job_files: triples(JOB_FILES_VAR),
        job_slot: Some(index),
        job_pids: manifest.table_pids(),
        job_group: (m.pgid != 0 && m.pgid != me).then(|| (m.pgid, manifest.index(m.pgid))).and_then(|(p, i)| Some((p, i?))),
        job_session: (m.sid != 0 && m.sid != me).then(|| (m.sid, manifest.index(m.sid))).and_then(|(p, i)| Some((p, i?))),
        ..opts.clone()
    };
    let Err(e) = restart_with(&part, &opts);
    // The other processes of the job end rather than run without this one.
    let _ = PidTable::fill(table, index, -1);
    Err(e)
}

/// Makes this restorer (process `me` of the job) the leader of a session and of a process
/// group of its own when it was one: the processes of the job in them are forked by it or
/// join later ([`join_job_group`]). What the kernel refuses (the restorer already leads a
/// group: `crum restart` started by an interactive shell) is said, and the restart goes on.
/// A restorer that already leads a session (or group) of its own (`crum restart` started by
/// `setsid`) is what the process was: nothing to do, nothing to say.
fn lead_groups(me: i32, session: bool, group: bool) {
    let own = std::process::id() as i32;
    if session {
        if sys::getsid() == own {
            // Already the leader of its own session, and so of its own group.
        } else if let Err(e) = sys::setsid() {
            eprintln!("crum: warning: process {me} led a session, and cannot lead one again ({e}): it stays in crum restart's");
        }
    } else if group && sys::getpgrp() != own {
        if let Err(e) = sys::setpgid(0, 0) {
            eprintln!("crum: warning: process {me} led a process group, and cannot lead one again ({e}): it stays in crum restart's");
        }
    }
}

/// Joins the process group of the job this process was in, once its leader is restored,
/// and checks that the session it inherited is the one it was in (else says so).
fn join_job_group(table: i32, me: i32, opts: &Options) {
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(600);
    if let Some((leader, slot)) = opts.job_group {
        let now = crum_ckpt::job::PidTable::wait_slot(table, slot, LIMIT);
        if now > 0 {
            if let Err(e) = sys::setpgid(0, now) {
                eprintln!("crum: warning: process {me} cannot join process group {leader} again ({e}): it stays in its parent's");
            }
        }
    }
    if let Some((leader, slot)) = opts.job_session {
        let now = crum_ckpt::job::PidTable::wait_slot(table, slot, LIMIT);
        if now > 0 && sys::getsid() != now {
            eprintln!("crum: warning: process {me} was in session {leader}, and comes back in its parent's");
        }
    }
}

/// Makes the pipes between the job's processes (every part's [`FdKind::JobPipe`]s), with
/// their capacity and the bytes that were in them, above every descriptor of every part and
/// not close-on-exec (the restorers of the other processes inherit them); `id:r:w,…`.
fn make_job_pipes(parts: &[&ProcessState]) -> Result<String, RestartError> {
    let mut pipes: Vec<(u64, u32, Vec<u8>)> = Vec::new();
    let top = job_fds_top(parts);
    for st in parts {
        for f in &st.fds {
            if let FdKind::JobPipe { id, size, data, .. } = &f.kind {
                match pipes.iter_mut().find(|p| p.0 == *id) {
                    Some(p) => {
                        p.1 = p.1.max(*size);
                        if !data.is_empty() {
                            p.2 = data.clone();
                        }
                    }
                    None => pipes.push((*id, *size, data.clone())),
                }
            }
        }
    }
    let mut out = Vec::new();
    for (id, size, data) in pipes {
        let (r, w) = sys::inherited_pipe(top + 64)?;
        if size > 0 {
            sys::set_pipe_size(w, size)?;
        }
        sys::write_all(w, &data)?;
        out.push(format!("{id}:{r}:{w}"));
    }
    Ok(out.join(","))
}

/// Makes the job's shared memory objects (`Manifest::shared`) once: a memfd each, as
/// large as its furthest mapping, filled from the parts' images (each mapping's bytes
/// from its process's part), above every descriptor of every part and inherited by the
/// other restorers; `obj:fd,…`.
fn make_job_shm(manifest: &crum_ckpt::job::Manifest, plans: &mut [Plan]) -> Result<String, RestartError> {
    let parts: Vec<&ProcessState> = plans.iter().map(|p| p.state()).collect();
    let base = job_fds_top(&parts) + 64;
    let mut objs: Vec<u32> = manifest.shared.iter().map(|g| g.obj).collect();
    objs.sort_unstable();
    objs.dedup();
    let mut out = Vec::new();
    for obj in objs {
        let segs: Vec<_> = manifest.shared.iter().filter(|g| g.obj == obj).collect();
        let size = segs.iter().map(|g| g.offset + (g.end - g.start)).max().unwrap_or(0);
        let fd = sys::inherited_high(sys::memfd(&format!("job-shared-memory-{obj}"), size)?, base)?;
        let mut filled: Vec<(u64, u64)> = Vec::new();
        sys::with_shared_map(fd, size, |mem| {
            for g in &segs {
                let len = g.end - g.start;
                if filled.contains(&(g.offset, len)) {
                    continue;
                }
                let Some(i) = manifest.index(g.pid) else { continue };
                let plan = &mut plans[i];
                let Some(ri) = plan.reader.regions().iter().position(|r| r.start == g.start && r.len == len && r.has_data) else {
                    continue;
                };
                let dst = &mut mem[g.offset as usize..(g.offset + len) as usize];
                plan.reader.read_region_into_zeroed(ri, dst).map_err(RestartError::from)?;
                filled.push((g.offset, len));
            }
            Ok(())
        })?;
        out.push(format!("{obj}:{fd}"));
    }
    Ok(out.join(","))
}

/// Makes the open file descriptions the job's processes share (every part's
/// [`FdKind::JobFile`]s) once, each from the first part holding it: an eventfd with its
/// counter, a timerfd armed as it was, a regular file as a file of that part is reopened ([`reopen`]: cut back to its size at the checkpoint, at its offset);
/// `id:fd:-1,…`. One of stdin, stdout or stderr whose file vanished, was replaced or shrank
/// is not made: each process gets `crum restart`'s stream instead, with a warning.
fn make_job_files(parts: &[&ProcessState]) -> Result<String, RestartError> {
    let base = job_fds_top(parts) + 64;
    let mut made: Vec<u64> = Vec::new();
    let mut out = Vec::new();
    for st in parts {
        for f in &st.fds {
            let FdKind::JobFile { id, file } = &f.kind else { continue };
            if made.contains(id) {
                continue;
            }
            made.push(*id);
            let one = FdState { fd: f.fd, flags: f.flags, kind: (**file).clone() };
            if f.fd <= 2 && file_problem(&one, false).is_some() {
                continue;
            }
            let made = match &one.kind {
                FdKind::EventFd { count, semaphore } => {
                    let fd = sys::eventfd(*count, *semaphore)?;
                    sys::set_status_flags(fd, (f.flags & libc::O_NONBLOCK as u32) as i32);
                    fd
                }
                FdKind::TimerFd { .. } => {
                    let fd = sys::timerfd(&one.kind)?;
                    sys::set_status_flags(fd, (f.flags & libc::O_NONBLOCK as u32) as i32);
                    fd
                }
                _ => reopen(&one, &[])?,
            };
            let fd = sys::inherited_high(made, base)?;
            out.push(format!("{id}:{fd}:-1"));
        }
    }
    Ok(out.join(","))
}

/// The highest descriptor of any part of a job (its objects are made above).
fn job_fds_top(parts: &[&ProcessState]) -> i32 {
    parts.iter().flat_map(|st| st.fds.iter().map(|f| f.fd)).max().unwrap_or(2).max(2)
}

/// Makes the sockets of the job (every part's [`SocketRole::JobPair`] and
/// [`SocketRole::JobShared`]) once, like [`make_job_pipes`]: each connection's two ends with
/// the messages that waited at each and their shutdown state, each shared socket as its
/// first holder's part describes it; `id:a:b,…` (b = -1 for a shared socket).
fn make_job_sockets(parts: &[&ProcessState]) -> Result<String, RestartError> {
    use crum_ckpt::state::SocketState;
    type End<'a> = (&'a SocketState, &'a str, &'a Vec<Vec<u8>>);
    let mut pairs: Vec<(u64, Option<End>, Option<End>)> = Vec::new();
    let mut shared: Vec<(u64, SocketState, &str)> = Vec::new();
    for st in parts {
        for f in &st.fds {
            let FdKind::Socket(s) = &f.kind else { continue };
            match &s.role {
                SocketRole::JobPair { id, first, queued } => {
                    let i = match pairs.iter().position(|p| p.0 == *id) {
                        Some(i) => i,
                        None => {
                            pairs.push((*id, None, None));
                            pairs.len() - 1
                        }
                    };
                    let slot = if *first { &mut pairs[i].1 } else { &mut pairs[i].2 };
                    slot.get_or_insert((s, st.cwd.as_str(), queued));
                }
                SocketRole::JobShared { id, role } if !shared.iter().any(|x| x.0 == *id) => {
                    shared.push((*id, SocketState { role: (**role).clone(), ..(**s).clone() }, st.cwd.as_str()));
                }
                _ => {}
            }
        }
    }
    let base = job_fds_top(parts) + 64;
    let mut out = Vec::new();
    for (id, a, b) in pairs {
        let (Some(a), Some(b)) = (a, b) else {
            return Err(RestartError::Invalid(format!("socket {id} of the job has one end in the image, not two")));
        };
        let (fa, fb) = sys::job_connection(a.0, a.1, b.0, b.1)?;
        let (fa, fb) = (sys::inherited_high(fa, base)?, sys::inherited_high(fb, base)?);
        // What waited at each end is sent again from the other one; then the shutdowns.
        for (to_other, queued, ty) in [(fb, a.2, a.0.ty), (fa, b.2, b.0.ty)] {
            if ty == libc::SOCK_STREAM {
                sys::send_stream(to_other, &queued.concat())?;
            } else {
                sys::send_messages(to_other, queued)?;
            }
        }
        if a.0.domain == libc::AF_UNIX {
            sys::shutdown(fa, a.0.shutdown);
            sys::shutdown(fb, b.0.shutdown);
        }
        out.push(format!("{id}:{fa}:{fb}"));
    }
    let mut connects = Vec::new();
    for (id, s, cwd) in &shared {
        let fd = sys::inherited_high(sys::socket(s, cwd)?, base)?;
        if matches!(s.role, SocketRole::Connected) {
            connects.push((fd, s, *cwd));
        }
        out.push(format!("{id}:{fd}:-1"));
    }
    for (fd, s, cwd) in connects {
        sys::connect_socket(fd, s, cwd, JOB_CONNECT_PATIENCE);
    }
    Ok(out.join(","))
}

/// How long a datagram socket of a job waits for the peer it was connected to, when that is
/// a Unix address nobody serves yet (the other processes are restored side by side).
const JOB_CONNECT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(3);

/// A progress bar on a terminal for images of at least this many bytes of memory.
const PROGRESS_MIN: u64 = 256 << 20;

fn restore(mut plan: Plan, attempt: u32, opts: &Options) -> Result<std::convert::Infallible, RestartError> {
    use std::io::IsTerminal;
    let total: u64 =
        plan.reader.regions().iter().filter(|r| r.has_data && is_process_memory(r.flags)).map(|r| r.len).sum();
    // Drawn only when asked to (no ticker thread: this process must be single-threaded when
    // it becomes the program), and cleared before anything of the program runs.
    let bar = if total >= PROGRESS_MIN && std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template("restoring {bytes}/{total_bytes} [{bar:30}] {bytes_per_sec}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let lazy = lazy::prepare(&plan, opts.lazy, opts.job_table_fd.is_some(), &opts.job_shm);
    if let Some(l) = &lazy {
        bar.set_length(total.saturating_sub(l.bytes()));
    }
    let mapped = layout::map_regions(&mut plan, &|n| bar.set_position(n), &opts.job_shm, lazy);
    bar.finish_and_clear();
    drop(bar);
    let lazy = match mapped {
        Ok(h) => h,
        Err(layout::MapError::Collision(detail)) => {
            if attempt + 1 >= MAX_ATTEMPTS {
                return Err(RestartError::Layout { tries: attempt + 1, detail });
            }
            return Err(sys::reexec(attempt + 1));
        }
        Err(layout::MapError::Other(e)) => return Err(e),
    };
    // The job's shared memory is mapped where this process had it.
    if let Ok(v) = std::env::var(JOB_SHM_VAR) {
        for fd in v.split(',').filter_map(|e| e.split_once(':')?.1.parse::<i32>().ok()) {
            sys::close(fd);
        }
    }
    let device = plan.has_device();
    let Plan { mut reader, state, dir } = plan;
    // The System V segments it had attached, attached again over their restored bytes.
    for a in &state.sysv_shm {
        let prot = state.regions.iter().find(|r| r.start == a.start).map_or(libc::PROT_READ | libc::PROT_WRITE, |r| r.prot as i32);
        sys::sysv_attach(a, prot)?;
    }
    // The contents of the files it had open for writing in place (checked with the image).
    let mut contents: Vec<(i32, Vec<u8>)> = Vec::new();
    for c in &state.file_contents {
        let bytes = check::hook_section(&mut reader, &c.section, crum_ckpt::state::MAX_FILE_CONTENTS)?
            .ok_or_else(|| RestartError::Invalid(format!("the image lacks section `{}`", c.section)))?;
        contents.push((c.fd, bytes));
    }
    drop(reader);
    // Files the program opened and wrote after the checkpoint (`crum_ckpt::writes`).
    for r in crum_ckpt::writes::roll_back(&dir).map_err(RestartError::Invalid)? {
        if let crum_ckpt::writes::Rollback::Unsure { path } = &r {
            eprintln!(
                "crum: warning: the program was creating {} when it was stopped, and this filesystem does not say when \
                 the file there was born: it is left as it is, and may be one the program created after the checkpoint",
                path.display()
            );
        }
        tracing::info!(?r, "rolled back");
    }
    // The job's pid table, above every descriptor of the program (the restore makes
    // temporary ones above them too, at the lowest free numbers: never onto it).
    let table_fd = match opts.job_table_fd {
        Some(fd) => {
            let top = state.fds.iter().map(|f| f.fd).max().unwrap_or(2).max(2);
            Some(sys::move_fd_above(fd, top + 16)?)
        }
        None => None,
    };
    // The lazy restart's descriptors, above them too (the agent moves them into crum's range).
    let lazy = match lazy {
        Some(h) => {
            let top = state.fds.iter().map(|f| f.fd).max().unwrap_or(2).max(2);
            Some(lazy::Handles { done_fd: sys::move_fd_above(h.done_fd, top + 16)?, uffd: sys::move_fd_above(h.uffd, top + 16)? })
        }
        None => None,
    };
    let mut keep: Vec<i32> = table_fd.into_iter().collect();
    keep.extend(lazy.iter().flat_map(|h| [h.done_fd, h.uffd]));
    keep.extend(opts.job_pipes.iter().chain(&opts.job_socks).chain(&opts.job_files).flat_map(|p| [p.1, p.2]).filter(|&f| f >= 0));
    let job = JobObjects {
        pipes: &opts.job_pipes,
        socks: &opts.job_socks,
        files: &opts.job_files,
        member: opts.job_table_fd.is_some(),
    };
    restore_fds(&state, &keep, &job, &contents)?;
    // The job's pipes and sockets are in place wherever this process had them.
    for p in opts.job_pipes.iter().chain(&opts.job_socks).chain(&opts.job_files) {
        sys::close(p.1);
        if p.2 >= 0 {
            sys::close(p.2);
        }
    }
    take_locks(&state)?;
    let channel_fd = match (&opts.proxy, device) {
        (Some((exe, dev)), true) => start_proxy(exe, dev)?,
        _ => -1,
    };
    // Into the job's process group once its leader is restored (before this process's own
    // slot is filled: no program of the job runs before every process is in its group).
    if let Some(fd) = table_fd {
        join_job_group(fd, state.pid, opts);
    }
    sys::chdir(&state.cwd)?;
    sys::set_umask(state.umask);
    sys::set_rlimits(&state.rlimits);
    sys::apply_advice(&state.advice);
    sys::install_guards(&state.guards);
    sys::write_restart_info(
        state.restart_info,
        state.pid,
        &dir,
        [channel_fd, table_fd.map_or(-1, i64::from)],
        lazy.as_ref().map_or([-1, -1], |h| [i64::from(h.done_fd), i64::from(h.uffd)]),
        opts.new_dir.as_deref(),
    );
    sys::block_signals();
    sys::unregister_rseq();
    sys::set_sigactions(&state.sigactions)?;
    // Armed only now: a timer that fires here waits, blocked, for the program's own handler.
    sys::posix_timers(&state.posix_timers)?;
    layout::move_specials(&state)?;
    if let (Some(fd), Some(slot)) = (table_fd, opts.job_slot) {
        crum_ckpt::job::PidTable::fill(fd, slot, std::process::id() as i32).map_err(RestartError::Invalid)?;
    }
    // After the vDSO moved: nothing here reads a clock.
    member_pidfds(&state, table_fd, &opts.job_pids)?;
    if !sys::set_brk(state.start_brk, state.brk) && state.brk > state.start_brk && state.start_brk != 0 {
        // Named, not silent: glibc is reconciled with the kernel's break (`agent::fix_curbrk`),
        // which is safe unless the image caught a thread between two of malloc's `brk` calls.
        eprintln!(
            "crum: warning: the kernel did not take the program's heap break (PR_SET_MM_MAP); malloc no longer \
             returns heap memory to the system, and a heap caught inside malloc's brk handling at the checkpoint may be corrupt"
        );
    }
    let fs = state.threads.iter().find(|t| t.slot == state.main_slot).map(|t| t.fs_base).unwrap_or(0);
    sys::enter(fs, state.main_stack, state.entry, state.main_slot as u64)
}

/// Re-creates the program's file descriptors. stdin, stdout and stderr are the regular files
/// they were ([`restore_stdio`]), else the restarting process's. A descriptor the program
/// inherited at `crum run` that crum cannot restore ([`FdKind::Inherited`]) is this process's
/// own of the same number, or /dev/null with a warning.
/// The objects of a job its root's restorer made, inherited by every restorer: (id, fd, fd).
struct JobObjects<'a> {
    pipes: &'a [(u64, i32, i32)],
    socks: &'a [(u64, i32, i32)],
    files: &'a [(u64, i32, i32)],
    /// A process of a job (restored side by side with the others).
    member: bool,
}

impl JobObjects<'_> {
    fn is_job(&self) -> bool {
        self.member
    }
}

/// The pidfds of other processes of the job ([`FdKind::PidFdOf`]), opened on them once they
/// are restored: after this process's own slot in the job's pid table is filled, so that no
/// two processes holding pidfds of each other wait for each other (a slot is filled without
/// waiting for any pidfd). The stand-in at each descriptor is replaced, its flags kept.
fn member_pidfds(st: &ProcessState, table_fd: Option<i32>, job_pids: &[i32]) -> Result<(), RestartError> {
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(600);
    for f in &st.fds {
        let FdKind::PidFdOf { pid, thread } = f.kind else { continue };
        let (Some(table), Some(slot)) = (table_fd, job_pids.iter().position(|&p| p == pid)) else {
            return Err(RestartError::Invalid(format!("fd {}: a pidfd of process {pid}, which this restart does not make", f.fd)));
        };
        let now = crum_ckpt::job::PidTable::wait_slot(table, slot, LIMIT);
        if now <= 0 {
            return Err(RestartError::Invalid(format!("fd {}: process {pid} of the job was not restarted", f.fd)));
        }
        let fd = sys::pidfd_of(now, thread)?;
        sys::dup_to(fd, f.fd, f.flags & libc::O_CLOEXEC as u32 != 0)?;
        sys::close(fd);
        sys::set_status_flags(f.fd, (f.flags & libc::O_NONBLOCK as u32) as i32);
    }
    Ok(())
}

/// Puts the job's shared file description `id` ([`FdKind::JobFile`]) at `f`'s descriptor.
fn place_job_file(f: &FdState, id: u64, files: &[(u64, i32, i32)]) -> Result<(), RestartError> {
    let Some(&(_, fd, _)) = files.iter().find(|p| p.0 == id) else {
        return Err(RestartError::Invalid(format!("fd {}: file {id} of the job was not made", f.fd)));
    };
    sys::dup_to(fd, f.fd, f.flags & libc::O_CLOEXEC as u32 != 0)
}

fn restore_fds(st: &ProcessState, keep: &[i32], job: &JobObjects, contents: &[(i32, Vec<u8>)]) -> Result<(), RestartError> {
    let (job_pipes, job_socks) = (job.pipes, job.socks);
    let mut fds: Vec<_> = st.fds.iter().filter(|f| f.fd > 2).collect();
    fds.sort_by_key(|f| f.fd);
    let base = fds.last().map_or(3, |f| f.fd + 1).max(3);
    let mut passed_on: Vec<i32> =
        fds.iter().filter(|f| matches!(f.kind, FdKind::Inherited { .. }) && sys::is_open(f.fd)).map(|f| f.fd).collect();
    passed_on.extend_from_slice(keep);
    sys::close_from_except(3, &passed_on);
    restore_stdio(st, base, job, contents)?;
    let mut pipes: HashMap<u64, (i32, i32)> = HashMap::new();
    // Pipe ends (pipe id, read end) given a descriptor so far.
    let mut ends_seen: std::collections::HashSet<(u64, bool)> = std::collections::HashSet::new();
    let mut pending_data: Vec<(u64, Vec<u8>)> = Vec::new();
    // Named pipes' bytes: (fd, id, path, bytes), written once every descriptor is back.
    let mut fifo_data: Vec<(i32, u64, &String, &Vec<u8>)> = Vec::new();
    // Deleted files made again: id → the program's fd that has it.
    let mut deleted: HashMap<u64, i32> = HashMap::new();
    // Interest lists are filled once every descriptor they name is back.
    let mut epolls: Vec<(i32, &Vec<crum_ckpt::state::EpollWatch>)> = Vec::new();
    // Watches are added once every descriptor is back ([`sys::inotify_watch`]).
    let mut inotifies: Vec<(i32, &Vec<crum_ckpt::state::InotifyWatch>)> = Vec::new();
    // Socket pairs by id (both ends made with the first), the messages to send through an
    // end once every descriptor is back, shutdowns after that, datagram sockets to connect.
    let mut socket_pairs: HashMap<u64, (i32, i32)> = HashMap::new();
    let mut socket_data: Vec<(i32, &Vec<Vec<u8>>)> = Vec::new();
    let mut shutdowns: Vec<(i32, u8)> = Vec::new();
    use crum_ckpt::state::SocketState;
    // (fd, its socket, the datagrams that waited in it with their senders)
    type Datagrams<'a> = (i32, &'a SocketState, &'a [(Vec<u8>, Vec<u8>)]);
    let mut datagrams: Vec<Datagrams> = Vec::new();
    let mut owned_connects: Vec<(i32, SocketState)> = Vec::new();
    // In a job the peer may be another process's socket, bound by its own restorer.
    let patience = if job.is_job() { JOB_CONNECT_PATIENCE } else { std::time::Duration::ZERO };
    let mut connects: Vec<(i32, &crum_ckpt::state::SocketState)> = Vec::new();
    for f in &fds {
        let cloexec = f.flags & libc::O_CLOEXEC as u32 != 0;
        let status_flags = (f.flags & (libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC | libc::O_DIRECT | libc::O_NOATIME) as u32) as i32;
        let tmp = match &f.kind {
            FdKind::Stdio => continue,
            FdKind::File { .. } => reopen(f, contents)?,
            FdKind::CharDev { path } => sys::open(path, (f.flags as i32) & !libc::O_CLOEXEC)?,
            FdKind::Tty => sys::tty_fd(f.flags as i32)?,
            FdKind::Pipe { id, read, data } => {
                let (r, w) = match pipes.get(id) {
                    Some(&p) => p,
                    None => {
                        let p = sys::pipe_high(base)?;
                        // Its capacity first: data beyond the default's would not fit.
                        if let Some(&(_, size)) = st.pipe_sizes.iter().find(|(i, _)| i == id) {
                            sys::set_pipe_size(p.1, size)?;
                        }
                        pipes.insert(*id, p);
                        p
                    }
                };
                if *read && !data.is_empty() {
                    pending_data.push((*id, data.clone()));
                }
                let end = if *read { r } else { w };
                // A second descriptor of the same end that is not a dup (those are
                // `FdKind::Dup`) had an open file description of its own (opened again through
                // /proc/self/fd): so has it now, with its own status flags.
                let again = !ends_seen.insert((*id, *read));
                if again {
                    let own = sys::open(&format!("/proc/self/fd/{end}"), if *read { libc::O_RDONLY } else { libc::O_WRONLY })?;
                    let hi = sys::move_high(own, base)?;
                    sys::dup_to(hi, f.fd, cloexec)?;
                    sys::close(hi);
                } else {
                    sys::dup_to(end, f.fd, cloexec)?;
                }
                sys::set_status_flags(f.fd, status_flags);
                continue;
            }
            FdKind::Dup { of } => {
                sys::dup_to(*of, f.fd, cloexec)?;
                continue;
            }
            FdKind::JobFile { id, .. } => {
                place_job_file(f, *id, job.files)?;
                continue;
            }
            FdKind::JobPipe { id, read, .. } => {
                let Some(&(_, r, w)) = job_pipes.iter().find(|p| p.0 == *id) else {
                    return Err(RestartError::Invalid(format!("fd {}: pipe:[{id}] of the job was not made", f.fd)));
                };
                sys::dup_to(if *read { r } else { w }, f.fd, cloexec)?;
                sys::set_status_flags(f.fd, status_flags);
                continue;
            }
            FdKind::Fifo { path, id, size, data, .. } => {
                let fd = sys::open_fifo(path, (f.flags as i32) & libc::O_ACCMODE)?;
                if *size > 0 {
                    sys::set_pipe_size(fd, *size)?;
                }
                if !data.is_empty() {
                    fifo_data.push((f.fd, *id, path, data));
                }
                fd
            }
            FdKind::ControlListener => sys::control_listener()?,
            FdKind::DeletedFile { path, memfd, id, pos, data, seals } => {
                let acc = (f.flags as i32) & libc::O_ACCMODE;
                let fd = match data {
                    Some(bytes) => {
                        let extents = st.deleted_extents.iter().find(|e| e.0 == *id).map(|e| &e.1[..]);
                        sys::deleted_file(path, *memfd, bytes, extents, *seals, acc)?
                    }
                    None => {
                        let Some(first) = deleted.get(id) else {
                            return Err(RestartError::Invalid(format!("fd {}: deleted file {path} without its contents", f.fd)));
                        };
                        sys::open(&format!("/proc/self/fd/{first}"), acc)?
                    }
                };
                sys::lseek(fd, *pos, path)?;
                deleted.entry(*id).or_insert(f.fd);
                fd
            }
            FdKind::EventFd { count, semaphore } => sys::eventfd(*count, *semaphore)?,
            FdKind::TimerFd { .. } => sys::timerfd(&f.kind)?,
            FdKind::SignalFd { mask } => sys::signalfd(*mask)?,
            FdKind::PidFd { thread } => sys::pidfd(*thread)?,
            // A stand-in until the process it names is restored (`member_pidfds`).
            FdKind::PidFdOf { .. } => sys::open("/dev/null", libc::O_RDONLY)?,
            FdKind::Inotify { watches, .. } => {
                inotifies.push((f.fd, watches));
                sys::inotify()?
            }
            FdKind::Epoll { watches } => {
                epolls.push((f.fd, watches));
                sys::epoll()?
            }
            FdKind::Socket(s) => match &s.role {
                SocketRole::Pair { id, first, queued } => {
                    let (a, b) = match socket_pairs.get(id) {
                        Some(&p) => p,
                        None => {
                            let (a, b) = sys::socketpair(s.ty)?;
                            let p = (sys::move_high(a, base)?, sys::move_high(b, base)?);
                            socket_pairs.insert(*id, p);
                            p
                        }
                    };
                    let (end, other) = if *first { (a, b) } else { (b, a) };
                    sys::set_socket_options(end, &s.options);
                    // What waited at this end is sent again from the other one.
                    if !queued.is_empty() {
                        socket_data.push((other, queued));
                    }
                    sys::dup_to(end, f.fd, cloexec)?;
                    sys::set_status_flags(f.fd, status_flags);
                    if s.shutdown != 0 {
                        shutdowns.push((f.fd, s.shutdown));
                    }
                    continue;
                }
                SocketRole::JobPair { .. } | SocketRole::JobShared { .. } => {
                    place_job_socket(f, s, job_socks)?;
                    continue;
                }
                SocketRole::Connected => {
                    connects.push((f.fd, s));
                    sys::socket(s, &st.cwd)?
                }
                SocketRole::Queued { role, queued } => {
                    // Made as its own role says; its datagrams sent to it again once every
                    // socket (their senders among them) is back.
                    let inner = SocketState { role: (**role).clone(), ..(**s).clone() };
                    let fd = sys::socket(&inner, &st.cwd)?;
                    datagrams.push((f.fd, s, queued));
                    if matches!(inner.role, SocketRole::Connected) {
                        owned_connects.push((f.fd, inner));
                    }
                    fd
                }
                _ => sys::socket(s, &st.cwd)?,
            },
            FdKind::Unsupported { what } => return Err(RestartError::Unsupported { fd: f.fd, what: what.clone() }),
            FdKind::Inherited { .. } if passed_on.contains(&f.fd) => {
                sys::set_cloexec(f.fd, cloexec);
                continue;
            }
            FdKind::Inherited { what } => {
                eprintln!(
                    "crum: warning: fd {} of the program ({what}, inherited when `crum run` started it) is \
                     /dev/null now: `crum restart` was started without an fd {} to pass on",
                    f.fd, f.fd
                );
                sys::open("/dev/null", libc::O_RDWR)?
            }
        };
        let hi = sys::move_high(tmp, base)?;
        sys::dup_to(hi, f.fd, cloexec)?;
        sys::close(hi);
        sys::set_status_flags(f.fd, status_flags);
    }
    // Modes and times of the files made anew: deleted files, memfds, socket files.
    for a in &st.fd_attrs {
        match st.fds.iter().find(|f| f.fd == a.fd).map(|f| &f.kind) {
            Some(FdKind::DeletedFile { path, .. }) => sys::set_file_attrs(a.fd, a.mode, a.times, a.owner, path)?,
            Some(FdKind::Socket(s)) => sys::chmod_socket_file(s, &st.cwd, a.mode, a.owner),
            _ => {}
        }
    }
    for (id, data) in pending_data {
        if let Some(&(_, w)) = pipes.get(&id) {
            sys::write_all(w, &data)?;
        }
    }
    // The bytes of each named pipe, through a writer of our own for the moment (this process
    // holds a read end of it: the open does not wait).
    for (fd, _, path, data) in fifo_data {
        let w = sys::open(&format!("/proc/self/fd/{fd}"), libc::O_WRONLY | libc::O_NONBLOCK)?;
        let r = sys::write_all(w, data);
        sys::close(w);
        r.map_err(|e| RestartError::Invalid(format!("cannot refill named pipe {path}: {e}")))?;
    }
    for (_, (r, w)) in pipes {
        sys::close(r);
        sys::close(w);
    }
    for (fd, msgs) in socket_data {
        sys::send_messages(fd, msgs)?;
    }
    for (_, (a, b)) in socket_pairs {
        sys::close(a);
        sys::close(b);
    }
    // The datagrams that waited in bound sockets, each from a socket with its sender's
    // name (before the connects: a connected socket takes datagrams from its peer only).
    let named: Vec<(Vec<u8>, i32)> = st
        .fds
        .iter()
        .filter_map(|f| match &f.kind {
            FdKind::Socket(s) if s.domain == libc::AF_UNIX && s.local.len() > 2 => Some((s.local.clone(), f.fd)),
            _ => None,
        })
        .collect();
    for (fd, s, queued) in datagrams {
        sys::send_datagrams(fd, s, &st.cwd, queued, &named)?;
    }
    for (fd, s) in &owned_connects {
        sys::connect_socket(*fd, s, &st.cwd, patience);
    }
    for (fd, bits) in shutdowns {
        sys::shutdown(fd, bits);
    }
    for (fd, s) in connects {
        sys::connect_socket(fd, s, &st.cwd, patience);
    }
    for (ep, watches) in epolls {
        for w in watches {
            // It would watch the stand-in, not the process (`member_pidfds`).
            if st.fds.iter().any(|f| f.fd == w.fd && matches!(f.kind, FdKind::PidFdOf { .. })) {
                return Err(RestartError::Invalid(format!(
                    "fd {ep}: an epoll instance watching fd {}, a pidfd of another process of the job, is not supported",
                    w.fd
                )));
            }
            sys::epoll_add(ep, w)?;
        }
    }
    for (fd, watches) in inotifies {
        sys::inotify_watch(fd, watches)?;
    }
    Ok(())
}

/// Takes the program's locks again and aims its descriptors' I/O signals at it, once no
/// descriptor of crum's own is left open on its files (closing one drops the process's POSIX
/// locks on the file: the job's shared files were, after they were put in place).
fn take_locks(st: &ProcessState) -> Result<(), RestartError> {
    for l in &st.locks {
        sys::take_lock(l)?;
    }
    for &(fd, owner, sig) in &st.fd_owners {
        sys::set_fd_owner(fd, owner, sig)?;
    }
    Ok(())
}

/// Opens the file of a [`FdKind::File`] descriptor again as it was: same flags, cut back to
/// its size at the checkpoint if the program wrote more since (written again after the
/// restart), at the same offset.
fn reopen(f: &FdState, contents: &[(i32, Vec<u8>)]) -> Result<i32, RestartError> {
    let FdKind::File { path, pos, size, mtime_ns, .. } = &f.kind else {
        return Err(RestartError::Invalid(format!("fd {} is not a file", f.fd)));
    };
    let open_flags = (f.flags as i32) & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_CLOEXEC);
    let carried = contents.iter().any(|c| c.0 == f.fd);
    let made = carried && !Path::new(path).exists();
    let fd = if made { sys::create(path, open_flags)? } else { sys::open(path, open_flags)? };
    let now = crum_ckpt::capture::file_identity(path).unwrap_or((0, 0, 0, 0));
    if let (true, FdKind::File { dev, ino, .. }) = (carried, &f.kind) {
        if (now.2, now.3) != (*dev, *ino) && !made {
            sys::close(fd);
            return Err(RestartError::FileChanged { path: path.clone(), fd: f.fd, problem: "was replaced" });
        }
    }
    if let Some((_, bytes)) = contents.iter().find(|c| c.0 == f.fd) {
        // Changed since the checkpoint (written in place, cut, grown): its bytes then.
        if (now.0, now.1) != (bytes.len() as u64, *mtime_ns) {
            sys::pwrite_all(fd, bytes, path)?;
            sys::ftruncate(fd, bytes.len() as u64, path)?;
        }
    } else if writable(f.flags) && now.0 > *size {
        sys::ftruncate(fd, *size, path)?;
    }
    sys::lseek(fd, *pos, path)?;
    Ok(fd)
}

/// stdin, stdout and stderr that were regular files at the checkpoint (`gzip -c < in > out`,
/// a batch system's log) are those files again, cut back to their size at the checkpoint and
/// at the same offset, so that output written after the checkpoint is not written twice and
/// an archive or log continues where the image left it. One whose file vanished, was
/// replaced or shrank (`crum restart ... > log` truncates it) is the restarting process's,
/// with a warning printed before any standard stream changes. Others (a terminal, a pipe)
/// are the restarting process's, like a terminal.
/// Puts the job's socket ([`SocketRole::JobPair`] or [`SocketRole::JobShared`], made by
/// the root's restorer) at the descriptor `f`, with this end's options and flags.
fn place_job_socket(
    f: &FdState,
    s: &crum_ckpt::state::SocketState,
    job_socks: &[(u64, i32, i32)],
) -> Result<(), RestartError> {
    let (id, first) = match &s.role {
        SocketRole::JobPair { id, first, .. } => (*id, *first),
        SocketRole::JobShared { id, .. } => (*id, true),
        _ => return Err(RestartError::Invalid(format!("fd {} is not a socket of the job", f.fd))),
    };
    let Some(&(_, a, b)) = job_socks.iter().find(|p| p.0 == id) else {
        return Err(RestartError::Invalid(format!("fd {}: socket {id} of the job was not made", f.fd)));
    };
    let end = if first { a } else { b };
    if matches!(s.role, SocketRole::JobPair { .. }) {
        // A TCP end keeps the SO_REUSEADDR the restart gave it, so that a later restart
        // can take its port again while this connection is in TIME_WAIT.
        let tcp = s.domain != libc::AF_UNIX;
        let opts: Vec<_> =
            s.options.iter().filter(|o| !(tcp && o.level == libc::SOL_SOCKET && o.name == libc::SO_REUSEADDR)).cloned().collect();
        sys::set_socket_options(end, &opts);
    }
    let cloexec = f.flags & libc::O_CLOEXEC as u32 != 0;
    sys::dup_to(end, f.fd, cloexec)?;
    sys::set_status_flags(f.fd, (f.flags & (libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC) as u32) as i32);
    Ok(())
}

fn restore_stdio(st: &ProcessState, base: i32, job: &JobObjects, contents: &[(i32, Vec<u8>)]) -> Result<(), RestartError> {
    let (job_pipes, job_socks) = (job.pipes, job.socks);
    const NAMES: [&str; 3] = ["stdin", "stdout", "stderr"];
    let mut stdio: Vec<&FdState> = st.fds.iter().filter(|f| (0..=2).contains(&f.fd)).collect();
    stdio.sort_by_key(|f| f.fd);
    // Which of them come back as files; the warnings go out on this process's stderr first.
    let mut restored: Vec<i32> = Vec::new();
    for f in &stdio {
        let name = NAMES[f.fd as usize];
        match &f.kind {
            FdKind::File { path, size, .. } => match file_problem(f, false) {
                None => restored.push(f.fd),
                Some(problem) => eprintln!(
                    "crum: warning: the program's {name} was the file {path} ({size} bytes at the checkpoint), \
                     which {problem}: it is crum restart's {name} now"
                ),
            },
            FdKind::Dup { of } if restored.contains(of) => restored.push(f.fd),
            // A pipe to another process of the job (`cmd | cat` in a shell).
            FdKind::JobPipe { .. } => restored.push(f.fd),
            // A file shared with other processes of the job (`script > log`), if it was made.
            FdKind::JobFile { id, file } => match job.files.iter().any(|p| p.0 == *id) {
                true => restored.push(f.fd),
                false => {
                    if let FdKind::File { path, size, .. } = &**file {
                        eprintln!(
                            "crum: warning: the program's {name} was the file {path} ({size} bytes at the checkpoint), \
                             shared with other processes of the job, which cannot be opened as it was: it is crum restart's {name} now"
                        );
                    }
                }
            },
            FdKind::Socket(s) if matches!(s.role, SocketRole::JobPair { .. } | SocketRole::JobShared { .. }) => {
                restored.push(f.fd)
            }
            _ => {}
        }
    }
    for f in &stdio {
        if !restored.contains(&f.fd) {
            continue;
        }
        let cloexec = f.flags & libc::O_CLOEXEC as u32 != 0;
        match &f.kind {
            FdKind::Dup { of } => sys::dup_to(*of, f.fd, cloexec)?,
            FdKind::JobPipe { id, read, .. } => {
                let Some(&(_, r, w)) = job_pipes.iter().find(|p| p.0 == *id) else {
                    return Err(RestartError::Invalid(format!("fd {}: pipe:[{id}] of the job was not made", f.fd)));
                };
                sys::dup_to(if *read { r } else { w }, f.fd, cloexec)?;
                let status_flags = (f.flags & (libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC) as u32) as i32;
                sys::set_status_flags(f.fd, status_flags);
            }
            FdKind::Socket(s) => place_job_socket(f, s, job_socks)?,
            FdKind::JobFile { id, .. } => place_job_file(f, *id, job.files)?,
            _ => {
                let hi = sys::move_high(reopen(f, contents)?, base)?;
                sys::dup_to(hi, f.fd, cloexec)?;
                sys::close(hi);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crum_ckpt::state::{FdState, ProcessState, PROCESS_STATE_VERSION};

    fn state_with(fds: Vec<FdState>) -> ProcessState {
        ProcessState {
            version: PROCESS_STATE_VERSION,
            pid: 1,
            pid_history: vec![],
            exe: String::new(),
            cmdline: vec![],
            cwd: "/".into(),
            regions: vec![],
            specials: vec![],
            threads: vec![],
            entry: 0,
            restart_info: 0,
            main_slot: 0,
            main_stack: 0,
            fds,
            sigactions: vec![],
            itimers: [(0, 0); 3],
            start_brk: 0,
            brk: 0,
            rlimits: vec![],
            umask: 0o022,
            hook_sections: vec![],
            locks: vec![],
            pipe_sizes: vec![],
            pending_signals: vec![],
            posix_timers: vec![],
            advice: vec![],
            guards: vec![],
            file_contents: vec![],
            fd_attrs: vec![],
            deleted_extents: vec![],
            fd_owners: vec![],
            mm_layout: vec![],
            auxv: vec![],
            sysv_shm: vec![],
        }
    }

    fn file_fd(path: &std::path::Path, flags: u32) -> FdState {
        let (size, mtime_ns, dev, ino) = crum_ckpt::capture::file_identity(path.to_str().unwrap()).unwrap();
        FdState {
            fd: 7,
            flags,
            kind: FdKind::File { path: path.to_str().unwrap().into(), pos: 0, size, mtime_ns, dev, ino, dir: false },
        }
    }

    #[test]
    fn unchanged_files_pass_validation() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, "abc").unwrap();
        assert!(check_files(&state_with(vec![file_fd(&p, libc::O_RDONLY as u32)])).is_ok());
    }

    #[test]
    fn changed_read_only_file_is_refused_by_name() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("input");
        std::fs::write(&p, "abc").unwrap();
        let st = state_with(vec![file_fd(&p, libc::O_RDONLY as u32)]);
        std::fs::write(&p, "abcd").unwrap();
        let e = check_files(&st).unwrap_err().to_string();
        assert!(e.contains("input") && e.contains("changed") && e.contains("fd 7"), "{e}");
    }

    #[test]
    fn grown_writable_file_passes_but_shrunk_one_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log");
        std::fs::write(&p, "abc").unwrap();
        let st = state_with(vec![file_fd(&p, (libc::O_WRONLY | libc::O_APPEND) as u32)]);
        std::fs::write(&p, "abcdef").unwrap();
        assert!(check_files(&st).is_ok(), "a longer log is cut back at restart, not refused");
        std::fs::write(&p, "a").unwrap();
        let e = check_files(&st).unwrap_err().to_string();
        assert!(e.contains("shrank"), "{e}");
    }

    #[test]
    fn vanished_and_replaced_files_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("gone");
        std::fs::write(&p, "abc").unwrap();
        let st = state_with(vec![file_fd(&p, libc::O_RDONLY as u32)]);
        std::fs::remove_file(&p).unwrap();
        assert!(check_files(&st).unwrap_err().to_string().contains("vanished"));
        std::fs::write(&p, "abc").unwrap();
        let e = check_files(&st).unwrap_err().to_string();
        assert!(e.contains("replaced") || e.contains("changed"), "{e}");
    }

    #[test]
    fn unsupported_descriptor_is_named() {
        let st = state_with(vec![FdState { fd: 5, flags: 2, kind: FdKind::Unsupported { what: "socket:[99]".into() } }]);
        let e = check_files(&st).unwrap_err().to_string();
        assert_eq!(e, "cannot restore fd 5: socket:[99]");
    }
}
