//! Fat binaries as nvcc 13 writes them, in every compression mode, read from the
//! `.nv_fatbin` section of real executables.

mod common;

use common::*;
use crum_ptx::fatbin::{best_ptx, extract_ptx, fatbin_total_size, FatbinError};
use crum_ptx::Module;

/// Every fat binary of a `.nv_fatbin` section, split with `fatbin_total_size`.
fn containers(section: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut pos = 0;
    while section.len() - pos >= 16 {
        let n = fatbin_total_size(&section[pos..]).unwrap();
        out.push(&section[pos..pos + n]);
        pos += n;
        // Containers are 8-byte aligned back to back.
        while pos < section.len() && pos % 8 != 0 {
            pos += 1;
        }
    }
    out
}

fn ptx_of(flags: &[&str]) -> Vec<crum_ptx::fatbin::PtxImage> {
    let exe = compile("app", flags, true);
    let sec = fatbin_section(&exe);
    let mut all = Vec::new();
    for c in containers(&sec) {
        match extract_ptx(c) {
            Ok(v) => all.extend(v),
            Err(FatbinError::SassOnly { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    all
}

fn check(images: &[crum_ptx::fatbin::PtxImage]) {
    let best = best_ptx(images).expect("a PTX image");
    assert_eq!(best.arch, 80);
    let m = Module::parse(&best.ptx).unwrap();
    assert!(m.kernel("_Z5scalePffi").is_some(), "kernels: {:?}", m.kernels().map(|k| &k.name).collect::<Vec<_>>());
}

#[test]
fn zstd_compressed_ptx_default_of_nvcc_13_is_extracted() {
    check(&ptx_of(&["-arch=sm_80"]));
}

#[test]
fn lz4_compressed_ptx_of_speed_mode_is_extracted() {
    // `-compress-mode=speed` writes the 0x2000 scheme that CUDA 11/12 used by default.
    let images = ptx_of(&["-arch=sm_80", "-compress-mode=speed"]);
    check(&images);
    // Same text as the uncompressed build.
    let plain = ptx_of(&["-arch=sm_80", "--no-compress"]);
    assert_eq!(best_ptx(&images).unwrap().ptx, best_ptx(&plain).unwrap().ptx);
}

#[test]
fn uncompressed_and_compress_all_builds_are_extracted() {
    check(&ptx_of(&["-arch=sm_80", "--no-compress"]));
    check(&ptx_of(&["-arch=sm_80", "-Xfatbin", "-compress-all"]));
}

#[test]
fn sass_only_build_is_refused_with_rebuild_hint() {
    let exe = compile("app", &["-gencode", "arch=compute_80,code=sm_80"], true);
    let sec = fatbin_section(&exe);
    let errs: Vec<String> = containers(&sec).iter().filter_map(|c| extract_ptx(c).err()).map(|e| e.to_string()).collect();
    assert!(!errs.is_empty());
    assert!(errs.iter().all(|e| e.contains("-arch=sm_80")), "{errs:?}");
}
