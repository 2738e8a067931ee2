//! The CUDA test corpus under `crum run` on the default device: each program in
//! `integration-tests/cuda/` (the list: `cuda_corpus_list/`, shared with `cuda_static.rs`,
//! which runs the same programs built with the static runtime) is built with the real nvcc
//! (`-cudart shared -arch=sm_80`), checks
//! its GPU results against a CPU computation, and must exit 0 with a final `PASS`; its stdout
//! must equal `cuda/expected/<name>.out` where that file exists. A program that is a folder of
//! several `.cu` files (`cuda/rdc_linked/`) is built with separate compilation (`-rdc=true`).

mod cuda_corpus_list;

use crum_integration_tests::run_cuda_pass_with;

cuda_corpus_list::corpus!(run_cuda_pass_with);

/// `crum run --strict-memory`: the same reads are illegal addresses, and the log names the
/// allocation each one misses.
#[test]
fn strict_memory_reports_reads_outside_allocations() {
    use crum_integration_tests::{build_cuda, crum_bin, wait_with_timeout};
    use std::process::{Command, Stdio};
    use std::time::Duration;
    let exe = build_cuda("oob_near").unwrap_or_else(|e| panic!("{e:#}"));
    let child = Command::new(crum_bin())
        .args(["run", "--device", "emu", "--strict-memory", "--"])
        .arg(&exe)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn crum run");
    let r = wait_with_timeout(child, Duration::from_secs(120)).expect("crum run");
    assert!(
        r.code != Some(0) && r.stdout.contains("cudaErrorIllegalAddress"),
        "expected the kernel to fail: code {:?}\nstdout:\n{}\nstderr:\n{}",
        r.code,
        r.stdout,
        r.stderr
    );
    assert!(
        r.stderr.contains("illegal address (--strict-memory)")
            && (r.stderr.contains("bytes before the allocation")
                || r.stderr.contains("bytes past the end of the allocation")),
        "the log names the allocation missed:\n{}",
        r.stderr
    );
}
