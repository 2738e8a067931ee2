//! `crum restart <image-dir>`: continue a checkpointed program in this terminal. The
//! `crum` process becomes the program (it keeps this pid); see `crum_restart`.

use std::path::PathBuf;

/// Arguments of `crum restart`.
#[derive(clap::Args)]
pub struct Args {
    /// An image directory, or a directory of images (the newest complete one is used).
    pub image: PathBuf,
}

pub fn main(args: Args) -> anyhow::Result<i32> {
    let mut dir = args.image;
    if dir.is_dir() && !dir.join("inventory").exists() {
        if let Ok(Some(latest)) = crum_ckpt::image::latest_image(&dir) {
            dir = latest;
        }
    }
    match crum_restart::restart(&dir) {
        Ok(never) => match never {},
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot restart {}", dir.display()))),
    }
}
