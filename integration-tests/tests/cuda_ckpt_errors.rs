//! Bad input to the restart of a CUDA program gets a clear error and loses nothing: an
//! unknown device, a GPU that is not there, a corrupt device state, a device section that does
//! not match its data, and an image restarted by something other than `crum restart`. A
//! restarted program whose proxy is killed gets CUDA errors instead of hanging.

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

/// The device proxy `crum restart` started for the restarted program `pid`: the process
/// whose command line is `crum proxy ... --watch-pid <pid>`. Waits for it.
fn proxy_of(pid: u32) -> u32 {
    let t0 = std::time::Instant::now();
    loop {
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let Ok(cl) = std::fs::read(format!("/proc/{p}/cmdline")) else { continue };
            let args: Vec<&[u8]> = cl.split(|&b| b == 0).collect();
            if args.get(1) == Some(&&b"proxy"[..]) && args.windows(2).any(|w| w[0] == b"--watch-pid" && w[1] == pid.to_string().as_bytes()) {
                return p;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no proxy for the restarted program {pid}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Field `n` (1-based, as in proc(5)) of /proc/<pid>/stat.
fn stat_field(pid: u32, n: usize) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(") ").unwrap();
    rest.split_whitespace().nth(n - 3).unwrap().to_string()
}

#[test]
fn killing_the_proxy_of_a_restarted_program_fails_its_cuda_calls_instead_of_hanging() {
    let tmp = tempfile::tempdir().unwrap();
    let image = cuda_image(tmp.path());
    let mut r = Proc::restart(&image, None, &tmp.path().join("restart.out")).expect("crum restart");
    let pid = r.child.id();
    // The restarted program computes through its new proxy (it prints again).
    let t0 = std::time::Instant::now();
    while r.stdout().lines().count() < 1 {
        if let Ok(Some(st)) = r.child.try_wait() {
            panic!("the restarted program ended early ({st}):\n{}", r.report());
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "the restarted program printed nothing:\n{}", r.report());
        std::thread::sleep(Duration::from_millis(10));
    }
    let proxy = proxy_of(pid);
    // Not the program's child: the program never sees crum's proxy (no SIGCHLD, not taken by
    // its waitpid(-1), not reaped under SIGCHLD = SIG_IGN).
    assert_ne!(stat_field(proxy, 4), pid.to_string(), "the proxy's parent is the program");
    assert!(!crum_integration_tests::children(pid).contains(&proxy));
    let st = Command::new("kill").args(["-9", &proxy.to_string()]).status().unwrap();
    assert!(st.success());
    let code = r.wait(Duration::from_secs(120)).expect("the program ends instead of hanging");
    assert_eq!(code, Some(1), "{}", r.report());
    assert!(r.stdout().contains("cudaErrorDevicesUnavailable"), "{}", r.report());
}
