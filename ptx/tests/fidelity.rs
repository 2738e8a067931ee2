//! Engine fidelity on hand-written PTX: 32-bit wrap of shared and local addresses, and the
//! `WARP_SZ` constant.

mod common;

use common::*;
use crum_ptx::{HostMemory, LaunchConfig, LaunchError, Module};

const HEAD: &str = ".version 8.0\n.target sm_80\n.address_size 64\n";

fn ptx(body: &str) -> Module {
    Module::parse(&format!("{HEAD}{body}")).unwrap()
}

/// Stores `%r1` to `out[0]`, `%r2` to `out[1]`, `%r3` to `out[2]` (thread 0 only).
const STORE3: &str = r#"
  ld.param.u64 %rd1, [out];
  st.global.u32 [%rd1], %r1;
  st.global.u32 [%rd1+4], %r2;
  st.global.u32 [%rd1+8], %r3;
  ret;
"#;

fn run3(m: &Module, kernel: &str) -> Result<Vec<i32>, LaunchError> {
    run3_shared(m, kernel, 0)
}

/// [`run3`] with `dynamic` bytes of dynamic shared memory.
fn run3_shared(m: &Module, kernel: &str, dynamic: u32) -> Result<Vec<i32>, LaunchError> {
    let mut mem = HostMemory::new();
    let out = mem.alloc(12);
    let c = LaunchConfig { dynamic_shared_bytes: dynamic, ..cfg(1, 1) };
    run(m, &mut mem, kernel, &c, &Args::new().ptr(out))?;
    Ok(to_i32s(&mem.read(out, 12)))
}

#[test]
fn shared_address_plus_offset_wraps_to_32_bits() {
    // 0xFFFFFFC0 + 68 is 0x1_0000_0004 in 64 bits; a GPU reads shared offset 4.
    let m = ptx(&format!(
        r#".visible .entry k(.param .u64 out)
{{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  mov.u32 %r5, 1234;
  st.shared.u32 [4], %r5;
  mov.u32 %r4, -64;
  ld.shared.u32 %r1, [%r4+68];
  add.u32 %r6, %r4, 72;
  st.shared.u32 [%r4+72], %r6;
  ld.shared.u32 %r2, [8];
  mov.u32 %r3, 0;
{STORE3}}}
"#
    ));
    assert_eq!(run3_shared(&m, "k", 16).unwrap(), vec![1234, 8, 0]);
}

#[test]
fn local_address_plus_offset_wraps_to_32_bits() {
    let m = ptx(&format!(
        r#".visible .entry k(.param .u64 out)
{{
  .local .align 4 .b8 buf[16];
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  mov.u32 %r5, 77;
  st.local.u32 [buf+8], %r5;
  mov.u32 %r4, buf;
  add.u32 %r4, %r4, -16;
  ld.local.u32 %r1, [%r4+24];
  mov.u32 %r2, 0;
  mov.u32 %r3, 0;
{STORE3}}}
"#
    ));
    assert_eq!(run3(&m, "k").unwrap(), vec![77, 0, 0]);
}

#[test]
fn warp_sz_operand_is_32() {
    let m = ptx(&format!(
        r#".visible .entry k(.param .u64 out)
{{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  mov.u32 %r1, WARP_SZ;
  shr.u32 %r2, %r1, 1;
  add.s32 %r3, %r1, WARP_SZ;
{STORE3}}}
"#
    ));
    assert_eq!(run3(&m, "k").unwrap(), vec![32, 16, 64]);
}
