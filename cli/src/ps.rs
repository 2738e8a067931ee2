//! `crum ps [--json]`: programs running under crum for this user (those with a live control
//! socket), with their lineage (`crum_ckpt::lineage`: a new one after every restart). Stale sockets of programs that are gone are removed on the way.
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
}

pub fn main(args: Args) -> anyhow::Result<i32> {
    let dir = control::socket_dir();
    let procs = control::list_in(&dir)?;
    let rows: Vec<Row> = procs
        .into_iter()
        .map(|info| {
            let lineage = control::request_status_within(&dir, info.pid, LINEAGE_WAIT)
                .ok()
                .and_then(|s| s.lineage);
            Row { info, lineage }
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
    for r in rows {
        let p = &r.info;
        let ms = p
            .since
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        writeln!(
            out,
            "{:>8}  {:<27}  {:<28}  {}",
            p.pid,
            crate::inspect::human_time(ms),
            r.lineage.as_deref().unwrap_or("?"),
            p.cmdline
        )?;
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
}
