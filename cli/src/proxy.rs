//! `crum proxy` (hidden): the device proxy that `crum run` and `crum restart` start. It maps
//! the channel memfd it inherited, opens the chosen backend and serves the application until
//! it is told to stop (SIGTERM from `crum run`), its parent dies (`crum run`: parent-death
//! signal), or the process it watches ends (`--watch-pid`, a restarted program, whose child
//! the proxy is not: watched through a pidfd, which a zombie cannot fool).

use anyhow::Context;
use crum_proxy::backend::{open, DeviceChoice};
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

pub fn main(args: Args) -> anyhow::Result<i32> {
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
