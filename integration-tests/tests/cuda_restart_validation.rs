//! A restart that fails leaves the world as it found it: `crum restart` checks every section
//! of a CUDA program's image, the device data included, before it touches the program's
//! files (it cuts writable files back to their size at the checkpoint, so a restart that
//! failed after that point lost what the program wrote since).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crum_ckpt::image::ImageReader;
use crum_integration_tests::{build_cuda, crum_bin, Proc};
use crum_wire::ckpt::SECTION_DEVICE_DATA;

fn len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Waits until `cond` holds (generous deadline: the suite runs under heavy load).
fn wait_for(what: &str, p: &mut Proc, cond: impl Fn(&Proc) -> bool) {
    let t0 = Instant::now();
    while !cond(p) {
        assert!(!p.exited(), "the program ended while waiting for {what}:\n{}", p.report());
        assert!(t0.elapsed() < Duration::from_secs(180), "no {what}:\n{}", p.report());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_restart_refused_for_damaged_device_data_keeps_the_programs_log_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_cuda("ckpt_log_file").expect("nvcc builds ckpt_log_file");
    let log = tmp.path().join("log");
    let log_arg = log.to_str().unwrap();
    let mut p = Proc::run(&prog, &[log_arg], &[], &[], &tmp.path().join("run.out")).expect("crum run");
    wait_for("ready", &mut p, |p| p.stdout().contains("ready"));
    wait_for("a line in the log", &mut p, |_| len(&log) > 0);
    let image = p.checkpoint(&tmp.path().join("images")).expect("checkpoint");
    // The program writes on after the checkpoint: these bytes exist only in the file.
    let at_checkpoint = len(&log);
    wait_for("more lines after the checkpoint", &mut p, |_| len(&log) > at_checkpoint + 64);
    p.kill9().expect("kill");
    let written = std::fs::read(&log).unwrap();

    // One stored byte of the device data (a compressed blob of chunks) flipped: only its
    // chunk's checksum can tell.
    let r = ImageReader::open(&image).unwrap();
    let blob = r
        .regions()
        .iter()
        .find(|g| g.name == SECTION_DEVICE_DATA.as_bytes())
        .unwrap_or_else(|| panic!("no {SECTION_DEVICE_DATA} blob in {}", image.display()));
    let chunk = blob.chunks.iter().find(|c| c.stored_len > 0).expect("a stored chunk of device data");
    let at = chunk.offset + u64::from(chunk.stored_len) / 2;
    drop(r);
    let pages = image.join("pages");
    let mut bytes = std::fs::read(&pages).unwrap();
    bytes[at as usize] ^= 0x10;
    std::fs::write(&pages, &bytes).unwrap();

    let out = Command::new(crum_bin())
        .arg("restart")
        .arg(&image)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run crum restart");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "a damaged image restarted: {err}");
    assert!(err.contains("checksum mismatch"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert_eq!(
        len(&log),
        written.len() as u64,
        "the refused restart cut the program's log ({at_checkpoint} bytes at the checkpoint)"
    );
    assert!(std::fs::read(&log).unwrap() == written, "the refused restart changed the program's log");
}
