//! Builds `libcrum_audit.so` from `preload/src/audit.c` (the dynamic linker's audit library
//! that redirects a shared object's static CUDA runtime to libcrum.so as it is loaded); `crum
//! run` carries its bytes and writes it beside its `libcuda.so.1` (`run::driver_dir`).
fn main() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../preload/src/audit.c");
    println!("cargo:rerun-if-changed={}", src.display());
    // Its ELF reading and patching, shared with preload/src/static_runtime.c.
    println!("cargo:rerun-if-changed={}", src.with_file_name("elf_patch.h").display());
    println!("cargo:rerun-if-changed={}", src.with_file_name("fingerprint.h").display());
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("libcrum_audit.so");
    let compiler = cc::Build::new().get_compiler();
    let status = compiler
        .to_command()
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run the C compiler for libcrum_audit.so");
    assert!(status.success(), "building libcrum_audit.so from {} failed", src.display());
}
