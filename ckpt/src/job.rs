//! Jobs: a process and its descendants under crum, checkpointed as one (issue 17).
//!
//! The process `crum run` started (the *root*) coordinates. When it checkpoints and has
//! descendants running crum's agent (children it executed under `crum run`'s environment,
//! their children, ...), every one of them is a *member*: the root connects to each
//! member's control socket ([`crate::control::Request::JobMember`]) and the cut is made in
//! three steps over those connections ([`Msg`]):
//! 1. every member stops its threads and says so (`Stopped`, with the pid its program
//!    knows); then the root stops its own;
//! 2. `GoCut`: each member captures itself and forks its image writer into the job's
//!    temporary directory (`Cut`); then the root does the same;
//! 3. `GoResume`: everyone runs again; each writer finishes (`Written`), and the root writes
//!    the manifest ([`Manifest`], `job.json`) and renames the directory into place. The
//!    image is one directory, complete only when every part is.
//!
//! No member runs between the first stop and the last capture, so what one member's image
//! says it sent another's says was not yet received.
//!
//! `crum restart` of a job image rebuilds the tree: each process is forked by its parent's
//! restorer, and after the restore each learns the pid every member has now (a table in a
//! memfd the restorers fill), so the pids the program knows keep naming the same processes
//! (`libcrum_libc.so`'s `crum_set_pid_table`).

#![allow(unsafe_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// The manifest file of a job image.
pub const MANIFEST: &str = "job.json";
/// Largest manifest accepted.
const MAX_MANIFEST: u64 = 1 << 20;
/// Most processes in one job.
pub const MAX_MEMBERS: usize = 1024;
/// Current manifest version.
pub const VERSION: u32 = 3;
/// Most shared mappings a manifest may list, and the largest shared object (bytes).
const MAX_SHARED: usize = 1 << 16;
const MAX_SHARED_BYTES: u64 = 1 << 44;

/// One process of a job image.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Member {
    /// The pid its program knows (the one it started with).
    pub pid: i32,
    /// Its parent's pid as the program knows it (the root's: outside the job).
    pub ppid: i32,
    /// The directory of its image, inside the job image.
    pub part: String,
    /// Its command name, for messages.
    #[serde(default)]
    pub comm: String,
    /// Its process group and session (version 3), each as the pid of its leader among the
    /// job's processes, or 0: the launcher's (the group or session `crum run` gave the root,
    /// outside the job), or one whose leader is not in the job (named when the image is
    /// written). A restart makes them again.
    #[serde(default)]
    pub pgid: i32,
    #[serde(default)]
    pub sid: i32,
}

/// A child of a process of the job that had exited and was not reaped yet: made again at
/// restart (a child of the same process that ends at once the same way), so that its
/// parent's `waitpid` finds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Zombie {
    pub pid: i32,
    /// Its parent, a process of the job.
    pub ppid: i32,
    /// Its wait status (`WIFEXITED`/`WIFSIGNALED` encoding).
    pub status: i32,
}

/// `job.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub version: u32,
    /// The process `crum restart` becomes (the job's root).
    pub root: i32,
    pub members: Vec<Member>,
    #[serde(default)]
    pub zombies: Vec<Zombie>,
    /// Shared memory mapped by several processes of the job (version 2).
    #[serde(default)]
    pub shared: Vec<SharedSeg>,
}

/// A mapping of shared memory (`MAP_SHARED` anonymous memory, a deleted file, a memfd) as
/// one process of a job maps it: `start..end` of process `pid` shows object `obj` from
/// byte `offset`. A restart makes each object once and maps it into every process that
/// had it, so they share it again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SharedSeg {
    pub pid: i32,
    pub start: u64,
    pub end: u64,
    pub obj: u32,
    pub offset: u64,
}

/// A shared memory mapping of this process as the cut finds it: its range, and the
/// device, inode and offset that say which object it shows.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShmMap {
    pub start: u64,
    pub end: u64,
    pub dev: String,
    pub ino: u64,
    pub offset: u64,
}

/// The shared memory of a job, from what each process maps ((program pid, its
/// mappings)): the mappings of objects mapped more than once (by several processes, or
/// twice by one), with an object number per (device, inode).
pub fn shared_segments(held: &[(i32, Vec<ShmMap>)]) -> Vec<SharedSeg> {
    let mut objs: Vec<(&str, u64)> = Vec::new();
    let mut out = Vec::new();
    for (pid, maps) in held {
        for m in maps {
            let sharers = held.iter().flat_map(|(_, v)| v.iter()).filter(|o| o.dev == m.dev && o.ino == m.ino).count();
            if sharers < 2 {
                continue;
            }
            let key = (m.dev.as_str(), m.ino);
            let obj = match objs.iter().position(|o| *o == key) {
                Some(i) => i,
                None => {
                    objs.push(key);
                    objs.len() - 1
                }
            };
            out.push(SharedSeg { pid: *pid, start: m.start, end: m.end, obj: obj as u32, offset: m.offset });
        }
    }
    out
}

impl Manifest {
    /// Reads and checks `dir/job.json` (untrusted: bounded, plain part names, one root, every
    /// other member's parent a member).
    pub fn read(dir: &Path) -> Result<Manifest, String> {
        let path = dir.join(MANIFEST);
        let mut b = Vec::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_MANIFEST + 1).read_to_end(&mut b))
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if b.len() as u64 > MAX_MANIFEST {
            return Err(format!("{} is larger than {MAX_MANIFEST} bytes", path.display()));
        }
        let m: Manifest = serde_json::from_slice(&b).map_err(|e| format!("{} is malformed: {e}", path.display()))?;
        m.check().map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(m)
    }

    fn check(&self) -> Result<(), String> {
        // Version 2 added `shared`, 3 the members' groups and sessions.
        if !(1..=VERSION).contains(&self.version) {
            return Err(format!("job manifest version {} (this crum reads {VERSION})", self.version));
        }
        if self.members.is_empty() || self.members.len() > MAX_MEMBERS {
            return Err(format!("{} processes (1 to {MAX_MEMBERS})", self.members.len()));
        }
        let pids: Vec<i32> = self.members.iter().map(|m| m.pid).collect();
        for (i, m) in self.members.iter().enumerate() {
            if m.pid <= 0 || pids[..i].contains(&m.pid) {
                return Err(format!("bad or repeated pid {}", m.pid));
            }
            if m.part.is_empty() || m.part.contains('/') || m.part.starts_with('.') {
                return Err(format!("bad part name {:?}", m.part));
            }
            if m.pid != self.root && !pids.contains(&m.ppid) {
                return Err(format!("process {} has parent {}, which is not in the job", m.pid, m.ppid));
            }
            for (what, id) in [("process group", m.pgid), ("session", m.sid)] {
                if id != 0 && !pids.contains(&id) {
                    return Err(format!("process {} is in {what} {id}, which is not one of the job's", m.pid));
                }
            }
        }
        if !pids.contains(&self.root) {
            return Err(format!("the root {} is not a member", self.root));
        }
        if self.zombies.len() > MAX_MEMBERS {
            return Err(format!("{} exited children (at most {MAX_MEMBERS})", self.zombies.len()));
        }
        for (i, z) in self.zombies.iter().enumerate() {
            if z.pid <= 0 || pids.contains(&z.pid) || self.zombies[..i].iter().any(|y| y.pid == z.pid) {
                return Err(format!("bad or repeated pid {} of an exited child", z.pid));
            }
            if !pids.contains(&z.ppid) {
                return Err(format!("exited child {} has parent {}, which is not in the job", z.pid, z.ppid));
            }
        }
        if self.shared.len() > MAX_SHARED {
            return Err(format!("{} shared mappings (at most {MAX_SHARED})", self.shared.len()));
        }
        for g in &self.shared {
            let len = g.end.saturating_sub(g.start);
            if !pids.contains(&g.pid) || len == 0 || g.obj as usize >= self.shared.len() || g.offset.saturating_add(len) > MAX_SHARED_BYTES {
                return Err(format!("bad shared mapping {:#x}-{:#x} of process {}", g.start, g.end, g.pid));
            }
        }
        // Every member reaches the root by parents (no cycle).
        for m in &self.members {
            let mut p = m.pid;
            for _ in 0..=self.members.len() {
                if p == self.root {
                    break;
                }
                p = self.member(p).map(|x| x.ppid).unwrap_or(self.root);
            }
            if p != self.root {
                return Err(format!("process {} does not descend from the root", m.pid));
            }
        }
        Ok(())
    }

    pub fn member(&self, pid: i32) -> Option<&Member> {
        self.members.iter().find(|m| m.pid == pid)
    }

    /// The members whose parent is `pid`.
    pub fn children(&self, pid: i32) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(move |m| m.ppid == pid && m.pid != self.root)
    }

    /// Position of `pid` among the members (its slot in the restart's pid table; the
    /// exited children's slots follow the members').
    pub fn index(&self, pid: i32) -> Option<usize> {
        self.members.iter().position(|m| m.pid == pid)
    }

    /// Every pid of the restart's pid table: the members', then the exited children's.
    pub fn table_pids(&self) -> Vec<i32> {
        self.members.iter().map(|m| m.pid).chain(self.zombies.iter().map(|z| z.pid)).collect()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).unwrap_or_default();
        v.push(b'\n');
        v
    }
}

/// Whether `dir` is a complete job image.
pub fn is_job_image(dir: &Path) -> bool {
    dir.join(MANIFEST).is_file()
}

/// The descendants of this process, parents before children: (pid, parent pid, command
/// name, state letter) as the kernel gives them.
pub fn descendants() -> Vec<(i32, i32, String, char)> {
    let mut out: Vec<(i32, i32, String, char)> = Vec::new();
    let mut queue = vec![crate::threads::real_pid()];
    while let Some(p) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else { continue };
        let mut kids = Vec::new();
        for t in tasks.flatten() {
            let Ok(list) = std::fs::read_to_string(t.path().join("children")) else { continue };
            kids.extend(list.split_whitespace().filter_map(|w| w.parse::<i32>().ok()));
        }
        kids.sort_unstable();
        kids.dedup();
        for k in kids {
            if out.iter().any(|o| o.0 == k) || out.len() >= MAX_MEMBERS {
                continue;
            }
            let stat = std::fs::read_to_string(format!("/proc/{k}/stat")).unwrap_or_default();
            let comm = match (stat.find('('), stat.rfind(')')) {
                (Some(a), Some(b)) if a < b => stat[a + 1..b].to_string(),
                _ => String::from("?"),
            };
            let state = stat.rfind(')').and_then(|b| stat[b + 1..].trim_start().chars().next()).unwrap_or('?');
            out.push((k, p, comm, state));
            queue.push(k);
        }
    }
    out
}

/// The children of `parents` (kernel pids): (pid, parent, state letter, wait status). Reads
/// /proc without the C library's `malloc` (the program's threads may be stopped).
fn children_of(parents: &[i32]) -> Vec<(i32, i32, char, Option<i32>)> {
    let mut out: Vec<(i32, i32, char, Option<i32>)> = Vec::new();
    for &p in parents {
        let Ok(dir) = std::ffi::CString::new(format!("/proc/{p}/task")) else { continue };
        for t in crate::capture::numeric_entries(&dir) {
            let list = std::fs::read_to_string(format!("/proc/{p}/task/{t}/children")).unwrap_or_default();
            for k in list.split_whitespace().filter_map(|w| w.parse::<i32>().ok()) {
                let stat = std::fs::read_to_string(format!("/proc/{k}/stat")).unwrap_or_default();
                let Some(b) = stat.rfind(')') else { continue };
                let fields: Vec<&str> = stat[b + 1..].split_whitespace().collect();
                // Field 3 is the state, field 52 the exit code (the wait status).
                let state = fields.first().and_then(|f| f.chars().next()).unwrap_or('?');
                let status = fields.get(49).and_then(|v| v.parse::<i32>().ok());
                if !out.iter().any(|o| o.0 == k) {
                    out.push((k, p, state, status));
                }
            }
        }
    }
    out
}

/// The exited, unreaped children of `parents` (kernel pids): (pid, parent, wait status).
pub fn zombie_children(parents: &[i32]) -> Vec<(i32, i32, i32)> {
    children_of(parents).into_iter().filter(|c| c.2 == 'Z').filter_map(|c| Some((c.0, c.1, c.3?))).collect()
}

/// Processes that belong to the job's sessions or process groups but not to the job: not
/// children of any of its processes (`job`, kernel pids: its processes and exited children),
/// so their parent exited and they were reparented outside it (to init or to a subreaper
/// above `crum run`: CRIU's child_subreaper_and_reparent, whose orphan then never answered
/// its restarted parent). A restart would not bring them back, and the program may wait for
/// them: one line each. crum's own processes (the proxy, a snapshot holder: `crum`'s
/// executable) and children of the job's processes (named by their parent's part) are not.
pub fn escaped(job: &[i32]) -> Vec<String> {
    let is_leader = |id: i32| id > 0 && job.contains(&id);
    // Every process: (pid, comm, state, ppid, pgid, sid).
    let mut all = Vec::new();
    for p in crate::capture::numeric_entries(c"/proc") {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let Some(b) = stat.rfind(')') else { continue };
        let comm = stat.find('(').map_or("?", |a| &stat[a + 1..b]).to_string();
        let f: Vec<&str> = stat[b + 1..].split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<i32>().ok()).unwrap_or(0);
        all.push((p, comm, f.first().copied().unwrap_or("?").to_string(), num(1), num(2), num(3)));
    }
    let parent = |p: i32| all.iter().find(|x| x.0 == p).map_or(0, |x| x.3);
    // Whether a process of the job is among `p`'s ancestors (its own part names it if so).
    let below_job = |mut p: i32| {
        for _ in 0..4096 {
            p = parent(p);
            if p <= 1 {
                return false;
            }
            if job.contains(&p) {
                return true;
            }
        }
        false
    };
    let mut out = Vec::new();
    for (p, comm, state, ppid, pgid, sid) in &all {
        if job.contains(p) || state == "X" || !(is_leader(*pgid) || is_leader(*sid)) || below_job(*p) {
            continue;
        }
        let exe = std::fs::read_link(format!("/proc/{p}/exe")).ok();
        if exe.as_ref().and_then(|e| e.file_name()).is_some_and(|n| n == "crum") {
            continue;
        }
        if out.len() == 4 {
            out.push("and more".to_string());
            break;
        }
        let (what, id) = if is_leader(*sid) { ("session", sid) } else { ("process group", pgid) };
        out.push(format!(
            "process {p} ({comm}) is in the {what} {id} of the job but not in the job (its parent exited and it was reparented to process {ppid} outside it): a restart would not bring it back"
        ));
    }
    out
}

/// The process group and session of each of `pids` (kernel pids), as `/proc/<pid>/stat`
/// gives them (fields 5 and 6): (pid, pgid, sid); a process that is gone is left out.
pub fn group_ids(pids: &[i32]) -> Vec<(i32, i32, i32)> {
    let mut out = Vec::with_capacity(pids.len());
    for &p in pids {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let Some(b) = stat.rfind(')') else { continue };
        let mut f = stat[b + 1..].split_whitespace().skip(2).map(|v| v.parse::<i32>().unwrap_or(0));
        if let (Some(pgid), Some(sid)) = (f.next(), f.next()) {
            out.push((p, pgid, sid));
        }
    }
    out
}

/// The groups and sessions of a job's processes as the manifest records them
/// ([`Member::pgid`], [`Member::sid`]): `ids` from [`group_ids`] (kernel pids), `root` the
/// launcher's (the root's parent's: `crum run`'s) group and session, `program` a kernel
/// pid's program pid. A group or session led by a process of the job is that process's
/// program pid; the launcher's is 0. Any other (its leader has exited or is outside the
/// job) is 0 too, and named: it comes back as the launcher's.
pub fn job_groups(ids: &[(i32, i32, i32)], launcher: (i32, i32), program: impl Fn(i32) -> i32) -> (Vec<(i32, i32, i32)>, Vec<String>) {
    let (root_pgid, root_sid) = launcher;
    let led = |id: i32| ids.iter().any(|x| x.0 == id);
    let mut problems = Vec::new();
    let mut out = Vec::with_capacity(ids.len());
    for &(p, pgid, sid) in ids {
        let mut pick = |what: &str, id: i32, launcher: i32| {
            if led(id) {
                program(id)
            } else {
                if id != launcher {
                    problems.push(format!(
                        "process {}: its {what} {id} has no leader in the job: it comes back in crum restart's",
                        program(p)
                    ));
                }
                0
            }
        };
        let g = pick("process group", pgid, root_pgid);
        let s = pick("session", sid, root_sid);
        out.push((program(p), g, s));
    }
    (out, problems)
}

/// The children of `parents` (kernel pids) that run (not exited) and are not in `known`:
/// processes of the job just forked whose agent is not up yet, or children without one.
pub fn other_children(parents: &[i32], known: &[i32]) -> Vec<i32> {
    children_of(parents).into_iter().filter(|c| c.2 != 'Z' && c.2 != 'X' && !known.contains(&c.0)).map(|c| c.0).collect()
}

/// Whether process `pid` runs crum's agent ([`crate::control::agent_running`]).
/// Whether a child without an agent may get one in a moment: it has crum's library mapped
/// (forked from a process under crum, or executed with it preloaded) or preloaded in its
/// environment (executed a moment ago). A child started without it (a shell's `cat`) never
/// will: a cut is not made again for it.
pub fn may_get_agent(pid: i32) -> bool {
    let has = |f: &str| std::fs::read(format!("/proc/{pid}/{f}")).is_ok_and(|b| b.windows(7).any(|w| w == b"libcrum"));
    has("maps") || has("environ")
}

pub fn has_agent(pid: i32) -> bool {
    pid > 0 && crate::control::agent_running(&crate::control::socket_dir(), pid as u32)
}

/// The parent of process `pid` (0 when unknown).
pub fn parent_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rfind(')').and_then(|b| stat[b + 1..].split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The root of the job `pid` belongs to: its topmost ancestor running crum's agent
/// (`has_agent`), or `pid` itself when none does.
pub fn root_of(pid: i32, has_agent: impl Fn(i32) -> bool) -> i32 {
    let mut root = pid;
    let mut p = parent_of(pid);
    for _ in 0..4096 {
        if p <= 1 {
            break;
        }
        if has_agent(p) {
            root = p;
        }
        p = parent_of(p);
    }
    root
}

/// The pipe ends this process holds: (pipe id, read end), once per kind of end. Runs while
/// the program's threads are stopped: nothing here calls the C library's `malloc` (one of
/// them may hold its lock, e.g. inside `fork`).
pub fn own_pipes() -> Vec<(u64, bool)> {
    let mut out = Vec::new();
    for fd in crate::capture::numeric_entries(c"/proc/self/fd") {
        let Some(id) = fd_inode(fd, "pipe").or_else(|| fifo_of(fd)) else { continue };
        // SAFETY: F_GETFL on a descriptor of this process.
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if fl < 0 {
            continue;
        }
        // A named pipe opened for reading and writing is both ends.
        let acc = fl & libc::O_ACCMODE;
        for (read, holds) in [(true, acc != libc::O_WRONLY), (false, acc != libc::O_RDONLY)] {
            if holds && !out.contains(&(id, read)) {
                out.push((id, read));
            }
        }
    }
    out
}

/// The id of the named pipe `fd` is open on ([`crate::capture::fifo_id`]), if it is one.
fn fifo_of(fd: i32) -> Option<u64> {
    // SAFETY: fstat of a descriptor of this process into a live local.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        return None;
    }
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    (!link.as_os_str().as_encoded_bytes().starts_with(b"pipe:[")).then(|| crate::capture::fifo_id(&st))
}

/// A process's descriptors of regular files ([`own_files`]), as the root collects them:
/// (kernel pid, program pid, (fd, device, inode) each).
pub type HeldFiles = (i32, i32, Vec<(i32, u64, u64)>);

/// The descriptors of regular files, eventfds and timerfds this process holds, crum's own
/// excepted: (fd, device, inode) (every eventfd and timerfd has the one inode of anonymous inodes: `kcmp` tells
/// them apart).
pub fn own_files() -> Vec<(i32, u64, u64)> {
    let mut out = Vec::new();
    let crums = crate::agent::own_fds();
    for fd in crate::capture::numeric_entries(c"/proc/self/fd")
        .into_iter()
        .filter(|fd| !crums.contains(fd))
    {
        // SAFETY: fstat of a descriptor of this process into a live local.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            continue;
        }
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap_or_default();
        let link = link.as_os_str();
        let regular = st.st_mode & libc::S_IFMT == libc::S_IFREG && !link.as_encoded_bytes().starts_with(b"anon_inode:");
        let counter = link == "anon_inode:[eventfd]" || link == "anon_inode:[timerfd]";
        if regular || counter {
            out.push((fd, st.st_dev, st.st_ino));
        }
    }
    out
}

/// The open file descriptions of regular files that several processes of a job share (a
/// shell's stdout redirected to a file, inherited by its children), from what each holds
/// ((kernel pid, program pid, [`own_files`])): descriptors of the same file in two
/// processes are the same description when `kcmp` says so. Each as (id, program pid, fd),
/// ids from 1.
pub fn job_files(held: &[HeldFiles]) -> Vec<(u64, i32, i32)> {
    // (kernel pid, program pid, fd, dev, ino) of files held by more than one process.
    let mut ends: Vec<(i32, i32, i32, u64, u64)> = Vec::new();
    for (k, p, files) in held {
        for &(fd, dev, ino) in files {
            if held.iter().any(|(k2, _, f2)| k2 != k && f2.iter().any(|x| (x.1, x.2) == (dev, ino))) {
                ends.push((*k, *p, fd, dev, ino));
            }
        }
    }
    let same = |a: &(i32, i32, i32, u64, u64), b: &(i32, i32, i32, u64, u64)| {
        // SAFETY: kcmp compares two descriptors of two processes; no memory is passed.
        (a.3, a.4) == (b.3, b.4) && unsafe { libc::syscall(libc::SYS_kcmp, a.0, b.0, 0 /* KCMP_FILE */, a.2, b.2) } == 0
    };
    let mut out: Vec<(u64, i32, i32)> = Vec::new();
    let mut next = 1u64;
    for (i, e) in ends.iter().enumerate() {
        if out.iter().any(|o| o.1 == e.1 && o.2 == e.2) {
            continue;
        }
        // Shared when another process holds the same description.
        let group: Vec<&(i32, i32, i32, u64, u64)> = ends[i..].iter().filter(|o| o.0 == e.0 && o.2 == e.2 || same(e, o)).collect();
        if group.iter().any(|o| o.0 != e.0) {
            for o in group {
                out.push((next, o.1, o.2));
            }
            next += 1;
        }
    }
    out
}

/// A deleted file or memfd open in several processes of the job (a child opening its
/// parent's memfd through `/proc/<pid>/fd`, a deleted file inherited by a fork), named: each
/// process's part carries its own copy, so after a restart what one writes the other would
/// not see. None when there is none.
pub fn shared_deleted_files(held: &[HeldFiles]) -> Option<String> {
    for (k, p, files) in held {
        for &(fd, dev, ino) in files {
            let Some((_, p2, _)) = held
                .iter()
                .find(|(k2, _, f2)| k2 != k && f2.iter().any(|x| (x.1, x.2) == (dev, ino)))
            else {
                continue;
            };
            let link = std::fs::read_link(format!("/proc/{k}/fd/{fd}")).unwrap_or_default();
            let link = link.to_string_lossy();
            if link.ends_with(" (deleted)") || link.starts_with("/memfd:") {
                return Some(format!(
                    "fd {fd} of process {p} ({link}) is open in process {p2} too: a restart would give each process a copy of its own"
                ));
            }
        }
    }
    None
}

/// Turns the descriptors of `fds` that are in `files` ([`job_files`]) for process `me`
/// (program pid) into [`FdKind::JobFile`]s (a dup of one stays a dup): regular files,
/// eventfds and timerfds.
pub fn mark_files(fds: &mut [crate::state::FdState], files: &[(u64, i32, i32)], me: i32) {
    use crate::state::FdKind;
    for f in fds.iter_mut() {
        if !matches!(f.kind, FdKind::File { .. } | FdKind::EventFd { .. } | FdKind::TimerFd { .. }) {
            continue;
        }
        if let Some(&(id, _, _)) = files.iter().find(|x| x.1 == me && x.2 == f.fd) {
            let file = std::mem::replace(&mut f.kind, FdKind::Stdio);
            f.kind = FdKind::JobFile { id, file: Box::new(file) };
        }
    }
}

/// The pipes between processes of a job, from what each holds ((program pid, its ends)):
/// those with a read end and a write end in the job, each with the lowest pid holding a
/// read end (its part carries the pipe's bytes).
pub fn job_pipes(held: &[(i32, Vec<(u64, bool)>)]) -> Vec<(u64, i32)> {
    let mut ids: Vec<u64> = held.iter().flat_map(|(_, v)| v.iter().map(|e| e.0)).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut out = Vec::new();
    for id in ids {
        let holders = |read: bool| held.iter().filter(move |(_, v)| v.contains(&(id, read))).map(|(p, _)| *p);
        let writers = holders(false).count();
        // A pipe of one process alone is that process's own (both ends there).
        let procs = held.iter().filter(|(_, v)| v.iter().any(|e| e.0 == id)).count();
        if let Some(carrier) = holders(true).min() {
            if writers > 0 && procs > 1 {
                out.push((id, carrier));
            }
        }
    }
    out
}

/// A socket a process of a job holds, as it reports it when it stops: its inode, a
/// connected Unix socket's peer inode (sock_diag), an established TCP connection's local and
/// peer addresses.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SockEnd {
    pub ino: u64,
    #[serde(default)]
    pub peer: u64,
    #[serde(default)]
    pub tcp: Option<(Vec<u8>, Vec<u8>)>,
}

/// The inode of this process's `fd` when it is a `kind` ("pipe", "socket": its
/// `/proc/self/fd` link reads `kind:[inode]`).
fn fd_inode(fd: i32, kind: &str) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    link.to_str()?.strip_prefix(kind)?.strip_prefix(":[")?.strip_suffix(']')?.parse().ok()
}

/// The sockets this process holds (once each), as [`SockEnd`]s.
pub fn own_sockets() -> Vec<SockEnd> {
    let mut out: Vec<SockEnd> = Vec::new();
    let mut diag = None;
    for fd in crate::capture::numeric_entries(c"/proc/self/fd") {
        let Some(ino) = fd_inode(fd, "socket") else { continue };
        if out.iter().any(|e| e.ino == ino) {
            continue;
        }
        let mut e = SockEnd { ino, peer: 0, tcp: None };
        let domain = sock_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN);
        let ty = sock_int(fd, libc::SOL_SOCKET, libc::SO_TYPE);
        if domain == Some(libc::AF_UNIX) {
            e.peer = diag.get_or_insert_with(crate::sockets::unix_diag).get(&(ino as u32)).map_or(0, |d| d.peer as u64);
        } else if matches!(domain, Some(libc::AF_INET | libc::AF_INET6)) && ty == Some(libc::SOCK_STREAM) && tcp_established(fd) {
            e.tcp = Some((crate::sockets::address(fd, false), crate::sockets::address(fd, true)));
        }
        out.push(e);
    }
    out
}

fn sock_int(fd: i32, level: i32, name: i32) -> Option<i32> {
    let mut v: libc::c_int = 0;
    let mut len = 4 as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live local.
    let r = unsafe { libc::getsockopt(fd, level, name, &mut v as *mut libc::c_int as *mut libc::c_void, &mut len) };
    (r == 0).then_some(v)
}

/// Whether a TCP socket's connection is established (`TCP_INFO`'s state; a connection
/// half closed or closing comes back closed, as one to outside).
fn tcp_established(fd: i32) -> bool {
    let mut info = [0u8; 8];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live buffer.
    let r = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, info.as_mut_ptr() as *mut libc::c_void, &mut len) };
    r == 0 && info[0] == 1 // TCP_ESTABLISHED
}

/// The sockets of a job, from what each process holds ((program pid, its sockets)): every
/// socket held by more than one process, or whose other end is held by another process,
/// as (inode, the other end's inode); 0 for a socket held by several processes that is not
/// an end of a connection inside the job. A restart makes each once.
pub fn job_sockets(held: &[(i32, Vec<SockEnd>)]) -> Vec<(u64, u64)> {
    let holders = |ino: u64| {
        let mut p: Vec<i32> = held.iter().filter(|(_, v)| v.iter().any(|e| e.ino == ino)).map(|(p, _)| *p).collect();
        p.dedup();
        p
    };
    let all: Vec<&SockEnd> = held.iter().flat_map(|(_, v)| v.iter()).collect();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for e in &all {
        if out.iter().any(|o| o.0 == e.ino) {
            continue;
        }
        let partner = all.iter().find(|o| {
            o.ino != e.ino
                && match (&e.tcp, &o.tcp) {
                    (Some((l, p)), Some((ol, op))) => l == op && p == ol,
                    (None, None) => e.peer != 0 && o.ino == e.peer && o.peer == e.ino,
                    _ => false,
                }
        });
        let mut procs = holders(e.ino);
        if let Some(o) = partner {
            procs.extend(holders(o.ino));
            procs.sort_unstable();
            procs.dedup();
        }
        if procs.len() > 1 {
            out.push((e.ino, partner.map_or(0, |o| o.ino)));
        }
    }
    out
}

/// The bytes buffered in the pipe whose read end is `fd`, left in it (`tee` into a pipe of
/// the same capacity).
pub fn peek_pipe(fd: i32) -> Result<Vec<u8>, String> {
    // SAFETY: F_GETPIPE_SZ on our descriptor.
    let size = unsafe { libc::fcntl(fd, libc::F_GETPIPE_SZ) };
    if size <= 0 {
        return Err(format!("fd {fd}: not a pipe"));
    }
    let mut p = [0i32; 2];
    // SAFETY: pipe2 into the live array.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(format!("cannot peek into pipe fd {fd}: {}", std::io::Error::last_os_error()));
    }
    let mut out = Vec::new();
    // SAFETY: our temporary pipe; tee duplicates without consuming; read into live buffers.
    let r = unsafe {
        libc::fcntl(p[1], libc::F_SETPIPE_SZ, size);
        let n = libc::tee(fd, p[1], size as usize, libc::SPLICE_F_NONBLOCK);
        if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN) {
            Err(format!("cannot peek into pipe fd {fd}: {}", std::io::Error::last_os_error()))
        } else {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let k = libc::read(p[0], buf.as_mut_ptr() as *mut libc::c_void, buf.len());
                if k <= 0 {
                    break;
                }
                out.extend_from_slice(&buf[..k as usize]);
            }
            Ok(())
        }
    };
    // SAFETY: our temporary pipe, closed once.
    unsafe {
        libc::close(p[0]);
        libc::close(p[1]);
    }
    r.map(|()| out)
}

/// Turns the descriptors of `fds` that are ends of `pipes` (the job's, with their
/// carriers) into [`FdKind::JobPipe`]; this process's part carries the bytes of those whose
/// carrier is `me` (with its first read end).
pub fn mark_pipes(fds: &mut [crate::state::FdState], pipes: &[(u64, i32)], me: i32) -> Vec<String> {
    use crate::state::FdKind;
    let mut problems = Vec::new();
    let mut carried: Vec<u64> = Vec::new();
    for f in fds.iter_mut() {
        if let FdKind::Fifo { id, data, lost, .. } = &mut f.kind {
            // A named pipe between processes of the job: its bytes go with the carrier's
            // first readable descriptor of it, once in the job.
            let Some(&(_, carrier)) = pipes.iter().find(|p| p.0 == *id) else { continue };
            data.clear();
            lost.clear();
            let readable = (f.flags as i32) & libc::O_ACCMODE != libc::O_WRONLY;
            if readable && carrier == me && !carried.contains(id) {
                carried.push(*id);
                match peek_pipe(f.fd) {
                    Ok(d) => *data = d,
                    Err(e) => problems.push(e),
                }
            }
            continue;
        }
        let Some(id) = fd_inode(f.fd, "pipe") else { continue };
        let Some(&(_, carrier)) = pipes.iter().find(|p| p.0 == id) else { continue };
        let read = (f.flags as i32) & libc::O_ACCMODE == libc::O_RDONLY;
        // SAFETY: F_GETPIPE_SZ on our descriptor.
        let size = unsafe { libc::fcntl(f.fd, libc::F_GETPIPE_SZ) }.max(0) as u32;
        let data = if read && carrier == me && !carried.contains(&id) {
            carried.push(id);
            match peek_pipe(f.fd) {
                Ok(d) => d,
                Err(e) => {
                    problems.push(e);
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        f.kind = FdKind::JobPipe { id, read, size, data };
    }
    problems
}

/// A step of the coordinated cut (one JSON line each way).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Msg {
    /// Member → root: its threads are stopped; the pid its program knows; the pipes it
    /// holds ends of (id, read end).
    Stopped {
        pid: i32,
        pipes: Vec<(u64, bool)>,
        #[serde(default)]
        socks: Vec<SockEnd>,
        /// Its descriptors of regular files: (fd, device, inode) ([`own_files`]).
        #[serde(default)]
        files: Vec<(i32, u64, u64)>,
        /// Its children stopped by a signal: (kernel pid, the stop signal its
        /// `waitpid(WUNTRACED)` would report, or 0: taken already) ([`own_stopped_children`]).
        #[serde(default)]
        stopped: Vec<(i32, i32)>,
    },
    /// Root → member: capture and fork the writer. `pipes`: the pipes between processes of
    /// the job, each with the pid of the process whose part carries its bytes; `zombies`:
    /// the job's processes and the exited children the manifest holds (kernel pids: a
    /// member's children among them are not named as lost).
    GoCut {
        pipes: Vec<(u64, i32)>,
        #[serde(default)]
        zombies: Vec<i32>,
        /// The job's sockets ([`job_sockets`]).
        #[serde(default)]
        socks: Vec<(u64, u64)>,
        /// The open file descriptions of regular files shared by several processes of the
        /// job ([`job_files`]).
        #[serde(default)]
        files: Vec<(u64, i32, i32)>,
        /// The members stopped by a signal that the cut continued and that stop again once
        /// it is made: (kernel pid, program pid). Their parents take the reports and
        /// `SIGCHLD` that makes before they run again.
        #[serde(default)]
        restopped: Vec<(i32, i32)>,
    },
    /// Member → root: the writer is forked; what a restart of its part cannot restore.
    Cut {
        problems: Vec<String>,
        /// Its shared memory mappings (made shared again at restart where another process
        /// of the job maps the same object).
        #[serde(default)]
        shared: Vec<ShmMap>,
        /// Its image writer's pid (0: none running): should the process end before it says
        /// `Written` (the program exits right after the cut), the root waits for the writer
        /// to complete the part instead of failing the checkpoint.
        #[serde(default)]
        writer: i32,
    },
    /// Root → member: run again.
    GoResume,
    /// Root → member: do not run again: complete the part, say so, and end (exit code 75:
    /// `crum checkpoint --exit`, `--on-signal SIG --exit`).
    GoExit,
    /// Member → root: its part is complete.
    Written,
    /// Root → member: give up (release the threads, remove what was written).
    Abort,
    /// Member → root: this step failed.
    Failed(String),
}

/// The state letter of process `pid` (`/proc/<pid>/stat`; '?' when gone).
pub fn state_of(pid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rfind(')').and_then(|b| stat[b + 1..].trim_start().chars().next()).unwrap_or('?')
}

/// The threads of process `pid` (kernel tids).
fn tasks_of(pid: i32) -> Vec<i32> {
    let mut v: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok())).collect())
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// A signal mask line (`SigCgt:`, `SigBlk:`…) of a /proc status text.
fn mask_of(status: &str, key: &str) -> u64 {
    status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(0)
}

/// crum's own threads, by the names it gives them (they get no held signal: they block all
/// but the stop signal, and never run the program's code).
fn is_crum_task(pid: i32, tid: i32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default();
    matches!(comm.trim(), "crum-control" | "crum-agent" | "crum-signal")
}

/// Why a member of the job stopped by a signal (state `T`) cannot be continued for the cut
/// without the program seeing it, if it cannot: its own `SIGCONT` handler would run (a
/// restart would run it again, or the original would run it twice), or a thread of it
/// blocks crum's stop signal (it would run the program's code before crum's).
pub fn hold_refusal(pid: i32, vpid: i32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let bit = |sig: i32| 1u64 << (sig - 1);
    if mask_of(&status, "SigCgt:") & bit(libc::SIGCONT) != 0 {
        return Some(format!(
            "process {vpid} is stopped and handles SIGCONT: continuing it for the checkpoint would run its handler; continue it (kill -CONT {pid}) and try again"
        ));
    }
    let stop = crate::threads::stop_signal();
    // Every signal that can be blocked (the C library's own two aside): the mask crum's
    // threads start with, before they unblock the stop signal and take their names (a
    // child stopped right after `fork`), and the mask of crum's handler, where a member that
    // stopped again after a cut has its threads (they return from it, into a pending held
    // signal, when it is continued).
    let all = !(bit(libc::SIGKILL) | bit(libc::SIGSTOP));
    let crums = |m: u64| (m | bit(32) | bit(33)) == all;
    for tid in tasks_of(pid) {
        let st = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap_or_default();
        let blocked = mask_of(&st, "SigBlk:");
        // A thread that stopped itself (`raise(SIGSTOP)`: the C library blocks every signal
        // around its `tgkill`) unblocks them as it returns, and enters crum's handler then,
        // having run nothing of the program's.
        let sc = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap_or_default();
        let nr = sc.split_whitespace().next().and_then(|v| v.parse::<i64>().ok()).unwrap_or(-1);
        let raised = [libc::SYS_tgkill, libc::SYS_tkill, libc::SYS_kill].contains(&nr);
        if !is_crum_task(pid, tid) && blocked & bit(stop) != 0 && !crums(blocked) && !raised {
            return Some(format!(
                "process {vpid} is stopped and its thread {tid} blocks crum's stop signal ({}): it could not be held while continued for the checkpoint",
                crate::threads::stop_signal_name()
            ));
        }
    }
    None
}

/// Continues member `pid`, stopped by a signal, so that its agent can take part in the cut,
/// without any instruction of its program running: crum's stop signal is queued to each
/// program thread first (`SI_QUEUE`, [`crate::threads::HOLD_MAGIC`]), so each thread enters
/// crum's handler as it wakes and waits there for its agent ([`crate::threads`]'s `hold`).
/// Returns what each thread was blocked in (tid, system call, pc), which its agent needs to
/// make an interrupted call go on ([`crate::threads::set_held`]).
pub fn continue_held(pid: i32) -> Result<Vec<(i32, i64, u64)>, String> {
    let stop = crate::threads::stop_signal();
    let mut held = Vec::new();
    for tid in tasks_of(pid) {
        if is_crum_task(pid, tid) {
            continue;
        }
        let sc = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap_or_default();
        let f: Vec<&str> = sc.split_whitespace().collect();
        let nr = f.first().and_then(|v| v.parse::<i64>().ok()).unwrap_or(-1);
        let pc = if f.len() >= 9 { u64::from_str_radix(f[f.len() - 1].trim_start_matches("0x"), 16).unwrap_or(0) } else { 0 };
        // SAFETY: a zeroed siginfo_t filled as rt_tgsigqueueinfo expects for SI_QUEUE (code,
        // sender, value); the target is a thread of a process of our job.
        let r = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let raw = &mut info as *mut libc::siginfo_t as *mut i32;
            *raw = stop; // si_signo
            *raw.add(2) = libc::SI_QUEUE; // si_code
            *raw.add(4) = crate::threads::real_pid(); // si_pid
            *raw.add(5) = libc::getuid() as i32; // si_uid
            *(raw.add(6) as *mut u64) = crate::threads::HOLD_MAGIC; // si_value
            libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, tid, stop, &info as *const libc::siginfo_t)
        };
        if r != 0 {
            return Err(format!("cannot hold thread {tid} of stopped process {pid}: {}", std::io::Error::last_os_error()));
        }
        held.push((tid, nr, pc));
    }
    // SAFETY: SIGCONT to a process of our job.
    if unsafe { libc::kill(pid, libc::SIGCONT) } != 0 {
        return Err(format!("cannot continue stopped process {pid}: {}", std::io::Error::last_os_error()));
    }
    Ok(held)
}

/// This process's children stopped by a signal, and what `waitpid(WUNTRACED)` would tell
/// of each now without taking it (kernel pid, the stop signal, or 0: no report waiting, the
/// program took it). Asked while the program's threads are stopped.
pub fn own_stopped_children() -> Vec<(i32, i32)> {
    let me = crate::threads::real_pid();
    let mut kids: Vec<i32> = Vec::new();
    for t in tasks_of(me) {
        let list = std::fs::read_to_string(format!("/proc/{me}/task/{t}/children")).unwrap_or_default();
        kids.extend(list.split_whitespace().filter_map(|w| w.parse::<i32>().ok()));
    }
    kids.into_iter()
        .filter(|&k| state_of(k) == 'T')
        .map(|k| {
            // SAFETY: waitid with WNOWAIT|WNOHANG into a live siginfo: takes nothing.
            let sig = unsafe {
                let mut si: libc::siginfo_t = std::mem::zeroed();
                let r = libc::syscall(
                    libc::SYS_waitid,
                    libc::P_PID,
                    k,
                    &mut si as *mut libc::siginfo_t,
                    libc::WSTOPPED | libc::WNOHANG | libc::WNOWAIT,
                    0,
                );
                if r == 0 && si.si_pid() == k && si.si_code == libc::CLD_STOPPED {
                    si.si_status()
                } else {
                    0
                }
            };
            (k, sig)
        })
        .collect()
}

/// Whether process `pid` exists and has not exited (not a zombie).
pub fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rfind(')').and_then(|b| stat[b + 1..].trim_start().chars().next()).is_some_and(|c| c != 'Z' && c != 'X')
}

/// Whether the part at `part` (a job part's final directory) is complete, once the image
/// writer `writer` (a kernel pid; 0: none) of a process that ended without saying so has
/// finished: it completes the part by renaming it into place, or fails and leaves none.
pub fn part_completed(part: &Path, writer: i32) -> bool {
    let t0 = std::time::Instant::now();
    while !part.is_dir() && writer > 0 && alive(writer) && t0.elapsed() < Duration::from_secs(3600) {
        std::thread::sleep(Duration::from_millis(5));
    }
    part.is_dir()
}

/// One end of a member's connection to the root.
pub struct Link {
    stream: UnixStream,
}

/// How long the root waits for a member's answer to a step (the writers' completion is
/// waited for as long as the member lives).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);

impl Link {
    pub fn new(stream: UnixStream) -> Link {
        Link { stream }
    }

    /// Its descriptor (crum's: kept out of the image).
    pub fn fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.stream.as_raw_fd()
    }

    pub fn send(&mut self, m: &Msg) -> Result<(), String> {
        let mut line = serde_json::to_vec(m).map_err(|e| e.to_string())?;
        line.push(b'\n');
        self.stream.write_all(&line).map_err(|e| format!("cannot send to the job: {e}"))
    }

    /// The next message; None after `limit` (None: no limit) or when the other side is gone.
    pub fn recv(&mut self, limit: Option<Duration>) -> Option<Msg> {
        let _ = self.stream.set_read_timeout(limit);
        // One byte at a time: a step never has more than one line in flight.
        let mut r = BufReader::with_capacity(1, (&self.stream).take(64 << 10));
        let mut line = Vec::new();
        r.read_until(b'\n', &mut line).ok()?;
        if line.last() != Some(&b'\n') {
            return None;
        }
        serde_json::from_slice(&line[..line.len() - 1]).ok()
    }
}

/// The pids of a restarted job: a memfd of `n` slots (the pid the program knows, the
/// kernel's now), made by the root's restorer, inherited by the others; each restorer fills
/// its own slot, and each restored agent waits until every slot is filled.
pub struct PidTable;

impl PidTable {
    /// A table for `pids` (the programs' pids), nothing filled; the descriptor is inherited
    /// across exec (the restorers of the other processes are executed with it).
    pub fn create(pids: &[i32]) -> Result<i32, String> {
        // SAFETY: memfd_create with a NUL-terminated name; flags 0 (no close-on-exec).
        let fd = unsafe { libc::memfd_create(c"crum-job-table".as_ptr(), 0) };
        if fd < 0 {
            return Err(format!("cannot create the job's pid table: {}", std::io::Error::last_os_error()));
        }
        let mut b = Vec::with_capacity(8 * (pids.len() + 1));
        b.extend_from_slice(&(pids.len() as i32).to_ne_bytes());
        b.extend_from_slice(&0i32.to_ne_bytes());
        for p in pids {
            b.extend_from_slice(&p.to_ne_bytes());
            b.extend_from_slice(&0i32.to_ne_bytes());
        }
        Self::write_at(fd, &b, 0)?;
        Ok(fd)
    }

    fn write_at(fd: i32, b: &[u8], at: u64) -> Result<(), String> {
        // SAFETY: pwrite from a live buffer.
        let n = unsafe { libc::pwrite(fd, b.as_ptr() as *const libc::c_void, b.len(), at as libc::off_t) };
        if n != b.len() as isize {
            return Err(format!("cannot write the job's pid table: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Records that slot `index` runs as kernel pid `now`.
    pub fn fill(fd: i32, index: usize, now: i32) -> Result<(), String> {
        Self::write_at(fd, &now.to_ne_bytes(), 8 * (index as u64 + 1) + 4)
    }

    /// The table as it is: (the program's pid, the kernel's; 0 while not filled).
    pub fn read(fd: i32) -> Vec<(i32, i32)> {
        let mut head = [0u8; 8];
        // SAFETY: pread into live buffers.
        if unsafe { libc::pread(fd, head.as_mut_ptr() as *mut libc::c_void, 8, 0) } != 8 {
            return Vec::new();
        }
        let n = (i32::from_ne_bytes([head[0], head[1], head[2], head[3]]).max(0) as usize).min(MAX_MEMBERS);
        let mut b = vec![0u8; 8 * n];
        // SAFETY: as above.
        if unsafe { libc::pread(fd, b.as_mut_ptr() as *mut libc::c_void, b.len(), 8) } != b.len() as isize {
            return Vec::new();
        }
        b.chunks_exact(8)
            .map(|c| (i32::from_ne_bytes([c[0], c[1], c[2], c[3]]), i32::from_ne_bytes([c[4], c[5], c[6], c[7]])))
            .collect()
    }

    /// The kernel pid slot `index` is filled with (-1: that process could not be restarted),
    /// or 0 when it is still empty after `limit`. Reads no clock (a restorer waits here after
    /// it moved the vDSO, where the C library's `clock_gettime` would jump into nothing): it
    /// counts its sleeps of a millisecond, so it may wait longer than `limit`, never less.
    pub fn wait_slot(fd: i32, index: usize, limit: Duration) -> i32 {
        let mut slept = Duration::ZERO;
        loop {
            let now = Self::read(fd).get(index).map_or(-1, |s| s.1);
            if now != 0 || slept >= limit {
                return now;
            }
            std::thread::sleep(Duration::from_millis(1));
            slept += Duration::from_millis(1);
        }
    }

    /// The table once every slot is filled, or as it is after `limit`.
    pub fn wait_complete(fd: i32, limit: Duration) -> Vec<(i32, i32)> {
        let t0 = std::time::Instant::now();
        loop {
            let t = Self::read(fd);
            // Complete, or a process of the job could not be restarted (-1).
            if t.iter().all(|&(_, r)| r != 0) || t.iter().any(|&(_, r)| r < 0) || t0.elapsed() >= limit {
                return t;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(pid: i32, ppid: i32) -> Member {
        Member { pid, ppid, part: format!("p-{pid}"), comm: "x".into(), pgid: 0, sid: 0 }
    }

    #[test]
    fn groups_and_sessions_are_recorded_by_their_leaders_program_pids() {
        // Kernel pids 100 (root), 101, 102, 103; the launcher's group 50, session 40.
        let ids = [(100, 100, 40), (101, 50, 40), (102, 102, 102), (103, 102, 102), (104, 77, 40)];
        let (out, problems) = job_groups(&ids, (50, 40), |k| k - 90);
        assert_eq!(out, vec![(10, 10, 0), (11, 0, 0), (12, 12, 12), (13, 12, 12), (14, 0, 0)]);
        // Group 77 has no leader in the job: named, never silently changed.
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("process 14") && problems[0].contains("process group 77"), "{problems:?}");
    }

    #[test]
    fn a_group_outside_the_job_is_refused_in_a_manifest() {
        let mut m = Manifest {
            version: VERSION,
            root: 10,
            members: vec![member(10, 1), member(11, 10)],
            zombies: Vec::new(),
            shared: Vec::new(),
        };
        m.members[1].pgid = 10;
        m.members[1].sid = 11;
        assert!(m.check().is_ok());
        m.members[1].pgid = 99;
        assert!(m.check().unwrap_err().contains("process group 99"));
    }

    #[test]
    fn manifests_are_checked() {
        let good = Manifest {
            version: VERSION,
            root: 10,
            members: vec![member(10, 1), member(11, 10), member(12, 11)],
            zombies: vec![Zombie { pid: 20, ppid: 11, status: 7 << 8 }],
            shared: vec![SharedSeg { pid: 11, start: 0x1000, end: 0x3000, obj: 0, offset: 0 }],
        };
        assert_eq!(good.table_pids(), vec![10, 11, 12, 20]);
        let foreign = Manifest { shared: vec![SharedSeg { pid: 99, start: 0x1000, end: 0x2000, obj: 0, offset: 0 }], ..good.clone() };
        assert!(foreign.check().is_err());
        let empty = Manifest { shared: vec![SharedSeg { pid: 10, start: 0x2000, end: 0x2000, obj: 0, offset: 0 }], ..good.clone() };
        assert!(empty.check().is_err());
        let stray = Manifest { zombies: vec![Zombie { pid: 21, ppid: 99, status: 0 }], ..good.clone() };
        assert!(stray.check().unwrap_err().contains("not in the job"));
        assert_eq!(good.check(), Ok(()));
        assert_eq!(good.children(10).map(|m| m.pid).collect::<Vec<_>>(), vec![11]);
        let orphan = Manifest { members: vec![member(10, 1), member(11, 99)], ..good.clone() };
        assert!(orphan.check().unwrap_err().contains("not in the job"));
        let cycle = Manifest { members: vec![member(10, 1), member(11, 12), member(12, 11)], ..good.clone() };
        assert!(cycle.check().unwrap_err().contains("does not descend"));
        let mut bad_part = good.clone();
        bad_part.members[1].part = "../x".into();
        assert!(bad_part.check().is_err());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MANIFEST), good.encode()).unwrap();
        assert_eq!(Manifest::read(dir.path()), Ok(good));
        assert!(is_job_image(dir.path()));
    }

    #[test]
    fn pipes_between_processes_are_the_jobs_and_the_lowest_reader_carries_them() {
        let held = vec![(10, vec![(1, true), (1, false), (2, false)]), (11, vec![(2, true), (3, true)]), (12, vec![(1, true)])];
        // 1: ends in 10 and 12, carried by 10; 2: 10 writes, 11 reads; 3: only a read end.
        assert_eq!(job_pipes(&held), vec![(1, 10), (2, 11)]);
        let own = vec![(10, vec![(4, true), (4, false)])];
        assert_eq!(job_pipes(&own), vec![]);
    }

    #[test]
    fn shared_memory_mapped_twice_is_the_jobs() {
        let m = |start: u64, ino: u64| ShmMap { start, end: start + 0x1000, dev: "00:01".into(), ino, offset: 0 };
        let held = vec![(10, vec![m(0x1000, 5), m(0x5000, 6)]), (11, vec![m(0x1000, 5), m(0x7000, 7)]), (12, vec![m(0x9000, 8), m(0xa000, 8)])];
        let segs = shared_segments(&held);
        let objs: Vec<(i32, u64, u32)> = segs.iter().map(|g| (g.pid, g.start, g.obj)).collect();
        // Inode 5 in two processes, inode 8 twice in one; 6 and 7 are one process's own.
        assert_eq!(objs, vec![(10, 0x1000, 0), (11, 0x1000, 0), (12, 0x9000, 1), (12, 0xa000, 1)]);
    }

    #[test]
    fn peeking_leaves_the_bytes_in_the_pipe() {
        let mut p = [0i32; 2];
        // SAFETY: pipe into the live array; our own descriptors below.
        unsafe {
            assert_eq!(libc::pipe(p.as_mut_ptr()), 0);
            assert_eq!(libc::write(p[1], b"hello".as_ptr() as *const libc::c_void, 5), 5);
        }
        assert_eq!(peek_pipe(p[0]).unwrap(), b"hello");
        let mut b = [0u8; 8];
        // SAFETY: as above.
        let n = unsafe { libc::read(p[0], b.as_mut_ptr() as *mut libc::c_void, 8) };
        assert_eq!(&b[..n as usize], b"hello");
        // SAFETY: as above.
        unsafe {
            libc::close(p[0]);
            libc::close(p[1]);
        }
    }

    #[test]
    fn pid_table_fills() {
        let fd = PidTable::create(&[10, 11]).unwrap();
        assert_eq!(PidTable::read(fd), vec![(10, 0), (11, 0)]);
        PidTable::fill(fd, 1, 77).unwrap();
        PidTable::fill(fd, 0, 76).unwrap();
        assert_eq!(PidTable::wait_complete(fd, Duration::from_secs(5)), vec![(10, 76), (11, 77)]);
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn link_exchanges_steps() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut a, mut b) = (Link::new(a), Link::new(b));
        a.send(&Msg::Stopped { pid: 5, pipes: vec![(9, true)], socks: Vec::new(), files: vec![(1, 2, 3)], stopped: Vec::new() }).unwrap();
        assert_eq!(
            b.recv(Some(Duration::from_secs(5))),
            Some(Msg::Stopped { pid: 5, pipes: vec![(9, true)], socks: Vec::new(), files: vec![(1, 2, 3)], stopped: Vec::new() })
        );
        b.send(&Msg::Cut { problems: vec!["p".into()], shared: Vec::new(), writer: 7 }).unwrap();
        assert_eq!(a.recv(None), Some(Msg::Cut { problems: vec!["p".into()], shared: Vec::new(), writer: 7 }));
        drop(b);
        assert_eq!(a.recv(None), None);
    }
}
