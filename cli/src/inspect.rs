//! `crum inspect <image-dir> [--json] [--verify]`: describes an image for people (on
//! stdout) or programs (`--json`). Sections other than the memory ones are shown by name and
//! size, whoever added them. Given a directory of images, describes the newest.
//!
//! The process part: command, ids, threads, every descriptor with what a restart makes of
//! it, the program's signal handlers, and "restartable yes" or "no, because …" (the checks
//! `crum restart` makes of descriptors, files and the working directory, here and now).
//!
//! The device part of a CUDA program's image (sections `crum.device` and `crum.device.data`,
//! [`crum_wire::ckpt`]) is decoded and shown: backend, device, modules, kernels, every saved
//! region of device/managed/pinned memory and module variables, streams, events, textures.
//!
//! Exit codes: 0 described (and verified, with `--verify`), 1 error (the message names it; a
//! corrupt device section is one). The device checks are `crum_restart::check`'s, the code
//! `crum restart` runs before it changes anything.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use crum_ckpt::image::{latest_image, utc_stamp, Encoding, ImageReader, RegionInfo};
use crum_ckpt::state::{FdKind, FdState, ProcessState, SocketRole, SECTION_PROCESS};
use crum_wire::ckpt::{DeviceState, SECTION_DEVICE_DATA};
use crum_wire::AllocKind;
use indicatif::HumanBytes;

/// Arguments of `crum inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// Image directory (or a directory of images: the newest is described).
    pub image: PathBuf,
    /// Machine-readable output (JSON on stdout).
    #[arg(long)]
    pub json: bool,
    /// Also read every chunk and section and check their checksums.
    #[arg(long)]
    pub verify: bool,
}

fn perms(prot: u32) -> String {
    let b = |bit: u32, c: char| if prot & bit != 0 { c } else { '-' };
    [
        b(libc::PROT_READ as u32, 'r'),
        b(libc::PROT_WRITE as u32, 'w'),
        b(libc::PROT_EXEC as u32, 'x'),
    ]
    .into_iter()
    .collect()
}

fn ratio(mem: u64, stored: u64) -> String {
    if stored == 0 {
        if mem == 0 {
            "-".into()
        } else {
            "zero".into()
        }
    } else {
        format!("{:.2}x", mem as f64 / stored as f64)
    }
}

#[derive(serde::Serialize)]
struct RegionJson<'a> {
    #[serde(flatten)]
    info: &'a RegionInfo,
    name: String,
    chunks: usize,
    nonzero_bytes: u64,
    stored_bytes: u64,
    zstd_chunks: usize,
    raw_chunks: usize,
    zero_chunks: usize,
}

/// A Unix time in milliseconds as `2026-11-22 22:37:22.123 UTC`.
pub(crate) fn human_time(unix_ms: u64) -> String {
    let s = utc_stamp(unix_ms); // 20261122T223722.123Z
    format!(
        "{}-{}-{} {}:{}:{} UTC",
        &s[0..4],
        &s[4..6],
        &s[6..8],
        &s[9..11],
        &s[11..13],
        &s[13..19]
    )
}

pub fn main(args: Args) -> anyhow::Result<i32> {
    // Canonical (printed), and the real error (permission denied, ...) for a path we cannot
    // reach, not "does not exist".
    let mut path = args.image.canonicalize().with_context(|| format!("cannot inspect {}", args.image.display()))?;
    if path.is_dir() && !path.join("inventory").exists() && !crum_ckpt::job::is_job_image(&path) {
        if let Some(newest) = latest_image(&path).context("listing images")? {
            eprintln!("crum: describing the newest image in {}", path.display());
            path = newest;
        }
    }
    if crum_ckpt::job::is_job_image(&path) {
        print!("{}", describe_job(&path, args.json, args.verify)?);
        return Ok(0);
    }
    print!("{}", describe(&path, args.json, args.verify)?);
    Ok(0)
}

/// A job image (`crum_ckpt::job`): its tree, then each process's part as [`describe`] says.
fn describe_job(path: &Path, json: bool, verify: bool) -> anyhow::Result<String> {
    let m = crum_ckpt::job::Manifest::read(path).map_err(|e| anyhow::anyhow!(e))?;
    let mut parts = Vec::new();
    for p in &m.members {
        parts.push(describe(&path.join(&p.part), json, verify).with_context(|| format!("process {} of the job", p.pid))?);
    }
    if json {
        let manifest = String::from_utf8(m.encode()).unwrap_or_default();
        return Ok(format!("{{\"job\":{},\"processes\":[{}]}}\n", manifest.trim(), parts.iter().map(|p| p.trim()).collect::<Vec<_>>().join(",")));
    }
    let mut o = String::new();
    use std::fmt::Write as _;
    writeln!(o, "job image {}: {} processes", path.display(), m.members.len())?;
    fn tree(o: &mut String, m: &crum_ckpt::job::Manifest, pid: i32, depth: usize) {
        if let Some(p) = m.member(pid) {
            let comm = if p.comm.is_empty() { String::new() } else { format!(" ({})", p.comm) };
            // Groups and sessions led by a process of the job (else: the launcher's).
            let mut ids = String::new();
            if p.sid != 0 {
                ids.push_str(&format!(" session {}", p.sid));
            }
            if p.pgid != 0 {
                ids.push_str(&format!(" group {}", p.pgid));
            }
            let _ = writeln!(o, "  {}{}{comm}{ids}", "  ".repeat(depth), p.pid);
        }
        for c in m.children(pid) {
            tree(o, m, c.pid, depth + 1);
        }
    }
    tree(&mut o, &m, m.root, 0);
    for (p, text) in m.members.iter().zip(parts) {
        writeln!(o, "\n== process {} (part {})", p.pid, p.part)?;
        o.push_str(&text);
    }
    Ok(o)
}

/// The description of the image at `path` (human text, or JSON with `json`).
fn describe(path: &Path, json: bool, verify: bool) -> anyhow::Result<String> {
    let mut r = ImageReader::open(path)?;
    // The same checks as `crum restart` makes before it changes anything (with `--verify`,
    // every chunk of process memory too); without `--verify` the device state is decoded
    // and checked but no data is read.
    let device = if verify {
        crum_restart::check::image(&mut r, true)?
    } else {
        crum_restart::check::device_state(&mut r)?
    };
    let verified = verify;
    // Optional (images of older crums have none); untrusted like every section.
    let lineage = match r.section(crum_ckpt::lineage::SECTION_LINEAGE) {
        Ok(Some(b)) => Some(crum_ckpt::lineage::Lineage::decode(&b).map_err(|e| anyhow::anyhow!(e))?),
        Ok(None) => None,
        Err(e) => return Err(e.into()),
    };
    // A process section that does not decode is shown as such (the rest of the image can
    // still be described); a restart would refuse it.
    let (process, process_error) = match r.section(SECTION_PROCESS) {
        Ok(Some(b)) => match ProcessState::decode(&b) {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e)),
        },
        Ok(None) => (None, None),
        Err(e) => return Err(e.into()),
    };
    let problems = process.as_ref().map(crum_restart::problems).unwrap_or_default();
    let inv = r.inventory().clone();
    let regions = r.regions().to_vec();
    let mapped: u64 = regions.iter().map(|g| g.len).sum();
    let stored_len: u64 = regions.iter().filter(|g| g.has_data).map(|g| g.len).sum();
    let nonzero: u64 = regions.iter().map(RegionInfo::nonzero_bytes).sum();
    let stored: u64 = regions.iter().map(RegionInfo::stored_bytes).sum();
    let disk: u64 = inv.sections.iter().map(|s| s.size).sum();
    // An incremental image: the earlier images it keeps memory in, with the stored bytes of
    // its memory each holds.
    let chain: Vec<(crum_ckpt::image::ChainEntry, u64)> = r
        .chain()
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let kept = regions
                .iter()
                .flat_map(|g| &g.chunks)
                .filter(|c| usize::from(c.file) == i + 1)
                .map(|c| u64::from(c.stored_len))
                .sum();
            (e.clone(), kept)
        })
        .collect();

    let mut o = String::new();
    if json {
        let count =
            |g: &RegionInfo, e: Encoding| g.chunks.iter().filter(|c| c.encoding == e).count();
        let regions_json: Vec<RegionJson> = regions
            .iter()
            .map(|g| RegionJson {
                info: g,
                name: g.name_lossy(),
                chunks: g.chunks.len(),
                nonzero_bytes: g.nonzero_bytes(),
                stored_bytes: g.stored_bytes(),
                zstd_chunks: count(g, Encoding::Zstd),
                raw_chunks: count(g, Encoding::Raw),
                zero_chunks: count(g, Encoding::Zero),
            })
            .collect();
        let out = serde_json::json!({
            "path": path,
            "inventory": inv,
            "chunk_size": r.chunk_size(),
            "totals": {
                "mapped_bytes": mapped,
                "saved_region_bytes": stored_len,
                "nonzero_bytes": nonzero,
                "stored_bytes": stored,
                "image_bytes": disk,
            },
            "verified": verified,
            "chain": chain.iter().map(|(e, kept)| serde_json::json!({
                "name": e.name, "inventory_crc": e.inventory_crc,
                "created_unix_ms": e.created_unix_ms, "kept_bytes": kept,
            })).collect::<Vec<_>>(),
            "lineage": lineage.as_ref().map(|l| serde_json::json!({
                "id": l.id, "parent": l.parent, "restarted_from": l.restarted_from,
            })),
            "regions": regions_json,
            "device": device.as_ref().map(|(d, n)| device_json(d, *n)),
            "process": match (&process, &process_error) {
                (Some(p), _) => process_json(p, &problems),
                (None, Some(e)) => serde_json::json!({ "restartable": false, "problems": [e] }),
                (None, None) => serde_json::Value::Null,
            },
        });
        writeln!(o, "{}", serde_json::to_string_pretty(&out)?)?;
        return Ok(o);
    }

    writeln!(o, "image      {}", path.display())?;
    writeln!(
        o,
        "format     {}.{} written by {}",
        inv.major, inv.minor, inv.producer
    )?;
    writeln!(
        o,
        "taken      {} on {}, Linux {}, {} pages",
        human_time(inv.created_unix_ms),
        inv.arch,
        inv.kernel_release,
        HumanBytes(u64::from(inv.page_size))
    )?;
    writeln!(o,
        "memory     {} regions, {} mapped, {} saved, {} non-zero, {} stored, ratio {} (chunks of {})",
        regions.len(),
        HumanBytes(mapped),
        HumanBytes(stored_len),
        HumanBytes(nonzero),
        HumanBytes(stored),
        ratio(stored_len, stored),
        HumanBytes(u64::from(r.chunk_size()))
    )?;
    writeln!(o, "on disk    {}", HumanBytes(disk))?;
    if !chain.is_empty() {
        let kept: u64 = chain.iter().map(|c| c.1).sum();
        writeln!(
            o,
            "chain      incremental: {} earlier image(s) in {} keep {} of its memory; this image adds {}",
            chain.len(),
            path.parent().map_or_else(|| ".".into(), |p| p.display().to_string()),
            HumanBytes(kept),
            HumanBytes(stored)
        )?;
        for (i, (e, b)) in chain.iter().enumerate() {
            writeln!(o, "           {} {}  {} ({})", i + 1, e.name, HumanBytes(*b), human_time(e.created_unix_ms))?;
        }
    }
    if let Some(l) = &lineage {
        writeln!(o, "lineage    {}", l.describe())?;
    }
    if verified {
        writeln!(o, "verified   every chunk and section matches its checksum")?;
    }
    if let Some(p) = &process {
        describe_process(&mut o, p, &problems)?;
    } else if let Some(e) = &process_error {
        writeln!(o, "process    {e}")?;
        writeln!(o, "restartable no, because the process section does not decode")?;
    }
    writeln!(o, "\nsections")?;
    writeln!(o, "  {:<24} {:>8} {:>12}  file", "name", "required", "size")?;
    for s in &inv.sections {
        writeln!(
            o,
            "  {:<24} {:>8} {:>12}  {}",
            s.name,
            if s.required { "yes" } else { "no" },
            HumanBytes(s.size).to_string(),
            s.file
        )?;
    }
    writeln!(o, "\nregions")?;
    writeln!(
        o,
        "  {:<33} {:>4} {:>10} {:>11} {:>11} {:>11} {:>7}  name",
        "address", "perm", "flags", "size", "non-zero", "stored", "ratio"
    )?;
    for g in &regions {
        let (nz, st) = if g.has_data {
            (
                HumanBytes(g.nonzero_bytes()).to_string(),
                HumanBytes(g.stored_bytes()).to_string(),
            )
        } else {
            ("-".into(), "not saved".into())
        };
        writeln!(
            o,
            "  {:016x}-{:016x} {:>4} {:>#10x} {:>11} {:>11} {:>11} {:>7}  {}",
            g.start,
            g.start.saturating_add(g.len),
            perms(g.prot),
            g.flags,
            HumanBytes(g.len).to_string(),
            nz,
            st,
            if g.has_data {
                ratio(g.len, g.stored_bytes())
            } else {
                "-".into()
            },
            g.name_lossy()
        )?;
    }
    if let Some((d, data_size)) = &device {
        describe_device(&mut o, d, *data_size)?;
    }
    Ok(o)
}

/// What a descriptor is and what a restart makes of it (`None`: as it was).
fn fd_text(f: &FdState) -> (&'static str, String, Option<String>) {
    let bytes = |n: usize| HumanBytes(n as u64).to_string();
    match &f.kind {
        FdKind::Stdio => ("stdio", "crum restart's own".into(), None),
        FdKind::File { path, pos, dir, .. } => (if *dir { "directory" } else { "file" }, format!("{path} at offset {pos}"), None),
        FdKind::CharDev { path } => ("device", path.clone(), None),
        FdKind::Tty => ("terminal", "crum restart's terminal".into(), None),
        FdKind::Pipe { id, read, data } => (
            "pipe",
            format!("pipe:[{id}] {} end{}", if *read { "read" } else { "write" }, if data.is_empty() { String::new() } else { format!(", {} waiting", bytes(data.len())) }),
            None,
        ),
        FdKind::JobPipe { id, read, size, data } => (
            "pipe",
            format!(
                "pipe:[{id}] {} end, to another process of the job, capacity {}{}",
                if *read { "read" } else { "write" },
                bytes(*size as usize),
                if data.is_empty() { String::new() } else { format!(", {} waiting", bytes(data.len())) }
            ),
            None,
        ),
        FdKind::Fifo { path, size, data, lost, .. } => (
            "fifo",
            format!(
                "named pipe {path}, {}, capacity {}{}",
                match (f.flags as i32) & libc::O_ACCMODE {
                    libc::O_RDONLY => "read end",
                    libc::O_WRONLY => "write end",
                    _ => "both ends",
                },
                bytes(*size as usize),
                if data.is_empty() { String::new() } else { format!(", {} waiting", bytes(data.len())) }
            ),
            (!lost.is_empty()).then(|| lost.clone()),
        ),
        FdKind::JobFile { id, file } => {
            let what = match &**file {
                FdKind::File { path, pos, .. } => format!("{path} at offset {pos}"),
                other => format!("{other:?}"),
            };
            ("file", format!("{what}, shared with other processes of the job (file {id} of the job)"), None)
        }
        FdKind::Dup { of } => ("dup", format!("of fd {of}"), None),
        FdKind::ControlListener => ("crum", "control socket (made again under the new pid)".into(), None),
        FdKind::Unsupported { what } => ("unsupported", what.clone(), Some("cannot be restored".into())),
        FdKind::Inherited { what } => {
            ("inherited", what.clone(), Some("crum restart's own fd of this number, else /dev/null".into()))
        }
        FdKind::EventFd { count, semaphore } => ("eventfd", format!("count {count}{}", if *semaphore { ", semaphore" } else { "" }), None),
        FdKind::TimerFd { value_ns, interval_ns, ticks, .. } => (
            "timerfd",
            format!("next in {} ms, every {} ms, {ticks} unread", value_ns / 1_000_000, interval_ns / 1_000_000),
            None,
        ),
        FdKind::SignalFd { mask } => ("signalfd", format!("mask {mask:#x}"), None),
        FdKind::Epoll { watches } => ("epoll", format!("watching {} fd(s)", watches.len()), None),
        FdKind::DeletedFile { path, memfd, data, .. } => (
            if *memfd { "memfd" } else { "deleted file" },
            match data {
                Some(d) => format!("{path}, {} saved", bytes(d.len())),
                None => format!("{path} (contents with an earlier fd)"),
            },
            None,
        ),
        FdKind::Socket(s) => {
            let role = match &s.role {
                SocketRole::Unconnected => String::new(),
                SocketRole::Listening { backlog } => format!(", listening (backlog {backlog})"),
                SocketRole::Pair { queued, .. } => {
                    let n: usize = queued.iter().map(Vec::len).sum();
                    format!(", pair with another fd{}", if n > 0 { format!(", {} waiting", bytes(n)) } else { String::new() })
                }
                SocketRole::Connected => String::new(),
                SocketRole::Closed { .. } => String::new(),
                SocketRole::JobPair { queued, .. } => {
                    let n: usize = queued.iter().map(Vec::len).sum();
                    format!(
                        ", connected to another process of the job{}",
                        if n > 0 { format!(", {} waiting", bytes(n)) } else { String::new() }
                    )
                }
                SocketRole::Queued { queued, .. } => format!(", {} datagram(s) waiting", queued.len()),
                SocketRole::JobShared { role, .. } => format!(
                    ", shared with other processes of the job{}",
                    if matches!(**role, SocketRole::Listening { .. }) { ", listening" } else { "" }
                ),
            };
            ("socket", format!("{}{role}", s.describe()), f.kind.loss().map(str::to_string))
        }
        FdKind::PidFd { thread } => ("pidfd", if *thread { "of the main thread" } else { "of the process itself" }.into(), None),
        FdKind::PidFdOf { pid, thread } => {
            ("pidfd", if *thread { format!("of the main thread of process {pid} of the job") } else { format!("of process {pid} of the job") }, None)
        }
        FdKind::Inotify { watches, .. } => (
            "inotify",
            match watches.len() {
                0 => "no watches".to_string(),
                n => format!("{n} watch(es): {}", watches.iter().map(|w| w.path.as_str()).collect::<Vec<_>>().join(", ")),
            },
            f.kind.loss().map(str::to_string),
        ),
    }
}

fn sig_name(sig: i32) -> String {
    match nix::sys::signal::Signal::try_from(sig) {
        Ok(s) => s.as_str().to_string(),
        Err(_) if sig >= libc::SIGRTMIN() => format!("SIGRTMIN+{}", sig - libc::SIGRTMIN()),
        Err(_) => format!("signal {sig}"),
    }
}

/// The process part: command, ids, threads, descriptors with what a restart makes of each,
/// signal handlers, and whether a restart here would work.
fn describe_process(o: &mut String, p: &ProcessState, problems: &[String]) -> anyhow::Result<()> {
    let earlier = if p.pid_history.is_empty() {
        String::new()
    } else {
        format!(" (earlier {})", p.pid_history.iter().map(i32::to_string).collect::<Vec<_>>().join(", "))
    };
    writeln!(o, "process    pid {}{earlier}: {}", p.pid, p.cmdline.join(" "))?;
    writeln!(o, "program    {}", p.exe)?;
    writeln!(o, "cwd        {}", p.cwd)?;
    writeln!(o, "threads    {} (crum's agent included)", p.threads.len())?;
    // The C library's internal signals (32, 33) and crum's stop signal are not the program's.
    let crum_sig = crum_ckpt::threads::stop_signal();
    let handled: Vec<String> = p
        .sigactions
        .iter()
        .filter(|a| a.handler > 1 && a.sig != crum_sig && !(32..=33).contains(&a.sig))
        .map(|a| sig_name(a.sig))
        .collect();
    if !handled.is_empty() {
        writeln!(o, "handlers   {}", handled.join(", "))?;
    }
    if !p.pending_signals.is_empty() {
        writeln!(o, "pending    {} signal(s)", p.pending_signals.len())?;
    }
    if problems.is_empty() {
        writeln!(o, "restartable yes")?;
    } else {
        writeln!(o, "restartable no, because {}", problems.join("; "))?;
    }
    writeln!(o, "
fds")?;
    writeln!(o, "  {:>4}  {:<12} what  [restart]", "fd", "kind")?;
    for f in &p.fds {
        let (kind, what, note) = fd_text(f);
        match note {
            Some(n) => writeln!(o, "  {:>4}  {kind:<12} {what}  [{n}]", f.fd)?,
            None => writeln!(o, "  {:>4}  {kind:<12} {what}", f.fd)?,
        }
    }
    for l in &p.locks {
        writeln!(o, "  lock {:?} on fd {} ({})", l.kind, l.fd, if l.write { "write" } else { "read" })?;
    }
    Ok(())
}

fn process_json(p: &ProcessState, problems: &[String]) -> serde_json::Value {
    serde_json::json!({
        "pid": p.pid,
        "pid_history": p.pid_history,
        "cmdline": p.cmdline,
        "exe": p.exe,
        "cwd": p.cwd,
        "threads": p.threads.len(),
        "restartable": problems.is_empty(),
        "problems": problems,
        "fds": p.fds.iter().map(|f| {
            let (kind, what, note) = fd_text(f);
            serde_json::json!({ "fd": f.fd, "kind": kind, "what": what, "restart": note })
        }).collect::<Vec<_>>(),
    })
}

fn kind_name(k: AllocKind) -> &'static str {
    match k {
        AllocKind::Device => "device",
        AllocKind::Managed => "managed",
        AllocKind::PinnedHost => "pinned",
    }
}

/// `cudaStreamNonBlocking` and other bits of a stream's flags.
fn stream_flags(f: u32) -> String {
    match f {
        0 => "default".into(),
        1 => "non-blocking".into(),
        _ => format!("{f:#x}"),
    }
}

/// `cudaEventBlockingSync` (1), `cudaEventDisableTiming` (2), `cudaEventInterprocess` (4).
fn event_flags(f: u32) -> String {
    let mut v = Vec::new();
    for (bit, name) in [
        (1, "blocking-sync"),
        (2, "disable-timing"),
        (4, "interprocess"),
    ] {
        if f & bit != 0 {
            v.push(name.to_string());
        }
    }
    if f & !7 != 0 {
        v.push(format!("{:#x}", f & !7));
    }
    if v.is_empty() {
        "default".into()
    } else {
        v.join(",")
    }
}

/// Counts and bytes of regions per kind; module variables counted apart from allocations.
struct DeviceTotals {
    rows: Vec<(&'static str, usize, u64)>,
}

impl DeviceTotals {
    fn of(d: &DeviceState) -> DeviceTotals {
        let mut rows = Vec::new();
        for k in [AllocKind::Device, AllocKind::Managed, AllocKind::PinnedHost] {
            let it = d
                .regions
                .iter()
                .filter(|r| r.kind == k && r.symbol.is_none());
            rows.push((kind_name(k), it.clone().count(), it.map(|r| r.len).sum()));
        }
        let vars = d.regions.iter().filter(|r| r.symbol.is_some());
        rows.push(("variable", vars.clone().count(), vars.map(|r| r.len).sum()));
        DeviceTotals { rows }
    }
}

fn device_json(d: &DeviceState, data_size: u64) -> serde_json::Value {
    use serde_json::json;
    let totals: serde_json::Map<String, serde_json::Value> = DeviceTotals::of(d)
        .rows
        .iter()
        .map(|(k, n, b)| (k.to_string(), json!({"count": n, "bytes": b})))
        .collect();
    json!({
        "version": d.version,
        "backend": d.backend,
        "device_name": d.device_name,
        "next_handle": d.next_handle,
        "data_bytes": data_size,
        "totals": totals,
        "modules": d.modules.iter().map(|m| json!({
            "handle": m.handle, "image_addr": m.image_addr, "image_len": m.image_len,
        })).collect::<Vec<_>>(),
        "functions": d.functions.iter().map(|f| json!({
            "handle": f.handle, "module": f.module, "name": f.name,
            "max_dynamic_shared": f.max_dynamic_shared,
        })).collect::<Vec<_>>(),
        "regions": d.regions.iter().map(|r| json!({
            "addr": r.addr, "len": r.len, "kind": kind_name(r.kind),
            "module": r.symbol.as_ref().map(|s| s.0),
            "symbol": r.symbol.as_ref().map(|s| s.1.clone()),
            "data_offset": r.data_offset,
        })).collect::<Vec<_>>(),
        "registered": d.registered.iter().map(|(a, l)| json!({"addr": a, "len": l})).collect::<Vec<_>>(),
        "streams": d.streams.iter().map(|s| json!({
            "handle": s.handle, "flags": s.flags, "priority": s.priority,
        })).collect::<Vec<_>>(),
        "events": d.events.iter().map(|e| json!({"handle": e.handle, "flags": e.flags})).collect::<Vec<_>>(),
        "textures": d.textures.iter().map(|(h, t)| json!({
            "handle": h, "base": t.base, "width": t.width, "height": t.height, "depth": t.depth,
            "mip_levels": t.mip.as_ref().map_or(0, |m| m.levels.len()),
        })).collect::<Vec<_>>(),
        "queue": d.queue.iter().map(|w| json!({
            "stream": w.stream, "seq": w.seq, "op": w.op.name(), "detail": queued_detail(&w.op),
        })).collect::<Vec<_>>(),
        "cut_notes": d.cut_notes,
        "unsaved": d.unsaved,
        "carried_calls": d.carried.iter().map(|c| json!({
            "lane": c.lane, "seq": c.seq, "what": carried_detail(&c.what),
        })).collect::<Vec<_>>(),
    })
}

/// One line about a unit of saved stream work.
fn queued_detail(op: &crum_wire::ckpt::QueuedOp) -> String {
    use crum_wire::ckpt::QueuedOp as Q;
    match op {
        Q::Launch { func, grid, block, shared, params, first_block, contexts, .. } => format!(
            "kernel {func:#x} grid {}x{}x{} block {}x{}x{} shared {shared} params {} B{}{}",
            grid[0], grid[1], grid[2], block[0], block[1], block[2], params.len(),
            if *first_block > 0 {
                format!(", from block {first_block} (preempted)")
            } else {
                String::new()
            },
            if contexts.is_empty() {
                String::new()
            } else {
                format!(
                    ", {} blocks saved in the middle ({})",
                    contexts.len(),
                    HumanBytes(contexts.iter().map(|c| c.len() as u64).sum())
                )
            }
        ),
        Q::Copy { dst, src, width, height, staged, .. } => match staged {
            Some(b) => format!("{width}x{height} B to {dst:#x} from {} staged bytes", b.len()),
            None => format!("{width}x{height} B to {dst:#x} from {src:#x}"),
        },
        Q::Memset { dst, value, width, height, .. } => format!("{width}x{height} B at {dst:#x} to {value:#04x}"),
        Q::EventRecord { event } => format!("event {event:#x}"),
        Q::WaitFor { on_stream, on_seq } if *on_seq == 0 => format!("stream {on_stream:#x} (done)"),
        Q::WaitFor { on_stream, on_seq } => format!("stream {on_stream:#x} work {on_seq}"),
        Q::HostFunc { func, data } => format!("{func:#x}({data:#x})"),
        Q::Marker => "synchronize".into(),
    }
}

fn carried_detail(c: &crum_wire::ckpt::Carried) -> String {
    use crum_wire::ckpt::Carried;
    let waits = |points: &[(u64, u64)]| {
        if points.is_empty() {
            "nothing (its work done)".to_string()
        } else {
            points.iter().map(|(s, q)| format!("stream {s:#x} work {q}")).collect::<Vec<_>>().join(", ")
        }
    };
    match c {
        Carried::Reply(b) => format!("answered, reply not read yet ({} B)", b.len()),
        Carried::Wait { points, .. } if points.is_empty() => "waiting, its work done".into(),
        Carried::Wait { points, .. } => format!("waiting for {}", waits(points)),
        Carried::Free { points, addr } => format!("cudaFree({addr:#x}) waiting for {}", waits(points)),
        Carried::Unload { points, module } => format!("module {module:#x} unload waiting for {}", waits(points)),
        Carried::Reset { points } => format!("cudaDeviceReset waiting for {}", waits(points)),
    }
}

/// The human description of the device part, appended to the process part.
fn describe_device(o: &mut String, d: &DeviceState, data_size: u64) -> anyhow::Result<()> {
    let hb = |b: u64| HumanBytes(b).to_string();
    writeln!(o, "\ndevice")?;
    writeln!(
        o,
        "  backend    {} (state version {})",
        d.backend, d.version
    )?;
    writeln!(o, "  device     {}", d.device_name)?;
    let totals = DeviceTotals::of(d);
    let parts: Vec<String> = totals
        .rows
        .iter()
        .map(|(k, n, b)| format!("{k} {n} ({})", hb(*b)))
        .collect();
    writeln!(o, "  memory     {}", parts.join(", "))?;
    writeln!(
        o,
        "  data       {} saved in {SECTION_DEVICE_DATA}",
        hb(data_size)
    )?;
    writeln!(
        o,
        "  objects    {} modules, {} kernels, {} streams, {} events, {} textures, {} registered host ranges",
        d.modules.len(),
        d.functions.len(),
        d.streams.len(),
        d.events.len(),
        d.textures.len(),
        d.registered.len()
    )?;

    writeln!(o, "\ndevice modules")?;
    writeln!(
        o,
        "  {:>8}  {:>18}  {:>11}",
        "handle", "fatbin address", "fatbin size"
    )?;
    for m in &d.modules {
        writeln!(
            o,
            "  {:>#8x}  {:>#18x}  {:>11}",
            m.handle,
            m.image_addr,
            hb(m.image_len)
        )?;
    }
    writeln!(o, "\ndevice kernels")?;
    writeln!(
        o,
        "  {:>8}  {:>8}  {:>10}  name",
        "handle", "module", "max dyn sh"
    )?;
    for f in &d.functions {
        let sh = f
            .max_dynamic_shared
            .map_or("-".to_string(), |v| v.to_string());
        writeln!(
            o,
            "  {:>#8x}  {:>#8x}  {:>10}  {}",
            f.handle, f.module, sh, f.name
        )?;
    }
    writeln!(o, "\ndevice memory")?;
    writeln!(
        o,
        "  {:<33} {:>11} {:>8}  variable",
        "address", "size", "kind"
    )?;
    for r in &d.regions {
        let var = r
            .symbol
            .as_ref()
            .map_or("-".to_string(), |(m, n)| format!("{n} (module {m:#x})"));
        writeln!(
            o,
            "  {:016x}-{:016x} {:>11} {:>8}  {}",
            r.addr,
            r.addr.saturating_add(r.len),
            hb(r.len),
            kind_name(r.kind),
            var
        )?;
    }
    if !d.registered.is_empty() {
        writeln!(o, "\nregistered host memory")?;
        for (a, l) in &d.registered {
            writeln!(
                o,
                "  {:016x}-{:016x} {:>11}",
                a,
                a.saturating_add(*l),
                hb(*l)
            )?;
        }
    }
    writeln!(o, "\nstreams")?;
    writeln!(o, "  {:>8}  {:<14} {:>8}", "handle", "flags", "priority")?;
    for s in &d.streams {
        writeln!(
            o,
            "  {:>#8x}  {:<14} {:>8}",
            s.handle,
            stream_flags(s.flags),
            s.priority
        )?;
    }
    writeln!(o, "\nevents")?;
    writeln!(o, "  {:>8}  flags", "handle")?;
    for e in &d.events {
        writeln!(o, "  {:>#8x}  {}", e.handle, event_flags(e.flags))?;
    }
    if !d.textures.is_empty() {
        writeln!(o, "\ntextures")?;
        for (h, t) in &d.textures {
            writeln!(
                o,
                "  {:>#8x}  base {:#x} {}x{}x{} pitch {}{}",
                h,
                t.base,
                t.width,
                t.height,
                t.depth,
                t.pitch,
                t.mip.as_ref().map_or(String::new(), |m| format!(", {} mipmap levels", m.levels.len()))
            )?;
        }
    }
    if !d.unsaved.is_empty() {
        writeln!(o, "\nnot saved (named at the checkpoint; a restart loses it)")?;
        for n in &d.unsaved {
            writeln!(o, "  {n}")?;
        }
    }
    if !d.cut_notes.is_empty() {
        writeln!(o, "\nwork running at the checkpoint")?;
        for n in &d.cut_notes {
            writeln!(o, "  {n}")?;
        }
    }
    if !d.queue.is_empty() {
        writeln!(o, "\nqueued device work (not started at the checkpoint; runs again after a restart)")?;
        writeln!(o, "  {} operations", d.queue.len())?;
        writeln!(o, "  {:>8} {:>8}  {:<14} detail", "stream", "work", "operation")?;
        for w in &d.queue {
            writeln!(o, "  {:>#8x} {:>8}  {:<14} {}", w.stream, w.seq, w.op.name(), queued_detail(&w.op))?;
        }
    }
    if !d.carried.is_empty() {
        writeln!(o, "\ncalls cut by the checkpoint (resumed after a restart)")?;
        for c in &d.carried {
            writeln!(o, "  lane {:>2} call {:>6}  {}", c.lane, c.seq, carried_detail(&c.what))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crum_wire::ckpt::SECTION_DEVICE;

    fn golden() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../ckpt/tests/golden/image-1.0")
    }

    #[test]
    fn golden_image_description_names_sections_and_regions() {
        if std::env::consts::ARCH != "x86_64" {
            return;
        }
        let text = describe(&golden(), false, true).unwrap();
        assert!(text.contains("format     1.0 written by crum"), "{text}");
        assert!(
            text.contains("2026-11-22 22:37:22.123 UTC on x86_64"),
            "{text}"
        );
        assert!(text.contains("verified"), "{text}");
        for name in ["process", "note", "[heap]", "/usr/lib/libx.so", "not saved"] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }

    #[test]
    fn golden_image_json_has_totals_and_regions() {
        if std::env::consts::ARCH != "x86_64" {
            return;
        }
        let v: serde_json::Value =
            serde_json::from_str(&describe(&golden(), true, false).unwrap()).unwrap();
        assert_eq!(v["totals"]["mapped_bytes"], 100 * 1024);
        assert_eq!(v["regions"].as_array().unwrap().len(), 3);
        assert_eq!(v["regions"][1]["name"], "/usr/lib/libx.so");
        assert_eq!(v["inventory"]["sections"][2]["name"], "process");
    }

    #[test]
    fn missing_image_is_one_line_error() {
        let e = describe(Path::new("/nonexistent/img"), false, false).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "image directory /nonexistent/img does not exist"
        );
    }

    /// A fresh directory under the system temp directory, removed on drop.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> TempDir {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let p =
                std::env::temp_dir().join(format!("crum-inspect-{tag}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn sample_device_state() -> DeviceState {
        use crum_wire::ckpt::*;
        let mib = 1u64 << 20;
        let base = crum_wire::DEVICE_VA_BASE;
        DeviceState {
            version: DEVICE_STATE_VERSION,
            backend: "emu".into(),
            device_name: "crum emulated device".into(),
            next_handle: 0x40,
            modules: vec![SavedModule {
                handle: 0x3,
                image_addr: 0x5555_0000_1000,
                image_len: 12_345,
            }],
            functions: vec![
                SavedFunction {
                    handle: 0x4,
                    module: 0x3,
                    name: "_Z5sweepPKfPfi".into(),
                    max_dynamic_shared: None,
                },
                SavedFunction {
                    handle: 0x5,
                    module: 0x3,
                    name: "_Z7reversePii".into(),
                    max_dynamic_shared: Some(65536),
                },
            ],
            regions: vec![
                SavedMemory {
                    addr: base,
                    len: 4 * mib,
                    kind: AllocKind::Device,
                    symbol: None,
                    data_offset: 0,
                },
                SavedMemory {
                    addr: base + 4 * mib,
                    len: 1024,
                    kind: AllocKind::Device,
                    symbol: Some((0x3, "table".into())),
                    data_offset: 4 * mib,
                },
                SavedMemory {
                    addr: base + 128 * mib,
                    len: 2 * mib,
                    kind: AllocKind::Managed,
                    symbol: None,
                    data_offset: 4 * mib + 1024,
                },
                SavedMemory {
                    addr: base + 512 * mib,
                    len: 4096,
                    kind: AllocKind::PinnedHost,
                    symbol: None,
                    data_offset: 6 * mib + 1024,
                },
            ],
            registered: vec![(0x7f00_0000_0000, 8192)],
            streams: vec![SavedStream {
                handle: 0x6,
                flags: 1,
                priority: -1,
            }],
            events: vec![
                SavedEvent {
                    handle: 0x7,
                    flags: 2,
                    completed_ago_ns: None,
                },
                SavedEvent {
                    handle: 0x8,
                    flags: 0,
                    completed_ago_ns: Some(1000),
                },
            ],
            textures: vec![],
            data_len: 6 * mib + 1024 + 4096,
            pending_error: 0,
            sticky_error: 0,
            printf: Vec::new(),
            queue: vec![QueuedWork {
                stream: 0x6,
                seq: 12,
                op: QueuedOp::Launch { func: 0x4, grid: [8, 1, 1], block: [256, 1, 1], shared: 0, cooperative: false, params: vec![0; 20], first_block: 3, contexts: vec![vec![0; 100]] },
            }],
            carried: vec![CarriedCall { channel: 1, lane: 2, seq: 9, what: Carried::Wait { points: vec![(0x6, 12)], syncing: true } }],
            cut_notes: vec!["kernel _Z5sweepPKfPfi (3 of 8 blocks done): stopped at a block boundary, policy auto: blocks take about 2 ms".into()],
            unsaved: vec!["device heap: kernels that call device-side malloc/new ran (grow)".into()],
        }
    }

    /// Writes an image holding one small memory region and the given device sections.
    fn image_with(dir: &Path, device: Option<&[u8]>, data_len: Option<u64>) -> PathBuf {
        use crum_ckpt::image::{ImageWriter, RegionMeta, WriterOptions};
        let opts = WriterOptions {
            chunk_size: 64 * 1024,
            dir_name: Some("img".into()),
            ..Default::default()
        };
        let mut w = ImageWriter::prepare(dir, &opts).unwrap();
        w.add_section("process", true, b"process state").unwrap();
        if let Some(b) = device {
            w.add_section(SECTION_DEVICE, false, b).unwrap();
        }
        if let Some(n) = data_len {
            w.add_section(SECTION_DEVICE_DATA, false, &vec![0x5a; n as usize])
                .unwrap();
        }
        let data = vec![7u8; 64 * 1024];
        let meta = RegionMeta {
            start: 0x4000_0000,
            len: data.len() as u64,
            prot: 3,
            flags: 0,
            offset: 0,
            name: b"[heap]",
        };
        w.add_region(&meta, &data).unwrap();
        w.commit().unwrap();
        w.final_path().to_path_buf()
    }

    #[test]
    fn device_section_is_described_with_modules_memory_streams_and_totals() {
        let tmp = TempDir::new("dev");
        let d = sample_device_state();
        let img = image_with(&tmp.0, Some(&d.encode()), Some(d.data_len));
        let text = describe(&img, false, true).unwrap();
        for want in [
            "backend    emu",
            "device     crum emulated device",
            "device 1 (4.00 MiB), managed 1 (2.00 MiB), pinned 1 (4.00 KiB), variable 1 (1.00 KiB)",
            "1 modules, 2 kernels, 1 streams, 2 events, 0 textures, 1 registered host ranges",
            "_Z5sweepPKfPfi",
            "65536  _Z7reversePii",
            "table (module 0x3)",
            "non-blocking",
            "disable-timing",
            "12.06 KiB",
            "1 operations",
            "launch         kernel 0x4 grid 8x1x1 block 256x1x1 shared 0 params 20 B, from block 3 (preempted), 1 blocks saved in the middle (100 B)",
            "lane  2 call      9  waiting for stream 0x6 work 12",
            "stopped at a block boundary, policy auto: blocks take about 2 ms",
            "not saved (named at the checkpoint; a restart loses it)\n  device heap: kernels that call device-side malloc/new ran (grow)",
        ] {
            assert!(text.contains(want), "`{want}` missing from:\n{text}");
        }
        let base = crum_wire::DEVICE_VA_BASE;
        let row = |addr: u64, len: u64| {
            let start = format!("{addr:016x}-{:016x}", addr + len);
            let line = text.lines().find(|l| l.trim_start().starts_with(&start));
            line.unwrap_or_else(|| panic!("no row {start} in:\n{text}"))
                .split_whitespace()
                .skip(1)
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mib = 1u64 << 20;
        assert_eq!(row(base, 4 * mib), "4.00 MiB device -");
        assert_eq!(
            row(base + 4 * mib, 1024),
            "1.00 KiB device table (module 0x3)"
        );
        assert_eq!(row(base + 128 * mib, 2 * mib), "2.00 MiB managed -");
        assert_eq!(row(base + 512 * mib, 4096), "4.00 KiB pinned -");
    }

    #[test]
    fn device_section_in_json_has_regions_and_totals() {
        let tmp = TempDir::new("json");
        let d = sample_device_state();
        let img = image_with(&tmp.0, Some(&d.encode()), Some(d.data_len));
        let v: serde_json::Value =
            serde_json::from_str(&describe(&img, true, false).unwrap()).unwrap();
        let dev = &v["device"];
        assert_eq!(dev["backend"], "emu");
        assert_eq!(dev["data_bytes"], d.data_len);
        assert_eq!(dev["totals"]["device"]["bytes"], 4u64 << 20);
        assert_eq!(dev["totals"]["managed"]["count"], 1);
        assert_eq!(dev["regions"].as_array().unwrap().len(), 4);
        assert_eq!(dev["regions"][1]["symbol"], "table");
        assert_eq!(dev["regions"][3]["kind"], "pinned");
        assert_eq!(dev["functions"][1]["max_dynamic_shared"], 65536);
        assert_eq!(dev["streams"][0]["priority"], -1);
    }

    #[test]
    fn image_without_device_section_shows_no_device_part() {
        let tmp = TempDir::new("nodev");
        let img = image_with(&tmp.0, None, None);
        let text = describe(&img, false, false).unwrap();
        assert!(!text.contains("\ndevice"), "{text}");
        let v: serde_json::Value =
            serde_json::from_str(&describe(&img, true, false).unwrap()).unwrap();
        assert!(v["device"].is_null());
    }

    #[test]
    fn corrupt_device_section_is_a_one_line_error() {
        let d = sample_device_state();
        let good = d.encode();
        let mut wrong_version = d.clone();
        wrong_version.version = 99;
        let mut outside = d.clone();
        outside.regions[0].data_offset = d.data_len;
        let mut huge_list = DeviceState::empty().encode();
        assert_eq!(&huge_list[..5], &[crum_wire::ckpt::DEVICE_STATE_VERSION as u8, 0, 0, 0, 0], "version, backend, device, next handle, modules");
        huge_list.splice(4..5, [253, 0, 0, 0, 0, 0, 1, 0, 0]);
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("garbage", vec![0xff; 7], "cannot be decoded"),
            (
                "truncated",
                good[..good.len() / 2].to_vec(),
                "cannot be decoded",
            ),
            (
                "trailing",
                [good.clone(), vec![0]].concat(),
                "trailing bytes",
            ),
            ("version", wrong_version.encode(), "version 99"),
            ("outside", outside.encode(), "outside the saved data"),
            ("empty", Vec::new(), "cannot be decoded"),
            // A list length of 2^40 (the modules): refused before anything is allocated
            // (it aborted `crum inspect` on a 26 TB allocation).
            ("huge list", huge_list, "runs past the end"),
        ];
        for (tag, bytes, want) in cases {
            let tmp = TempDir::new(tag);
            let img = image_with(&tmp.0, Some(&bytes), Some(d.data_len));
            let e = format!("{:#}", describe(&img, false, false).unwrap_err());
            assert!(e.contains(want) && e.contains(SECTION_DEVICE), "{tag}: {e}");
            assert!(!e.contains('\n'), "{tag}: multi-line error: {e}");
        }
    }

    #[test]
    fn device_data_size_differing_from_the_state_is_an_error() {
        let tmp = TempDir::new("size");
        let d = sample_device_state();
        let img = image_with(&tmp.0, Some(&d.encode()), Some(4096));
        let e = format!("{:#}", describe(&img, false, false).unwrap_err());
        assert!(e.contains("holds 4096"), "{e}");
        let tmp2 = TempDir::new("dataonly");
        let img = image_with(&tmp2.0, None, Some(16));
        let e = format!("{:#}", describe(&img, false, false).unwrap_err());
        assert!(e.contains("no `crum.device` section"), "{e}");
    }
}
