//! The idempotence analysis (issue 16): one kernel per class, each checked as a summary of its
//! global accesses and as a launch decision with its parameters mapped to allocations.

use crum_ptx::analysis::{idempotent_launch, Target};
use crum_ptx::Module;

const HEAD: &str = ".version 8.0\n.target sm_80\n.address_size 64\n";

fn ptx(body: &str) -> Module {
    Module::parse(&format!("{HEAD}{body}")).unwrap()
}

/// Two allocations: [0x1000, 0x2000) and [0x2000, 0x3000).
fn alloc(a: u64) -> Option<u64> {
    match a {
        0x1000..0x2000 => Some(0x1000),
        0x2000..0x3000 => Some(0x2000),
        _ => None,
    }
}

fn params(ptrs: &[u64]) -> Vec<u8> {
    ptrs.iter().flat_map(|p| p.to_le_bytes()).collect()
}

fn decide(m: &Module, k: &str, ptrs: &[u64]) -> Result<(), String> {
    let acc = m.kernel_accesses(k).unwrap();
    let info = m.kernel(k).unwrap();
    idempotent_launch(&acc, info, &params(ptrs), &alloc, &|_| None)
}

/// out[i] = in[i] * 2 (`in` read only, `out` write only).
const COPY: &str = r#"
.visible .entry twice(.param .u64 src, .param .u64 dst)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [src];
  ld.param.u64 %rd2, [dst];
  cvta.to.global.u64 %rd3, %rd1;
  cvta.to.global.u64 %rd4, %rd2;
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd5, %r1, 4;
  add.s64 %rd6, %rd3, %rd5;
  ld.global.u32 %r2, [%rd6];
  shl.b32 %r3, %r2, 1;
  add.s64 %rd7, %rd4, %rd5;
  st.global.u32 [%rd7], %r3;
  ret;
}
"#;

#[test]
fn read_only_and_write_only_parameters_are_told_apart() {
    let m = ptx(COPY);
    let a = m.kernel_accesses("twice").unwrap();
    assert_eq!(a.reads.into_iter().collect::<Vec<_>>(), vec![Target::Param(0)]);
    assert_eq!(a.writes.into_iter().collect::<Vec<_>>(), vec![Target::Param(1)]);
    assert!(!a.atomics && !a.calls);
    // Distinct allocations: idempotent.
    assert_eq!(decide(&m, "twice", &[0x1000, 0x2000]), Ok(()));
    // Aliasing arguments (both into one allocation): not.
    let e = decide(&m, "twice", &[0x1000, 0x1800]).unwrap_err();
    assert!(e.contains("reads and writes the allocation at 0x1000"), "{e}");
}

#[test]
fn a_write_only_kernel_is_idempotent() {
    let m = ptx(r#"
.visible .entry fill(.param .u64 dst)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [dst];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r1;
  ret;
}
"#);
    let a = m.kernel_accesses("fill").unwrap();
    assert!(a.reads.is_empty());
    assert_eq!(decide(&m, "fill", &[0x2000]), Ok(()));
}

#[test]
fn reading_and_writing_one_parameter_is_not_idempotent() {
    let m = ptx(r#"
.visible .entry inc(.param .u64 x)
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [x];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  ld.global.u32 %r2, [%rd3];
  add.u32 %r2, %r2, 1;
  st.global.u32 [%rd3], %r2;
  ret;
}
"#);
    let e = decide(&m, "inc", &[0x1000]).unwrap_err();
    assert!(e.contains("reads and writes"), "{e}");
}

#[test]
fn atomics_are_not_idempotent() {
    let m = ptx(r#"
.visible .entry count(.param .u64 c)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [c];
  atom.global.add.u32 %r1, [%rd1], 1;
  red.global.add.u32 [%rd1], 1;
  ret;
}
"#);
    let a = m.kernel_accesses("count").unwrap();
    assert!(a.atomics);
    assert!(decide(&m, "count", &[0x1000]).unwrap_err().contains("atomic"));
}

#[test]
fn a_pointer_loaded_from_memory_is_unknown() {
    // p = table[0]; p[tid] = tid: where it writes cannot be known from the parameters.
    let m = ptx(r#"
.visible .entry indirect(.param .u64 table)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [table];
  ld.global.u64 %rd2, [%rd1];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r1;
  ret;
}
"#);
    let a = m.kernel_accesses("indirect").unwrap();
    assert!(a.writes.contains(&Target::Unknown), "{a:?}");
    assert!(decide(&m, "indirect", &[0x1000]).unwrap_err().contains("cannot be shown"));
}

#[test]
fn a_device_pointer_parameter_outside_any_allocation_is_not_trusted() {
    let m = ptx(COPY);
    assert!(decide(&m, "twice", &[0x1000, 0x9000]).is_err());
}
