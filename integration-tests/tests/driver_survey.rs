//! The driver-API survey's instruments (issue 13, `docs/driver-api.md`): a program built with
//! the static CUDA runtime, run against the logging `libcuda.so.1` of
//! `scripts/survey-driver-api.sh`, leaves a log of what the runtime asked of the driver; the
//! same program with its runtime redirected to libcrum.so (`scripts/survey-redirect-static.sh`,
//! the experiment behind the design's § 4.1) runs, checkpoints and restarts under crum. The
//! tests keep both instruments working, so the document's numbers can be reproduced.

use std::fs;
use std::process::Command;

use crum_integration_tests::{crum_bin, workspace};

#[test]
fn the_logging_driver_records_what_a_static_runtime_program_asks_of_the_driver() {
    // Arrange / Act: the script builds vector_add with -cudart static and runs it.
    let out = Command::new(workspace().join("scripts/survey-driver-api.sh"))
        .arg("vector_add")
        .output()
        .expect("run scripts/survey-driver-api.sh");
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "survey failed:\n{summary}\n{}", String::from_utf8_lossy(&out.stderr));

    // Assert: entry points by cuGetProcAddress (with versions), direct look-ups, export
    // tables and their slots, and where the program stopped.
    let log = fs::read_to_string(workspace().join("integration-tests/build/survey/vector_add.log"))
        .expect("the logging driver wrote a log");
    let count = |prefix: &str| log.lines().filter(|l| l.starts_with(prefix)).count();
    assert!(log.lines().any(|l| l == "dlsym cuGetProcAddress_v2"), "{log}");
    assert!(count("proc ") >= 300, "only {} cuGetProcAddress requests:\n{log}", count("proc "));
    assert!(log.lines().any(|l| l.starts_with("proc cuLaunchKernel 4000 0 ")), "{log}");
    assert!(log.lines().any(|l| l.starts_with("call cuInit impl 0")), "{log}");
    // The runtime's driver validity check (export table D4082055…, slot 1) is where every
    // program of the corpus stops against a driver that cannot answer it.
    assert!(log.lines().any(|l| l == "table D4082055-BDE6-704B-8D34-BA123C66E1F2"), "{log}");
    assert!(log.lines().any(|l| l.starts_with("slot D4082055-BDE6-704B-8D34-BA123C66E1F2 1 ")), "{log}");
    assert!(summary.contains("| vector_add | 1 | `vector_add.cu:12 cudaMalloc(&da, n * 4) -> cudaErrorSoftwareValidityNotEstablished`"), "{summary}");
    assert!(summary.contains("| INTEGRITY_CHECK | 1 | 1 |"), "{summary}");
}

#[test]
fn a_static_runtime_program_redirected_to_libcrum_passes_across_a_restart_and_a_restart_of_it() {
    // Arrange / Act: vector_add built with -cudart static, NVIDIA's runtime in it redirected to
    // libcrum.so, checkpointed at GATE(1), restarted, checkpointed again at GATE(2), restarted.
    let out = Command::new(workspace().join("scripts/survey-redirect-static.sh"))
        .args(["--ckpt", "vector_add"])
        .env("CRUM", crum_bin())
        .output()
        .expect("run scripts/survey-redirect-static.sh");

    // Assert: the program's own check passed after both restarts.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("vector_add PASS after a restart and a restart of the restart"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
