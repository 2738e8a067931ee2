//! `crum inspect <image-dir> [--json] [--verify]`: describes an image for people (on
//! stdout) or programs (`--json`). Sections other than the memory ones are shown by name and
//! size, whoever added them. Given a directory of images, describes the newest.
//!
//! Exit codes: 0 described (and verified, with `--verify`), 1 error (the message names it).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use crum_ckpt::image::{latest_image, utc_stamp, Encoding, ImageReader, RegionInfo};
use indicatif::HumanBytes;

/// Arguments of `crum inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// Image directory (or a directory of images: the newest is described).
    pub image: PathBuf,
    /// Machine-readable output (JSON on stdout).
    #[arg(long)]
    pub json: bool,
    /// Also read every chunk and section and check their checksums.
    #[arg(long)]
    pub verify: bool,
}

fn perms(prot: u32) -> String {
    let b = |bit: u32, c: char| if prot & bit != 0 { c } else { '-' };
    [
        b(libc::PROT_READ as u32, 'r'),
        b(libc::PROT_WRITE as u32, 'w'),
        b(libc::PROT_EXEC as u32, 'x'),
    ]
    .into_iter()
    .collect()
}

fn ratio(mem: u64, stored: u64) -> String {
    if stored == 0 {
        if mem == 0 {
            "-".into()
        } else {
            "zero".into()
        }
    } else {
        format!("{:.2}x", mem as f64 / stored as f64)
    }
}

#[derive(serde::Serialize)]
struct RegionJson<'a> {
    #[serde(flatten)]
    info: &'a RegionInfo,
    name: String,
    chunks: usize,
    nonzero_bytes: u64,
    stored_bytes: u64,
    zstd_chunks: usize,
    raw_chunks: usize,
    zero_chunks: usize,
}

/// A Unix time in milliseconds as `2026-11-22 22:37:22.123 UTC`.
pub(crate) fn human_time(unix_ms: u64) -> String {
    let s = utc_stamp(unix_ms); // 20261122T223722.123Z
    format!(
        "{}-{}-{} {}:{}:{} UTC",
        &s[0..4],
        &s[4..6],
        &s[6..8],
        &s[9..11],
        &s[11..13],
        &s[13..19]
    )
}

pub fn main(args: Args) -> anyhow::Result<i32> {
    let mut path = args.image.clone();
    if path.is_dir() && !path.join("inventory").exists() {
        if let Some(newest) = latest_image(&path).context("listing images")? {
            eprintln!("crum: describing the newest image in {}", path.display());
            path = newest;
        }
    }
    print!("{}", describe(&path, args.json, args.verify)?);
    Ok(0)
}

/// The description of the image at `path` (human text, or JSON with `json`).
fn describe(path: &Path, json: bool, verify: bool) -> anyhow::Result<String> {
    let mut r = ImageReader::open(path)?;
    let verified = if verify {
        r.verify()?;
        true
    } else {
        false
    };
    let inv = r.inventory().clone();
    let regions = r.regions().to_vec();
    let mapped: u64 = regions.iter().map(|g| g.len).sum();
    let stored_len: u64 = regions.iter().filter(|g| g.has_data).map(|g| g.len).sum();
    let nonzero: u64 = regions.iter().map(RegionInfo::nonzero_bytes).sum();
    let stored: u64 = regions.iter().map(RegionInfo::stored_bytes).sum();
    let disk: u64 = inv.sections.iter().map(|s| s.size).sum();

    let mut o = String::new();
    if json {
        let count =
            |g: &RegionInfo, e: Encoding| g.chunks.iter().filter(|c| c.encoding == e).count();
        let regions_json: Vec<RegionJson> = regions
            .iter()
            .map(|g| RegionJson {
                info: g,
                name: g.name_lossy(),
                chunks: g.chunks.len(),
                nonzero_bytes: g.nonzero_bytes(),
                stored_bytes: g.stored_bytes(),
                zstd_chunks: count(g, Encoding::Zstd),
                raw_chunks: count(g, Encoding::Raw),
                zero_chunks: count(g, Encoding::Zero),
            })
            .collect();
        let out = serde_json::json!({
            "path": path,
            "inventory": inv,
            "chunk_size": r.chunk_size(),
            "totals": {
                "mapped_bytes": mapped,
                "saved_region_bytes": stored_len,
                "nonzero_bytes": nonzero,
                "stored_bytes": stored,
                "image_bytes": disk,
            },
            "verified": verified,
            "regions": regions_json,
        });
        writeln!(o, "{}", serde_json::to_string_pretty(&out)?)?;
        return Ok(o);
    }

    writeln!(o, "image      {}", path.display())?;
    writeln!(
        o,
        "format     {}.{} written by {}",
        inv.major, inv.minor, inv.producer
    )?;
    writeln!(
        o,
        "taken      {} on {}, Linux {}, {} pages",
        human_time(inv.created_unix_ms),
        inv.arch,
        inv.kernel_release,
        HumanBytes(u64::from(inv.page_size))
    )?;
    writeln!(o,
        "memory     {} regions, {} mapped, {} saved, {} non-zero, {} stored, ratio {} (chunks of {})",
        regions.len(),
        HumanBytes(mapped),
        HumanBytes(stored_len),
        HumanBytes(nonzero),
        HumanBytes(stored),
        ratio(stored_len, stored),
        HumanBytes(u64::from(r.chunk_size()))
    )?;
    writeln!(o, "on disk    {}", HumanBytes(disk))?;
    if verified {
        writeln!(o, "verified   every chunk and section matches its checksum")?;
    }
    writeln!(o, "\nsections")?;
    writeln!(o, "  {:<24} {:>8} {:>12}  file", "name", "required", "size")?;
    for s in &inv.sections {
        writeln!(
            o,
            "  {:<24} {:>8} {:>12}  {}",
            s.name,
            if s.required { "yes" } else { "no" },
            HumanBytes(s.size).to_string(),
            s.file
        )?;
    }
    writeln!(o, "\nregions")?;
    writeln!(
        o,
        "  {:<33} {:>4} {:>10} {:>11} {:>11} {:>11} {:>7}  name",
        "address", "perm", "flags", "size", "non-zero", "stored", "ratio"
    )?;
    for g in &regions {
        let (nz, st) = if g.has_data {
            (
                HumanBytes(g.nonzero_bytes()).to_string(),
                HumanBytes(g.stored_bytes()).to_string(),
            )
        } else {
            ("-".into(), "not saved".into())
        };
        writeln!(
            o,
            "  {:016x}-{:016x} {:>4} {:>#10x} {:>11} {:>11} {:>11} {:>7}  {}",
            g.start,
            g.start.saturating_add(g.len),
            perms(g.prot),
            g.flags,
            HumanBytes(g.len).to_string(),
            nz,
            st,
            if g.has_data {
                ratio(g.len, g.stored_bytes())
            } else {
                "-".into()
            },
            g.name_lossy()
        )?;
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../ckpt/tests/golden/image-1.0")
    }

    #[test]
    fn golden_image_description_names_sections_and_regions() {
        if std::env::consts::ARCH != "x86_64" {
            return;
        }
        let text = describe(&golden(), false, true).unwrap();
        assert!(text.contains("format     1.0 written by crum"), "{text}");
        assert!(
            text.contains("2026-11-22 22:37:22.123 UTC on x86_64"),
            "{text}"
        );
        assert!(text.contains("verified"), "{text}");
        for name in ["process", "note", "[heap]", "/usr/lib/libx.so", "not saved"] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }

    #[test]
    fn golden_image_json_has_totals_and_regions() {
        if std::env::consts::ARCH != "x86_64" {
            return;
        }
        let v: serde_json::Value =
            serde_json::from_str(&describe(&golden(), true, false).unwrap()).unwrap();
        assert_eq!(v["totals"]["mapped_bytes"], 100 * 1024);
        assert_eq!(v["regions"].as_array().unwrap().len(), 3);
        assert_eq!(v["regions"][1]["name"], "/usr/lib/libx.so");
        assert_eq!(v["inventory"]["sections"][2]["name"], "process");
    }

    #[test]
    fn missing_image_is_one_line_error() {
        let e = describe(Path::new("/nonexistent/img"), false, false).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "image directory /nonexistent/img does not exist"
        );
    }
}
