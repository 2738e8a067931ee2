//! `crum ps [--json]`: programs running under crum for this user (those with a live control
//! socket). Stale sockets of programs that are gone are removed on the way.
//!
//! Exit codes: 0 listed (possibly none), 1 error.

use crum_ckpt::control;

/// Arguments of `crum ps`.
#[derive(clap::Args)]
pub struct Args {
    /// Machine-readable output (JSON on stdout).
    #[arg(long)]
    pub json: bool,
}

pub fn main(args: Args) -> anyhow::Result<i32> {
    let procs = control::list()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&procs)?);
        return Ok(0);
    }
    if procs.is_empty() {
        eprintln!("crum: no programs are running under crum");
        return Ok(0);
    }
    println!("{:>8}  {:<27}  command", "pid", "since");
    for p in procs {
        let ms = p
            .since
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        println!(
            "{:>8}  {:<27}  {}",
            p.pid,
            crate::inspect::human_time(ms),
            p.cmdline
        );
    }
    Ok(0)
}
