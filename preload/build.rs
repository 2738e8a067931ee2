//! Compiles `src/exec.c`, the variadic exec functions (see its header).
fn main() {
    println!("cargo:rerun-if-changed=src/exec.c");
    cc::Build::new().file("src/exec.c").flag("-fvisibility=hidden").compile("crum_exec");
}
