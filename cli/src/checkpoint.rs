//! `crum checkpoint <pid> [--dir DIR] [--exit]` or `crum checkpoint --all`: asks the agent of
//! a program running under crum to write an image, waits until the image is complete and
//! prints its path on stdout (one line per program). With `--exit` the program ends after a
//! successful checkpoint (migration, preemption).
//!
//! Exit codes: 0 every requested checkpoint completed, 1 at least one failed (each failure
//! is named on stderr), 2 `--all` found no program.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use crum_ckpt::control;

/// Arguments of `crum checkpoint`.
#[derive(clap::Args)]
pub struct Args {
    /// Process id of a program running under `crum run`.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub pid: Option<u32>,
    /// Write the image under this directory instead of the program's configured one.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// End the program after a successful checkpoint.
    #[arg(long)]
    pub exit: bool,
    /// Checkpoint every program of this user running under crum.
    #[arg(long)]
    pub all: bool,
}

fn spinner(pid: u32) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new_spinner();
    pb.set_message(format!("checkpointing process {pid}"));
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

fn one(pid: u32, args: &Args) -> anyhow::Result<PathBuf> {
    let pb = spinner(pid);
    let r = control::request_checkpoint(pid, args.dir.as_deref(), args.exit);
    pb.finish_and_clear();
    r.with_context(|| format!("checkpoint of process {pid}"))
}

pub fn main(args: Args) -> anyhow::Result<i32> {
    let pids: Vec<u32> = if args.all {
        let procs = control::list().context("listing programs under crum")?;
        if procs.is_empty() {
            eprintln!("crum: no programs are running under crum");
            return Ok(2);
        }
        procs.into_iter().map(|p| p.pid).collect()
    } else {
        vec![args.pid.expect("clap requires a pid without --all")]
    };
    if pids.len() == 1 {
        let path = one(pids[0], &args)?;
        println!("{}", path.display());
        return Ok(0);
    }
    let mut failed = 0;
    for pid in pids {
        match one(pid, &args) {
            Ok(path) => println!("{}", path.display()),
            Err(e) => {
                eprintln!("crum: error: {e:#}");
                failed += 1;
            }
        }
    }
    Ok(if failed == 0 { 0 } else { 1 })
}
