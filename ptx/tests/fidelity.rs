//! Engine fidelity on hand-written PTX: per-kernel static shared memory, the reserved shared
//! region behind `%reserved_smem_offset_*`, 32-bit wrap of shared and local addresses, the
//! `WARP_SZ` constant, and a rejected form failing only the kernels that reach it.

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

/// Two kernels with 200 KiB of static shared memory each, one through a called function.
const TWO_BIG: &str = r#"
.shared .align 4 .b8 a[204800];
.shared .align 4 .b8 b[204800];
.shared .align 8 .b8 small[24];
.func (.param .b32 r) touch_b()
{
  .reg .b32 %r<4>;
  mov.u32 %r1, b;
  st.shared.u32 [b+204796], %r1;
  ld.shared.u32 %r2, [b+204796];
  st.param.b32 [r], %r2;
  ret;
}
.visible .entry ka(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  mov.u32 %r1, a;
  st.shared.u32 [a+204796], %r1;
  mov.u32 %r2, %total_smem_size;
  mov.u32 %r3, 0;
  ld.param.u64 %rd1, [out];
  st.global.u32 [%rd1], %r1;
  st.global.u32 [%rd1+4], %r2;
  st.global.u32 [%rd1+8], %r3;
  ret;
}
.visible .entry kb(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  { .param .b32 rv;
    call (rv), touch_b, ();
    ld.param.b32 %r1, [rv];
  }
  mov.u32 %r2, %total_smem_size;
  mov.u32 %r3, small;
  ld.param.u64 %rd1, [out];
  st.global.u32 [%rd1], %r1;
  st.global.u32 [%rd1+4], %r2;
  st.global.u32 [%rd1+8], %r3;
  ret;
}
.visible .entry none(.param .u64 out)
{
  ret;
}
"#;

#[test]
fn static_shared_memory_counts_only_what_each_kernel_reaches() {
    let m = ptx(TWO_BIG);
    let size = |k: &str| m.kernel(k).unwrap().static_shared_bytes;
    // `kb` reaches `b` through `touch_b`, and `small` itself; `none` reaches nothing.
    assert_eq!((size("ka"), size("kb"), size("none")), (204800, 204800 + 24 + 8, 0));
    // The module's 400 KiB would not fit in a block; each kernel's 200 KiB does. Variables
    // start after the 1 KiB reserved region.
    assert_eq!(run3(&m, "ka").unwrap(), vec![1024, 204800, 0]);
    assert_eq!(run3(&m, "kb").unwrap(), vec![1024, 204832, 1024 + 204800]);
}

#[test]
fn reserved_shared_region_precedes_user_shared_memory() {
    let m = ptx(
        r#".shared .align 4 .b8 user[64];
.extern .shared .align 16 .b8 dyn[];
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<16>;
  .reg .b64 %rd<8>;
  mov.u32 %r1, %reserved_smem_offset_begin;
  mov.u32 %r2, %reserved_smem_offset_end;
  mov.u32 %r3, %reserved_smem_offset_cap;
  mov.u32 %r4, %reserved_smem_offset_0;
  mov.u32 %r5, %reserved_smem_offset_1;
  mov.u32 %r6, user;
  mov.u32 %r7, dyn;
  mov.u32 %r8, %aggr_smem_size;
  mov.u32 %r9, %total_smem_size;
  // The reserved region starts zeroed (cooperative groups rely on it on sm_80+).
  ld.shared.u32 %r10, [%r5];
  ld.param.u64 %rd1, [out];
  st.global.v4.u32 [%rd1], {%r1, %r2, %r3, %r4};
  st.global.v4.u32 [%rd1+16], {%r5, %r6, %r7, %r8};
  st.global.v2.u32 [%rd1+32], {%r9, %r10};
  ret;
}
"#,
    );
    let mut mem = HostMemory::new();
    let out = mem.alloc(40);
    let c = LaunchConfig { dynamic_shared_bytes: 32, ..cfg(1, 1) };
    run(&m, &mut mem, "k", &c, &Args::new().ptr(out)).unwrap();
    let v = to_i32s(&mem.read(out, 40));
    let (begin, end, cap, off0, off1) = (v[0], v[1], v[2], v[3], v[4]);
    assert_eq!((begin, end, cap), (0, 1024, 1024));
    // CG's multi-warp scratch needs 288 bytes at offset 1, inside the region.
    assert!(off0 >= begin && off1 >= begin && off1 + 288 <= end, "{v:?}");
    assert_eq!((v[5], v[6], v[7], v[8], v[9]), (1024, 1024 + 64, 1024 + 64 + 32, 64 + 32, 0));
}

/// `good` runs; `bad` uses an operand the decoder does not know; `caller` reaches it
/// through a call.
const ONE_BAD: &str = r#"
.func (.param .b32 r) helper()
{
  .reg .b32 %r<4>;
  mov.u32 %r1, %no_such_register;
  st.param.b32 [r], %r1;
  ret;
}
.visible .entry good(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  mov.u32 %r1, 5;
  mov.u32 %r2, 6;
  mov.u32 %r3, 7;
  ld.param.u64 %rd1, [out];
  st.global.u32 [%rd1], %r1;
  st.global.u32 [%rd1+4], %r2;
  st.global.u32 [%rd1+8], %r3;
  ret;
}
.visible .entry bad(.param .u64 out)
{
  .reg .b32 %r<4>;
  ts : .branchtargets L0, L1;
L0:
L1:
  ret;
}
.visible .entry caller(.param .u64 out)
{
  .reg .b32 %r<4>;
  { .param .b32 rv;
    call (rv), helper, ();
  }
  ret;
}
"#;

#[test]
fn a_rejected_form_fails_only_the_kernels_that_reach_it() {
    let m = ptx(ONE_BAD);
    assert_eq!(run3(&m, "good").unwrap(), vec![5, 6, 7]);
    let e = run3(&m, "bad").unwrap_err();
    assert_eq!(e.cuda_error(), 801);
    let msg = e.to_string();
    assert!(msg.contains("`bad`") && msg.contains(".branchtargets") && msg.contains("PTX line"), "{msg}");
    let e = run3(&m, "caller").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("`caller`") && msg.contains("%no_such_register") && msg.contains("`helper`"),
        "{msg}"
    );
    // The good kernel still runs after the others were refused.
    assert_eq!(run3(&m, "good").unwrap(), vec![5, 6, 7]);
}
