//! Reading the state of the calling process while its other threads are stopped: memory
//! map, open files, signal dispositions, timers, limits, working directory.
//!
//! # Safety
//! Only plain system calls into locals (`rt_sigaction`, `getitimer`, `fstat`, `fcntl`,
//! `getrlimit`, `umask`, `brk(0)`), each documented at its use.
#![allow(unsafe_code)]

use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::state::{EpollWatch, FdAttr, FdKind, FdState, FileLock, LockKind, PendingSignal, PosixTimer, Region, RegionKind, SigAction, Special, ADVICE};

/// Names of the kernel special mappings that must follow the program to the same address.
pub const SPECIAL_NAMES: [&str; 3] = ["[vvar]", "[vvar_vclock]", "[vdso]"];

/// The numeric entries of a directory (e.g. /proc/self/task), sorted. Uses raw `getdents64`
/// rather than `opendir`, which calls the C library's `malloc` — a lock that a stopped
/// thread may hold.
pub fn numeric_entries(dir: &std::ffi::CStr) -> Vec<i32> {
    let mut out = Vec::new();
    // SAFETY: open/getdents64/close on our own fd with a live stack buffer; entries are
    // parsed within the byte count the kernel returned.
    unsafe {
        let fd = libc::open(dir.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC);
        if fd < 0 {
            return out;
        }
        let mut buf = [0u8; 8192];
        loop {
            let n = libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len());
            if n <= 0 {
                break;
            }
            let mut off = 0usize;
            while off + 19 < n as usize {
                let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
                if reclen == 0 {
                    break;
                }
                let name = &buf[off + 19..off + reclen];
                let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
                if let Some(v) = std::str::from_utf8(name).ok().and_then(|s| s.parse().ok()) {
                    out.push(v);
                }
                off += reclen;
            }
        }
        libc::close(fd);
    }
    out.sort_unstable();
    out
}

/// One line of /proc/<pid>/maps.
#[derive(Debug, Clone, PartialEq)]
pub struct MapsEntry {
    pub start: u64,
    pub end: u64,
    pub prot: u32,
    pub shared: bool,
    pub offset: u64,
    /// The device (`major:minor`, hexadecimal) and inode of what is mapped.
    pub dev: String,
    pub inode: u64,
    pub name: String,
}

/// Parses /proc/<pid>/maps text.
pub fn parse_maps(text: &str) -> Result<Vec<MapsEntry>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.splitn(6, ' ');
        let (range, perms, off, dev, ino) = match (it.next(), it.next(), it.next(), it.next(), it.next()) {
            (Some(a), Some(b), Some(c), Some(d), Some(e)) => (a, b, c, d, e),
            _ => return Err(format!("malformed maps line: {line}")),
        };
        let name = it.next().unwrap_or("").trim_start().to_string();
        let (s, e) = range.split_once('-').ok_or_else(|| format!("malformed maps range: {line}"))?;
        let p = perms.as_bytes();
        if p.len() < 4 {
            return Err(format!("malformed maps permissions: {line}"));
        }
        let mut prot = 0;
        if p[0] == b'r' {
            prot |= libc::PROT_READ as u32;
        }
        if p[1] == b'w' {
            prot |= libc::PROT_WRITE as u32;
        }
        if p[2] == b'x' {
            prot |= libc::PROT_EXEC as u32;
        }
        let hex = |v: &str| u64::from_str_radix(v, 16).map_err(|_| format!("malformed maps number in: {line}"));
        out.push(MapsEntry {
            start: hex(s)?,
            end: hex(e)?,
            prot,
            shared: p[3] == b's',
            offset: hex(off)?,
            dev: dev.to_string(),
            inode: ino.parse().map_err(|_| format!("malformed maps inode in: {line}"))?,
            name,
        });
    }
    Ok(out)
}

/// Reads this process's memory map.
pub fn own_maps() -> Result<Vec<MapsEntry>, String> {
    let text = std::fs::read_to_string("/proc/self/maps").map_err(|e| format!("cannot read /proc/self/maps: {e}"))?;
    parse_maps(&text)
}

/// Splits a memory map into restorable regions and special mappings. The region holding
/// `main_sp` (or named `[stack]`) is the main stack.
pub fn classify(maps: &[MapsEntry], main_sp: u64) -> (Vec<Region>, Vec<Special>) {
    let mut regions = Vec::new();
    let mut specials = Vec::new();
    for m in maps {
        if m.name == "[vsyscall]" {
            continue;
        }
        if SPECIAL_NAMES.contains(&m.name.as_str()) {
            specials.push(Special { name: m.name.clone(), start: m.start, end: m.end });
            continue;
        }
        let kind = if m.shared {
            let plain_file = m.name.starts_with('/')
                && !m.name.ends_with(" (deleted)")
                && !m.name.starts_with("/memfd:")
                && !m.name.starts_with("/SYSV")
                && m.name != "/dev/zero"
                && m.inode != 0;
            if plain_file {
                RegionKind::SharedFile { path: m.name.clone(), offset: m.offset }
            } else {
                RegionKind::SharedAnon
            }
        } else {
            RegionKind::Private
        };
        let has_data = !matches!(kind, RegionKind::SharedFile { .. });
        let growsdown = matches!(kind, RegionKind::Private)
            && (m.name == "[stack]" || (m.name.is_empty() && (m.start..m.end).contains(&main_sp)));
        regions.push(Region { start: m.start, end: m.end, prot: m.prot, kind, name: m.name.clone(), has_data, growsdown });
    }
    (regions, specials)
}

/// The advice and locks on the given regions (`VmFlags` of /proc/self/smaps, [`ADVICE`]),
/// as (start, end, bits) for the mappings that have any; and marks the private regions the
/// kernel grows down on demand (`VmFlags` "gd": `MAP_GROWSDOWN`, the main stack or a
/// program's own such mapping) as [`Region::growsdown`].
pub fn advice(regions: &mut [Region]) -> Vec<(u64, u64, u32)> {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    for (a, b) in parse_growsdown(&text) {
        for r in regions.iter_mut().filter(|r| matches!(r.kind, RegionKind::Private) && r.start == a && r.end == b) {
            r.growsdown = true;
        }
    }
    parse_advice(&text).into_iter().filter(|&(a, b, _)| regions.iter().any(|r| r.start <= a && b <= r.end)).collect()
}

/// Each smaps entry's range with the tokens of its `VmFlags` line.
fn vm_flags(smaps: &str) -> impl Iterator<Item = ((u64, u64), &str)> {
    let mut range = None;
    smaps.lines().filter_map(move |l| {
        if let Some(flags) = l.strip_prefix("VmFlags:") {
            return range.take().map(|r| (r, flags));
        }
        if let Some((r, _)) = l.split_once(' ') {
            if let Some((a, b)) = r.split_once('-') {
                if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                    range = Some((a, b));
                }
            }
        }
        None
    })
}

/// (start, end, [`ADVICE`] bits) of each smaps entry with any.
pub fn parse_advice(smaps: &str) -> Vec<(u64, u64, u32)> {
    vm_flags(smaps)
        .filter_map(|((a, b), flags)| {
            let bits = flags
                .split_whitespace()
                .filter_map(|t| ADVICE.iter().position(|(name, _)| *name == t))
                .fold(0u32, |b, i| b | 1 << i);
            (bits != 0).then_some((a, b, bits))
        })
        .collect()
}

/// The ranges of the smaps entries that grow down on demand (`VmFlags` "gd").
pub fn parse_growsdown(smaps: &str) -> Vec<(u64, u64)> {
    vm_flags(smaps).filter(|(_, flags)| flags.split_whitespace().any(|t| t == "gd")).map(|(r, _)| r).collect()
}

/// Every signal's disposition (kernel `struct sigaction` layout).
pub fn sigactions() -> Vec<SigAction> {
    let mut out = Vec::new();
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let mut k = [0u64; 4];
        // SAFETY: rt_sigaction(sig, NULL, &old, 8) writes the kernel struct into `k`
        // (handler, flags, restorer, mask: 4 × u64 on x86-64).
        let r = unsafe { libc::syscall(libc::SYS_rt_sigaction, sig, std::ptr::null::<u8>(), k.as_mut_ptr(), 8) };
        if r == 0 {
            out.push(SigAction { sig, handler: k[0], flags: k[1], restorer: k[2], mask: k[3] });
        }
    }
    out
}

/// A mask line (`SigPnd:`) of a status file.
fn status_mask(status: &str, key: &str) -> u64 {
    status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(0)
}

/// The signals sent to the process and not taken yet, in queue order (taken and put back by
/// the main thread when it stopped: `threads::take_pending_signals`), and what a restart
/// cannot bring back: signals sent to one thread alone, and any beyond what crum keeps.
pub fn pending_signals(threads: &[i32]) -> (Vec<PendingSignal>, Vec<String>) {
    let (list, lost) = crate::threads::pending_signals();
    let out = list.into_iter().map(|(sig, info)| PendingSignal { sig, info }).collect();
    let mut problems = Vec::new();
    if lost > 0 {
        problems.push(format!("{lost} queued signal(s) beyond the {} crum keeps: a restart does not bring them back", crate::threads::MAX_PENDING));
    }
    for &tid in threads {
        let st = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap_or_default();
        let private = status_mask(&st, "SigPnd:") & !(1u64 << (crate::threads::stop_signal() - 1));
        if private != 0 {
            problems.push(format!("thread {tid} has signals sent to it alone waiting (mask {private:#x}): a restart does not bring them back"));
        }
    }
    (out, problems)
}

/// Clocks a POSIX timer can be made on again: `CLOCK_REALTIME`, `CLOCK_MONOTONIC`,
/// `CLOCK_PROCESS_CPUTIME_ID`, `CLOCK_BOOTTIME`, `CLOCK_REALTIME_ALARM`,
/// `CLOCK_BOOTTIME_ALARM`, `CLOCK_TAI`.
const TIMER_CLOCKS: [i32; 7] = [0, 1, 2, 7, 8, 9, 11];

/// Parses /proc/self/timers (`ID:`, `signal: N/value`, `notify: kind/pid.N|tid.N`,
/// `ClockID:`) into (id, signo, value, notify word, tid-directed, target, clock).
pub fn parse_timers(text: &str) -> Vec<(i32, i32, u64, String, bool, i32, i32)> {
    let mut out = Vec::new();
    let mut cur: Option<(i32, i32, u64, String, bool, i32, i32)> = None;
    for l in text.lines() {
        let Some((k, v)) = l.split_once(':') else { continue };
        let v = v.trim();
        match k.trim() {
            "ID" => {
                out.extend(cur.take());
                cur = v.parse().ok().map(|id| (id, 0, 0, String::new(), false, 0, -1));
            }
            "signal" => {
                if let (Some(c), Some((n, val))) = (cur.as_mut(), v.split_once('/')) {
                    c.1 = n.parse().unwrap_or(0);
                    c.2 = u64::from_str_radix(val, 16).unwrap_or(0);
                }
            }
            "notify" => {
                if let (Some(c), Some((kind, target))) = (cur.as_mut(), v.split_once('/')) {
                    c.3 = kind.to_string();
                    c.4 = target.starts_with("tid.");
                    c.5 = target.split_once('.').and_then(|(_, n)| n.parse().ok()).unwrap_or(0);
                }
            }
            "ClockID" => {
                if let Some(c) = cur.as_mut() {
                    c.6 = v.parse().unwrap_or(-1);
                }
            }
            _ => {}
        }
    }
    out.extend(cur);
    out
}

/// The process's POSIX timers (`timer_create`) with the time left on each, and what cannot
/// be made again (named): a timer aimed at a thread other than the main one (glibc's
/// `SIGEV_THREAD` timers notify a helper thread), or on another clock.
pub fn posix_timers() -> (Vec<PosixTimer>, Vec<String>) {
    let text = std::fs::read_to_string("/proc/self/timers").unwrap_or_default();
    let pid = crate::threads::real_pid();
    let (mut out, mut problems) = (Vec::new(), Vec::new());
    for (id, signo, value, kind, to_tid, target, clock) in parse_timers(&text) {
        let notify = match kind.as_str() {
            "signal" => libc::SIGEV_SIGNAL,
            "none" => libc::SIGEV_NONE,
            _ => -1,
        };
        if notify < 0 || (to_tid && target != pid) {
            problems.push(format!(
                "POSIX timer {id} notifies {} (a SIGEV_THREAD timer, or one aimed at a thread other than the main one): a restart does not bring it back",
                if to_tid { format!("thread {target}") } else { format!("by '{kind}'") }
            ));
            continue;
        }
        if !TIMER_CLOCKS.contains(&clock) {
            problems.push(format!("POSIX timer {id} runs on clock {clock}: a restart does not bring it back"));
            continue;
        }
        // SAFETY: timer_gettime of one of our timers into a live local.
        let mut cur: libc::itimerspec = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::syscall(libc::SYS_timer_gettime, id, &mut cur) } != 0 {
            continue;
        }
        let ns = |t: libc::timespec| t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
        out.push(PosixTimer {
            id,
            clock,
            notify: notify | if to_tid { libc::SIGEV_THREAD_ID } else { 0 },
            signo,
            value,
            value_ns: ns(cur.it_value),
            interval_ns: ns(cur.it_interval),
        });
    }
    out.sort_by_key(|t| t.id);
    (out, problems)
}

/// The three interval timers as (interval µs, value µs).
pub fn itimers() -> [(u64, u64); 3] {
    let mut out = [(0, 0); 3];
    for (i, w) in [libc::ITIMER_REAL, libc::ITIMER_VIRTUAL, libc::ITIMER_PROF].into_iter().enumerate() {
        // SAFETY: getitimer writes the live local.
        let mut v: libc::itimerval = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::getitimer(w, &mut v) } == 0 {
            let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
            let (interval, mut value) = (us(v.it_interval), us(v.it_value));
            if interval != 0 && value == 0 {
                // A periodic timer that expired with its signal still pending reads as
                // disarmed: the kernel re-arms ITIMER_REAL only when SIGALRM is taken, which
                // stopped threads do not do. Neither the signal nor (saved as is) the timer
                // would come back at restart, and a program waiting for it would wait
                // forever; due at once, it delivers the lost signal and runs on.
                value = 1;
            }
            out[i] = (interval, value);
        }
    }
    out
}

/// Resource limits, indexed by resource number.
pub fn rlimits() -> Vec<(u64, u64)> {
    (0..16)
        .map(|r| {
            let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: getrlimit writes the live local.
            unsafe { libc::getrlimit(r as _, &mut l) };
            (l.rlim_cur, l.rlim_max)
        })
        .collect()
}

/// The file creation mask (read by setting and restoring it; other threads are stopped).
pub fn umask() -> u32 {
    // SAFETY: umask cannot fail; the old mask is put back at once.
    unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m as u32
    }
}

/// This process's children (of every thread): pid, command name and state letter (`Z`: a
/// zombie not yet reaped). Its own image writers are not among them while it captures.
pub fn children() -> Vec<(i32, String, char)> {
    let mut out = Vec::new();
    for tid in numeric_entries(c"/proc/self/task") {
        let Ok(list) = std::fs::read_to_string(format!("/proc/self/task/{tid}/children")) else { continue };
        for pid in list.split_whitespace().filter_map(|w| w.parse::<i32>().ok()) {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let comm = match (stat.find('('), stat.rfind(')')) {
                (Some(a), Some(b)) if a < b => stat[a + 1..b].to_string(),
                _ => String::from("?"),
            };
            let state = stat.rfind(')').and_then(|b| stat[b + 1..].trim_start().chars().next()).unwrap_or('?');
            out.push((pid, comm, state));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The controlling terminal of a process that leads its session, which a restart cannot give
/// back: it took that terminal itself (`TIOCSCTTY`, or the first terminal it opened after
/// `setsid`), and a restarted process leads a session without one, so opening `/dev/tty`
/// fails with ENXIO and closing the master side no longer hangs it up (CRIU's `pty03`,
/// `tty00`). A process that does not lead its session shares its session's terminal, which a
/// restart gives as the restarting one's ("the restarting terminal").
pub fn controlling_terminal_problem() -> Option<String> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    controlling_terminal_in_stat(&s)
}

/// [`controlling_terminal_problem`] from the text of /proc/<pid>/stat.
pub fn controlling_terminal_in_stat(stat: &str) -> Option<String> {
    let pid: u64 = stat.split(' ').next()?.parse().ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let field = |n: usize| -> Option<u64> { rest.split(' ').nth(n - 3)?.trim().parse().ok() };
    let (sid, tty) = (field(6)?, field(7)?);
    if tty == 0 || sid != pid {
        return None;
    }
    let (major, minor) = ((tty >> 8) & 0xfff, (tty & 0xff) | ((tty >> 12) & 0xfff00));
    let name = if (136..=143).contains(&major) {
        format!("/dev/pts/{}", (major - 136) * 256 + minor)
    } else {
        format!("terminal {major}:{minor}")
    };
    Some(format!(
        "process {pid} leads its session with controlling terminal {name}: a restart does not make it the controlling terminal again (opening /dev/tty fails, no hangup reaches the process)"
    ))
}

/// Field `n` (1-based, as in proc(5)) of /proc/self/stat, as a number.
fn stat_field(n: usize) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after "pid (comm)" start at field 3.
    let rest = &s[s.rfind(')')? + 2..];
    rest.split(' ').nth(n - 3)?.trim().parse().ok()
}

/// The kernel's memory-layout bookkeeping of this process, in the order of `struct
/// prctl_mm_map` (start_code, end_code, start_data, end_data, start_brk, brk, start_stack,
/// arg_start, arg_end, env_start, env_end), from /proc/self/stat (fields 26-28, 45-51) and
/// `brk(0)`.
pub fn mm_layout() -> Option<[u64; 11]> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<u64> = rest.split(' ').map(|v| v.trim().parse().unwrap_or(0)).collect();
    let at = |n: usize| f.get(n - 3).copied();
    Some([at(26)?, at(27)?, at(45)?, at(46)?, at(47)?, brk().1, at(28)?, at(48)?, at(49)?, at(50)?, at(51)?])
}

/// The process's auxiliary vector (/proc/self/auxv) as words, up to and with its `AT_NULL`
/// pair; empty if it cannot be read.
pub fn auxv() -> Vec<u64> {
    let Ok(b) = std::fs::read("/proc/self/auxv") else { return Vec::new() };
    let mut out = Vec::new();
    for pair in b.chunks_exact(16) {
        let t = u64::from_ne_bytes(pair[..8].try_into().unwrap_or_default());
        let v = u64::from_ne_bytes(pair[8..].try_into().unwrap_or_default());
        out.extend([t, v]);
        if t == 0 {
            break;
        }
    }
    out
}

/// `struct prctl_mm_map` of `<linux/prctl.h>`.
#[repr(C)]
struct PrctlMmMap {
    fields: [u64; 11],
    auxv: *const u64,
    auxv_size: u32,
    exe_fd: u32,
}

/// Sets the kernel's bookkeeping of this process's memory layout (`prctl(PR_SET_MM,
/// PR_SET_MM_MAP)`): `fields` in the order of [`mm_layout`], the auxiliary vector (words;
/// empty: left as it is) and the file /proc/self/exe names (`exe_fd`; -1: left as it is).
/// Needs no privilege but for `exe_fd` (`CAP_CHECKPOINT_RESTORE` or `CAP_SYS_ADMIN`), which
/// the kernel also refuses (`EBUSY`) while a file mapping of the current exe remains. The
/// kernel checks the values (ordered, inside the address space, within `RLIMIT_DATA`) and
/// only records them. Err: the errno.
pub fn set_mm_map(fields: [u64; 11], auxv: &[u64], exe_fd: i32) -> Result<(), i32> {
    let map = PrctlMmMap {
        fields,
        auxv: if auxv.is_empty() { std::ptr::null() } else { auxv.as_ptr() },
        auxv_size: (std::mem::size_of_val(auxv)) as u32,
        exe_fd: exe_fd as u32,
    };
    // SAFETY: a live struct of the kernel's layout and its size; the auxiliary vector it
    // points at is a live slice of `auxv_size` bytes; the kernel copies what it needs.
    let r = unsafe {
        libc::prctl(libc::PR_SET_MM, libc::PR_SET_MM_MAP, &map as *const PrctlMmMap, std::mem::size_of::<PrctlMmMap>(), 0)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// Where the process's argument strings start (`arg_start`, field 48 of /proc/self/stat).
pub fn arg_start() -> u64 {
    stat_field(48).unwrap_or(0)
}

/// (start_brk, brk) of the process.
pub fn brk() -> (u64, u64) {
    // SAFETY: brk(0) only reports the current break.
    let cur = unsafe { libc::syscall(libc::SYS_brk, 0) } as u64;
    let start = stat_field(47).unwrap_or(0);
    (start, cur)
}

fn fdinfo(fd: i32) -> Option<(u64, u32)> {
    let text = read_raw(&format!("/proc/self/fdinfo/{fd}"))?;
    let mut pos = None;
    let mut flags = None;
    for l in text.lines() {
        if let Some(v) = l.strip_prefix("pos:") {
            pos = v.trim().parse().ok();
        } else if let Some(v) = l.strip_prefix("flags:") {
            flags = u32::from_str_radix(v.trim(), 8).ok();
        }
    }
    Some((pos?, flags?))
}

/// One `lock:` line of a /proc/self/fdinfo file (the format of /proc/locks):
/// `1: POSIX  ADVISORY  WRITE 1234 fe:00:5678 5 14`. Err names a lock that cannot be taken
/// again (a delegation, a mandatory lock); Ok(None) a line that is not a lock held (a
/// waiter, `->`, or a lease being broken to nothing). A lease being broken is the lease it
/// is being broken to, as `F_GETLEASE` says.
pub fn parse_lock_line(fd: i32, line: &str) -> Result<Option<FileLock>, String> {
    let rest = line.split_once(':').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    if f.first() == Some(&"->") {
        return Ok(None);
    }
    if f.len() < 7 {
        return Err(format!("fd {fd}: a lock the kernel describes as '{}' is not taken again by a restart", line.trim()));
    }
    // A lease being broken shows the type it is being broken to (what `F_GETLEASE`
    // answers): it is taken again as that, the break done — none when it goes to UNLCK.
    if f[0] == "LEASE" && f[1] == "BREAKING" && f[2] == "UNLCK" {
        return Ok(None);
    }
    let kind = match f[0] {
        "FLOCK" => LockKind::Flock,
        "POSIX" => LockKind::Posix,
        "OFDLCK" => LockKind::Ofd,
        "LEASE" if f[1] == "ACTIVE" || f[1] == "BREAKING" => LockKind::Lease,
        _ => return Err(format!("fd {fd}: a {} {} lock is not taken again by a restart", f[0], f[1])),
    };
    let write = match f[2] {
        "WRITE" => true,
        "READ" => false,
        other => return Err(format!("fd {fd}: a {} lock of mode {other} is not taken again by a restart", f[0])),
    };
    let start = f[5].parse().map_err(|_| format!("fd {fd}: unreadable lock range '{}'", line.trim()))?;
    let end = if f[6] == "EOF" { None } else { Some(f[6].parse().map_err(|_| format!("fd {fd}: unreadable lock range '{}'", line.trim()))?) };
    Ok(Some(FileLock { fd, kind, write, start, end }))
}

/// The locks this process holds through its descriptors (fdinfo's `lock:` lines), each
/// once: a POSIX lock shows on every descriptor of its file, a flock or OFD lock on every
/// descriptor of its open file description (dups). Also what cannot be taken again.
///
/// A flock or OFD lock belongs to an open file description, which a fork shares: every
/// process of a job holding it sees the lock. It is left to the process that took it (the
/// owner the kernel names) when that is another of `others` (kernel pids of the job's other
/// processes) still holding the file, so that after a restart the kernel names the same
/// owner (the restorer that takes a lock first is named).
pub fn locks(fds: &[FdState], others: &[i32]) -> (Vec<FileLock>, Vec<String>) {
    let mut out: Vec<FileLock> = Vec::new();
    let mut problems = Vec::new();
    // Per lock: the file it is on (dev:ino field) and its range, to drop repeats.
    let mut seen: Vec<(String, LockKind, bool, u64, Option<u64>, i32)> = Vec::new();
    for f in fds.iter().filter(|f| !matches!(f.kind, FdKind::Dup { .. })) {
        let Some(text) = read_raw(&format!("/proc/self/fdinfo/{}", f.fd)) else { continue };
        for l in text.lines().filter_map(|l| l.strip_prefix("lock:")) {
            match parse_lock_line(f.fd, l) {
                // A write lease being broken to a read lease on a descriptor open for writing:
                // a read lease cannot be taken there, only reached by a break.
                Ok(Some(lock)) if lock.kind == LockKind::Lease && !lock.write && f.flags as i32 & libc::O_ACCMODE != libc::O_RDONLY => {
                    problems.push(format!(
                        "fd {}: a write lease being broken to a read lease cannot be taken again on a descriptor open for writing",
                        f.fd
                    ));
                }
                Ok(Some(lock)) => {
                    let file = l.split_whitespace().nth(5).unwrap_or("").to_string();
                    let owner_pid: i32 = l
                        .split_whitespace()
                        .nth(4)
                        .and_then(|p| p.parse().ok())
                        .unwrap_or(0);
                    if lock.kind != LockKind::Posix
                        && others.contains(&owner_pid)
                        && holds_file(owner_pid, f.fd)
                    {
                        continue;
                    }
                    // POSIX locks belong to the process: the same lock through another fd
                    // is a repeat. Flock/OFD ones belong to the open file description.
                    let owner = if lock.kind == LockKind::Posix { 0 } else { f.fd };
                    let key = (file, lock.kind, lock.write, lock.start, lock.end, owner);
                    if !seen.contains(&key) {
                        seen.push(key);
                        out.push(lock);
                    }
                }
                Ok(None) => {}
                Err(e) => problems.push(e),
            }
        }
    }
    (out, problems)
}

/// A small file read with the system calls themselves: after a restart the C library's
/// `open` is libcrum_libc.so's, which gives fdinfo files with lock owners and a pidfd's
/// process in the program's pids, and crum compares them with the kernel's.
pub(crate) fn read_raw(path: &str) -> Option<String> {
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: openat of a NUL-terminated path; our descriptor, read into a live buffer and
    // closed once.
    unsafe {
        let fd = libc::syscall(libc::SYS_openat, libc::AT_FDCWD, c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) as i32;
        if fd < 0 {
            return None;
        }
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            out.extend_from_slice(&buf[..n as usize]);
        }
        libc::close(fd);
        String::from_utf8(out).ok()
    }
}

/// Whether process `pid` holds the open file description of our `fd` (a descriptor of the
/// same file that `kcmp` finds the same).
pub(crate) fn holds_file(pid: i32, fd: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(format!("/proc/self/fd/{fd}")) else { return false };
    // The kernel's pid (the C library's `getpid` answers the program's after a restart).
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_getpid) };
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    dir.flatten().any(|e| {
        let theirs: Option<i64> = e.file_name().to_str().and_then(|n| n.parse().ok());
        theirs.is_some_and(|t| {
            std::fs::metadata(e.path()).is_ok_and(|o| (o.dev(), o.ino()) == (m.dev(), m.ino()))
                // SAFETY: kcmp compares two descriptors of two processes; no memory is passed.
                && unsafe { libc::syscall(libc::SYS_kcmp, me, pid, 0 /* KCMP_FILE */, fd, t) } == 0
        })
    })
}

/// The capacity of each pipe of `fds` (by id, from its read end).
pub fn pipe_sizes(fds: &[FdState]) -> Vec<(u64, u32)> {
    let mut out: Vec<(u64, u32)> = Vec::new();
    for f in fds {
        if let FdKind::Pipe { id, .. } = f.kind {
            if out.iter().any(|(i, _)| *i == id) {
                continue;
            }
            // SAFETY: a query on our own descriptor.
            let n = unsafe { libc::fcntl(f.fd, libc::F_GETPIPE_SZ) };
            if n > 0 {
                out.push((id, n as u32));
            }
        }
    }
    out
}

/// For a Unix socket bound to `path`: whether it listens; None for any other socket.
fn is_listener_at(fd: i32, path: &Path) -> Option<bool> {
    let mut acc: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt/getsockname write into live locals of the sizes given.
    unsafe {
        if libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN, &mut acc as *mut _ as *mut libc::c_void, &mut len)
            != 0
        {
            return None;
        }
        let mut sa: libc::sockaddr_un = std::mem::zeroed();
        let mut slen = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        if libc::getsockname(fd, &mut sa as *mut _ as *mut libc::sockaddr, &mut slen) != 0
            || sa.sun_family != libc::AF_UNIX as u16
        {
            return None;
        }
        let bytes: Vec<u8> = sa.sun_path.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        if bytes != path.as_os_str().as_encoded_bytes() {
            return None;
        }
    }
    Some(acc != 0)
}

/// What to do with sockets of the agent's control server (bound at `control_path`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Own {
    Listener,
    Connection,
}

/// Open file descriptors. `skip` are the agent's private fds; sockets bound to
/// `control_path` are reported through `own` (the listener is re-created under the new pid
/// at restart, connections are dropped).
/// `job_socks`: the sockets of the process's job ([`crate::job::job_sockets`]).
pub fn fds(skip: &[i32], control_path: Option<&Path>, own: &mut Vec<(i32, Own)>, job_socks: &[(u64, u64)]) -> Vec<FdState> {
    let list = numeric_entries(c"/proc/self/fd");
    let mut out: Vec<FdState> = Vec::new();
    // (fd, pipe inode, is read end) of the pipes seen.
    let mut pipes: Vec<(i32, u64, bool)> = Vec::new();
    // (fd, id, access mode) of the named pipes seen.
    let mut fifos: Vec<(i32, u64, i32)> = Vec::new();
    let pid = crate::threads::real_pid();
    // Deleted files whose contents are already carried (by inode).
    let mut deleted: Vec<u64> = Vec::new();
    // Sockets: (fd, inode, connected peer's inode), and what sock_diag says (asked once).
    let mut socks: Vec<(i32, u64, u32)> = Vec::new();
    let mut diag = None;
    for fd in list {
        if skip.contains(&fd) {
            continue;
        }
        let Ok(link) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else { continue };
        let link = link.to_string_lossy().into_owned();
        let Some((pos, flags)) = fdinfo(fd) else { continue };
        // A dup of an earlier fd (same open file description)?
        let dup_of = out.iter().find(|e| {
            // SAFETY: kcmp compares two fds of our own process; no memory is passed.
            unsafe { libc::syscall(libc::SYS_kcmp, pid, pid, 0 /* KCMP_FILE */, e.fd, fd) == 0 }
        });
        if let Some(d) = dup_of {
            // stdin/stdout/stderr are a dup only of one restored as a file (`> log 2>&1`).
            if fd > 2 || matches!(d.kind, FdKind::File { .. } | FdKind::Dup { .. }) {
                let of = if let FdKind::Dup { of } = d.kind { of } else { d.fd };
                out.push(FdState { fd, flags, kind: FdKind::Dup { of } });
                continue;
            }
        }
        // SAFETY: fstat into a live local.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            continue;
        }
        let fmt = st.st_mode & libc::S_IFMT;
        if fmt == libc::S_IFSOCK {
            if let Some(listening) = control_path.and_then(|cp| is_listener_at(fd, cp)) {
                own.push((fd, if listening { Own::Listener } else { Own::Connection }));
                continue;
            }
        }
        // stdin/stdout/stderr: the regular file they are (`gzip -c < in > out`), else the
        // restarting process's (a terminal, a pipe from the launcher).
        if fd <= 2 && !(fmt == libc::S_IFREG && link.starts_with('/') && !link.ends_with(" (deleted)")) {
            out.push(FdState { fd, flags, kind: FdKind::Stdio });
            continue;
        }
        let kind = match fmt {
            libc::S_IFREG | libc::S_IFDIR => {
                if fmt == libc::S_IFREG && link.ends_with(" (deleted)") && link.starts_with('/') {
                    deleted_file(fd, &link, &st, pos, &mut deleted)
                } else if link.ends_with(" (deleted)") || !link.starts_with('/') {
                    FdKind::Unsupported { what: format!("deleted or unnamed file {link}") }
                } else if let Some(rest) = link.strip_prefix(&format!("/proc/{}/", crate::threads::real_pid())) {
                    // A file of the process's own /proc directory (`/proc/self/pagemap`,
                    // `status`…): the restarted process's own, which is another inode
                    // whose contents the kernel makes (identity 0: not checked).
                    FdKind::File {
                        path: format!("/proc/self/{rest}"),
                        pos,
                        size: 0,
                        mtime_ns: 0,
                        dev: 0,
                        ino: 0,
                        dir: fmt == libc::S_IFDIR,
                    }
                } else {
                    let mtime_ns = st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128;
                    FdKind::File {
                        path: link.clone(),
                        pos,
                        size: st.st_size as u64,
                        mtime_ns,
                        dev: st.st_dev,
                        ino: st.st_ino,
                        dir: fmt == libc::S_IFDIR,
                    }
                }
            }
            libc::S_IFCHR => {
                if link == "/dev/ptmx" || link == "/dev/pts/ptmx" {
                    // The master side of a pseudo-terminal the program made: reopening the
                    // path would make a new pair, with another slave and none of its state.
                    let mut n: libc::c_uint = 0;
                    // SAFETY: TIOCGPTN writes one unsigned int into the live local.
                    let slave = if unsafe { libc::ioctl(fd, libc::TIOCGPTN, &mut n) } == 0 {
                        format!(" /dev/pts/{n}")
                    } else {
                        String::new()
                    };
                    FdKind::Unsupported { what: format!("{link} (the master side of pseudo-terminal{slave}: crum cannot make the pair again)") }
                } else if link.starts_with("/dev/pts/") || link.starts_with("/dev/tty") || link == "/dev/console" {
                    FdKind::Tty
                } else {
                    FdKind::CharDev { path: link.clone() }
                }
            }
            libc::S_IFIFO if link.starts_with("pipe:[") => {
                let read = flags & libc::O_ACCMODE as u32 == libc::O_RDONLY as u32;
                pipes.push((fd, st.st_ino, read));
                FdKind::Pipe { id: st.st_ino, read, data: Vec::new() }
            }
            libc::S_IFIFO if link.starts_with('/') && !link.ends_with(" (deleted)") => {
                let id = fifo_id(&st);
                let acc = flags as i32 & libc::O_ACCMODE;
                fifos.push((fd, id, acc));
                // SAFETY: F_GETPIPE_SZ on our descriptor.
                let size = unsafe { libc::fcntl(fd, libc::F_GETPIPE_SZ) }.max(0) as u32;
                FdKind::Fifo { path: link.clone(), id, size, data: Vec::new(), lost: String::new() }
            }
            libc::S_IFIFO => FdKind::Unsupported { what: format!("{link} (a named pipe whose name was removed)") },
            libc::S_IFSOCK => {
                let (kind, peer) = crate::sockets::describe(fd, st.st_ino, &mut diag, job_socks);
                socks.push((fd, st.st_ino, peer));
                kind
            }
            0 if link.starts_with("anon_inode:") => anon_inode(fd, &link),
            _ => FdKind::Unsupported { what: link.clone() },
        };
        out.push(FdState { fd, flags, kind });
    }
    crate::sockets::pair_up(&mut out, &socks, job_socks);
    // Pipes: both ends must be here; the read end carries the buffered bytes (one read end:
    // a pipe whose read end is open twice, e.g. again through /proc/self/fd, has one queue).
    let mut drained: Vec<u64> = Vec::new();
    for e in out.iter_mut() {
        let FdKind::Pipe { id, read, .. } = e.kind else { continue };
        let other = pipes.iter().any(|&(f, i, r)| i == id && r != read && f != e.fd);
        if !other && !read && !has_reader(e.fd) {
            // A write end whose read end is closed everywhere (a child's copy of a pipe the
            // parent has stopped reading): a pipe again, its read end closed, so that a
            // write fails with EPIPE as it would have.
        } else if !other {
            e.kind = FdKind::Unsupported { what: format!("pipe:[{id}] to another process") };
        } else if read && !drained.contains(&id) {
            drained.push(id);
            let data = drain_pipe(e.fd, &pipes, id);
            e.kind = FdKind::Pipe { id, read, data };
        }
    }
    // Named pipes: the bytes in one are carried (by its first readable descriptor) when
    // both ends are here, or a read end is and no other process has it open; else they
    // cannot be, and are named (a job's are settled by
    // `crate::job::mark_pipes`).
    let mut fifo_ids: Vec<u64> = fifos.iter().map(|f| f.1).collect();
    fifo_ids.sort_unstable();
    fifo_ids.dedup();
    for id in fifo_ids {
        let first = fifos.iter().find(|f| f.1 == id).map_or(-1, |f| f.0);
        let readable = fifos.iter().find(|f| f.1 == id && f.2 != libc::O_WRONLY).map(|f| f.0);
        let writable = fifos.iter().any(|f| f.1 == id && f.2 != libc::O_RDONLY);
        // Without a write end here the bytes are still this process's alone when no other
        // process has the pipe open (its writer wrote and closed it): then they are carried.
        let (carrier, bytes, why) = match readable {
            Some(r) if writable || !open_elsewhere(r) => match crate::job::peek_pipe(r) {
                Ok(d) => (r, d, String::new()),
                Err(err) => (-1, Vec::new(), err),
            },
            _ => {
                let n = queued_bytes(first);
                let why = if n > 0 {
                    format!("the {n} bytes in it are not carried (its other end is outside the process)")
                } else {
                    String::new()
                };
                (-1, Vec::new(), why)
            }
        };
        for e in out.iter_mut() {
            if let FdKind::Fifo { id: i, data, lost, .. } = &mut e.kind {
                if *i == id && e.fd == carrier {
                    *data = bytes.clone();
                }
                if *i == id && e.fd == first {
                    lost.clone_from(&why);
                }
            }
        }
    }
    // An epoll instance's watches must name descriptors that are here and restored.
    let restorable: Vec<i32> = out.iter().filter(|e| e.kind.problem().is_none()).map(|e| e.fd).collect();
    for e in out.iter_mut() {
        let FdKind::Epoll { watches } = &e.kind else { continue };
        if let Some(w) = watches.iter().find(|w| !restorable.contains(&w.fd)) {
            e.kind = FdKind::Unsupported {
                what: format!("anon_inode:[eventpoll] watching fd {}, which is not restored", w.fd),
            };
        }
    }
    out
}

/// What [`file_contents`] gives: what the process state records, the hook sections
/// holding the bytes, problems.
pub type FileContents = (Vec<crate::state::FileContent>, Vec<(String, Vec<u8>)>, Vec<String>);

/// The contents of the regular files of `fds` open for writing other than by appending
/// ([`crate::state::FileContent`]), stdin, stdout and stderr excepted, each file once, up
/// to `budget` bytes in all. A file open read-write that does not fit is named (what the
/// program changes in it after the checkpoint is not undone by a restart); one open
/// write-only is taken as written from start to end (a restart cuts it back to its size) and
/// is not, nor is one the process holds POSIX locks on (reading it needs a second
/// descriptor, and closing that would drop the locks) or a lease on (opening it again would
/// break the lease). Read with `pread`: no offset moves.
pub fn file_contents(fds: &[FdState], locks: &[crate::state::FileLock], budget: u64) -> FileContents {
    let (mut out, mut sections, mut problems) = (Vec::new(), Vec::new(), Vec::new());
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let mut used = 0u64;
    for f in fds {
        let FdKind::File { path, size, dev, ino, dir: false, .. } = &f.kind else { continue };
        let acc = f.flags as i32 & libc::O_ACCMODE;
        // stdin, stdout and stderr are streams (`prog > out`): cut back, never written back.
        if f.fd <= 2 || acc == libc::O_RDONLY || f.flags & libc::O_APPEND as u32 != 0 || (*dev, *ino) == (0, 0) || seen.contains(&(*dev, *ino)) {
            continue;
        }
        seen.push((*dev, *ino));
        if used + size > budget {
            if acc == libc::O_RDWR {
                problems.push(format!(
                    "fd {} ({path}, {size} bytes) is open for reading and writing, and the image carries files of up to                      {budget} bytes in all: what the program changes in it after the checkpoint is not undone by a restart",
                    f.fd
                ));
            }
            continue;
        }
        // Read through the descriptor itself where it can be (closing another descriptor
        // of the file would drop the process's POSIX locks on it); a write-only one through
        // a second descriptor, unless the process holds POSIX locks on the file.
        let r = if acc == libc::O_RDWR {
            f.fd
        } else {
            // Nor a file with a lease on it: opening it again would break the lease, and the
            // open would wait for the stopped program to give it up (lease-break-time).
            let locked = locks.iter().any(|l| {
                matches!(l.kind, crate::state::LockKind::Posix | crate::state::LockKind::Lease)
                    && fds.iter().any(|g| g.fd == l.fd && matches!(&g.kind, FdKind::File { dev: d, ino: i, .. } if (*d, *i) == (*dev, *ino)))
            });
            // (A lease being broken to nothing is not among `locks`: its line is.)
            if locked || read_raw(&format!("/proc/self/fdinfo/{}", f.fd)).is_some_and(|t| t.contains(" LEASE ")) {
                continue;
            }
            let Ok(name) = std::ffi::CString::new(format!("/proc/self/fd/{}", f.fd)) else { continue };
            // SAFETY: NUL-terminated path; our own descriptor, closed below.
            let r = unsafe { libc::open(name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            if r < 0 {
                continue;
            }
            r
        };
        let mut bytes = vec![0u8; *size as usize];
        let mut at = 0usize;
        while at < bytes.len() {
            // SAFETY: pread into the live buffer's tail.
            let n = unsafe { libc::pread(r, bytes[at..].as_mut_ptr() as *mut libc::c_void, bytes.len() - at, at as libc::off_t) };
            if n <= 0 {
                break;
            }
            at += n as usize;
        }
        if r != f.fd {
            // SAFETY: ours, closed once.
            unsafe { libc::close(r) };
        }
        // (Shorter: the file shrank since fstat; what is there is its contents.)
        bytes.truncate(at);
        used += at as u64;
        let section = format!("crum.file.{}", f.fd);
        out.push(crate::state::FileContent { fd: f.fd, section: section.clone() });
        sections.push((section, bytes));
    }
    (out, sections, problems)
}

/// The id of a named pipe: its device and inode.
pub fn fifo_id(st: &libc::stat) -> u64 {
    st.st_dev.rotate_left(32) ^ st.st_ino
}

/// The bytes waiting in a pipe or named pipe (`FIONREAD`), 0 when unknown.
fn queued_bytes(fd: i32) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into the live local.
    if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } < 0 {
        return 0;
    }
    n.max(0) as usize
}

/// Whether a process other than this one has the file open at `fd` open too (a descriptor
/// in `/proc/<pid>/fd` with its device and inode). Processes whose descriptors cannot be
/// read (another user's) are passed over.
fn open_elsewhere(fd: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: fstat of our own descriptor into a live local.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return true;
    }
    // The kernel's pid (the C library's `getpid` answers the program's after a restart).
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_getpid) } as i32;
    for pid in numeric_entries(c"/proc").into_iter().filter(|&p| p != me) {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        if dir.flatten().any(|e| {
            std::fs::metadata(e.path()).is_ok_and(|m| (m.dev(), m.ino()) == (st.st_dev, st.st_ino))
        }) {
            return true;
        }
    }
    false
}

/// Whether the pipe whose write end is `fd` has a read end open anywhere (the kernel
/// reports `POLLERR` on a write end without readers).
fn has_reader(fd: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
    // SAFETY: poll of one live pollfd, without waiting.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n != 1 || p.revents & libc::POLLERR == 0
}

/// Largest deleted file whose contents an image carries.
pub const MAX_DELETED: u64 = 64 << 20;

/// A regular file deleted while open, or a memfd: its contents (once per file).
fn deleted_file(fd: i32, link: &str, st: &libc::stat, pos: u64, carried: &mut Vec<u64>) -> FdKind {
    let name = link.strip_suffix(" (deleted)").unwrap_or(link);
    let memfd = name.starts_with("/memfd:");
    if !memfd && st.st_nlink > 0 {
        // Still reachable under another name: a copy would part from it.
        return FdKind::Unsupported { what: format!("{link} (deleted, but linked elsewhere)") };
    }
    let size = st.st_size as u64;
    if size > MAX_DELETED {
        return FdKind::Unsupported { what: format!("{link} ({size} bytes: crum carries deleted files up to {MAX_DELETED})") };
    }
    // SAFETY: F_GET_SEALS on our own descriptor (EINVAL for a file that takes none).
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) }.max(0) as u32;
    let id = st.st_dev.rotate_left(32) ^ st.st_ino;
    let data = if carried.contains(&id) {
        None
    } else {
        let mut buf = vec![0u8; size as usize];
        let mut off = 0usize;
        // Read through a descriptor of our own with O_NOATIME (the owner's right), so that the
        // checkpoint does not change the file's access time; else through the program's.
        let own = format!("/proc/self/fd/{fd}\0");
        // SAFETY: opens a NUL-terminated path; the descriptor is closed below.
        let mut rfd = unsafe { libc::open(own.as_ptr().cast(), libc::O_RDONLY | libc::O_NOATIME | libc::O_CLOEXEC) };
        if rfd < 0 {
            // SAFETY: as above.
            rfd = unsafe { libc::open(own.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
        }
        let from = if rfd >= 0 { rfd } else { fd };
        while off < buf.len() {
            // SAFETY: pread into the live buffer's remaining bytes (the offset is kept).
            let n = unsafe { libc::pread(from, buf[off..].as_mut_ptr() as *mut libc::c_void, buf.len() - off, off as libc::off_t) };
            if n <= 0 {
                break;
            }
            off += n as usize;
        }
        if rfd >= 0 {
            // SAFETY: our own descriptor.
            unsafe { libc::close(rfd) };
        }
        if off < buf.len() {
            return FdKind::Unsupported { what: format!("{link} (its contents cannot be read)") };
        }
        carried.push(id);
        Some(buf)
    };
    let path = if memfd { name.trim_start_matches("/memfd:").to_string() } else { name.to_string() };
    FdKind::DeletedFile { path, memfd, id, pos, data, seals }
}

/// The data extents of each deleted file and memfd of `fds` that has holes, by id
/// ([`crate::state::ProcessState::deleted_extents`]): `SEEK_DATA`/`SEEK_HOLE` through a
/// descriptor of crum's own (the program's offset stays). A file without holes, or one whose
/// extents cannot be read, is not listed (written whole at restart).
pub fn deleted_extents(fds: &[FdState]) -> Vec<(u64, Vec<(u64, u64)>)> {
    let mut out = Vec::new();
    for f in fds {
        let FdKind::DeletedFile {
            id,
            data: Some(data),
            ..
        } = &f.kind
        else {
            continue;
        };
        let size = data.len() as i64;
        let own = format!("/proc/self/fd/{}\0", f.fd);
        // SAFETY: opens a NUL-terminated path; the descriptor is closed below.
        let rfd = unsafe { libc::open(own.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if rfd < 0 {
            continue;
        }
        let mut extents = Vec::new();
        let mut at = 0i64;
        let mut ok = true;
        while at < size {
            // SAFETY: lseek on our own descriptor.
            let start = unsafe { libc::lseek(rfd, at, libc::SEEK_DATA) };
            if start < 0 {
                // ENXIO: no data from `at` to the end; anything else: the file system cannot say.
                ok = std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
                break;
            }
            // SAFETY: as above.
            let end = unsafe { libc::lseek(rfd, start, libc::SEEK_HOLE) };
            if end <= start {
                ok = false;
                break;
            }
            let end = end.min(size);
            if start < end {
                extents.push((start as u64, (end - start) as u64));
            }
            at = end;
        }
        // SAFETY: ours, closed once.
        unsafe { libc::close(rfd) };
        if ok && extents != [(0, size as u64)] {
            out.push((*id, extents));
        }
    }
    out
}

/// The lines of /proc/self/fdinfo/<fd> as (key, value) pairs.
fn fdinfo_fields(fd: i32) -> Vec<(String, String)> {
    let text = read_raw(&format!("/proc/self/fdinfo/{fd}")).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// An eventfd, timerfd, signalfd, epoll or inotify instance, or a pidfd (of the process
/// itself, or of another process: [`FdKind::PidFdOf`] with the kernel's pid), from its
/// fdinfo; other anonymous inodes (pidfds of exited processes and of threads, userfaultfd,
/// io_uring…) are named as unsupported.
fn anon_inode(fd: i32, link: &str) -> FdKind {
    let unsupported = || FdKind::Unsupported { what: link.to_string() };
    let f = fdinfo_fields(fd);
    let get = |k: &str| f.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    match link {
        "anon_inode:[eventfd]" => {
            // Hexadecimal ("%16llx").
            let Some(count) = get("eventfd-count").and_then(|v| u64::from_str_radix(v, 16).ok()) else { return unsupported() };
            // Kernels before 6.6 do not say whether it counts as a semaphore.
            let Some(sem) = get("eventfd-semaphore") else {
                return FdKind::Unsupported { what: format!("{link} (this kernel does not tell whether it is a semaphore)") };
            };
            FdKind::EventFd { count, semaphore: sem == "1" }
        }
        "anon_inode:[timerfd]" => {
            // Forwards an expired periodic timer, adding its overruns to the ticks (a read
            // would count them the same), so that fdinfo's it_value is the time to the next
            // expiry.
            // SAFETY: timerfd_gettime writes into a live local.
            let mut cur: libc::itimerspec = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::timerfd_gettime(fd, &mut cur) } != 0 {
                return unsupported();
            }
            let f = fdinfo_fields(fd);
            let get = |k: &str| f.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
            let (Some(clock), Some(ticks), Some(sflags)) = (
                get("clockid").and_then(|v| v.parse::<i32>().ok()),
                get("ticks").and_then(|v| v.parse::<u64>().ok()),
                get("settime flags").and_then(|v| u32::from_str_radix(v, 8).ok()),
            ) else {
                return unsupported();
            };
            let value_ns = cur.it_value.tv_sec as u64 * 1_000_000_000 + cur.it_value.tv_nsec as u64;
            let interval_ns = cur.it_interval.tv_sec as u64 * 1_000_000_000 + cur.it_interval.tv_nsec as u64;
            let realtime_deadline = clock == libc::CLOCK_REALTIME && sflags & libc::TFD_TIMER_ABSTIME as u32 != 0;
            let mut deadline_ns = 0;
            if realtime_deadline && value_ns != 0 {
                // SAFETY: clock_gettime writes into a live local.
                let mut now: libc::timespec = unsafe { std::mem::zeroed() };
                // SAFETY: as above.
                unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
                deadline_ns = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64 + value_ns;
            }
            FdKind::TimerFd {
                clock,
                realtime_deadline,
                cancel_on_set: sflags & 2 != 0,
                value_ns,
                interval_ns,
                ticks,
                deadline_ns,
            }
        }
        "anon_inode:[signalfd]" => match get("sigmask").and_then(|v| u64::from_str_radix(v, 16).ok()) {
            Some(mask) => FdKind::SignalFd { mask },
            None => unsupported(),
        },
        "anon_inode:inotify" => crate::inotify::capture(fd, link),
        "anon_inode:[pidfd]" => {
            // `PIDFD_THREAD` is `O_EXCL` among the file's flags.
            let thread = get("flags").and_then(|v| u32::from_str_radix(v, 8).ok()).is_some_and(|f| f & libc::O_EXCL as u32 != 0);
            let me = crate::threads::real_pid();
            match get("Pid").and_then(|v| v.parse::<i32>().ok()) {
                Some(p) if p == me => FdKind::PidFd { thread },
                Some(-1) => FdKind::Unsupported { what: format!("{link} of a process that has exited") },
                Some(p) if std::path::Path::new(&format!("/proc/self/task/{p}")).exists() => {
                    FdKind::Unsupported { what: format!("{link} of thread {p} of this process (its id changes at a restart)") }
                }
                // Kept when `p` is a process of the job (`agent::member_pidfds`), named if not.
                Some(p) if p > 0 => FdKind::PidFdOf { pid: p, thread },
                _ => unsupported(),
            }
        }
        "anon_inode:[eventpoll]" => {
            let mut watches = Vec::new();
            let text = read_raw(&format!("/proc/self/fdinfo/{fd}")).unwrap_or_default();
            for l in text.lines().filter(|l| l.starts_with("tfd:")) {
                let w: Vec<&str> = l.split_whitespace().collect();
                let at = |k: &str| w.iter().position(|x| *x == k).and_then(|i| w.get(i + 1)).copied();
                let (Some(tfd), Some(events), Some(data), Some(ino)) = (
                    at("tfd:").and_then(|v| v.parse::<i32>().ok()),
                    at("events:").and_then(|v| u32::from_str_radix(v, 16).ok()),
                    at("data:").and_then(|v| u64::from_str_radix(v, 16).ok()),
                    l.split_whitespace().find_map(|x| x.strip_prefix("ino:")).and_then(|v| u64::from_str_radix(v, 16).ok()),
                ) else {
                    return FdKind::Unsupported { what: format!("{link} with an entry the kernel describes as '{l}'") };
                };
                // The number it was added by must still name that file.
                // SAFETY: fstat into a live local.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: as above.
                if unsafe { libc::fstat(tfd, &mut st) } != 0 || st.st_ino != ino {
                    return FdKind::Unsupported {
                        what: format!("{link} watching a file no longer open at fd {tfd} (closed or replaced since it was added)"),
                    };
                }
                watches.push(EpollWatch { fd: tfd, events, data });
            }
            FdKind::Epoll { watches }
        }
        _ => unsupported(),
    }
}

/// Takes the bytes buffered in a pipe and puts them back at once (the program keeps running
/// after the checkpoint and must see them). Other threads are stopped meanwhile.
fn drain_pipe(rfd: i32, pipes: &[(i32, u64, bool)], id: u64) -> Vec<u8> {
    let Some(&(wfd, _, _)) = pipes.iter().find(|&&(_, i, r)| i == id && !r) else { return Vec::new() };
    let mut avail: libc::c_int = 0;
    // SAFETY: FIONREAD writes an int.
    if unsafe { libc::ioctl(rfd, libc::FIONREAD, &mut avail) } != 0 || avail <= 0 {
        return Vec::new();
    }
    let mut buf = vec![0u8; avail as usize];
    // SAFETY: F_GETFL/F_SETFL on our own fd; reads into the live buffer.
    unsafe {
        let fl = libc::fcntl(rfd, libc::F_GETFL);
        libc::fcntl(rfd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        let n = libc::read(rfd, buf.as_mut_ptr() as *mut libc::c_void, buf.len());
        libc::fcntl(rfd, libc::F_SETFL, fl);
        buf.truncate(n.max(0) as usize);
        let mut off = 0;
        while off < buf.len() {
            let w = libc::write(wfd, buf[off..].as_ptr() as *const libc::c_void, buf.len() - off);
            if w <= 0 {
                break;
            }
            off += w as usize;
        }
    }
    buf
}

/// Reads a file's metadata the way [`FdKind::File`] records it: (size, mtime_ns, dev, ino).
pub fn file_identity(path: &str) -> std::io::Result<(u64, i128, u64, u64)> {
    let m = std::fs::metadata(path)?;
    Ok((m.size(), m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128, m.dev(), m.ino()))
}

/// The mode, times and owner of the files a restart creates anew for the descriptors in `fds`
/// ([`crate::state::ProcessState::fd_attrs`]): deleted files and memfds (`fstat` of the
/// descriptor), and the socket file of a Unix socket bound to a path (`stat` of the path,
/// from this process's working directory as the program's is; only while it is a socket).
pub fn fd_attrs(fds: &[FdState]) -> Vec<FdAttr> {
    let mut out = Vec::new();
    for f in fds {
        match &f.kind {
            FdKind::DeletedFile { .. } => {
                // SAFETY: a plain C struct, all zeroes is a valid value.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: fstat into the live local, on the program's descriptor.
                if unsafe { libc::fstat(f.fd, &mut st) } == 0 {
                    out.push(FdAttr {
                        fd: f.fd,
                        mode: st.st_mode & 0o7777,
                        times: Some([(st.st_atime, st.st_atime_nsec), (st.st_mtime, st.st_mtime_nsec)]),
                        owner: (st.st_uid, st.st_gid),
                    });
                }
            }
            FdKind::Socket(s) if s.domain == libc::AF_UNIX && s.local.len() > 2 && s.local[2] != 0 => {
                let path: Vec<u8> = s.local[2..].split(|&c| c == 0).next().unwrap_or(&[]).to_vec();
                let path = std::path::PathBuf::from(std::ffi::OsString::from_vec(path));
                if let Ok(m) = std::fs::symlink_metadata(&path) {
                    if m.file_type().is_socket() {
                        out.push(FdAttr { fd: f.fd, mode: m.mode() & 0o7777, times: None, owner: (m.uid(), m.gid()) });
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_maps_reads_fields_and_names_with_spaces() {
        let text = "55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]\n\
                    7f0000000000-7f0000001000 r-xs 00001000 fe:01 1234                       /tmp/a file\n";
        let m = parse_maps(text).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].start, 0x55d0c0000000);
        assert_eq!(m[0].prot, (libc::PROT_READ | libc::PROT_WRITE) as u32);
        assert_eq!(m[0].name, "[heap]");
        assert!(m[1].shared);
        assert_eq!(m[1].offset, 0x1000);
        assert_eq!(m[1].name, "/tmp/a file");
    }

    #[test]
    fn classify_skips_vsyscall_and_separates_specials() {
        let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap()).unwrap();
        let (regions, specials) = classify(&maps, 0);
        assert!(specials.iter().any(|s| s.name == "[vdso]"));
        assert!(regions.iter().all(|r| r.name != "[vsyscall]" && r.name != "[vdso]"));
        assert!(regions.iter().any(|r| r.name == "[stack]" && r.has_data));
    }

    #[test]
    #[allow(unsafe_code)]
    fn a_periodic_timer_whose_signal_is_pending_is_saved_as_due_not_disarmed() {
        // SAFETY: SIGALRM ignored (nothing in this test binary uses it), so the expiry's
        // signal is never taken and the kernel does not re-arm the timer; both are put back.
        unsafe {
            let old = libc::signal(libc::SIGALRM, libc::SIG_IGN);
            let it = libc::itimerval {
                it_interval: libc::timeval { tv_sec: 0, tv_usec: 2000 },
                it_value: libc::timeval { tv_sec: 0, tv_usec: 2000 },
            };
            libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut());
            std::thread::sleep(std::time::Duration::from_millis(20));
            let got = itimers()[0];
            let off: libc::itimerval = std::mem::zeroed();
            libc::setitimer(libc::ITIMER_REAL, &off, std::ptr::null_mut());
            libc::signal(libc::SIGALRM, old);
            assert_eq!(got, (2000, 1), "an expired periodic timer must be saved as due");
        }
    }

    #[test]
    #[allow(unsafe_code)]
    fn fds_classifies_pipes_dups_devices_and_sockets() {
        use std::os::fd::AsRawFd;
        let mut p = [0i32; 2];
        // SAFETY: plain fd-creating calls into live locals; every fd is closed below.
        let (sock, dup, dn) = unsafe {
            assert_eq!(libc::pipe(p.as_mut_ptr()), 0);
            assert_eq!(libc::write(p[1], b"hello".as_ptr() as *const libc::c_void, 5), 5);
            (libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, 0), libc::dup(p[1]), std::fs::File::open("/dev/null").unwrap())
        };
        let mut own = Vec::new();
        let list = fds(&[], None, &mut own, &[]);
        let get = |fd: i32| list.iter().find(|f| f.fd == fd).unwrap_or_else(|| panic!("fd {fd} missing")).kind.clone();
        assert!(matches!(get(p[0]), FdKind::Pipe { read: true, ref data, .. } if data == b"hello"));
        assert!(matches!(get(p[1]), FdKind::Pipe { read: false, .. }));
        assert_eq!(get(dup), FdKind::Dup { of: p[1] });
        assert_eq!(get(dn.as_raw_fd()), FdKind::CharDev { path: "/dev/null".into() });
        assert!(matches!(get(sock), FdKind::Unsupported { ref what } if what.starts_with("socket:[") && what.contains("netlink")));
        // The buffered bytes are still in the pipe for the program.
        let mut b = [0u8; 8];
        // SAFETY: read into a live buffer, then close our fds.
        unsafe {
            assert_eq!(libc::read(p[0], b.as_mut_ptr() as *mut libc::c_void, 8), 5);
            for fd in [p[0], p[1], sock, dup] {
                libc::close(fd);
            }
        }
        assert_eq!(&b[..5], b"hello");
    }

    #[test]
    #[allow(unsafe_code)]
    fn a_write_end_whose_read_end_is_closed_everywhere_is_a_pipe_again() {
        let mut p = [0i32; 2];
        // SAFETY: pipe into a live array; the read end is closed at once, the write end below.
        unsafe {
            assert_eq!(libc::pipe(p.as_mut_ptr()), 0);
            libc::close(p[0]);
        }
        let mut own = Vec::new();
        let list = fds(&[], None, &mut own, &[]);
        let w = list.iter().find(|f| f.fd == p[1]).expect("the write end");
        assert!(matches!(w.kind, FdKind::Pipe { read: false, .. }), "{:?}", w.kind);
        // SAFETY: our descriptor.
        unsafe { libc::close(p[1]) };
    }

    #[test]
    fn advice_is_read_from_the_vmflags_of_smaps() {
        let text = "7f00-7f10 rw-p 00000000 00:00 0 \nSize: 4 kB\nVmFlags: rd wr mr mw me dd ac \n\
                    7f10-7f20 rw-p 00000000 00:00 0 \nVmFlags: rd wr mr mw me ac \n\
                    7f20-7f30 rw-p 00000000 00:00 0 [heap]\nVmFlags: rd wr dc wf hg lo \n";
        assert_eq!(parse_advice(text), vec![(0x7f00, 0x7f10, 1), (0x7f20, 0x7f30, 2 | 4 | 8 | 64)]);
    }

    #[test]
    fn a_session_leader_with_a_controlling_terminal_is_named_and_others_are_not() {
        // pid 77 (a b) leads session 77 on /dev/pts/3 (136:3): named.
        let leader = "77 (a b) S 1 77 77 34819 77 4194560 0";
        let p = controlling_terminal_in_stat(leader).expect("not named");
        assert!(p.contains("process 77") && p.contains("/dev/pts/3"), "{p}");
        // In session 70 (not its own) on the same terminal, or leading one without: not named.
        assert_eq!(controlling_terminal_in_stat("77 (a) S 1 77 70 34819 77 4194560 0"), None);
        assert_eq!(controlling_terminal_in_stat("77 (a) S 1 77 77 0 -1 4194560 0"), None);
    }

    #[test]
    fn mappings_that_grow_down_are_read_from_the_vmflags_of_smaps() {
        let text = "7f00-7f10 rw-p 00000000 00:00 0 \nSize: 4 kB\nVmFlags: rd wr mr mw me gd ac \n\
                    7f10-7f20 rw-p 00000000 00:00 0 \nVmFlags: rd wr mr mw me ac \n\
                    7ffe0-7fff0 rw-p 00000000 00:00 0 [stack]\nVmFlags: rd wr mr mw me gd ac \n";
        assert_eq!(parse_growsdown(text), vec![(0x7f00, 0x7f10), (0x7ffe0, 0x7fff0)]);
        assert!(parse_advice(text).is_empty());
    }

    #[test]
    fn posix_timers_are_read_from_proc_with_their_notification() {
        let text = "ID: 3\nsignal: 14/0000000000001092\nnotify: signal/pid.77\nClockID: 1\n\
                    ID: 0\nsignal: 0/0000000000000000\nnotify: none/pid.77\nClockID: 7\n\
                    ID: 5\nsignal: 34/00007f00deadbeef\nnotify: signal/tid.78\nClockID: 0\n";
        let t = parse_timers(text);
        assert_eq!(t.len(), 3);
        assert_eq!(t[0], (3, 14, 0x1092, "signal".to_string(), false, 77, 1));
        assert_eq!(t[1], (0, 0, 0, "none".to_string(), false, 77, 7));
        assert_eq!(t[2], (5, 34, 0x7f00_dead_beef, "signal".to_string(), true, 78, 0));
        assert!(parse_timers("garbage\nID: x\n").is_empty());
    }

    #[test]
    fn descriptors_in_flight_behind_an_empty_message_refuse_the_socket_and_stay_with_the_program() {
        let (mut dg, mut p) = ([0i32; 2], [0i32; 2]);
        // SAFETY: fd-creating calls, sends from live buffers (one carrying a pipe's read end
        // in a control message laid out by the CMSG macros); every fd is closed below.
        unsafe {
            assert_eq!(libc::socketpair(libc::AF_UNIX, libc::SOCK_DGRAM, 0, dg.as_mut_ptr()), 0);
            assert_eq!(libc::pipe(p.as_mut_ptr()), 0);
            assert_eq!(libc::write(p[1], b"hi".as_ptr() as *const libc::c_void, 2), 2);
            libc::send(dg[0], b"".as_ptr() as *const libc::c_void, 0, 0);
            let mut ctl = [0u64; 4];
            let mut iov = libc::iovec { iov_base: b"m".as_ptr() as *mut libc::c_void, iov_len: 1 };
            let mut mh: libc::msghdr = std::mem::zeroed();
            mh.msg_iov = &mut iov;
            mh.msg_iovlen = 1;
            mh.msg_control = ctl.as_mut_ptr() as *mut libc::c_void;
            mh.msg_controllen = libc::CMSG_SPACE(4) as usize;
            let c = libc::CMSG_FIRSTHDR(&mh);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(4) as usize;
            (libc::CMSG_DATA(c) as *mut i32).write_unaligned(p[0]);
            assert_eq!(libc::sendmsg(dg[0], &mh, 0), 1);
            libc::close(p[0]);
        }
        let mut own = Vec::new();
        let list = fds(&[], None, &mut own, &[]);
        let FdKind::Socket(s) = &list.iter().find(|f| f.fd == dg[1]).expect("the socket").kind else { panic!("not a socket") };
        assert!(s.refuse.contains("1 file descriptor(s) in flight in it (SCM_RIGHTS)"), "{}", s.refuse);
        // The program still has both messages, in order, and the pipe behind the second.
        // SAFETY: receives into live buffers; reads our pipe; closes our fds.
        unsafe {
            let mut buf = [0u8; 4];
            assert_eq!(libc::recv(dg[1], buf.as_mut_ptr() as *mut libc::c_void, 4, libc::MSG_DONTWAIT), 0);
            let mut ctl = [0u64; 4];
            let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: 4 };
            let mut mh: libc::msghdr = std::mem::zeroed();
            mh.msg_iov = &mut iov;
            mh.msg_iovlen = 1;
            mh.msg_control = ctl.as_mut_ptr() as *mut libc::c_void;
            mh.msg_controllen = std::mem::size_of_val(&ctl);
            assert_eq!(libc::recvmsg(dg[1], &mut mh, libc::MSG_DONTWAIT), 1);
            let c = libc::CMSG_FIRSTHDR(&mh);
            assert!(!c.is_null() && (*c).cmsg_type == libc::SCM_RIGHTS, "the descriptor is gone");
            let fd = (libc::CMSG_DATA(c) as *const i32).read_unaligned();
            assert_eq!(libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, 4), 2);
            assert_eq!(&buf[..2], b"hi");
            for f in [fd, p[1], dg[0], dg[1]] {
                libc::close(f);
            }
        }
    }

    #[test]
    fn socket_pairs_carry_their_queues_and_listeners_their_addresses() {
        use crate::state::SocketRole;
        let (mut st, mut dg) = ([0i32; 2], [0i32; 2]);
        // SAFETY: fd-creating calls and sends from live buffers; every fd is closed below.
        let (udp, tl) = unsafe {
            assert_eq!(libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, st.as_mut_ptr()), 0);
            assert_eq!(libc::socketpair(libc::AF_UNIX, libc::SOCK_DGRAM, 0, dg.as_mut_ptr()), 0);
            libc::send(st[0], b"abc".as_ptr() as *const libc::c_void, 3, 0);
            libc::send(dg[0], b"one".as_ptr() as *const libc::c_void, 3, 0);
            libc::send(dg[0], b"".as_ptr() as *const libc::c_void, 0, 0);
            libc::send(dg[0], b"three".as_ptr() as *const libc::c_void, 5, 0);
            let tl = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            (libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0), tl)
        };
        let mut own = Vec::new();
        let list = fds(&[], None, &mut own, &[]);
        let get = |fd: i32| match &list.iter().find(|f| f.fd == fd).unwrap_or_else(|| panic!("fd {fd} missing")).kind {
            FdKind::Socket(s) => (**s).clone(),
            k => panic!("fd {fd}: {k:?}"),
        };
        let (a, b) = (get(st[0]), get(st[1]));
        let (SocketRole::Pair { id: ia, first: fa, queued: qa }, SocketRole::Pair { id: ib, first: fb, queued: qb }) = (a.role, b.role) else {
            panic!("stream ends are not a pair")
        };
        assert!(ia == ib && fa != fb && qa.is_empty());
        assert_eq!(qb, vec![b"abc".to_vec()]);
        let SocketRole::Pair { queued, .. } = get(dg[1]).role else { panic!("datagram ends are not a pair") };
        assert_eq!(queued, vec![b"one".to_vec(), Vec::new(), b"three".to_vec()], "messages and their boundaries");
        use std::os::fd::AsRawFd;
        let l = get(tl.as_raw_fd());
        assert!(matches!(l.role, SocketRole::Listening { .. }));
        assert_eq!(crate::state::sockaddr_text(&l.local), tl.local_addr().unwrap().to_string());
        let u = get(udp);
        assert!(u.role == SocketRole::Unconnected && u.local.is_empty() && u.lost.is_empty());
        // The program still has every message, in order.
        let mut buf = [0u8; 8];
        // SAFETY: reads into a live buffer, then close our fds.
        unsafe {
            assert_eq!(libc::recv(st[1], buf.as_mut_ptr() as *mut libc::c_void, 8, libc::MSG_DONTWAIT), 3);
            for want in [&b"one"[..], b"", b"three"] {
                let n = libc::recv(dg[1], buf.as_mut_ptr() as *mut libc::c_void, 8, libc::MSG_DONTWAIT);
                assert_eq!(&buf[..n as usize], want);
            }
            for fd in [st[0], st[1], dg[0], dg[1], udp] {
                libc::close(fd);
            }
        }
    }

    #[test]
    fn arg_start_points_into_a_mapping_holding_the_command_line() {
        let a = arg_start();
        let maps = own_maps().unwrap();
        assert!(maps.iter().any(|m| (m.start..m.end).contains(&a)), "arg_start {a:#x} is not mapped");
        assert!(brk().0 > 0);
    }

    #[test]
    fn numeric_entries_lists_our_threads() {
        let t = numeric_entries(c"/proc/self/task");
        // SAFETY: getpid cannot fail.
        assert!(t.contains(&unsafe { libc::getpid() }));
        assert!(t.windows(2).all(|w| w[0] < w[1]));
        assert!(numeric_entries(c"/nonexistent").is_empty());
    }

    #[test]
    fn parse_maps_rejects_garbage() {
        assert!(parse_maps("not a maps line").is_err());
    }

    #[test]
    fn lock_lines_of_every_kind_parse_waiters_do_not_and_breaking_leases_as_their_target() {
        let l = |s| parse_lock_line(3, s);
        assert_eq!(
            l("\t1: FLOCK  ADVISORY  WRITE 2241 fe:00:10182730 0 EOF"),
            Ok(Some(FileLock { fd: 3, kind: LockKind::Flock, write: true, start: 0, end: None }))
        );
        assert_eq!(
            l("\t2: POSIX  ADVISORY  READ 2241 fe:00:10182731 100 119"),
            Ok(Some(FileLock { fd: 3, kind: LockKind::Posix, write: false, start: 100, end: Some(119) }))
        );
        assert_eq!(l("\t1: OFDLCK ADVISORY  WRITE -1 fe:00:1 0 EOF").unwrap().unwrap().kind, LockKind::Ofd);
        assert_eq!(l("\t1: LEASE  ACTIVE    READ 7 fe:00:1 0 EOF").unwrap().unwrap().kind, LockKind::Lease);
        assert_eq!(l("\t1: -> FLOCK  ADVISORY  WRITE 9 fe:00:1 0 EOF"), Ok(None));
        // A lease being broken: taken again as what it is being broken to.
        assert_eq!(
            l("\t1: LEASE  BREAKING  READ 7 fe:00:1 0 EOF"),
            Ok(Some(FileLock { fd: 3, kind: LockKind::Lease, write: false, start: 0, end: None }))
        );
        assert_eq!(l("\t1: LEASE  BREAKING  UNLCK 7 fe:00:1 0 EOF"), Ok(None));
        assert!(l("\t1: DELEG  ACTIVE    READ 7 fe:00:1 0 EOF").is_err());
        assert!(l("\t1: garbage").is_err());
    }

    #[test]
    fn locks_held_through_descriptors_are_captured_once() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(dir.path().join("x")).unwrap();
        let fd = f.as_raw_fd();
        // SAFETY: lock calls on our own descriptor with a live struct.
        unsafe {
            assert_eq!(libc::flock(fd, libc::LOCK_SH), 0);
            let mut fl: libc::flock = std::mem::zeroed();
            fl.l_type = libc::F_WRLCK as i16;
            fl.l_start = 4;
            fl.l_len = 4;
            assert_eq!(libc::fcntl(fd, libc::F_SETLK, &fl), 0);
        }
        // SAFETY: dup/close of descriptors this test owns.
        let dup = unsafe { libc::dup(fd) };
        let fds = vec![
            FdState { fd, flags: 0, kind: FdKind::CharDev { path: String::new() } },
            FdState { fd: dup, flags: 0, kind: FdKind::Dup { of: fd } },
        ];
        let (locks, problems) = locks(&fds, &[]);
        // SAFETY: as above.
        unsafe { libc::close(dup) };
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(locks.len(), 2, "{locks:?}");
        assert!(locks.contains(&FileLock { fd, kind: LockKind::Flock, write: false, start: 0, end: None }));
        assert!(locks.contains(&FileLock { fd, kind: LockKind::Posix, write: true, start: 4, end: Some(7) }));
    }

    #[test]
    fn event_objects_are_captured_from_their_fdinfo() {
        // SAFETY: fd-creating calls into live locals; every fd is closed below.
        let (ev, tfd, sfd, ep, p0, again) = unsafe {
            let ev = libc::eventfd(0, libc::EFD_SEMAPHORE);
            let big: u64 = 0x1_2345_6789;
            assert_eq!(libc::write(ev, &big as *const u64 as *const libc::c_void, 8), 8);
            let tfd = libc::timerfd_create(libc::CLOCK_MONOTONIC, 0);
            let its = libc::itimerspec {
                it_interval: libc::timespec { tv_sec: 1, tv_nsec: 0 },
                it_value: libc::timespec { tv_sec: 100, tv_nsec: 0 },
            };
            assert_eq!(libc::timerfd_settime(tfd, 0, &its, std::ptr::null_mut()), 0);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigaddset(&mut set, libc::SIGUSR2);
            let sfd = libc::signalfd(-1, &set, 0);
            let ep = libc::epoll_create1(0);
            let mut e = libc::epoll_event { events: (libc::EPOLLIN | libc::EPOLLET) as u32, u64: 77 };
            assert_eq!(libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, ev, &mut e), 0);
            // A pipe whose read end is open twice (a second open file description).
            let mut p = [0i32; 2];
            assert_eq!(libc::pipe(p.as_mut_ptr()), 0);
            assert_eq!(libc::write(p[1], b"once".as_ptr() as *const libc::c_void, 4), 4);
            let path = std::ffi::CString::new(format!("/proc/self/fd/{}", p[0])).unwrap();
            let again = libc::open(path.as_ptr(), libc::O_RDONLY);
            (ev, tfd, sfd, ep, p, again)
        };
        let mut own = Vec::new();
        let list = fds(&[], None, &mut own, &[]);
        let get = |fd: i32| list.iter().find(|f| f.fd == fd).unwrap_or_else(|| panic!("fd {fd} missing")).kind.clone();
        let kinds = [get(ev), get(tfd), get(sfd), get(ep), get(p0[0]), get(again)];
        // SAFETY: our own descriptors, closed once.
        unsafe {
            for fd in [ev, tfd, sfd, ep, p0[0], p0[1], again] {
                libc::close(fd);
            }
        }
        assert_eq!(kinds[0], FdKind::EventFd { count: 0x1_2345_6789, semaphore: true });
        let FdKind::TimerFd { clock, value_ns, interval_ns, ticks, realtime_deadline, .. } = kinds[1] else {
            panic!("{:?}", kinds[1])
        };
        assert_eq!((clock, interval_ns, ticks, realtime_deadline), (libc::CLOCK_MONOTONIC, 1_000_000_000, 0, false));
        assert!(value_ns > 90_000_000_000 && value_ns <= 100_000_000_000, "{value_ns}");
        assert_eq!(kinds[2], FdKind::SignalFd { mask: 1 << (libc::SIGUSR2 - 1) });
        let FdKind::Epoll { ref watches } = kinds[3] else { panic!("{:?}", kinds[3]) };
        assert_eq!(watches.len(), 1);
        assert_eq!((watches[0].fd, watches[0].data), (ev, 77));
        assert_ne!(watches[0].events & libc::EPOLLET as u32, 0);
        // The bytes queued in the pipe are carried once, not once per read end.
        let carried: Vec<usize> = kinds[4..]
            .iter()
            .map(|k| if let FdKind::Pipe { data, .. } = k { data.len() } else { panic!("{k:?}") })
            .collect();
        assert_eq!(carried.iter().sum::<usize>(), 4, "{carried:?}");
    }
}

