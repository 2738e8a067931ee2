//! `crum proxy` (hidden): the device proxy that `crum run` and `crum restart` start. It maps
//! the channel memfd it inherited, opens the chosen backend and serves the application until
//! it is told to stop (SIGTERM from `crum run`), its parent dies (`crum run`: parent-death
//! signal), or the process it watches ends (`--watch-pid`, a restarted program, whose child
//! the proxy is not: watched through a pidfd, which a zombie cannot fool).

use anyhow::Context;
use crum_proxy::backend::{open, DeviceChoice};
use std::os::unix::process::CommandExt;
use crum_wire::Channel;
use std::sync::Arc;

/// Arguments of `crum proxy`.
#[derive(clap::Args)]
pub struct Args {
    /// Descriptor number of the inherited channel memfd.
    #[arg(long)]
    pub channel_fd: i32,
    /// Which device to drive.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Pid of the process that started the proxy; if it is already gone, the proxy exits
    /// at once (it may die before the parent-death signal is armed).
    #[arg(long)]
    pub parent: Option<i32>,
    /// Serve until this process (the program, not our parent) ends, instead of the parent.
    #[arg(long, conflicts_with = "parent")]
    pub watch_pid: Option<i32>,
}

/// Parse `auto|emu|cuda`.
pub fn device_choice(s: &str) -> anyhow::Result<DeviceChoice> {
    Ok(match s {
        "auto" => DeviceChoice::Auto,
        "emu" => DeviceChoice::Emu,
        "cuda" => DeviceChoice::Cuda,
        other => anyhow::bail!("unknown device `{other}` (expected auto, emu or cuda)"),
    })
}

/// A proxy that may drive a GPU runs with its address space laid out without randomization
/// (`personality(ADDR_NO_RANDOMIZE)`, as `setarch -R`): re-executes itself so once. The
/// driver places module variables (`__device__`, `__constant__`) itself, at addresses a
/// restart must reproduce since the program holds them; without randomization a fresh proxy
/// that loads the same modules in the same order is given the same addresses where the
/// driver is deterministic (a restart that does not get them fails, naming the variable).
fn without_address_randomization(choice: DeviceChoice) -> anyhow::Result<()> {
    use nix::sys::personality::{self, Persona};
    if choice == DeviceChoice::Emu || !crum_proxy::cuda::driver::library_present() {
        return Ok(());
    }
    let now = personality::get().context("reading the process personality")?;
    if now.contains(Persona::ADDR_NO_RANDOMIZE) {
        return Ok(());
    }
    if let Err(e) = personality::set(now | Persona::ADDR_NO_RANDOMIZE) {
        // Not fatal: only a restart's module variables depend on it.
        tracing::warn!("cannot turn address randomization off for the device proxy: {e}");
        return Ok(());
    }
    let mut argv = std::env::args_os();
    let mut again = std::process::Command::new("/proc/self/exe");
    if let Some(arg0) = argv.next() {
        again.arg0(arg0);
    }
    let err = again.args(argv).exec();
    // exec returned: carry on randomized.
    tracing::warn!("cannot re-execute the device proxy without address randomization: {err}");
    let _ = personality::set(now);
    Ok(())
}

pub fn main(args: Args) -> anyhow::Result<i32> {
    without_address_randomization(device_choice(&args.device)?)?;
    if let Some(pid) = args.watch_pid {
        // Started detached by `crum restart` for the program it becomes.
        let program = match crum_wire::PeerWatch::open(pid) {
            Ok(w) => w,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(0),
            Err(e) => return Err(e).with_context(|| format!("watching process {pid}")),
        };
        let choice = device_choice(&args.device)?;
        let channel = Arc::new(Channel::open(args.channel_fd).context("opening the channel")?);
        let backend = open(choice).context("opening the device")?;
        tracing::info!(backend = backend.name(), "proxy serving");
        crum_proxy::serve(channel, backend, &|| !program.exited()).map_err(|e| anyhow::anyhow!("{e}"))?;
        return Ok(0);
    }
    // Die with our parent (`crum run`) rather than linger.
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .context("setting the parent-death signal")?;
    let choice = device_choice(&args.device)?;
    let channel = Arc::new(Channel::open(args.channel_fd).context("opening the channel")?);
    let backend = open(choice).context("opening the device")?;
    tracing::info!(backend = backend.name(), "proxy serving");
    let parent = nix::unistd::getppid();
    if args.parent.is_some_and(|p| p != parent.as_raw()) {
        // Our parent died before the parent-death signal was armed.
        return Ok(0);
    }
    crum_proxy::serve(channel, backend, &|| nix::unistd::getppid() == parent)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(0)
}

/// [`crum_proxy::backend::probe_cuda`] in a child process (`crum probe-cuda`): the reason a
/// GPU cannot be used, or None. `crum restart` probes so because its process becomes the
/// restored program: loading the driver there (`cuInit` maps the library, may start threads)
/// would leave the driver's mappings and threads inside the program's address space as it is
/// rebuilt — the emulated driver's stream thread crashed the restored program at its next
/// checkpoint that way.
pub fn probe_cuda_in_child() -> anyhow::Result<Option<String>> {
    let exe = std::env::current_exe().context("locating the crum binary")?;
    let out = std::process::Command::new(exe)
        .arg("probe-cuda")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running crum probe-cuda")?;
    Ok(match out.status.code() {
        Some(0) => None,
        _ => Some(String::from_utf8_lossy(&out.stdout).trim().to_string()),
    })
}
