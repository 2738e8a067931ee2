//! Bad input to `crum restart`: a missing directory, a truncated or corrupted image — each a
//! one-line error naming the problem, with nothing of the program started.
mod proc_common;
use proc_common::*;
use std::path::{Path, PathBuf};

fn image(sb: &Sandbox) -> PathBuf {
    let prog = build_c("counter");
    let mut p = run_under_crum(sb, &prog, &["400", "5"], &[], "run.out");
    p.wait_lines(3);
    let img = checkpoint(sb, p.pid());
    p.kill9();
    img
}

fn refused(sb: &Sandbox, img: &Path, needle: &str) {
    let mut r = restart(sb, img, "restart.out");
    assert_eq!(r.wait_exit(), 1, "restart of a bad image did not fail: {}", r.stderr());
    let err = r.stderr();
    assert_eq!(err.lines().count(), 1, "not a one-line error: {err}");
    assert!(err.contains(needle), "error does not say {needle:?}: {err}");
    assert!(r.output().is_empty(), "the program ran: {}", r.output());
}

#[test]
fn missing_directory_is_refused() {
    let sb = Sandbox::new();
    refused(&sb, &sb.path("no-such-image"), "does not exist");
}

#[test]
fn truncated_image_is_refused() {
    let sb = Sandbox::new();
    let img = image(&sb);
    let pages = img.join("pages");
    let len = std::fs::metadata(&pages).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&pages).unwrap().set_len(len / 2).unwrap();
    refused(&sb, &img, "truncated");
}

#[test]
fn corrupted_process_section_is_refused() {
    let sb = Sandbox::new();
    let img = image(&sb);
    // The first section file is the process description; flip one byte in its middle.
    let f = img.join("s-0");
    let mut b = std::fs::read(&f).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0xff;
    std::fs::write(&f, b).unwrap();
    refused(&sb, &img, "checksum");
}

#[test]
fn directory_that_is_not_an_image_is_refused() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.path("empty")).unwrap();
    std::fs::write(sb.path("empty/x"), "x").unwrap();
    refused(&sb, &sb.path("empty"), "not a complete crum image");
}
