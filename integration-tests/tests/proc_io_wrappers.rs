//! The C library I/O wrappers `crum run` preloads (`libcrum_libc.so`, issue 4: a system call
//! whose buffer lies on a protected shadow page of managed memory would get EFAULT, so each
//! wrapper readies its buffers first). Here on ordinary memory, with `integration-tests/c/
//! io_wrappers.c`: the program's calls must reach the wrappers — not the C library, which is
//! what happens if the wrappers are exported with a symbol version, as libcrum.so versions
//! its own — and must answer exactly as the C library does, errno included.
mod proc_common;
use proc_common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Every wrapper io_wrappers.c calls (the program binds each one).
const WRAPPED: [&str; 29] = [
    "read",
    "pread",
    "pread64",
    "readv",
    "preadv",
    "preadv64",
    "recv",
    "recvfrom",
    "recvmsg",
    "write",
    "pwrite",
    "pwrite64",
    "writev",
    "pwritev",
    "pwritev64",
    "send",
    "sendto",
    "sendmsg",
    "fread",
    "fwrite",
    "fread_unlocked",
    "fwrite_unlocked",
    "__read_chk",
    "__pread_chk",
    "__pread64_chk",
    "__recv_chk",
    "__recvfrom_chk",
    "__fread_chk",
    "__fread_unlocked_chk",
];

/// `crum run --device emu -- io_wrappers` in the sandbox's `run` directory, with extra
/// environment; the program's stdout after a successful exit.
fn run_io_wrappers(sb: &Sandbox, env: &[(&str, &Path)]) -> String {
    let prog = build_c("io_wrappers");
    let mut cmd = Command::new(crum_bin());
    cmd.args(["run", "--device", "emu", "--dir"])
        .arg(sb.images())
        .arg("--")
        .arg(&prog)
        .current_dir(sb.path("run"))
        .env("CRUM_CONTROL_DIR", sb.sock());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut p = spawn_cmd(&mut cmd, sb.path("run.out"));
    let code = p.wait_exit();
    assert_eq!(code, 0, "io_wrappers under crum run failed:\n{}{}", p.output(), p.stderr());
    p.output()
}

#[test]
fn io_calls_under_crum_run_answer_as_the_c_library_does_errno_included() {
    let sb = Sandbox::new();
    let prog = build_c("io_wrappers");
    let want = expected_output(&sb, &prog, &[]);
    assert_eq!(want.lines().last(), Some("PASS"), "io_wrappers fails without crum:\n{want}");

    let got = run_io_wrappers(&sb, &[]);

    assert_eq!(got, want, "io_wrappers under crum run differs from a run without crum");
}

#[test]
fn io_calls_of_the_program_bind_to_the_wrappers_not_the_c_library() {
    let sb = Sandbox::new();
    let log = sb.path("ld");

    let out = run_io_wrappers(&sb, &[("LD_DEBUG", Path::new("bindings")), ("LD_DEBUG_OUTPUT", &log)]);

    assert_eq!(out.lines().last(), Some("PASS"), "{out}");
    // The loader writes one `ld.<pid>` per process (crum, the proxy, the program); the
    // program's lines read "binding file <prog> [0] to <library> [0]: normal symbol `<name>' ...".
    let mut bound: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in std::fs::read_dir(sb.tmp.path()).unwrap() {
        let path = e.unwrap().path();
        if !path.file_name().unwrap().to_string_lossy().starts_with("ld.") {
            continue;
        }
        // Threads bind symbols at the same time and the loader writes a line in pieces: two
        // lines can share one (`…symbol `x'     <pid>: binding file …`), so every
        // "binding file" of a line counts.
        for rest in std::fs::read_to_string(&path).unwrap().lines().flat_map(|l| l.split("binding file ").skip(1)) {
            let Some((from, rest)) = rest.split_once(" [0] to ") else { continue };
            if !from.ends_with("/io_wrappers") {
                continue;
            }
            let Some((to, rest)) = rest.split_once(" [") else { continue };
            let Some(name) = rest.split_once('`').and_then(|(_, r)| r.split_once('\'')).map(|(n, _)| n) else {
                continue;
            };
            let lib = to.rsplit('/').next().unwrap_or(to);
            bound.entry(name.to_string()).or_default().insert(lib.to_string());
        }
    }
    let wrong: Vec<String> = WRAPPED
        .iter()
        .filter(|n| bound.get(**n).is_none_or(|libs| libs.len() != 1 || !libs.contains("libcrum_libc.so")))
        .map(|n| format!("{n} -> {:?}", bound.get(*n)))
        .collect();
    assert!(wrong.is_empty(), "not bound (only) to libcrum_libc.so: {wrong:?}");
}
