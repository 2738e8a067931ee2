//! Compiles `src/exec.c`, the variadic exec functions, and `src/syscall.c`, the variadic
//! `syscall` (see their headers).
fn main() {
    println!("cargo:rerun-if-changed=src/exec.c");
    println!("cargo:rerun-if-changed=src/syscall.c");
    cc::Build::new().file("src/exec.c").file("src/syscall.c").flag("-fvisibility=hidden").compile("crum_exec");
}
