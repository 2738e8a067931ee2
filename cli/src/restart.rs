//! `crum restart <image-dir>`: continue a checkpointed program in this terminal. The
//! `crum` process becomes the program (it keeps this pid); see `crum_restart`. A CUDA
//! program's image gets a fresh device proxy on the chosen device.
//!
//! An image is code run with the restarting user's rights: unless `--trust` names one
//! image explicitly, the image (and the directory of images it is picked from) must be the
//! user's own and reachable only through directories others cannot write (`crate::trust`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// Arguments of `crum restart`.
#[derive(clap::Args)]
pub struct Args {
    /// Device for a CUDA program: auto (a GPU if one is usable, else the emulated device),
    /// emu or cuda. An image taken on one device restarts on another.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Restart this image even if it belongs to another user or lies in a directory others
    /// can write (it runs with your rights). Only for an image named explicitly, not for a
    /// directory of images.
    #[arg(long)]
    pub trust: bool,
    /// Where the restarted program writes its images from now on (created if missing);
    /// by default where it wrote them before.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// One process of a job image (started by the restorer of its parent; not for direct use).
    #[arg(long, hide = true)]
    pub job_member: Option<i32>,
    /// As `crum run --strict-memory`: the restarted program's kernels may touch only the
    /// bytes they allocated (emulated device). Sets CRUM_STRICT_MEMORY=1 for the proxy.
    #[arg(long)]
    pub strict_memory: bool,
    /// Run the program before its memory is read: large private regions are served from
    /// the image on first touch by a page server process, which reads the rest in the
    /// background (userfaultfd). Without it (and without --eager) a restart is lazy where
    /// that is safe and at least 256 MiB would be served lazily. When it is not possible,
    /// the restart is eager and says why.
    #[arg(long, conflicts_with = "eager")]
    pub lazy: bool,
    /// Read every page of the image before the program runs.
    #[arg(long)]
    pub eager: bool,
    /// An image directory, or a directory of images: the newest image that verifies is
    /// used (newer ones that do not are skipped, saying why), and named on stderr.
    pub image: PathBuf,
}

/// The image `crum restart ARG` restarts: ARG itself or the newest complete image in it,
/// canonical, checked by the trust rules unless `trust`.
pub fn choose_image(arg: &Path, trust: bool) -> anyhow::Result<PathBuf> {
    // The real error (permission denied, ...), not "does not exist" for every failure.
    let path = match arg.canonicalize() {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("cannot restart {}: it does not exist", arg.display())
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("cannot restart {}", arg.display()))),
    };
    if !path.is_dir() {
        bail!("cannot restart {}: not a directory", path.display());
    }
    let is_image = path
        .join("inventory")
        .try_exists()
        .with_context(|| format!("cannot restart {}", path.display()))?
        || crum_ckpt::job::is_job_image(&path);
    let image = if is_image {
        path
    } else {
        if trust {
            bail!(
                "--trust needs an image, not a directory of images: name the image to restart \
                 (`ls {}`)",
                path.display()
            );
        }
        crate::trust::check_images_dir(&path).with_context(|| {
            format!("refusing to restart from {} (it must be yours and private)", path.display())
        })?;
        newest_that_verifies(&path)?
    };
    if !trust {
        crate::trust::check_image(&image).with_context(|| {
            format!(
                "refusing to restart {} (name it with --trust to run it with your rights anyway)",
                image.display()
            )
        })?;
    }
    Ok(image)
}

/// The newest image in `parent` that verifies (`crum_restart::validate`: inventory,
/// checksums of its metadata, process state, files it needs): said on stderr, with each newer
/// image skipped and why (a batch job's last image may be the one the node died writing).
fn newest_that_verifies(parent: &Path) -> anyhow::Result<PathBuf> {
    let images = crum_ckpt::image::list_images(parent).with_context(|| format!("cannot restart {}", parent.display()))?;
    if images.is_empty() {
        bail!(
            "cannot restart {}: not a complete crum image (no inventory file), nor a directory holding one",
            parent.display()
        );
    }
    let mut skipped = Vec::new();
    for e in images.iter().rev() {
        match validate_any(&e.path) {
            Ok(_) => {
                for (p, why) in &skipped {
                    eprintln!("crum: skipping {}: {why}", Path::new(p).display());
                }
                eprintln!("crum: restarting {}", e.path.display());
                return Ok(e.path.clone());
            }
            Err(err) => skipped.push((e.path.display().to_string(), format!("{:#}", anyhow::Error::new(err)))),
        }
    }
    let list: Vec<String> = skipped.iter().map(|(p, why)| format!("{p}: {why}")).collect();
    bail!("cannot restart {}: no image in it verifies:\n  {}", parent.display(), list.join("\n  "))
}

/// [`crum_restart::validate`] of an image, or of every part of a job image.
fn validate_any(image: &Path) -> Result<(), crum_restart::RestartError> {
    if crum_ckpt::job::is_job_image(image) {
        let m = crum_ckpt::job::Manifest::read(image).map_err(crum_restart::RestartError::Invalid)?;
        for p in &m.members {
            crum_restart::validate(&image.join(&p.part))?;
        }
        return Ok(());
    }
    crum_restart::validate(image).map(|_| ())
}

/// `--dir`: created if missing, absolute (the program may change its working directory).
fn new_images_dir(d: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(d).with_context(|| format!("cannot create the image directory {}", d.display()))?;
    let d = d.canonicalize().with_context(|| format!("cannot use the image directory {}", d.display()))?;
    crate::trust::warn_about_dir(&d);
    Ok(d)
}

pub fn main(args: Args) -> anyhow::Result<i32> {
    let device = crate::proxy::device_choice(&args.device)?;
    if args.strict_memory {
        // Inherited by the proxy this restart starts (and by the restorers of a job's other
        // processes); nothing else runs in this process yet.
        std::env::set_var("CRUM_STRICT_MEMORY", "1");
    }
    let dir = choose_image(&args.image, args.trust)?;
    let exe = std::env::current_exe().context("locating the crum binary")?;
    let new_dir = args.dir.as_deref().map(new_images_dir).transpose()?;
    let lazy = match (args.lazy, args.eager) {
        (true, _) => crum_restart::lazy::Mode::Lazy,
        (_, true) => crum_restart::lazy::Mode::Eager,
        _ => crum_restart::lazy::Mode::Auto,
    };
    let opts = crum_restart::Options { proxy: Some((exe.clone(), args.device.clone())), new_dir, lazy, ..Default::default() };
    if crum_ckpt::job::is_job_image(&dir) {
        // The restorers of the other processes get the same options.
        let mut pass = vec!["--device".to_string(), args.device.clone(), "--trust".to_string()];
        if let Some(d) = &opts.new_dir {
            pass.extend(["--dir".to_string(), d.display().to_string()]);
        }
        return match crum_restart::restart_job(&dir, args.job_member, &exe, &pass, &opts) {
            Ok(never) => match never {},
            Err(e) => Err(anyhow::Error::new(e).context(format!("cannot restart {}", dir.display()))),
        };
    }
    if device == crum_proxy::DeviceChoice::Cuda {
        let plan = crum_restart::validate(&dir).with_context(|| format!("cannot restart {}", dir.display()))?;
        if plan.has_device() {
            // In a child: this process becomes the program and must not load the driver.
            if let Some(reason) = crate::proxy::probe_cuda_in_child()? {
                bail!("--device cuda: no usable GPU: {reason}");
            }
        }
    }
    match crum_restart::restart_with(&dir, &opts) {
        Ok(never) => match never {},
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot restart {}", dir.display()))),
    }
}
