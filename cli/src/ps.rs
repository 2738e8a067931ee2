//! `crum ps [--json]`: programs running under crum for this user (those with a live control
//! socket), grouped by job (`crum_ckpt::job`: a root and the descendants under crum, which
//! are checkpointed with it), with each one's lineage (`crum_ckpt::lineage`: a new one after
//! every restart), and for each job its image directory and last checkpoint. Stale sockets
//! of programs that are gone are removed on the way.
//!
//! Exit codes: 0 listed (possibly none), 1 error.

use std::io::Write;
use std::time::Duration;

use crum_ckpt::control;

/// Arguments of `crum ps`.
#[derive(clap::Args)]
pub struct Args {
    /// Machine-readable output (JSON on stdout).
    #[arg(long)]
    pub json: bool,
}

/// How long `crum ps` waits for a program's agent to say its lineage (an agent busy with a
/// checkpoint answers when it is done).
const LINEAGE_WAIT: Duration = Duration::from_secs(2);

/// One program as `crum ps --json` prints it.
#[derive(serde::Serialize)]
struct Row {
    #[serde(flatten)]
    info: control::ProcInfo,
    /// Its lineage (a new one after each restart); None when the agent did not answer.
    lineage: Option<String>,
    /// The root of its job (itself for a root).
    root: u32,
    /// Where its checkpoints go, and the last one written (a job's: its root's).
    dir: Option<std::path::PathBuf>,
    last_image: Option<std::path::PathBuf>,
    checkpoints: u64,
}

pub fn main(args: Args) -> anyhow::Result<i32> {
    let dir = control::socket_dir();
    let procs = control::list_in(&dir)?;
    let pids: Vec<u32> = procs.iter().map(|p| p.pid).collect();
    let rows: Vec<Row> = procs
        .into_iter()
        .map(|info| {
            let st = control::request_status_within(&dir, info.pid, LINEAGE_WAIT).ok();
            let root = crum_ckpt::job::root_of(info.pid as i32, |p| p > 0 && pids.contains(&(p as u32))) as u32;
            Row {
                root,
                lineage: st.as_ref().and_then(|s| s.lineage.clone()),
                dir: st.as_ref().and_then(|s| s.dir.clone()),
                last_image: st.as_ref().and_then(|s| s.last_image.clone()),
                checkpoints: st.map_or(0, |s| s.checkpoints),
                info,
            }
        })
        .collect();
    let mut out = std::io::stdout().lock();
    print_rows(&rows, args.json, &mut out)
}

fn print_rows(rows: &[Row], json: bool, out: &mut dyn Write) -> anyhow::Result<i32> {
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(rows)?)?;
        return Ok(0);
    }
    if rows.is_empty() {
        eprintln!("crum: no programs are running under crum");
        return Ok(0);
    }
    writeln!(out, "{:>8}  {:<27}  {:<28}  command", "pid", "since", "lineage")?;
    // Each job: its root, then its members (the root's image directory and last checkpoint
    // are the job's).
    let mut roots: Vec<&Row> = rows.iter().filter(|r| r.root == r.info.pid || !rows.iter().any(|x| x.info.pid == r.root)).collect();
    roots.sort_by_key(|r| r.info.pid);
    for root in roots {
        let mut members: Vec<&Row> = rows.iter().filter(|r| r.root == root.info.pid && r.info.pid != root.info.pid).collect();
        members.sort_by_key(|r| r.info.pid);
        for (i, r) in std::iter::once(root).chain(members.iter().copied()).enumerate() {
            let p = &r.info;
            let ms = p.since.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
            let pid = if i == 0 { p.pid.to_string() } else { format!("└ {}", p.pid) };
            writeln!(out, "{:>8}  {:<27}  {:<28}  {}", pid, crate::inspect::human_time(ms), r.lineage.as_deref().unwrap_or("?"), p.cmdline)?;
        }
        let what = if members.is_empty() { String::new() } else { format!("job of {} processes; ", members.len() + 1) };
        let dir = root.dir.as_ref().map_or("?".into(), |d| d.display().to_string());
        let last = match &root.last_image {
            Some(img) => format!("last checkpoint {} ({} so far)", img.display(), root.checkpoints),
            None => "no checkpoint yet".into(),
        };
        writeln!(out, "{:>8}  {what}images in {dir}; {last}", "")?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ps_shows_each_programs_lineage() {
        let rows = vec![Row {
            info: control::ProcInfo { pid: 42, cmdline: "./prog 1".into(), since: std::time::UNIX_EPOCH },
            lineage: Some("20260101T000000.000Z-42".into()),
            root: 42,
            dir: Some("/imgs".into()),
            last_image: None,
            checkpoints: 0,
        }];
        let mut out = Vec::new();
        print_rows(&rows, false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.lines().next().unwrap().contains("lineage"), "{text}");
        let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(row[0], "42", "{text}");
        assert_eq!(&row[row.len() - 3..], ["20260101T000000.000Z-42", "./prog", "1"], "{text}");
        let mut out = Vec::new();
        print_rows(&rows, true, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v[0]["lineage"], "20260101T000000.000Z-42");
        assert_eq!(v[0]["pid"], 42);
    }

    #[test]
    fn ps_groups_a_job_under_its_root_with_its_images() {
        let row = |pid: u32, root: u32| Row {
            info: control::ProcInfo { pid, cmdline: format!("./p{pid}"), since: std::time::UNIX_EPOCH },
            lineage: None,
            root,
            dir: Some("/imgs".into()),
            last_image: (pid == 10).then(|| "/imgs/ckpt-1".into()),
            checkpoints: 3,
        };
        let rows = vec![row(12, 10), row(10, 10), row(11, 10), row(20, 20)];
        let mut out = Vec::new();
        print_rows(&rows, false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].trim_start().starts_with("10 "), "{text}");
        assert!(lines[2].contains("└ 11") && lines[3].contains("└ 12"), "{text}");
        assert!(lines[4].contains("job of 3 processes") && lines[4].contains("/imgs/ckpt-1 (3 so far)"), "{text}");
        assert!(lines[5].trim_start().starts_with("20 ") && lines[6].contains("no checkpoint yet"), "{text}");
        let mut out = Vec::new();
        print_rows(&rows, true, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v[0]["root"], 10);
    }
}
