//! `crum run`: run a program with its CUDA calls going to a device proxy.
//!
//! Creates the channel memfd, starts `crum proxy` (own process group, so a terminal's Ctrl-C
//! reaches only the program), waits until it serves, then runs the program with
//! `LD_PRELOAD=libcrum.so` and the channel descriptor in `CRUM_CHANNEL`. The program's
//! stdio, arguments and environment pass through; its exit status is ours, and if a signal
//! killed it we re-raise the same signal. SIGTERM, SIGHUP, SIGUSR1/2 sent to `crum run` are
//! forwarded to the program. If the proxy dies first, the channel is marked dead so the
//! program's CUDA calls fail instead of hanging; when the program ends, the proxy is stopped.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use nix::sys::signal::{self, SigSet, Signal};
use nix::unistd::Pid;

use crum_wire::Channel;

/// Arguments of `crum run`.
#[derive(clap::Args)]
pub struct Args {
    /// Device: a real GPU (`cuda`), the emulated device (`emu`), or `auto` (GPU if usable).
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Checkpoint every DUR (e.g. 90s, 10m, 1h).
    #[arg(long, value_name = "DUR")]
    pub interval: Option<String>,
    /// Directory for checkpoint images.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Keep the newest N (at least 1) images of this program's lineage; older ones are
    /// removed. Images of other programs, and images newer than the one a restarted program
    /// was restarted from, are never removed.
    #[arg(long, value_name = "N", value_parser = parse_keep)]
    pub keep: Option<u32>,
    /// Write a full image every N checkpoints (1 to 256; default 8); the images between
    /// store only the memory changed since the program's previous image in the same
    /// directory and keep the rest there (`crum inspect` shows the chain; --keep never
    /// removes an image a kept one needs). 1: every image is full. Sets CRUM_CKPT_FULL_EVERY.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub full_every: Option<u32>,
    /// Chunk size of images in KiB (a power of two, 64 to 65536; default 4096): the unit an
    /// incremental image keeps or stores. Smaller chunks keep more of a program that changes
    /// its memory here and there. Sets CRUM_CKPT_CHUNK_KIB.
    #[arg(long, value_name = "KIB", value_parser = parse_chunk_kib)]
    pub chunk_size: Option<u32>,
    /// Checkpoint when this signal arrives (e.g. USR1, SIGTERM, 10). Not KILL or STOP
    /// (they cannot be caught) nor a fault signal (SEGV, BUS, ILL, FPE, TRAP).
    #[arg(long, value_name = "SIG", value_parser = parse_trigger_signal)]
    pub on_signal: Option<Signal>,
    /// With --on-signal: end the program once the checkpoint that signal triggered is
    /// written, with exit code 75 ("checkpointed and stopped", apart from finishing). For
    /// batch jobs signalled before their time limit (Slurm `--signal=B:USR1@60`).
    #[arg(long, requires = "on_signal")]
    pub exit: bool,
    /// How managed memory is tracked (see docs/managed-memory.md): `mprotect` (page
    /// protection, the default), `uffd` (userfaultfd, precise; falls back to mprotect with a
    /// warning where not allowed), or `verify` (mprotect that reports programs reading
    /// managed memory they wrote since the last CUDA call). Sets CRUM_MANAGED.
    #[arg(long, value_enum, value_name = "MODE")]
    pub managed: Option<ManagedMode>,
    /// Write no image a restart could not restore exactly: what would be a warning at
    /// checkpoint time (a socket, a deleted file, ...) fails the checkpoint instead. Sets
    /// CRUM_STRICT=1.
    #[arg(long)]
    pub strict: bool,
    /// Kernels on the emulated device may touch only the bytes they allocated: an access
    /// past an allocation's end (within its last page) or before the first allocation, which
    /// a GPU lets pass, is an illegal address, logged with the allocation it misses. Sets
    /// CRUM_STRICT_MEMORY=1 for the device proxy.
    #[arg(long)]
    pub strict_memory: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    pub command: Vec<String>,
}

/// `crum run --managed`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ManagedMode {
    Mprotect,
    Uffd,
    Verify,
}

impl ManagedMode {
    fn env_value(self) -> &'static str {
        match self {
            ManagedMode::Mprotect => "mprotect",
            ManagedMode::Uffd => "uffd",
            ManagedMode::Verify => "verify",
        }
    }
}

/// Parse a duration: plain seconds, or a number with ms/s/m/h/d.
pub fn parse_duration(s: &str) -> anyhow::Result<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().with_context(|| format!("bad duration `{s}`"))?;
    let mult = match unit {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => bail!("bad duration unit in `{s}` (use ms, s, m, h or d)"),
    };
    let secs = n * mult;
    if secs <= 0.0 || !secs.is_finite() {
        bail!("duration must be positive: `{s}`");
    }
    Ok(secs)
}

/// Parse a signal given as a number, `USR1` or `SIGUSR1`.
pub fn parse_signal(s: &str) -> anyhow::Result<Signal> {
    if let Ok(n) = s.parse::<i32>() {
        return Signal::try_from(n).with_context(|| format!("no signal number {n}"));
    }
    let name = s.to_ascii_uppercase();
    let name = if name.starts_with("SIG") {
        name
    } else {
        format!("SIG{name}")
    };
    name.parse::<Signal>()
        .with_context(|| format!("unknown signal `{s}`"))
}

/// `--chunk-size KIB`: a power of two from 64 to 65536 (clap's value parser).
fn parse_chunk_kib(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(k) if k.is_power_of_two() && (64..=65536).contains(&k) => Ok(k),
        _ => Err(format!("`{s}` is not a power of two from 64 to 65536 (KiB)")),
    }
}

/// `--keep N`: a count of at least 1 (clap's value parser, so that `--keep 0` is refused
/// with the usage error).
fn parse_keep(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err("must be at least 1 (leave --keep out to keep every image)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a count of images")),
    }
}

/// `--on-signal SIG`: a signal the agent can catch and that faults do not raise (clap's value
/// parser).
fn parse_trigger_signal(s: &str) -> Result<Signal, String> {
    let sig = parse_signal(s).map_err(|e| e.to_string())?;
    match crum_ckpt::agent::trigger_signal_problem(sig as i32) {
        Some(why) => Err(format!("{sig} {why}")),
        None => Ok(sig),
    }
}

fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|c| c.is_file())
    })
}

/// A binary that carries kernels (`.nv_fatbin`) but uses no shared runtime — it neither
/// NEEDs `libcudart.so*` nor imports `__cudaRegisterFatBinary` — was linked with the static
/// CUDA runtime, which cannot be interposed. Either sign alone means the shared runtime: a
/// program whose kernels live in a shared library but which was linked by `nvcc -rdc=true`
/// carries the device-link step's (empty) `.nv_fatbin` and registers nothing itself.
pub fn statically_linked_cudart(path: &Path) -> anyhow::Result<bool> {
    use object::{Object, ObjectSymbol};
    let Ok(data) = std::fs::read(path) else {
        return Ok(false);
    };
    let Ok(file) = object::File::parse(&*data) else {
        return Ok(false);
    };
    if file.section_by_name(".nv_fatbin").is_none() {
        return Ok(false);
    }
    let imports_runtime = file
        .dynamic_symbols()
        .any(|s| s.is_undefined() && s.name().is_ok_and(|n| n == "__cudaRegisterFatBinary"));
    Ok(!imports_runtime && !needs_shared_cudart(&data))
}

/// The entry points of the static runtime of the stripped executable `path`, found by
/// fingerprint (`crate::fingerprint`), as `preload/src/static_runtime.c` reads them from
/// `CRUM_STATIC_RUNTIME`; an error naming why when none matches.
fn stripped_runtime(path: &Path) -> anyhow::Result<String> {
    use crate::fingerprint;
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let prints = fingerprint::known()?;
    match fingerprint::locate(&fingerprint::code_ranges(&data), &prints) {
        Ok(found) => {
            tracing::info!(
                version = %found.version,
                entry_points = found.funcs.len(),
                "{}: stripped; its static CUDA runtime found by fingerprint",
                path.display()
            );
            fingerprint::handover(path, &found).with_context(|| format!("reading {}", path.display()))
        }
        Err(why) => {
            let seen = fingerprint::kernels_toolkit(&data)
                .map(|v| format!(" (its kernels were compiled by {v})"))
                .unwrap_or_default();
            bail!(
                "{} is linked with the static CUDA runtime and stripped{seen}: {why}.\n\
                 crum finds a stripped program's runtime entry points by fingerprints of the runtimes \
                 it knows. Add the one it was built with: CRUM_CUDART_STATIC=/path/to/libcudart_static.a \
                 (of that toolkit); or run it unstripped, or rebuild it with the shared runtime: \
                 nvcc -cudart shared ... (CMake: set CUDA_RUNTIME_LIBRARY Shared)",
                path.display()
            )
        }
    }
}

/// Whether the ELF file has a symbol table (`.symtab`: not stripped).
fn has_symbol_table(path: &Path) -> bool {
    use object::Object;
    std::fs::read(path).ok().is_some_and(|d| object::File::parse(&*d).is_ok_and(|f| f.section_by_name(".symtab").is_some()))
}

/// Whether the ELF file's dynamic section NEEDs `libcudart.so` (any version).
fn needs_shared_cudart(data: &[u8]) -> bool {
    use object::read::elf::{Dyn, ElfFile64};
    let Ok(elf) = ElfFile64::<object::Endianness>::parse(data) else {
        return false;
    };
    let endian = elf.endian();
    let sections = elf.elf_section_table();
    let Ok(Some((entries, strtab))) = sections.dynamic(endian, data) else {
        return false;
    };
    let Ok(strings) = sections.strings(endian, data, strtab) else {
        return false;
    };
    entries.iter().any(|d| {
        d.tag32(endian) == Some(object::elf::DT_NEEDED)
            && d.string(endian, strings).is_ok_and(|n| n.starts_with(b"libcudart.so"))
    })
}

/// `libcrum.so` next to the `crum` binary (`target/<profile>/`).
fn interposer() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the crum binary")?;
    let dir = exe.parent().context("crum binary has no directory")?;
    for cand in [
        dir.join("libcrum.so"),
        dir.join("../libcrum.so"),
        dir.join("../lib/crum/libcrum.so"),
    ] {
        if cand.is_file() {
            return Ok(cand.canonicalize()?);
        }
    }
    bail!(
        "libcrum.so not found next to {} (build it with `cargo build`)",
        exe.display()
    )
}

/// `libcrum_audit.so` (`cli/build.rs`, `preload/src/audit.c`).
const AUDIT_LIB: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libcrum_audit.so"));

/// A private directory holding `libcuda.so.1`, a symbolic link to `lib` (libcrum.so, whose
/// driver-API face is `interpose/src/api/driver.rs`): the dynamic linker sees the file it has
/// preloaded already and maps nothing new. One directory per libcrum.so (by its path), so two
/// crum installations never hand a program the other's library.
fn driver_dir(lib: &Path) -> anyhow::Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    lib.hash(&mut h);
    let base = crum_ckpt::control::socket_dir();
    crum_ckpt::control::ensure_private_dir(&base)?;
    let dir = base.join(format!("lib-{:016x}", h.finish()));
    crum_ckpt::control::ensure_private_dir(&dir)?;
    // The audit library (`preload/src/audit.c`): written once per content.
    let audit = dir.join("libcrum_audit.so");
    if std::fs::read(&audit).ok().as_deref() != Some(AUDIT_LIB) {
        let tmp = dir.join(format!(".libcrum_audit.so.{}", std::process::id()));
        std::fs::write(&tmp, AUDIT_LIB).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &audit).with_context(|| format!("creating {}", audit.display()))?;
    }
    let link = dir.join("libcuda.so.1");
    if std::fs::read_link(&link).ok().as_deref() != Some(lib) {
        // Made under a temporary name and renamed over: concurrent runs never see it half made.
        let tmp = dir.join(format!(".libcuda.so.1.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(lib, &tmp).with_context(|| format!("creating {}", tmp.display()))?;
        std::fs::rename(&tmp, &link).with_context(|| format!("creating {}", link.display()))?;
    }
    Ok(dir)
}

/// The fingerprints crum knows (`crate::fingerprint::known`, their text forms one after the
/// other) in a file of `dir`, for the audit library to find the static runtime of stripped
/// shared objects: one file per content, written once.
fn fingerprints_file(dir: &Path) -> anyhow::Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    let text: String = crate::fingerprint::known()?.iter().map(|f| f.to_text()).collect();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    let path = dir.join(format!("cudart-fingerprints-{:016x}.txt", h.finish()));
    if std::fs::read(&path).ok().as_deref() != Some(text.as_bytes()) {
        let tmp = dir.join(format!(".cudart-fingerprints.{}", std::process::id()));
        std::fs::write(&tmp, &text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("creating {}", path.display()))?;
    }
    Ok(path)
}

const FORWARDED: [Signal; 4] = [
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

pub fn main(args: Args) -> anyhow::Result<i32> {
    let program = &args.command[0];
    let device = crate::proxy::device_choice(&args.device)?;
    if device == crum_proxy::DeviceChoice::Cuda {
        if let Some(reason) = crum_proxy::backend::probe_cuda() {
            bail!("--device cuda: no usable GPU: {reason}");
        }
    }
    let interval = args.interval.as_deref().map(parse_duration).transpose()?;
    let ckpt_signal = args.on_signal;
    if let Some(dir) = &args.dir {
        crate::trust::warn_about_dir(dir);
    }
    // The static runtime's entry points are redirected to libcrum.so when the program loads
    // (preload/src/static_runtime.c), found by the executable's symbol table, or, stripped,
    // by fingerprint here.
    let mut static_table = None;
    if let Some(path) = find_program(program) {
        if statically_linked_cudart(&path)? && !has_symbol_table(&path) {
            static_table = Some(stripped_runtime(&path)?);
        }
    }
    let lib = interposer()?;

    let channel = Arc::new(Channel::create().context("creating the channel")?);
    // The proxy and the program get the channel above the program's fd range (the program
    // opens fd 3 first, as without crum), and only they get it (`pass_fd`).
    let fd = high_channel_fd(channel.raw_fd())?;
    let exe = std::env::current_exe().context("locating the crum binary")?;

    // Signals for the program are handled by a thread (sigwait); block them here before any
    // thread starts. Children get a clean mask (`clean_signal_mask`).
    let mut set = SigSet::empty();
    for s in FORWARDED.iter().chain(&[Signal::SIGINT, Signal::SIGQUIT]) {
        set.add(*s);
    }
    set.thread_block().context("blocking signals")?;

    let mut proxy = Command::new(&exe);
    clean_signal_mask(&mut proxy);
    pass_fd(&mut proxy, fd);
    let mut proxy = proxy
        .arg("proxy")
        .arg("--channel-fd")
        .arg(fd.to_string())
        .arg("--device")
        .arg(&args.device)
        .arg("--parent")
        .arg(std::process::id().to_string())
        .envs(args.strict_memory.then_some(("CRUM_STRICT_MEMORY", "1")))
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting the device proxy")?;
    let proxy_pid = proxy.id() as i32;
    let t0 = std::time::Instant::now();
    while channel.wait_ready(Duration::from_millis(20)).is_err() {
        if let Some(st) = proxy.try_wait()? {
            bail!("the device proxy exited during startup ({st})");
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = proxy.kill();
            bail!("the device proxy did not start within 60 s");
        }
    }
    let proxy_done = Arc::new(AtomicBool::new(false));
    {
        let (ch, done) = (channel.clone(), proxy_done.clone());
        std::thread::spawn(move || {
            let st = proxy.wait();
            done.store(true, Ordering::SeqCst);
            ch.set_dead();
            tracing::debug!(?st, "proxy ended");
        });
    }

    // The C library wrappers first (their calls into libcrum are resolved by name).
    let shim = lib.with_file_name("libcrum_libc.so");
    if !shim.is_file() {
        bail!("{} not found next to {} (build it with `cargo build`)", shim.display(), lib.display());
    }
    let mut preload = format!("{}:{}", shim.display(), lib.display());
    if let Ok(old) = std::env::var("LD_PRELOAD") {
        if !old.is_empty() {
            preload = format!("{preload}:{old}");
        }
    }
    let mut cmd = Command::new(program);
    clean_signal_mask(&mut cmd);
    pass_fd(&mut cmd, fd);
    // Programs of the driver API (linked with -lcuda, or `dlopen("libcuda.so.1")`) get
    // crum's libcrum.so under that name, first on the library path.
    match driver_dir(&lib) {
        Ok(d) => {
            let path = match std::env::var("LD_LIBRARY_PATH") {
                Ok(old) if !old.is_empty() => format!("{}:{old}", d.display()),
                _ => d.display().to_string(),
            };
            cmd.env("LD_LIBRARY_PATH", path);
            // Shared objects with a static CUDA runtime of their own: redirected as they load.
            let audit = d.join("libcrum_audit.so");
            let audit = match std::env::var("LD_AUDIT") {
                Ok(old) if !old.is_empty() => format!("{}:{old}", audit.display()),
                _ => audit.display().to_string(),
            };
            cmd.env("LD_AUDIT", audit);
            // ... found by fingerprint in a stripped one (`preload/src/audit.c`).
            match fingerprints_file(&d) {
                Ok(f) => {
                    cmd.env("CRUM_CUDART_FINGERPRINTS", f);
                }
                Err(e) => tracing::warn!("stripped shared objects with a static CUDA runtime will not be found: {e:#}"),
            }
        }
        Err(e) => tracing::warn!("no libcuda.so.1 of crum's for driver-API programs: {e:#}"),
    }
    cmd.args(&args.command[1..])
        .env("LD_PRELOAD", preload)
        .env(crum_wire::ENV_CHANNEL, fd.to_string())
        .env("CRUM_RUN", "1")
        // For the CUDA programs the program starts as children: their own proxies, on the
        // same device with the same options (`interpose::own_proxy`).
        .env(crum_wire::ENV_EXE, &exe)
        .env(crum_wire::ENV_DEVICE, &args.device)
        .envs(args.strict_memory.then_some(("CRUM_STRICT_MEMORY", "1")))
        .env(
            "CRUM_CKPT_DIR",
            args.dir
                .clone()
                .unwrap_or_else(|| PathBuf::from("crum-images")),
        );
    if let Some(table) = &static_table {
        cmd.env("CRUM_STATIC_RUNTIME", table);
    }
    if let Some(i) = interval {
        cmd.env("CRUM_CKPT_INTERVAL", format!("{i}"));
    }
    if let Some(m) = args.managed {
        cmd.env("CRUM_MANAGED", m.env_value());
    }
    if let Some(k) = args.keep {
        cmd.env("CRUM_CKPT_KEEP", k.to_string());
    }
    if let Some(n) = args.full_every {
        cmd.env("CRUM_CKPT_FULL_EVERY", n.to_string());
    }
    if let Some(k) = args.chunk_size {
        cmd.env("CRUM_CKPT_CHUNK_KIB", k.to_string());
    }
    if let Some(s) = ckpt_signal {
        cmd.env("CRUM_CKPT_SIGNAL", (s as i32).to_string());
    }
    if args.strict {
        cmd.env("CRUM_STRICT", "1");
    }
    if args.exit {
        cmd.env("CRUM_CKPT_EXIT", "1");
    }
    let mut app = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = signal::kill(Pid::from_raw(proxy_pid), Signal::SIGKILL);
            eprintln!("crum: {program}: {e}");
            return Ok(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    let app_pid = Arc::new(AtomicI32::new(app.id() as i32));
    {
        let pid = app_pid.clone();
        std::thread::spawn(move || loop {
            let Ok(sig) = set.wait() else { continue };
            // Terminal Ctrl-C/Ctrl-\ already reached the program (same process group).
            if FORWARDED.contains(&sig) {
                let _ = signal::kill(Pid::from_raw(pid.load(Ordering::SeqCst)), sig);
            }
        });
    }
    let status = app.wait().context("waiting for the program")?;
    if !proxy_done.load(Ordering::SeqCst) {
        let _ = signal::kill(Pid::from_raw(proxy_pid), Signal::SIGTERM);
    }
    if let Some(sig) = status.signal() {
        // Die the same way the program did.
        if let Ok(s) = Signal::try_from(sig) {
            let _ = reraise(s);
        }
        return Ok(128 + sig);
    }
    Ok(status.code().unwrap_or(1))
}

/// A close-on-exec duplicate of the channel descriptor `fd` above the program's fd range
/// (`crum_ckpt::highfd`); `fd` itself is made close-on-exec, so no child inherits the low
/// number. The duplicate is handed only to the proxy and the program ([`pass_fd`]); the
/// program's preloaded library moves it again if needed and keeps it close-on-exec.
fn high_channel_fd(fd: std::os::fd::RawFd) -> anyhow::Result<std::os::fd::RawFd> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    use std::os::fd::BorrowedFd;
    #[allow(unsafe_code)]
    // SAFETY: `fd` is the channel's descriptor, open for as long as `channel` lives (all of
    // `main`).
    let b = unsafe { BorrowedFd::borrow_raw(fd) };
    fcntl(b, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).context("marking the channel close-on-exec")?;
    let hi = fcntl(b, FcntlArg::F_DUPFD_CLOEXEC(crum_ckpt::highfd::base()))
        .or_else(|_| fcntl(b, FcntlArg::F_DUPFD_CLOEXEC(3)))
        .context("duplicating the channel descriptor")?;
    Ok(hi)
}

/// The child inherits `fd` (close-on-exec is cleared in the child only).
fn pass_fd(cmd: &mut Command, fd: std::os::fd::RawFd) {
    #[allow(unsafe_code)]
    // SAFETY: the hook runs in the forked child before exec and only calls fcntl on a
    // descriptor number, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            libc::fcntl(fd, libc::F_SETFD, 0);
            Ok(())
        });
    }
}

/// Children must not inherit the signals we block for the forwarding thread.
fn clean_signal_mask(cmd: &mut Command) {
    #[allow(unsafe_code)]
    // SAFETY: the hook runs in the forked child before exec and only calls pthread_sigmask,
    // which is async-signal-safe and touches no locks or allocations.
    unsafe {
        cmd.pre_exec(|| {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            Ok(())
        });
    }
}

fn reraise(s: Signal) -> nix::Result<()> {
    let mut set = SigSet::empty();
    set.add(s);
    // SAFETY: SIG_DFL is always a valid disposition. (nix marks sigaction unsafe only
    // because of handler functions.)
    #[allow(unsafe_code)]
    unsafe {
        signal::sigaction(
            s,
            &signal::SigAction::new(
                signal::SigHandler::SigDfl,
                signal::SaFlags::empty(),
                SigSet::empty(),
            ),
        )?;
    }
    set.thread_unblock()?;
    // Core dumps of crum itself are not wanted.
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
    signal::raise(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("10m").unwrap(), 600.0);
        assert_eq!(parse_duration("90").unwrap(), 90.0);
        assert_eq!(parse_duration("1.5h").unwrap(), 5400.0);
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("0").is_err());
    }

    #[test]
    fn signals_parse_by_name_or_number() {
        assert_eq!(parse_signal("USR1").unwrap(), Signal::SIGUSR1);
        assert_eq!(parse_signal("SIGTERM").unwrap(), Signal::SIGTERM);
        assert_eq!(parse_signal("10").unwrap(), Signal::SIGUSR1);
        assert!(parse_signal("NOPE").is_err());
    }

    #[test]
    fn keep_zero_and_uncatchable_or_fault_signals_are_refused_at_parsing() {
        assert_eq!(parse_chunk_kib("256"), Ok(256));
        assert!(parse_chunk_kib("100").is_err() && parse_chunk_kib("32").is_err() && parse_chunk_kib("131072").is_err());
        assert_eq!(parse_keep("2"), Ok(2));
        assert!(parse_keep("0").unwrap_err().contains("at least 1"));
        assert!(parse_keep("x").is_err());
        assert_eq!(parse_trigger_signal("USR1"), Ok(Signal::SIGUSR1));
        for s in ["KILL", "SIGSTOP", "9", "19"] {
            let e = parse_trigger_signal(s).unwrap_err();
            assert!(e.contains("cannot be caught"), "{s}: {e}");
        }
        for s in ["SEGV", "BUS", "TRAP", "ILL", "FPE"] {
            assert!(parse_trigger_signal(s).unwrap_err().contains("fault"), "{s}");
        }
    }
}
