//! The library answers to the driver's name: SONAME `libcuda.so.1`, so a loader that asks for
//! `libcuda.so.1` after `CRUM_LIBCUDA` preloaded it gets this object.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
