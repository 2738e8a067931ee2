//! Process attributes the kernel keeps outside memory and descriptors: `oom_score_adj`, the
//! child-subreaper flag, the dumpable flag, `no_new_privs`, the transparent-huge-page
//! switch (`PR_SET_THP_DISABLE`) and the execution domain (`personality`); per thread, the
//! scheduling policy, real-time priority, nice value, timer slack and parent-death signal
//! (in the thread slots, [`crate::threads`]); the supplementary groups; the main thread's
//! capability sets (inheritable, permitted, effective, bounding, ambient); the process's
//! `membarrier` registrations (global expedited, and private expedited: plain, `SYNC_CORE`, `RSEQ`).
//! A restarted process used to get the restarting process's values silently (without its
//! registrations, the program's expedited barriers failed with EPERM after a restart).
//!
//! [`capture`] records them when an image is cut (the threads stopped) in this module's
//! statics, which are program memory and so come back with the image; [`apply`] sets them
//! again in the restored process before its other threads exist (raw system calls: nothing is
//! allocated there), and remembers what the kernel refused; [`refused`] names it, for a
//! warning once the threads run. The user and groups are compared too: a restart as another
//! user is named, not hidden.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering::Relaxed};

/// Index of each saved attribute in [`SAVED`] (also its bit in [`REFUSED`]).
const OOM: usize = 0;
const SUBREAPER: usize = 1;
const DUMPABLE: usize = 2;
const NO_NEW_PRIVS: usize = 3;
const THP_DISABLE: usize = 4;
const PERSONALITY: usize = 5;
const UID: usize = 6;
const GID: usize = 7;
const MEMBARRIER: usize = 8;
const LOGINUID: usize = 9;
/// The main thread's capability sets (`CapInh`, `CapPrm`, `CapEff`, `CapBnd`, `CapAmb` of
/// /proc/self/status, as masks).
const CAP_INH: usize = 10;
const CAP_PRM: usize = 11;
const CAP_EFF: usize = 12;
const CAP_BND: usize = 13;
const CAP_AMB: usize = 14;
const N: usize = 15;
/// Not captured (an image of an older crum, or a capture that failed): `apply` leaves it.
const UNSET: i64 = i64::MIN;

const NAMES: [&str; N] =
    ["oom_score_adj", "child subreaper flag", "dumpable flag", "no_new_privs", "THP disable flag", "personality", "user", "group", "membarrier registrations", "audit login uid",
     "inheritable capability set", "permitted capability set", "effective capability set", "capability bounding set", "ambient capability set"];

/// `membarrier` commands: (the private expedited barrier, the registration it needs). Where
/// the kernel cannot tell registrations (`MEMBARRIER_CMD_GET_REGISTRATIONS`, Linux 6.3), the
/// barrier answers EPERM without one, so issuing it (a harmless barrier: the threads are
/// stopped) reads it.
const MEMBARRIER_CMDS: [(i64, i64); 3] = [(1 << 3, 1 << 4), (1 << 5, 1 << 6), (1 << 7, 1 << 8)];
/// `MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED`: told only by `GET_REGISTRATIONS` (its barrier
/// succeeds either way).
const MEMBARRIER_GLOBAL: i64 = 1 << 2;
const MEMBARRIER_GET_REGISTRATIONS: i64 = 1 << 9;

fn membarrier_raw(cmd: i64) -> i64 {
    // SAFETY: membarrier takes plain integers.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd as libc::c_int, 0 as libc::c_uint, 0 as libc::c_int) as i64 }
}

fn membarrier(cmd: i64) -> bool {
    membarrier_raw(cmd) == 0
}

/// The registrations this process has, as the registration commands' bits: the global
/// expedited one and those of [`MEMBARRIER_CMDS`].
fn membarrier_registered() -> i64 {
    let known = MEMBARRIER_CMDS.iter().fold(MEMBARRIER_GLOBAL, |m, (_, reg)| m | reg);
    let r = membarrier_raw(MEMBARRIER_GET_REGISTRATIONS);
    if r >= 0 {
        return r & known;
    }
    MEMBARRIER_CMDS.iter().filter(|(barrier, _)| membarrier(*barrier)).fold(0, |m, (_, reg)| m | reg)
}

#[allow(clippy::declare_interior_mutable_const)]
const INIT: AtomicI64 = AtomicI64::new(UNSET);
static SAVED: [AtomicI64; N] = [INIT; N];
/// The value found in the restored process where it differs and could not be set.
static FOUND: [AtomicI64; N] = [INIT; N];
/// Bit i: attribute i could not be restored.
static REFUSED: AtomicU32 = AtomicU32::new(0);
/// Per-thread scheduling attributes that could not be restored (see [`note_thread_refused`]).
static THREADS_REFUSED: AtomicU32 = AtomicU32::new(0);
/// The supplementary groups (up to [`MAX_GROUPS`]; count UNSET: not captured) and whether a
/// restart could not set them.
const MAX_GROUPS: usize = 64;
#[allow(clippy::declare_interior_mutable_const)]
const GROUP_INIT: AtomicU32 = AtomicU32::new(0);
static GROUPS: [AtomicU32; MAX_GROUPS] = [GROUP_INIT; MAX_GROUPS];
static NGROUPS: AtomicI64 = AtomicI64::new(UNSET);
static GROUPS_REFUSED: AtomicU32 = AtomicU32::new(0);

/// The calling thread's supplementary groups (None: more than [`MAX_GROUPS`]).
fn groups() -> Option<([libc::gid_t; MAX_GROUPS], usize)> {
    let mut g = [0 as libc::gid_t; MAX_GROUPS];
    // SAFETY: getgroups writes at most MAX_GROUPS ids into the live array.
    let n = unsafe { libc::getgroups(MAX_GROUPS as libc::c_int, g.as_mut_ptr()) };
    (n >= 0).then_some((g, n as usize))
}

fn saved_groups() -> Option<Vec<u32>> {
    let n = NGROUPS.load(Relaxed);
    (n != UNSET).then(|| GROUPS[..n as usize].iter().map(|g| g.load(Relaxed)).collect())
}

/// `prctl(op, v)`: true on success.
fn prctl_set(op: i32, v: i64) -> bool {
    // SAFETY: a prctl setting with one integer argument.
    unsafe { libc::prctl(op, v as libc::c_ulong, 0, 0, 0) == 0 }
}

/// The execution domain (`set`: also sets it; -1 on failure).
fn personality(set: Option<i64>) -> i64 {
    // SAFETY: personality takes and returns plain integers (0xffffffff only queries).
    unsafe { libc::personality(set.map_or(0xffff_ffff, |v| v as libc::c_ulong)) as i64 }
}

fn prctl_get(op: i32) -> i64 {
    // SAFETY: a prctl query without pointer arguments.
    unsafe { libc::prctl(op, 0, 0, 0, 0) as i64 }
}

/// A `Field:` line of /proc/self/status holding a hexadecimal mask (the capability sets).
fn status_hex(status: &str, key: &str) -> Option<i64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    u64::from_str_radix(line[key.len()..].trim(), 16).ok().map(|v| v as i64)
}

/// The calling thread's capability sets (`capget`, version 3): (inheritable, permitted,
/// effective) masks.
fn capget() -> Option<(u64, u64, u64)> {
    let mut hdr = [0x2008_0522u32, 0]; // _LINUX_CAPABILITY_VERSION_3, this thread
    let mut data = [0u32; 6]; // two of { effective, permitted, inheritable }
    // SAFETY: capget writes two `__user_cap_data_struct`s into the live array.
    let r = unsafe { libc::syscall(libc::SYS_capget, hdr.as_mut_ptr(), data.as_mut_ptr()) };
    let m = |i: usize| data[i] as u64 | (data[i + 3] as u64) << 32;
    (r == 0).then(|| (m(2), m(1), m(0)))
}

fn capset(inh: u64, prm: u64, eff: u64) -> bool {
    let mut hdr = [0x2008_0522u32, 0];
    let data = [eff as u32, prm as u32, inh as u32, (eff >> 32) as u32, (prm >> 32) as u32, (inh >> 32) as u32];
    // SAFETY: capset reads the header and two data structs from live arrays.
    unsafe { libc::syscall(libc::SYS_capset, hdr.as_mut_ptr(), data.as_ptr()) == 0 }
}

/// The calling thread's bounding and ambient sets, as masks (capabilities 0 to 63).
fn cap_bnd_amb() -> (u64, u64) {
    let (mut bnd, mut amb) = (0u64, 0u64);
    for c in 0..64u64 {
        // SAFETY: prctl queries with plain integers; an unknown capability answers EINVAL.
        unsafe {
            if libc::prctl(libc::PR_CAPBSET_READ, c, 0, 0, 0) == 1 {
                bnd |= 1 << c;
            }
            if libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_IS_SET as libc::c_ulong, c, 0, 0) == 1 {
                amb |= 1 << c;
            }
        }
    }
    (bnd, amb)
}

/// Gives the main thread its capability sets back (the restorer runs with the restarting
/// user's, all of root's when run as root): the bounding set is narrowed first (that needs
/// `CAP_SETPCAP`, which the next step may drop), then the inheritable, permitted and
/// effective sets are set, then the ambient set raised. A set the kernel does not let us
/// reach (more than the restarting process has) is named.
fn apply_caps(want: impl Fn(usize) -> Option<i64>, refuse: impl Fn(usize, i64)) {
    let (Some(inh), Some(prm), Some(eff)) = (want(CAP_INH), want(CAP_PRM), want(CAP_EFF)) else { return };
    let (inh, prm, eff) = (inh as u64, prm as u64, eff as u64);
    if let Some(bnd) = want(CAP_BND) {
        let (now, _) = cap_bnd_amb();
        for c in 0..64u64 {
            if now & (1 << c) != 0 && bnd as u64 & (1 << c) == 0 {
                // SAFETY: drops one capability from this thread's bounding set.
                unsafe { libc::prctl(libc::PR_CAPBSET_DROP, c, 0, 0, 0) };
            }
        }
        let (now, _) = cap_bnd_amb();
        if now != bnd as u64 {
            refuse(CAP_BND, now as i64);
        }
    }
    if capget() != Some((inh, prm, eff)) && !capset(inh, prm, eff) {
        if let Some((i, p, e)) = capget() {
            for (k, want, got) in [(CAP_INH, inh, i), (CAP_PRM, prm, p), (CAP_EFF, eff, e)] {
                if want != got {
                    refuse(k, got as i64);
                }
            }
        }
    }
    if let Some(amb) = want(CAP_AMB) {
        let amb = amb as u64;
        if cap_bnd_amb().1 != amb {
            // SAFETY: prctl with plain integers.
            unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0) };
            for c in (0..64u64).filter(|c| amb & (1 << c) != 0) {
                // SAFETY: as above.
                unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong, c, 0, 0) };
            }
            let now = cap_bnd_amb().1;
            if now != amb {
                refuse(CAP_AMB, now as i64);
            }
        }
    }
}

/// A `Field:` line of /proc/self/status (the main thread's), as a number (first column).
fn status_field(status: &str, key: &str) -> Option<i64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// Records the attributes (threads stopped; allocates only through the agent's arena).
pub fn capture() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let oom = std::fs::read_to_string("/proc/self/oom_score_adj").ok().and_then(|s| s.trim().parse().ok());
    let pers = std::fs::read_to_string("/proc/self/personality").ok().and_then(|s| i64::from_str_radix(s.trim(), 16).ok());
    let mut subreaper: libc::c_int = 0;
    // SAFETY: PR_GET_CHILD_SUBREAPER writes one int to the live local.
    let sr = unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut subreaper as *mut libc::c_int, 0, 0, 0) };
    let values: [Option<i64>; N] = [
        oom,
        (sr == 0).then_some(subreaper as i64),
        Some(prctl_get(libc::PR_GET_DUMPABLE)).filter(|v| *v >= 0),
        status_field(&status, "NoNewPrivs:"),
        Some(prctl_get(libc::PR_GET_THP_DISABLE)).filter(|v| *v >= 0),
        pers,
        status_field(&status, "Uid:"),
        status_field(&status, "Gid:"),
        Some(membarrier_registered()),
        std::fs::read_to_string("/proc/self/loginuid").ok().and_then(|s| s.trim().parse().ok()),
        status_hex(&status, "CapInh:"),
        status_hex(&status, "CapPrm:"),
        status_hex(&status, "CapEff:"),
        status_hex(&status, "CapBnd:"),
        status_hex(&status, "CapAmb:"),
    ];
    for (s, v) in SAVED.iter().zip(values) {
        s.store(v.unwrap_or(UNSET), Relaxed);
    }
    match groups() {
        Some((g, n)) => {
            for (slot, id) in GROUPS.iter().zip(&g[..n]) {
                slot.store(*id, Relaxed);
            }
            NGROUPS.store(n as i64, Relaxed);
        }
        None => NGROUPS.store(UNSET, Relaxed),
    }
}

const OOM_FILE: &std::ffi::CStr = c"/proc/self/oom_score_adj";
const LOGINUID_FILE: &std::ffi::CStr = c"/proc/self/loginuid";

/// Reads a number from a /proc file with raw calls (nothing allocated).
fn raw_proc_num(path: &std::ffi::CStr) -> Option<i64> {
    let mut b = [0u8; 24];
    // SAFETY: open/read/close of our own descriptor into the live buffer.
    let n = unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, b.as_mut_ptr() as *mut libc::c_void, b.len());
        libc::close(fd);
        n
    };
    let s = std::str::from_utf8(&b[..n.max(0) as usize]).ok()?;
    s.trim().parse().ok()
}

/// Writes a number into a /proc file with raw calls.
fn write_proc_num(path: &std::ffi::CStr, v: i64) -> bool {
    let mut b = [0u8; 24];
    let mut n = 0;
    let neg = v < 0;
    let mut u = v.unsigned_abs();
    loop {
        b[n] = b'0' + (u % 10) as u8;
        n += 1;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    if neg {
        b[n] = b'-';
        n += 1;
    }
    b[..n].reverse();
    // SAFETY: open/write/close of our own descriptor from the live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let w = libc::write(fd, b.as_ptr() as *const libc::c_void, n);
        libc::close(fd);
        w == n as isize
    }
}

/// In the restored process, on its main thread before the other threads are re-created:
/// sets every captured attribute that differs. Raw system calls only; refusals are kept for
/// [`refused`].
pub fn apply() {
    REFUSED.store(0, Relaxed);
    let refuse = |i: usize, found: i64| {
        FOUND[i].store(found, Relaxed);
        REFUSED.fetch_or(1 << i, Relaxed);
    };
    let want = |i: usize| Some(SAVED[i].load(Relaxed)).filter(|v| *v != UNSET);
    if let Some(v) = want(OOM) {
        if raw_proc_num(OOM_FILE) != Some(v) && !write_proc_num(OOM_FILE, v) {
            refuse(OOM, raw_proc_num(OOM_FILE).unwrap_or(UNSET));
        }
    }
    // The audit login uid (4294967295: none): setting it needs CAP_AUDIT_CONTROL, and once set
    // it may be immutable (`audit --loginuid-immutable`).
    if let Some(v) = want(LOGINUID) {
        if raw_proc_num(LOGINUID_FILE) != Some(v) && !write_proc_num(LOGINUID_FILE, v) {
            refuse(LOGINUID, raw_proc_num(LOGINUID_FILE).unwrap_or(UNSET));
        }
    }
    if let Some(v) = want(SUBREAPER) {
        if !prctl_set(libc::PR_SET_CHILD_SUBREAPER, v) {
            refuse(SUBREAPER, 0);
        }
    }
    if let Some(v) = want(DUMPABLE) {
        let now = prctl_get(libc::PR_GET_DUMPABLE);
        if now != v && !prctl_set(libc::PR_SET_DUMPABLE, v) {
            refuse(DUMPABLE, now);
        }
    }
    if let Some(v) = want(THP_DISABLE) {
        let now = prctl_get(libc::PR_GET_THP_DISABLE);
        if now != v && !prctl_set(libc::PR_SET_THP_DISABLE, v) {
            refuse(THP_DISABLE, now);
        }
    }
    if let Some(v) = want(PERSONALITY) {
        let now = personality(None);
        if now != v && personality(Some(v)) < 0 {
            refuse(PERSONALITY, now);
        }
    }
    // Last: no_new_privs cannot be cleared, and set it is inherited by the threads created
    // after this.
    if let Some(v) = want(NO_NEW_PRIVS) {
        let now = prctl_get(libc::PR_GET_NO_NEW_PRIVS);
        if now != v && (v == 0 || !prctl_set(libc::PR_SET_NO_NEW_PRIVS, 1)) {
            refuse(NO_NEW_PRIVS, now);
        }
    }
    if let Some(v) = want(MEMBARRIER) {
        for reg in std::iter::once(MEMBARRIER_GLOBAL).chain(MEMBARRIER_CMDS.iter().map(|(_, reg)| *reg)) {
            if v & reg != 0 && !membarrier(reg) {
                refuse(MEMBARRIER, membarrier_registered());
            }
        }
    }
    // Supplementary groups: set on this (the only) thread with the raw system call; the
    // threads made after inherit them. Needs CAP_SETGID where they differ.
    GROUPS_REFUSED.store(0, Relaxed);
    let n = NGROUPS.load(Relaxed);
    if n != UNSET {
        let mut want = [0 as libc::gid_t; MAX_GROUPS];
        for (w, g) in want.iter_mut().zip(&GROUPS[..n as usize]) {
            *w = g.load(Relaxed);
        }
        let differs = groups().is_none_or(|(g, m)| g[..m] != want[..n as usize]);
        // SAFETY: setgroups reads n ids of the live array.
        if differs && unsafe { libc::syscall(libc::SYS_setgroups, n as usize, want.as_ptr()) } != 0 {
            GROUPS_REFUSED.store(1, Relaxed);
        }
    }
    // Last: what the steps above needed (CAP_SETGID, CAP_SYS_RESOURCE…) may be dropped here.
    apply_caps(want, refuse);
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid() as i64, libc::getgid() as i64) };
    if want(UID).is_some_and(|v| v != uid) {
        refuse(UID, uid);
    }
    if want(GID).is_some_and(|v| v != gid) {
        refuse(GID, gid);
    }
}

/// A restored thread's scheduling attribute could not be set (bit 0: policy/priority,
/// bit 1: nice, bit 2: timer slack). Raw: called by restored threads before they run.
pub fn note_thread_refused(bits: u32) {
    THREADS_REFUSED.fetch_or(bits, Relaxed);
}

/// What [`apply`] (and the restored threads) could not restore, one line each.
pub fn refused() -> Vec<String> {
    let bits = REFUSED.load(Relaxed);
    let mut out = Vec::new();
    for (i, name) in NAMES.iter().enumerate() {
        if bits & (1 << i) == 0 {
            continue;
        }
        let (was, now) = (SAVED[i].load(Relaxed), FOUND[i].load(Relaxed));
        let now = if now == UNSET { String::from("unknown") } else { now.to_string() };
        out.push(if i == UID || i == GID {
            format!("the program ran as {name} {was} and is restarted as {name} {now}: files and permissions may differ")
        } else if (CAP_INH..=CAP_AMB).contains(&i) {
            format!("the {name} was {:#x} and could not be restored (it is {:#x}): the restart has fewer capabilities", was as u64, FOUND[i].load(Relaxed) as u64)
        } else if i == MEMBARRIER {
            format!("the {name} (commands {was:#x}) could not all be made again (now {now}): expedited barriers fail with EPERM")
        } else {
            format!("the {name} was {was} and could not be restored (it is {now})")
        });
    }
    if GROUPS_REFUSED.load(Relaxed) != 0 {
        let now = groups().map(|(g, n)| format!("{:?}", &g[..n])).unwrap_or_else(|| "unknown".into());
        out.push(format!(
            "the supplementary groups were {:?} and could not be restored (they are {now})",
            saved_groups().unwrap_or_default()
        ));
    }
    let t = THREADS_REFUSED.load(Relaxed);
    if t & 1 != 0 {
        out.push("a thread's scheduling policy or real-time priority could not be restored (not permitted)".into());
    }
    if t & 2 != 0 {
        out.push("a thread's nice value could not be restored (lowering it is not permitted): it runs at the restarting process's".into());
    }
    if t & 4 != 0 {
        out.push("a thread's timer slack could not be restored".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests share the module's statics.
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn capture_reads_this_process_and_apply_keeps_it() {
        let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        capture();
        assert_eq!(SAVED[OOM].load(Relaxed), raw_proc_num(OOM_FILE).unwrap());
        assert_eq!(SAVED[DUMPABLE].load(Relaxed), 1);
        // SAFETY: getuid cannot fail.
        assert_eq!(SAVED[UID].load(Relaxed), unsafe { libc::getuid() } as i64);
        apply();
        assert_eq!(refused(), Vec::<String>::new());
    }

    #[test]
    fn oom_score_adj_is_written_as_text() {
        let now = raw_proc_num(OOM_FILE).unwrap();
        assert!(write_proc_num(OOM_FILE, now));
        assert_eq!(raw_proc_num(OOM_FILE), Some(now));
    }

    #[test]
    fn refusals_are_named_with_both_values() {
        let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        SAVED[OOM].store(-500, Relaxed);
        FOUND[OOM].store(0, Relaxed);
        SAVED[UID].store(1000, Relaxed);
        FOUND[UID].store(1001, Relaxed);
        REFUSED.store((1 << OOM) | (1 << UID), Relaxed);
        THREADS_REFUSED.store(2, Relaxed);
        let r = refused();
        REFUSED.store(0, Relaxed);
        THREADS_REFUSED.store(0, Relaxed);
        assert_eq!(r.len(), 3, "{r:?}");
        assert_eq!(r[0], "the oom_score_adj was -500 and could not be restored (it is 0)");
        assert!(r[1].contains("user 1000") && r[1].contains("user 1001"), "{}", r[1]);
        assert!(r[2].contains("nice"), "{}", r[2]);
    }
}
