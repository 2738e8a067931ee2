//! Engine behaviours on hand-written PTX: grid-wide sync (every block resident, more blocks
//! than workers), refusal of oversized cooperative
//! grids, deadlock detection, barriers with thread counts, calls with param blocks,
//! misaligned accesses, and unsupported instructions failing only when executed; and
//! texture fetches from nvcc-built kernels.

mod common;

use common::*;
use crum_ptx::{launch, ChannelKind, AddressMode, HostMemory, LaunchConfig, LaunchError, Module, Pool, TextureDesc};

const HEAD: &str = ".version 8.0\n.target sm_80\n.address_size 64\n";

fn ptx(body: &str) -> Module {
    Module::parse(&format!("{HEAD}{body}")).unwrap()
}

fn go(m: &Module, k: &str, c: LaunchConfig, params: &[u8], mem: &HostMemory, workers: usize) -> Result<crum_ptx::LaunchOutput, LaunchError> {
    launch(m, k, &c, params, &|_| None, mem, &Pool::new(workers))
}

/// Every block adds 1 to a counter in the grid-sync workspace (`%envreg1/2`, as cooperative
/// groups do: CUDA 13's `driver_abi.h` builds the address as (envreg1 << 32) | envreg2),
/// spins until all blocks have arrived, then writes what it saw.
const GRID_SYNC: &str = r#"
.visible .entry gs(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  .reg .pred %p<2>;
  mov.u32 %r1, %envreg1;
  mov.u32 %r2, %envreg2;
  mov.b64 %rd1, {%r2, %r1};
  mov.u32 %r3, %nctaid.x;
  bar.sync 0;
  mov.u32 %r4, %tid.x;
  setp.ne.s32 %p1, %r4, 0;
  @%p1 bra WAIT;
  atom.add.u32 %r5, [%rd1], 1;
SPIN:
  ld.volatile.u32 %r6, [%rd1];
  setp.lt.u32 %p1, %r6, %r3;
  @%p1 bra SPIN;
WAIT:
  bar.sync 0;
  ld.volatile.u32 %r6, [%rd1];
  ld.param.u64 %rd2, [out];
  mov.u32 %r7, %ctaid.x;
  mul.wide.u32 %rd3, %r7, 4;
  add.s64 %rd4, %rd2, %rd3;
  @!%p1 st.u32 [%rd4], %r6;
  ret;
}
"#;

#[test]
fn grid_sync_completes_when_all_blocks_are_resident() {
    let m = ptx(GRID_SYNC);
    assert!(m.kernel("gs").unwrap().uses_grid_sync);
    let mut mem = HostMemory::new();
    let out = mem.alloc(16);
    let c = LaunchConfig { grid: [4, 1, 1], block: [64, 1, 1], dynamic_shared_bytes: 0, cooperative: true };
    go(&m, "gs", c, &out.to_le_bytes(), &mem, 4).unwrap();
    assert_eq!(to_i32s(&mem.read(out, 16)), vec![4; 4]);
}

#[test]
fn cooperative_grid_larger_than_the_pool_keeps_every_block_resident() {
    // 216 blocks (108 SMs x 2, an occupancy-sized grid) on 2 workers and on 1: every block
    // is live at once, each worker running its share in turns.
    let m = ptx(GRID_SYNC);
    for workers in [2, 1] {
        let mut mem = HostMemory::new();
        let out = mem.alloc(216 * 4);
        let c = LaunchConfig { grid: [216, 1, 1], block: [32, 1, 1], dynamic_shared_bytes: 0, cooperative: true };
        go(&m, "gs", c, &out.to_le_bytes(), &mem, workers).unwrap();
        assert_eq!(to_i32s(&mem.read(out, 216 * 4)), vec![216; 216], "{workers} workers");
    }
}

#[test]
fn cooperative_grid_beyond_what_the_engine_keeps_resident_is_refused() {
    let m = ptx(GRID_SYNC);
    let mut mem = HostMemory::new();
    let out = mem.alloc(64);
    let c = LaunchConfig { grid: [1 << 15, 1, 1], block: [32, 1, 1], dynamic_shared_bytes: 0, cooperative: true };
    let e = go(&m, "gs", c, &out.to_le_bytes(), &mem, 2).unwrap_err();
    assert_eq!(e, LaunchError::CooperativeTooLarge);
    assert_eq!(e.cuda_error(), 720);
}

#[test]
fn barrier_only_some_threads_reach_is_a_deadlock_error_not_a_hang() {
    let m = ptx(r#"
.visible .entry dl()
{
  .reg .b32 %r1;
  .reg .pred %p1;
  mov.u32 %r1, %tid.x;
  setp.lt.u32 %p1, %r1, 32;
  @%p1 bra OTHER;
  bar.sync 1, 64;
  ret;
OTHER:
  bar.sync 2, 64;
  ret;
}
"#);
    let mem = HostMemory::new();
    let c = LaunchConfig { grid: [1, 1, 1], block: [64, 1, 1], dynamic_shared_bytes: 0, cooperative: false };
    // Warp 0 waits at barrier 2, warp 1 at barrier 1, each for 64 threads: never completes.
    let e = go(&m, "dl", c, &[], &mem, 1).unwrap_err();
    assert!(matches!(e, LaunchError::Deadlock(_)), "{e:?}");
}

#[test]
fn barrier_with_count_releases_when_count_threads_arrive() {
    // Warps 0-1 meet at barrier 1 (64 threads); warp 2 never does.
    let m = ptx(r#"
.visible .entry bc(.param .u64 out)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  .reg .pred %p1;
  mov.u32 %r1, %tid.x;
  setp.ge.u32 %p1, %r1, 64;
  @%p1 bra END;
  bar.sync 1, 64;
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], 7;
END:
  ret;
}
"#);
    let mut mem = HostMemory::new();
    let out = mem.alloc(96 * 4);
    let c = LaunchConfig { grid: [1, 1, 1], block: [96, 1, 1], dynamic_shared_bytes: 0, cooperative: false };
    go(&m, "bc", c, &out.to_le_bytes(), &mem, 1).unwrap();
    let v = to_i32s(&mem.read(out, 96 * 4));
    assert!(v[..64].iter().all(|&x| x == 7) && v[64..].iter().all(|&x| x == 0));
}

#[test]
fn call_passes_params_and_returns_value_through_param_blocks() {
    let m = ptx(r#"
.func (.param .b32 ret) twice_plus(.param .b32 a, .param .b32 b)
{
  .reg .b32 %r<4>;
  .local .align 4 .b8 depot[8];
  ld.param.u32 %r1, [a];
  ld.param.u32 %r2, [b];
  mov.u64 %rd9, depot;
  st.local.u32 [depot+4], %r1;
  ld.local.u32 %r3, [depot+4];
  shl.b32 %r3, %r3, 1;
  add.s32 %r3, %r3, %r2;
  st.param.b32 [ret], %r3;
  ret;
}
.visible .entry caller(.param .u64 out)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  mov.u32 %r1, %tid.x;
  {
  .param .b32 p0;
  st.param.b32 [p0], %r1;
  .param .b32 p1;
  st.param.b32 [p1], 100;
  .param .b32 r0;
  call.uni (r0), twice_plus, (p0, p1);
  ld.param.b32 %r2, [r0];
  }
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r2;
  ret;
}
"#.replace("  mov.u64 %rd9, depot;\n", "").as_str());
    let mut mem = HostMemory::new();
    let out = mem.alloc(32 * 4);
    go(&m, "caller", cfg(1, 32), &out.to_le_bytes(), &mem, 1).unwrap();
    assert_eq!(to_i32s(&mem.read(out, 128)), (0..32).map(|t| 2 * t + 100).collect::<Vec<_>>());
}

#[test]
fn misaligned_global_access_reports_misaligned_address() {
    let m = ptx(r#"
.visible .entry mis(.param .u64 p)
{
  .reg .b64 %rd<3>;
  .reg .b32 %r1;
  ld.param.u64 %rd1, [p];
  ld.global.u32 %r1, [%rd1+2];
  ret;
}
"#);
    let mut mem = HostMemory::new();
    let a = mem.alloc(16);
    let e = go(&m, "mis", cfg(1, 1), &a.to_le_bytes(), &mem, 1).unwrap_err();
    assert_eq!(e.cuda_error(), 716);
}

#[test]
fn unknown_instruction_fails_only_the_kernel_that_runs_it() {
    let m = ptx(r#"
.visible .entry good() { ret; }
.visible .entry bad()
{
  .reg .b32 %r1;
  frobnicate.b32 %r1, %r1;
  ret;
}
"#);
    let mem = HostMemory::new();
    go(&m, "good", cfg(1, 1), &[], &mem, 1).unwrap();
    let e = go(&m, "bad", cfg(1, 1), &[], &mem, 1).unwrap_err();
    assert!(matches!(&e, LaunchError::Unsupported(s) if s.contains("frobnicate")), "{e:?}");
    assert_eq!(e.cuda_error(), 801);
}

#[test]
fn launch_of_missing_kernel_or_bad_shape_is_refused() {
    let m = ptx(".visible .entry k() { ret; }\n");
    let mem = HostMemory::new();
    assert_eq!(go(&m, "nope", cfg(1, 1), &[], &mem, 1).unwrap_err().cuda_error(), 98);
    assert_eq!(go(&m, "k", cfg(1, 2048), &[], &mem, 1).unwrap_err().cuda_error(), 9);
    let huge = LaunchConfig { dynamic_shared_bytes: 1 << 30, ..cfg(1, 1) };
    assert_eq!(go(&m, "k", huge, &[], &mem, 1).unwrap_err().cuda_error(), 701);
}

fn texture_module() -> Module {
    module("texture")
}

#[test]
fn tex1dfetch_reads_linear_memory_through_a_texture_object() {
    let m = texture_module();
    let mut mem = HostMemory::new();
    let data: Vec<f32> = (0..16).map(|i| i as f32 * 1.5).collect();
    let base = mem.alloc_bytes(&f32s(&data));
    let desc = TextureDesc::from_parts(base, 16, 0, 0, 0, [32, 0, 0, 0], 2, [1, 1, 1], 0, 0, false);
    mem.add_texture(0x77, desc);
    let out = mem.alloc(4 * 20);
    run(&m, &mut mem, "tex_fetch_1d", &cfg(1, 20), &Args::new().ptr(0x77).ptr(out).i32(20)).unwrap();
    let got = to_f32s(&mem.read(out, 80));
    for i in 0..20 {
        // Out-of-range fetches read zero.
        assert_eq!(got[i], if i < 16 { data[i] * 2.0 } else { 0.0 });
    }
}

#[test]
fn tex2d_point_and_linear_sampling_follow_cuda() {
    let m = texture_module();
    let (w, h) = (4u32, 3u32);
    let data: Vec<f32> = (0..w * h).map(|i| i as f32).collect();
    for linear in [false, true] {
        let mut mem = HostMemory::new();
        let base = mem.alloc_bytes(&f32s(&data));
        let desc = TextureDesc {
            base,
            width: w as u64,
            height: h as u64,
            depth: 0,
            pitch: 4 * w as u64,
            bits: [32, 0, 0, 0],
            kind: ChannelKind::Float,
            address_mode: [AddressMode::Clamp; 3],
            linear_filter: linear,
            normalized_float: false,
            normalized_coords: false,
            mip: None,
        };
        mem.add_texture(5, desc);
        let out = mem.alloc(4 * (w * h) as u64);
        let c = LaunchConfig { grid: [1, 1, 1], block: [w, h, 1], dynamic_shared_bytes: 0, cooperative: false };
        run(&m, &mut mem, "tex_2d", &c, &Args::new().ptr(5).ptr(out).i32(w as i32).i32(h as i32)).unwrap();
        let got = to_f32s(&mem.read(out, 4 * (w * h) as usize));
        for y in 0..h as usize {
            for x in 0..w as usize {
                let at = |xx: usize| data[y * w as usize + xx.min(w as usize - 1)];
                // Second sample at x+1.0: point → texel x+1 (clamped); linear → halfway.
                let second = if linear { (at(x) + at(x + 1)) / 2.0 } else { at(x + 1) };
                assert_eq!(got[y * w as usize + x], at(x) + second * 1000.0, "x={x} y={y} linear={linear}");
            }
        }
    }
}

#[test]
fn bar_arrive_lets_producers_signal_consumers_without_waiting() {
    // Warp 1 produces into shared memory and arrives at barrier 1; warp 0 waits there
    // (count 64) and then consumes.
    let m = ptx(r#"
.visible .entry pc(.param .u64 out)
{
  .shared .align 4 .b8 buf[128];
  .reg .b32 %r<6>;
  .reg .b64 %rd<4>;
  .reg .pred %p1;
  mov.u32 %r1, %tid.x;
  setp.lt.u32 %p1, %r1, 32;
  @%p1 bra CONSUME;
  sub.u32 %r2, %r1, 32;
  shl.b32 %r3, %r2, 2;
  mov.u32 %r4, buf;
  add.u32 %r4, %r4, %r3;
  mul.lo.u32 %r5, %r2, 10;
  st.shared.u32 [%r4], %r5;
  bar.arrive 1, 64;
  ret;
CONSUME:
  bar.sync 1, 64;
  shl.b32 %r3, %r1, 2;
  mov.u32 %r4, buf;
  add.u32 %r4, %r4, %r3;
  ld.shared.u32 %r5, [%r4];
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r5;
  ret;
}
"#);
    let mut mem = HostMemory::new();
    let out = mem.alloc(32 * 4);
    let c = LaunchConfig { grid: [1, 1, 1], block: [64, 1, 1], dynamic_shared_bytes: 0, cooperative: false };
    go(&m, "pc", c, &out.to_le_bytes(), &mem, 1).unwrap();
    assert_eq!(to_i32s(&mem.read(out, 128)), (0..32).map(|i| i * 10).collect::<Vec<_>>());
}

#[test]
fn same_shuffle_in_both_branches_of_a_divergent_if_completes_together() {
    // Odd lanes shuffle %r2, even lanes %r3, at two different shfl instructions with the
    // full mask: they exchange as one warp operation.
    let m = ptx(r#"
.visible .entry div(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  .reg .pred %p1;
  mov.u32 %r1, %tid.x;
  mul.lo.u32 %r2, %r1, 10;
  mul.lo.u32 %r3, %r1, 100;
  and.b32 %r4, %r1, 1;
  setp.eq.u32 %p1, %r4, 1;
  @%p1 bra ODD;
  shfl.sync.bfly.b32 %r5, %r3, 1, 31, -1;
  bra.uni DONE;
ODD:
  shfl.sync.bfly.b32 %r5, %r2, 1, 31, -1;
DONE:
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r5;
  ret;
}
"#);
    let mut mem = HostMemory::new();
    let out = mem.alloc(32 * 4);
    go(&m, "div", cfg(1, 32), &out.to_le_bytes(), &mem, 1).unwrap();
    // Lane t reads lane t^1's source: even lanes get (t+1)*10, odd lanes (t-1)*100.
    let want: Vec<i32> = (0..32).map(|t| if t % 2 == 0 { (t + 1) * 10 } else { (t - 1) * 100 }).collect();
    assert_eq!(to_i32s(&mem.read(out, 128)), want);
}

#[test]
fn call_sequences_declaring_the_same_param_name_with_different_types_each_use_their_own() {
    // nvcc names every call sequence's arguments `param0`, `param1`...: here a .b64 then a
    // .b32 `param0`, which must not share one frame offset (the .b64 store would be misaligned).
    let m = ptx(r#"
.func (.param .b64 r) twice(.param .b64 x) { .reg .b64 %rd<3>; ld.param.b64 %rd1, [x]; add.s64 %rd2, %rd1, %rd1; st.param.b64 [r], %rd2; ret; }
.func (.param .b32 r) inc(.param .b32 x) { .reg .b32 %r<3>; ld.param.b32 %r1, [x]; add.s32 %r2, %r1, 1; st.param.b32 [r], %r2; ret; }
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [out];
  mov.u64 %rd2, 20;
  { // callseq 0
  .param .b64 param0;
  st.param.b64 [param0+0], %rd2;
  .param .b64 retval0;
  call.uni (retval0), twice, (param0);
  ld.param.b64 %rd3, [retval0+0];
  }
  mov.u32 %r1, 6;
  { // callseq 1
  .param .b32 param0;
  st.param.b32 [param0+0], %r1;
  .param .b32 retval0;
  call.uni (retval0), inc, (param0);
  ld.param.b32 %r2, [retval0+0];
  }
  cvt.u64.u32 %rd4, %r2;
  add.s64 %rd5, %rd3, %rd4;
  st.global.u64 [%rd1], %rd5;
  ret;
}
"#);
    let mut mem = HostMemory::new();
    let out = mem.alloc(8);
    go(&m, "k", cfg(1, 1), &out.to_le_bytes(), &mem, 1).unwrap();
    assert_eq!(u64::from_le_bytes(mem.read(out, 8).try_into().unwrap()), 40 + 7);
}

#[test]
fn call_to_an_external_function_fails_the_launch_cleanly() {
    let m = ptx(r#"
.extern .func (.param .b32 r) elsewhere(.param .b32 a);
.visible .entry k()
{
  .reg .b32 %r1;
  {
  .param .b32 a0;
  st.param.b32 [a0], 1;
  .param .b32 r0;
  call.uni (r0), elsewhere, (a0);
  ld.param.b32 %r1, [r0];
  }
  ret;
}
"#);
    let mem = HostMemory::new();
    let e = go(&m, "k", cfg(1, 1), &[], &mem, 1).unwrap_err();
    assert!(matches!(&e, LaunchError::Unsupported(s) if s.contains("elsewhere")), "{e:?}");
}

#[test]
fn spin_wait_on_a_flag_set_by_a_later_thread_of_the_block_completes() {
    // Thread 0 spins on a shared flag that thread 1 sets; thread 0 runs first.
    let m = ptx(r#"
.visible .entry spin(.param .u64 out)
{
  .shared .align 4 .b32 flag;
  .reg .b32 %r<4>;
  .reg .b64 %rd<2>;
  .reg .pred %p1;
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra SETTER;
WAIT:
  ld.volatile.shared.u32 %r2, [flag];
  setp.eq.u32 %p1, %r2, 0;
  @%p1 bra WAIT;
  ld.param.u64 %rd1, [out];
  st.global.u32 [%rd1], %r2;
  ret;
SETTER:
  st.volatile.shared.u32 [flag], 42;
  ret;
}
"#);
    let mut mem = HostMemory::new();
    let out = mem.alloc(4);
    go(&m, "spin", cfg(1, 2), &out.to_le_bytes(), &mem, 1).unwrap();
    assert_eq!(to_i32s(&mem.read(out, 4)), vec![42]);
}

#[test]
fn cp_async_and_mbarrier_phases_order_shared_memory_traffic() {
    // cp.async copies 4 bytes per thread into shared memory; an mbarrier (expected 64)
    // separates the writes from the reads of a neighbour's slot, twice (two phases).
    let m = ptx(r#"
.visible .entry mb(.param .u64 in, .param .u64 out)
{
  .shared .align 8 .b64 bar;
  .shared .align 4 .b8 buf[256];
  .reg .b32 %r<12>;
  .reg .b64 %rd<8>;
  .reg .pred %p<3>;
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra SYNC;
  mbarrier.init.shared.b64 [bar], 64;
SYNC:
  bar.sync 0;
  ld.param.u64 %rd1, [in];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  shl.b32 %r2, %r1, 2;
  mov.u32 %r3, buf;
  add.u32 %r4, %r3, %r2;
  cp.async.ca.shared.global [%r4], [%rd3], 4;
  cp.async.commit_group;
  cp.async.wait_all;
  mbarrier.arrive.shared.b64 %rd4, [bar];
WAIT1:
  mbarrier.test_wait.shared.b64 %p2, [bar], %rd4;
  @!%p2 bra WAIT1;
  add.u32 %r5, %r1, 1;
  and.b32 %r5, %r5, 63;
  shl.b32 %r6, %r5, 2;
  add.u32 %r7, %r3, %r6;
  ld.shared.u32 %r8, [%r7];
  mbarrier.arrive.shared.b64 %rd5, [bar];
WAIT2:
  mbarrier.try_wait.parity.shared.b64 %p2, [bar], 1;
  @!%p2 bra WAIT2;
  st.shared.u32 [%r4], 7;
  ld.param.u64 %rd6, [out];
  add.s64 %rd7, %rd6, %rd2;
  st.global.u32 [%rd7], %r8;
  ret;
}
"#);
    let mut mem = HostMemory::new();
    let x: Vec<i32> = (0..64).map(|i| i * i).collect();
    let (pi, po) = (mem.alloc_bytes(&i32s(&x)), mem.alloc(256));
    let mut params = pi.to_le_bytes().to_vec();
    params.extend_from_slice(&po.to_le_bytes());
    go(&m, "mb", cfg(1, 64), &params, &mem, 1).unwrap();
    let want: Vec<i32> = (0..64).map(|i| x[(i + 1) % 64]).collect();
    assert_eq!(to_i32s(&mem.read(po, 256)), want);
}

fn float_tex(base: u64, w: u64, h: u64, d: u64) -> TextureDesc {
    TextureDesc {
        base,
        width: w,
        height: h,
        depth: d,
        pitch: 4 * w,
        bits: [32, 0, 0, 0],
        kind: ChannelKind::Float,
        address_mode: [AddressMode::Clamp; 3],
        linear_filter: false,
        normalized_float: false,
        normalized_coords: false,
        mip: None,
    }
}

#[test]
fn layered_and_3d_textures_select_the_right_texels() {
    let m = texture_module();
    // 1D layered: 8 texels x 3 layers (layers stored as rows).
    let data: Vec<f32> = (0..24).map(|i| i as f32 * 0.5).collect();
    let mut mem = HostMemory::new();
    let base = mem.alloc_bytes(&f32s(&data));
    mem.add_texture(9, float_tex(base, 8, 3, 0));
    let out = mem.alloc(4 * 24);
    let c = LaunchConfig { grid: [1, 1, 1], block: [8, 3, 1], dynamic_shared_bytes: 0, cooperative: false };
    run(&m, &mut mem, "tex_layered", &c, &Args::new().ptr(9).ptr(out).i32(8).i32(3)).unwrap();
    assert_eq!(to_f32s(&mem.read(out, 96)), data);
    // 3D: 4x4x4.
    let cube: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let base = mem.alloc_bytes(&f32s(&cube));
    mem.add_texture(10, float_tex(base, 4, 4, 4));
    let out = mem.alloc(4 * 64);
    let c = LaunchConfig { grid: [1, 1, 1], block: [4, 4, 4], dynamic_shared_bytes: 0, cooperative: false };
    run(&m, &mut mem, "tex_3d", &c, &Args::new().ptr(10).ptr(out).i32(4)).unwrap();
    assert_eq!(to_f32s(&mem.read(out, 256)), cube);
}

#[test]
fn surface_reads_and_writes_are_byte_addressed_in_x() {
    let m = texture_module();
    let (w, h) = (5u64, 3u64);
    let data: Vec<f32> = (0..w * h).map(|i| i as f32).collect();
    let mut mem = HostMemory::new();
    let src = mem.alloc_bytes(&f32s(&data));
    let dst = mem.alloc(4 * w * h);
    mem.add_surface(1, float_tex(src, w, h, 0));
    mem.add_surface(2, float_tex(dst, w, h, 0));
    let c = LaunchConfig { grid: [1, 1, 1], block: [w as u32, h as u32, 1], dynamic_shared_bytes: 0, cooperative: false };
    run(&m, &mut mem, "surf_copy_scaled", &c, &Args::new().ptr(1).ptr(2).i32(w as i32).i32(h as i32)).unwrap();
    assert_eq!(to_f32s(&mem.read(dst, 4 * (w * h) as usize)), data.iter().map(|v| v * 3.0).collect::<Vec<_>>());
}

/// Each block writes its index + 1 to `out[block]`.
const MARK: &str = r#"
.visible .entry mark(.param .u64 out)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %ctaid.x;
  add.u32 %r2, %r1, 1;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.u32 [%rd3], %r2;
  ret;
}
"#;

/// Block-boundary preemption (issue 16): a launch stopped before any block runs none and says
/// where it stopped; the rest of the grid, launched from there, completes it exactly.
#[test]
fn a_stopped_launch_runs_no_block_after_the_stop_and_resumes_from_where_it_stopped() {
    use crum_ptx::LaunchCtl;
    use std::sync::atomic::Ordering;
    let ctl = |mode: u8| {
        let c = LaunchCtl::default();
        c.mode.store(mode, Ordering::Relaxed);
        c
    };
    let m = ptx(MARK);
    let mut mem = HostMemory::new();
    let out = mem.alloc(4 * 64);
    let c = LaunchConfig { grid: [64, 1, 1], block: [32, 1, 1], dynamic_shared_bytes: 0, cooperative: false };
    let pool = Pool::new(4);
    let stop = ctl(LaunchCtl::STOP);
    let p = out.to_le_bytes();
    let o = crum_ptx::launch_from(&m, "mark", &c, &p, &|_| None, &mem, &pool, 10, Some(&stop)).unwrap();
    assert_eq!(o.stopped_at, Some(10));
    assert_eq!(to_i32s(&mem.read(out, 4 * 64)), vec![0; 64]);
    // Blocks 0..10 "ran before": run them, then the rest from 10 with no stop.
    let first = LaunchConfig { grid: [10, 1, 1], ..c };
    launch(&m, "mark", &first, &p, &|_| None, &mem, &pool).unwrap();
    let o = crum_ptx::launch_from(&m, "mark", &c, &p, &|_| None, &mem, &pool, 10, None).unwrap();
    assert_eq!(o.stopped_at, None);
    assert_eq!(to_i32s(&mem.read(out, 4 * 64)), (1..=64).collect::<Vec<i32>>());
    // A stop raised while blocks run: every block before `stopped_at` ran, none after.
    let out2 = mem.alloc(4 * 4096);
    let big = LaunchConfig { grid: [4096, 1, 1], ..c };
    let stop = ctl(LaunchCtl::RUN);
    let p2 = out2.to_le_bytes();
    let o = std::thread::scope(|s| {
        s.spawn(|| {
            while mem.read(out2, 4) == [0, 0, 0, 0] {
                std::thread::yield_now();
            }
            stop.mode.store(LaunchCtl::STOP, Ordering::Relaxed);
        });
        crum_ptx::launch_from(&m, "mark", &big, &p2, &|_| None, &mem, &pool, 0, Some(&stop)).unwrap()
    });
    let got = to_i32s(&mem.read(out2, 4 * 4096));
    let at = o.stopped_at.unwrap_or(4096) as usize;
    assert!(got[..at].iter().enumerate().all(|(i, &v)| v == i as i32 + 1), "a block before {at} did not run");
    assert!(got[at..].iter().all(|&v| v == 0), "a block after {at} ran");
    assert_eq!(stop.blocks_done.load(Ordering::Relaxed), at as u64);
    // Grid-sync kernels ignore the stop (their blocks must all be resident).
    let g = ptx(GRID_SYNC);
    let gout = mem.alloc(16);
    let coop = LaunchConfig { grid: [4, 1, 1], block: [64, 1, 1], dynamic_shared_bytes: 0, cooperative: true };
    let stop = ctl(LaunchCtl::STOP);
    let o = crum_ptx::launch_from(&g, "gs", &coop, &gout.to_le_bytes(), &|_| None, &mem, &Pool::new(4), 0, Some(&stop)).unwrap();
    assert_eq!(o.stopped_at, None);
    assert_eq!(to_i32s(&mem.read(gout, 16)), vec![4; 4]);
}

/// Flush (issue 16): a launch told to flush abandons even the blocks it runs (a thread in a
/// long loop is left at its next yield) and fails with `Flushed`.
#[test]
fn a_flushed_launch_abandons_its_running_blocks() {
    use crum_ptx::LaunchCtl;
    use std::sync::atomic::Ordering;
    // One block whose thread loops (about forever) unless told otherwise.
    let m = ptx(r#"
.visible .entry forever(.param .u64 out)
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<2>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, 0;
LOOP:
  add.u32 %r1, %r1, 1;
  setp.lt.u32 %p1, %r1, 2000000000;
  @%p1 bra LOOP;
  st.global.u32 [%rd1], %r1;
  ret;
}
"#);
    let mut mem = HostMemory::new();
    let out = mem.alloc(4);
    let c = LaunchConfig { grid: [1, 1, 1], block: [1, 1, 1], dynamic_shared_bytes: 0, cooperative: false };
    let ctl = LaunchCtl::default();
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            ctl.mode.store(LaunchCtl::FLUSH, Ordering::Relaxed);
        });
        crum_ptx::launch_from(&m, "forever", &c, &out.to_le_bytes(), &|_| None, &mem, &Pool::new(2), 0, Some(&ctl)).unwrap_err()
    });
    assert_eq!(e, LaunchError::Flushed);
    assert_eq!(mem.read(out, 4), [0, 0, 0, 0]);
}

/// Context save (issue 16): a block saved in the middle — each thread deep in a loop that
/// reads and writes global memory and meets a barrier — comes back from its encoded context
/// (as after a restart) and finishes with exactly the result of an uninterrupted run.
#[test]
fn a_block_saved_in_the_middle_resumes_from_its_context_to_the_same_result() {
    use crum_ptx::{BlockContext, LaunchCtl};
    use std::sync::atomic::Ordering;
    // x[tid] = f^N(x[tid]) with a barrier and a shared-memory exchange every iteration.
    let m = ptx(r#"
.visible .entry churn(.param .u64 x, .param .u32 n)
{
  .reg .b32 %r<10>;
  .reg .b64 %rd<6>;
  .reg .pred %p<2>;
  .shared .align 4 .b8 sh[256];
  ld.param.u64 %rd1, [x];
  ld.param.u32 %r9, [n];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  mov.u32 %r2, 0;
  mov.u64 %rd4, sh;
  add.s64 %rd5, %rd4, %rd2;
LOOP:
  ld.global.u32 %r3, [%rd3];
  mad.lo.u32 %r3, %r3, 1664525, 1013904223;
  st.shared.u32 [%rd5], %r3;
  bar.sync 0;
  xor.b32 %r4, %r1, 1;
  mul.wide.u32 %rd2, %r4, 4;
  add.s64 %rd2, %rd4, %rd2;
  ld.shared.u32 %r5, [%rd2];
  bar.sync 0;
  shr.u32 %r5, %r5, 7;
  xor.b32 %r3, %r3, %r5;
  st.global.u32 [%rd3], %r3;
  add.u32 %r2, %r2, 1;
  setp.lt.u32 %p1, %r2, %r9;
  @%p1 bra LOOP;
  ret;
}
"#);
    let n: u32 = 60_000;
    let c = LaunchConfig { grid: [1, 1, 1], block: [64, 1, 1], dynamic_shared_bytes: 0, cooperative: false };
    let pool = Pool::new(2);
    let init: Vec<u8> = (0..64u32).flat_map(|i| i.wrapping_mul(2654435761).to_le_bytes()).collect();
    // Uninterrupted.
    let mut mem = HostMemory::new();
    let want = mem.alloc(256);
    mem.write(want, &init);
    let mut p = want.to_le_bytes().to_vec();
    p.extend(n.to_le_bytes());
    launch(&m, "churn", &c, &p, &|_| None, &mem, &pool).unwrap();
    let want = mem.read(want, 256);
    // Saved in the middle, then resumed from the encoded context.
    let x = mem.alloc(256);
    mem.write(x, &init);
    let mut p = x.to_le_bytes().to_vec();
    p.extend(n.to_le_bytes());
    let ctl = LaunchCtl::default();
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            // Once the loop has run a while (the first element changed).
            while mem.read(x, 4) == init[..4] {
                std::thread::yield_now();
            }
            ctl.mode.store(LaunchCtl::SAVE, Ordering::Relaxed);
        });
        crum_ptx::launch_from(&m, "churn", &c, &p, &|_| None, &mem, &pool, 0, Some(&ctl)).unwrap()
    });
    if out.contexts.is_empty() {
        // The block ended before the save took effect (a very slow helper thread).
        assert_eq!(mem.read(x, 256), want);
        return;
    }
    assert_eq!((out.stopped_at, out.contexts.len()), (Some(1), 1));
    let middle = mem.read(x, 256);
    assert_ne!(middle, want, "saved before its end");
    let bytes = out.contexts[0].encode();
    let ctx = BlockContext::decode(&bytes).unwrap();
    let o = crum_ptx::launch_resume(&m, "churn", &c, &p, &|_| None, &mem, &pool, 1, None, vec![ctx]).unwrap();
    assert_eq!((o.stopped_at, o.contexts.len()), (None, 0));
    assert_eq!(mem.read(x, 256), want);
    // A context that does not fit the launch is refused, not run.
    let mut bad = BlockContext::decode(&bytes).unwrap();
    bad.index = 5;
    assert!(crum_ptx::launch_resume(&m, "churn", &c, &p, &|_| None, &mem, &pool, 1, None, vec![bad]).is_err());
    assert!(BlockContext::decode(&bytes[..bytes.len() / 2]).is_err());
}

/// What nvcc 13 emits for `tex2DLod`, `tex2DGrad` and `tex2D` on one texture object.
const MIP_TEX: &str = r#"
.visible .entry t(.param .u64 tex, .param .u64 out, .param .f32 lod)
{
  .reg .f32 %f<20>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [tex];
  ld.param.u64 %rd2, [out];
  ld.param.f32 %f1, [lod];
  mov.f32 %f2, 0f3E000000;
  tex.level.2d.v4.f32.f32 {%f3, %f4, %f5, %f6}, [%rd1, {%f2, %f2}], %f1;
  st.global.f32 [%rd2], %f3;
  mov.f32 %f11, 0f00000000;
  tex.grad.2d.v4.f32.f32 {%f12, %f13, %f14, %f15}, [%rd1, {%f2, %f2}], {%f1, %f11}, {%f11, %f1};
  st.global.f32 [%rd2+4], %f12;
  tex.2d.v4.f32.f32 {%f7, %f8, %f9, %f10}, [%rd1, {%f2, %f2}];
  st.global.f32 [%rd2+8], %f7;
  ret;
}
"#;

#[test]
fn tex_level_grad_and_plain_fetches_pick_levels_of_a_mipmapped_texture() {
    let m = ptx(MIP_TEX);
    // Four levels, 8x8 down to 1x1; every texel of level l holds 10 (l + 1).
    for (linear, lod, want) in [
        // Linear between levels: 1.5 → halfway between 20 and 30; the gradient of 1.5
        // normalized = 12 texels → lod 3.58, clamped to the last level; plain → level 0.
        (true, 1.5f32, [25.0f32, 40.0, 10.0]),
        // 0.25 → a quarter of the way to level 1; gradient 2 texels → level 1.
        (true, 0.25, [12.5, 20.0, 10.0]),
        // Point between levels: the nearest (1.5 → 1, as ceil(lod + 1/2) - 1).
        (false, 1.5, [20.0, 40.0, 10.0]),
    ] {
        let mut mem = HostMemory::new();
        let mut levels = Vec::new();
        for l in 0..4u64 {
            let w = 8 >> l;
            let base = mem.alloc_bytes(&f32s(&vec![10.0 * (l + 1) as f32; (w * w) as usize]));
            levels.push(crum_ptx::MipLevel { base, width: w, height: w, depth: 1, pitch: 4 * w });
        }
        let mut desc = TextureDesc::from_parts(levels[0].base, 8, 8, 1, 32, [32, 0, 0, 0], 2, [1, 1, 1], 0, 0, true);
        desc.mip = Some(crum_ptx::Mipmap { levels, linear, bias: 0.0, min_clamp: 0.0, max_clamp: 3.0 });
        mem.add_texture(0x91, desc);
        let out = mem.alloc(12);
        let mut params = 0x91u64.to_le_bytes().to_vec();
        params.extend_from_slice(&out.to_le_bytes());
        params.extend_from_slice(&lod.to_le_bytes());
        go(&m, "t", cfg(1, 1), &params, &mem, 1).unwrap();
        assert_eq!(to_f32s(&mem.read(out, 12)), want, "linear {linear} lod {lod}");
    }
}

#[test]
fn a_zero_max_level_clamp_and_a_bias_move_the_level_as_on_a_gpu() {
    let m = ptx(MIP_TEX);
    let mut mem = HostMemory::new();
    let mut levels = Vec::new();
    for l in 0..4u64 {
        let w = 8 >> l;
        let base = mem.alloc_bytes(&f32s(&vec![10.0 * (l + 1) as f32; (w * w) as usize]));
        levels.push(crum_ptx::MipLevel { base, width: w, height: w, depth: 1, pitch: 4 * w });
    }
    for (bias, max_clamp, want) in [(0.0f32, 0.0f32, [10.0f32, 10.0, 10.0]), (1.0, 2.0, [30.0, 30.0, 20.0])] {
        let mut desc = TextureDesc::from_parts(levels[0].base, 8, 8, 1, 32, [32, 0, 0, 0], 2, [1, 1, 1], 0, 0, true);
        desc.mip = Some(crum_ptx::Mipmap { levels: levels.clone(), linear: true, bias, min_clamp: 0.0, max_clamp });
        mem.add_texture(0x92, desc);
        let out = mem.alloc(12);
        let mut params = 0x92u64.to_le_bytes().to_vec();
        params.extend_from_slice(&out.to_le_bytes());
        params.extend_from_slice(&1.5f32.to_le_bytes());
        go(&m, "t", cfg(1, 1), &params, &mem, 1).unwrap();
        assert_eq!(to_f32s(&mem.read(out, 12)), want, "bias {bias} max clamp {max_clamp}");
    }
}

/// What nvcc 13 emits for `cudaGraphSetConditional(h, --*c > 0)` in thread 0.
const SET_CONDITIONAL: &str = r#"
.extern .func cudaGraphSetConditional
(
	.param .b64 cudaGraphSetConditional_param_0,
	.param .b32 cudaGraphSetConditional_param_1
)
;
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)
{
  .reg .pred %p<3>;
  .reg .b32 %r<5>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd2, [k_param_1];
  mov.u32 %r1, %tid.x;
  setp.ne.s32 %p1, %r1, 0;
  @%p1 bra $L__BB0_2;
  cvta.to.global.u64 %rd3, %rd2;
  ld.global.u32 %r2, [%rd3];
  add.s32 %r3, %r2, -1;
  st.global.u32 [%rd3], %r3;
  setp.gt.s32 %p2, %r2, 1;
  selp.u32 %r4, 1, 0, %p2;
  {
  .reg .b32 temp_param_reg;
  .param .b64 param0;
  st.param.b64 [param0+0], %rd1;
  .param .b32 param1;
  st.param.b32 [param1+0], %r4;
  call.uni
  cudaGraphSetConditional,
  (
  param0,
  param1
  );
  }
$L__BB0_2:
  ret;
}
"#;

#[test]
fn graph_set_conditional_stores_the_value_at_the_handle() {
    let m = ptx(SET_CONDITIONAL);
    let mut mem = HostMemory::new();
    // The handle is the address of the condition; the high bytes around it stay untouched.
    let cond = mem.alloc_bytes(&[0xee; 12]);
    let counter = mem.alloc_bytes(&2i32.to_le_bytes());
    let handle = cond + 4;
    let mut params = handle.to_le_bytes().to_vec();
    params.extend_from_slice(&counter.to_le_bytes());
    go(&m, "k", cfg(1, 32), &params, &mem, 1).unwrap();
    assert_eq!(mem.read(cond, 12), [0xee, 0xee, 0xee, 0xee, 1, 0, 0, 0, 0xee, 0xee, 0xee, 0xee]);
    go(&m, "k", cfg(1, 32), &params, &mem, 1).unwrap();
    assert_eq!(mem.read(cond + 4, 4), [0, 0, 0, 0], "the counter reached 0");
    // A handle that names no memory faults like a bad store.
    let mut bad = 0x10u64.to_le_bytes().to_vec();
    bad.extend_from_slice(&counter.to_le_bytes());
    assert!(matches!(go(&m, "k", cfg(1, 32), &bad, &mem, 1), Err(LaunchError::IllegalAddress { .. })));
}
