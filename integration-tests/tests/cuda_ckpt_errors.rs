//! Bad input to the restart of a CUDA program gets a clear error and loses nothing: an
//! unknown device, a GPU that is not there, a corrupt device state, a device section that does
//! not match its data, and an image restarted by something other than `crum restart`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crum_integration_tests::{build_cuda, crum_bin, Proc};

/// A checkpoint of the Jacobi sample while it runs (it is killed afterwards).
fn cuda_image(dir: &Path) -> PathBuf {
    let prog = build_cuda("jacobi").expect("nvcc builds jacobi");
    let mut p = Proc::run(&prog, &["64", "200000", "1000"], &[], &[], &dir.join("run.out")).expect("crum run");
    std::thread::sleep(Duration::from_millis(700));
    let image = p.checkpoint(&dir.join("images")).expect("checkpoint");
    p.kill9().expect("kill");
    image
}

fn restart(args: &[&str], image: &Path) -> (i32, String) {
    let out = Command::new(crum_bin())
        .arg("restart")
        .args(args)
        .arg(image)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run crum restart");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Every file of an image and its bytes (to prove a failed restart changed nothing).
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| (e.path(), std::fs::read(e.path()).unwrap()))
        .collect();
    v.sort();
    v
}

/// The file holding metadata section `name` (from `crum inspect`'s section table).
fn section_file(image: &Path, name: &str) -> PathBuf {
    let out = Command::new(crum_bin()).arg("inspect").arg(image).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no section {name} in:\n{text}"));
    image.join(line.split_whitespace().last().unwrap())
}

#[test]
fn bad_devices_and_corrupt_device_state_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let image = cuda_image(tmp.path());
    let before = snapshot(&image);

    let (code, err) = restart(&["--device", "quantum"], &image);
    assert_ne!(code, 0);
    assert!(err.contains("unknown device `quantum`"), "{err}");

    if crum_proxy::backend::probe_cuda().is_some() {
        let (code, err) = restart(&["--device", "cuda"], &image);
        assert_ne!(code, 0);
        assert!(err.contains("no usable GPU"), "{err}");
    }
    assert_eq!(snapshot(&image), before, "a refused restart changes nothing in the image");

    // A copy whose device state is garbage (with a matching checksum nowhere): the restart
    // names the broken section instead of starting the program.
    let broken = tmp.path().join("broken");
    std::fs::create_dir(&broken).unwrap();
    for (p, bytes) in &before {
        std::fs::write(broken.join(p.file_name().unwrap()), bytes).unwrap();
    }
    let f = section_file(&broken, "crum.device");
    let mut bytes = std::fs::read(&f).unwrap();
    for b in bytes.iter_mut() {
        *b ^= 0x5a;
    }
    std::fs::write(&f, &bytes).unwrap();
    let (code, err) = restart(&[], &broken);
    assert_ne!(code, 0, "a corrupt device section must not restart");
    assert!(err.contains("crum.device") || err.contains("device state"), "{err}");
    assert_eq!(snapshot(&image), before, "the good image is untouched");
}

#[test]
fn a_cuda_image_restarted_without_a_proxy_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let image = cuda_image(tmp.path());
    let plan = crum_restart::validate(&image).expect("valid image");
    assert!(plan.has_device(), "a CUDA program's image carries device state");
    match crum_restart::restart_with(&image, &crum_restart::Options::default()) {
        Ok(never) => match never {},
        Err(e) => assert!(e.to_string().contains("CUDA program"), "{e}"),
    }
}
