//! A program nobody here wrote: NVIDIA's `cuda-python` driver bindings and NVRTC (from PyPI,
//! installed by `scripts/setup-cuda.sh`), compiling a kernel at run time and driving it
//! through the driver API (`integration-tests/py/cuda_python_saxpy.py`, the pattern of
//! NVIDIA's own vectorAdd example). Under `crum run` it gets crum's `libcuda.so.1`; it is
//! checkpointed mid-run, killed and restarted, and every step prints once, right.

use std::time::{Duration, Instant};

use crum_integration_tests::{cuda_home, workspace, Proc};

/// The Python of the venv that holds the CUDA packages.
fn venv_python() -> std::path::PathBuf {
    let home = cuda_home().unwrap_or_else(|e| panic!("{e:#}"));
    home.ancestors()
        .find(|d| d.join("pyvenv.cfg").is_file())
        .map(|d| d.join("bin/python"))
        .expect("the CUDA toolkit root lies inside a venv")
}

#[test]
fn nvidia_cuda_python_and_nvrtc_run_checkpoint_and_restart_on_crums_driver() {
    let py = venv_python();
    let script = workspace().join("integration-tests/py/cuda_python_saxpy.py");
    let dir = tempfile::tempdir().unwrap();
    let script_arg = script.to_str().unwrap();
    let want: String = (0..200).map(|k| format!("step {k} ok\n")).collect::<String>() + "PASS\n";

    let mut p = Proc::run(&py, &[script_arg, "200"], &["--device", "emu"], &[], &dir.path().join("first.out")).unwrap();
    let t0 = Instant::now();
    while p.stdout().lines().count() < 4 {
        assert!(!p.exited() && t0.elapsed() < Duration::from_secs(180), "{}", p.report());
        std::thread::sleep(Duration::from_millis(10));
    }
    let img = p.checkpoint(&dir.path().join("images")).unwrap();
    p.kill9().unwrap();
    let before = p.stdout();
    assert!(want.starts_with(&before), "{before}");
    let mut r = Proc::restart(&img, None, &dir.path().join("r.out")).unwrap();
    let after = r.success(Duration::from_secs(180)).unwrap();
    // The restart prints what the first run had not printed when the image was taken.
    let taken_at = want.len().checked_sub(after.len()).expect("the restart printed more than a whole run");
    assert!(want.ends_with(&after) && taken_at <= before.len() && taken_at > 0, "before:\n{before}after:\n{after}");
}
