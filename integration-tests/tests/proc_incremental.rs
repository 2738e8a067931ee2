//! Incremental images (issue 15): after a program's first image, an image stores only the
//! chunks that changed since the program's previous one in the same directory and keeps the
//! rest there (`docs/image-format.md` § Incremental images). Restarts read through the
//! chain, restarts of restarts go on chaining, and rotation never removes an image a kept
//! one needs. The program (`inc_memory.c`) prints a checksum of all its 256 MiB each step,
//! so a byte brought back wrong anywhere changes what it prints; a step changes at most two
//! of its 64 chunks (4 MiB), so the few steps between two checkpoints (many more on a loaded
//! machine) leave most of it unchanged.
mod proc_common;
use proc_common::*;
use std::path::{Path, PathBuf};

/// `crum inspect --json` of `img`, with `--verify` (every chunk read through the chain).
fn inspect(sb: &Sandbox, img: &Path) -> serde_json::Value {
    let o = std::process::Command::new(crum_bin())
        .args(["inspect", "--json", "--verify"])
        .arg(img)
        .env("CRUM_CONTROL_DIR", sb.sock())
        .output()
        .unwrap();
    assert!(o.status.success(), "inspect {}: {}", img.display(), String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn chain(v: &serde_json::Value) -> Vec<String> {
    v["chain"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect()
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_str().unwrap().to_string()
}

fn stored(v: &serde_json::Value) -> u64 {
    v["totals"]["stored_bytes"].as_u64().unwrap()
}

const ARGS: [&str; 3] = ["60", "100", "256"];

#[test]
fn images_after_the_first_store_only_changed_chunks_and_restart_through_their_chain() {
    let sb = Sandbox::new();
    let prog = build_c("inc_memory");
    let mut p = run_under_crum(&sb, &prog, &ARGS, &[], "run.out");
    p.wait_lines(2);
    let mut imgs: Vec<PathBuf> = Vec::new();
    for _ in 0..3 {
        imgs.push(checkpoint(&sb, p.pid()));
        p.wait_lines(p.lines() + 1);
    }
    p.kill9();
    let (a, b, c) = (inspect(&sb, &imgs[0]), inspect(&sb, &imgs[1]), inspect(&sb, &imgs[2]));
    assert!(chain(&a).is_empty(), "the first image is full");
    assert_eq!(chain(&b), [name(&imgs[0])]);
    assert_eq!(chain(&c), [name(&imgs[0]), name(&imgs[1])]);
    // 256 MiB of noise in the first; a few 64 KiB pieces (in 4 MiB chunks) changed since.
    assert!(stored(&a) > 250 << 20, "{}", stored(&a));
    assert!(stored(&b) * 2 < stored(&a), "second image stores {} of {}", stored(&b), stored(&a));
    assert!(c["chain"][0]["kept_bytes"].as_u64().unwrap() > 100 << 20, "{c:#}");

    let expected = expected_output(&sb, &prog, &ARGS);
    // Restart the newest; checkpoint the restarted program (its image chains on), kill it,
    // restart that image: the run ends as the uninterrupted one.
    let mut r = restart(&sb, &imgs[2], "r1.out");
    r.wait_lines(2);
    let d = checkpoint(&sb, r.pid());
    r.wait_lines(r.lines() + 1);
    r.kill9();
    let at = assert_continues(&expected, 0, &p.output(), &r.output(), false, "restart of an incremental image");
    let dv = inspect(&sb, &d);
    assert_eq!(chain(&dv), [name(&imgs[0]), name(&imgs[1]), name(&imgs[2])], "the restarted program's image");
    let mut r2 = restart(&sb, &d, "r2.out");
    assert_eq!(r2.wait_exit(), 0, "{}", r2.stderr());
    assert_continues(&expected, at, &r.output(), &r2.output(), true, "restart of a restart through a chain of four");
}

#[test]
fn rotation_never_removes_an_image_that_a_kept_image_needs() {
    let sb = Sandbox::new();
    let prog = build_c("inc_memory");
    // --keep 3: an image keeps memory in at most two earlier ones.
    let mut p = run_under_crum(&sb, &prog, &ARGS, &[("CRUM_CKPT_KEEP", "3")], "run.out");
    p.wait_lines(2);
    let mut taken = Vec::new();
    for _ in 0..6 {
        taken.push(checkpoint(&sb, p.pid()));
        // Every image left restarts: what its chain names is there.
        for img in sb.list_images() {
            let v = inspect(&sb, &img);
            assert!(chain(&v).len() <= 2, "{}: {:?}", img.display(), chain(&v));
        }
        p.wait_lines(p.lines() + 1);
    }
    p.kill9();
    // Images 1, 2, 3 (full, then two on it), 4 full, 5 and 6 on it: the first three go.
    let left = sb.list_images();
    assert_eq!(left, taken[3..].to_vec());
    assert_eq!(chain(&inspect(&sb, &taken[5])), [name(&taken[3]), name(&taken[4])]);
    let expected = expected_output(&sb, &prog, &ARGS);
    let mut r = restart(&sb, &taken[5], "r.out");
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert_continues(&expected, 0, &p.output(), &r.output(), true, "restart of the newest kept image");
}

#[test]
fn full_every_one_writes_full_images() {
    let sb = Sandbox::new();
    let prog = build_c("inc_memory");
    let mut p = run_under_crum(&sb, &prog, &ARGS, &[("CRUM_CKPT_FULL_EVERY", "1")], "run.out");
    p.wait_lines(2);
    let first = checkpoint(&sb, p.pid());
    p.wait_lines(p.lines() + 1);
    let second = checkpoint(&sb, p.pid());
    p.kill9();
    assert!(chain(&inspect(&sb, &first)).is_empty());
    let v = inspect(&sb, &second);
    assert!(chain(&v).is_empty());
    assert!(stored(&v) > 250 << 20, "{}", stored(&v));
}
