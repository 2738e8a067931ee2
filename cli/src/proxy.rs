//! `crum proxy` (hidden): the device proxy that `crum run` starts. It maps the channel memfd
//! it inherited, opens the chosen backend and serves the application until it is told to
//! stop (SIGTERM from `crum run`) or its parent dies.

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
