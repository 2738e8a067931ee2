//! `crum checkpoint <pid> [--dir DIR] [--exit]` or `crum checkpoint --all`: asks the agent of
//! a program running under crum to write an image, waits until the image is complete and
//! prints its path on stdout (one line per program). With `--exit` the program ends after a
//! successful checkpoint (migration, preemption).
//!
//! Exit codes: 0 every requested checkpoint completed, 1 at least one failed (each failure
//! is named on stderr), 2 `--all` found no program.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use crum_ckpt::control;

/// Arguments of `crum checkpoint`.
#[derive(clap::Args)]
pub struct Args {
    /// Process id of a program running under `crum run`, or of the `crum run` (or `crum
    /// restart`'s caller) that started it: the program below it is checkpointed. A process
    /// of a job (a descendant of the program) names the whole job.
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
    /// Write no image if a restart could not restore the program exactly (what would
    /// otherwise be a warning, such as a socket crum cannot restore, is an error).
    #[arg(long)]
    pub strict: bool,
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

/// The process to checkpoint for `pid`: itself if it runs under crum (it has a control
/// socket), else the nearest process below it that does (`crum run`'s pid names its
/// program, as a batch script knows it from `$!`).
fn target(sock_dir: &Path, pid: u32) -> u32 {
    let has_socket = |p: u32| control::socket_may_be_current(sock_dir, p);
    if has_socket(pid) {
        // A member of a job: the job is checkpointed, by its root.
        let root = crum_ckpt::job::root_of(pid as i32, |p| p > 0 && control::agent_running(sock_dir, p as u32)) as u32;
        if root != pid {
            eprintln!("crum: process {pid} belongs to the job of process {root}: checkpointing the job");
        }
        return root;
    }
    let mut level = vec![pid];
    for _ in 0..8 {
        let next: Vec<u32> = level.iter().flat_map(|&p| children(p)).collect();
        if let Some(&p) = next.iter().find(|&&p| has_socket(p)) {
            return p;
        }
        if next.is_empty() {
            break;
        }
        level = next;
    }
    pid
}

/// The children of `pid` (every thread's).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| s.split_whitespace().filter_map(|w| w.parse().ok()).collect::<Vec<u32>>())
        .collect()
}

fn one(sock_dir: &Path, pid: u32, args: &Args) -> anyhow::Result<PathBuf> {
    let pid = target(sock_dir, pid);
    let pb = spinner(pid);
    let r = control::request_checkpoint_in(sock_dir, pid, args.dir.as_deref(), args.exit, args.strict);
    pb.finish_and_clear();
    let done = r.with_context(|| format!("checkpoint of process {pid}"))?;
    for w in &done.warnings {
        eprintln!("crum: warning: process {pid}: {w} (--strict: no image)");
    }
    Ok(done.path)
}

pub fn main(args: Args) -> anyhow::Result<i32> {
    if let Some(dir) = &args.dir {
        crate::trust::warn_about_dir(dir);
    }
    run_in(&control::socket_dir(), &args, &mut std::io::stdout())
}

/// The image path as printed: canonical (no `.`, `..`, `//` or links) when it can be resolved.
fn printable(path: PathBuf) -> PathBuf {
    path.canonicalize().unwrap_or(path)
}

/// `crum checkpoint` against the control sockets in `sock_dir`, printing paths to `out`.
fn run_in(sock_dir: &Path, args: &Args, out: &mut dyn std::io::Write) -> anyhow::Result<i32> {
    let pids: Vec<u32> = if args.all {
        let procs = control::list_in(sock_dir).context("listing programs under crum")?;
        if procs.is_empty() {
            eprintln!("crum: no programs are running under crum");
            return Ok(2);
        }
        procs.into_iter().map(|p| p.pid).collect()
    } else {
        vec![args.pid.expect("clap requires a pid without --all")]
    };
    if pids.len() == 1 {
        let path = printable(one(sock_dir, pids[0], args)?);
        writeln!(out, "{}", path.display())?;
        return Ok(0);
    }
    let mut failed = 0;
    for pid in pids {
        match one(sock_dir, pid, args) {
            Ok(path) => writeln!(out, "{}", printable(path).display())?,
            Err(e) => {
                eprintln!("crum: error: {e:#}");
                failed += 1;
            }
        }
    }
    Ok(if failed == 0 { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crum_ckpt::control::{ControlServer, Request};

    /// A fresh directory under the system temp dir (removed by the test).
    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("crum-cli-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn args(pid: Option<u32>, all: bool) -> Args {
        Args {
            pid,
            dir: Some(PathBuf::from("/imgs")),
            exit: false,
            all,
            strict: false,
        }
    }

    #[test]
    fn checkpoint_prints_the_path_the_agent_reports() {
        let t = scratch("ok");
        let dir = t.join("crum");
        let pid = std::process::id();
        let server = ControlServer::bind_in(&dir, pid).unwrap();
        let agent = std::thread::spawn(move || {
            for _ in 0..2 {
                let (req, resp) = server.accept().unwrap();
                let Request::Checkpoint { dir, .. } = req else {
                    panic!("{req:?}")
                };
                resp.reply(Ok(dir.unwrap().join("ckpt-1"))).unwrap();
            }
        });
        let mut out = Vec::new();
        assert_eq!(run_in(&dir, &args(Some(pid), false), &mut out).unwrap(), 0);
        assert_eq!(String::from_utf8(out).unwrap(), "/imgs/ckpt-1\n");
        let mut out = Vec::new();
        assert_eq!(run_in(&dir, &args(None, true), &mut out).unwrap(), 0);
        assert_eq!(String::from_utf8(out).unwrap(), "/imgs/ckpt-1\n");
        agent.join().unwrap();
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn checkpoint_of_pid_not_under_crum_is_a_clear_error() {
        let t = scratch("none");
        let e = run_in(&t, &args(Some(std::process::id()), false), &mut Vec::new()).unwrap_err();
        assert!(
            format!("{e:#}").contains("is not running under crum"),
            "{e:#}"
        );
        assert_eq!(run_in(&t, &args(None, true), &mut Vec::new()).unwrap(), 2);
    }
}
