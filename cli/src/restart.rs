//! `crum restart <image-dir>`: continue a checkpointed program in this terminal. The
//! `crum` process becomes the program (it keeps this pid); see `crum_restart`. A CUDA
//! program's image gets a fresh device proxy on the chosen device.

use std::path::PathBuf;

use anyhow::{bail, Context};

/// Arguments of `crum restart`.
#[derive(clap::Args)]
pub struct Args {
    /// Device for a CUDA program: auto (a GPU if one is usable, else the emulated device),
    /// emu or cuda. An image taken on one device restarts on another.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// An image directory, or a directory of images (the newest complete one is used).
    pub image: PathBuf,
}

pub fn main(args: Args) -> anyhow::Result<i32> {
    let device = crate::proxy::device_choice(&args.device)?;
    let mut dir = args.image;
    if dir.is_dir() && !dir.join("inventory").exists() {
        if let Ok(Some(latest)) = crum_ckpt::image::latest_image(&dir) {
            dir = latest;
        }
    }
    let exe = std::env::current_exe().context("locating the crum binary")?;
    let opts = crum_restart::Options { proxy: Some((exe, args.device.clone())) };
    if device == crum_proxy::DeviceChoice::Cuda {
        let plan = crum_restart::validate(&dir).with_context(|| format!("cannot restart {}", dir.display()))?;
        if plan.has_device() {
            if let Some(reason) = crum_proxy::backend::probe_cuda() {
                bail!("--device cuda: no usable GPU: {reason}");
            }
        }
    }
    match crum_restart::restart_with(&dir, &opts) {
        Ok(never) => match never {},
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot restart {}", dir.display()))),
    }
}
