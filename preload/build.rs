//! Compiles `src/exec.c`, the variadic exec functions, `src/syscall.c`, the variadic
//! `syscall`, and `src/static_runtime.c`, the redirection of a static CUDA runtime to
//! libcrum.so (see their headers; `src/elf_patch.h` and `src/fingerprint.h` are shared with
//! `src/audit.c`, built by
//! `cli/build.rs`).
fn main() {
    println!("cargo:rerun-if-changed=src/exec.c");
    println!("cargo:rerun-if-changed=src/syscall.c");
    println!("cargo:rerun-if-changed=src/static_runtime.c");
    println!("cargo:rerun-if-changed=src/elf_patch.h");
    println!("cargo:rerun-if-changed=src/fingerprint.h");
    cc::Build::new()
        .file("src/exec.c")
        .file("src/syscall.c")
        .file("src/static_runtime.c")
        .flag("-fvisibility=hidden")
        .compile("crum_exec");
}
