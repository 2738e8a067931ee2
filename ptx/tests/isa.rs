//! Instruction families against plain Rust references: each case is a one-instruction
//! kernel run by 32 threads on random operands (proptest), compared bit for bit.

use crum_ptx::{launch, HostMemory, LaunchConfig, Module, Pool};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const LANES: usize = 32;

/// A kernel that loads (a, b, c) per thread as raw 64-bit words, converts them to the
/// 32-bit registers %ra.. as well, runs `body` and stores %d.
fn kernel(body: &str) -> Module {
    let src = format!(
        r#"
.version 8.0
.target sm_80
.address_size 64
.visible .entry t(.param .u64 pin, .param .u64 pout)
{{
  .reg .b64 %a, %b, %c, %d, %addr, %o, %off;
  .reg .b32 %ra, %rb, %rc, %rd, %tid;
  .reg .b16 %ha, %hb, %hd;
  .reg .f32 %fa, %fb, %fc, %fd;
  .reg .f64 %da, %db, %dc, %dd;
  .reg .pred %p, %q, %pc;
  ld.param.u64 %addr, [pin];
  ld.param.u64 %o, [pout];
  mov.u32 %tid, %tid.x;
  mul.wide.u32 %off, %tid, 24;
  add.s64 %addr, %addr, %off;
  ld.global.u64 %a, [%addr];
  ld.global.u64 %b, [%addr+8];
  ld.global.u64 %c, [%addr+16];
  cvt.u32.u64 %ra, %a;
  cvt.u32.u64 %rb, %b;
  cvt.u32.u64 %rc, %c;
  cvt.u16.u64 %ha, %a;
  cvt.u16.u64 %hb, %b;
  mov.b32 %fa, %ra;
  mov.b32 %fb, %rb;
  mov.b32 %fc, %rc;
  mov.b64 %da, %a;
  mov.b64 %db, %b;
  mov.b64 %dc, %c;
  setp.ne.s32 %pc, %rc, 0;
  mov.u64 %d, 0;
  {body}
  mul.wide.u32 %off, %tid, 8;
  add.s64 %o, %o, %off;
  st.global.u64 [%o], %d;
  ret;
}}
"#
    );
    Module::parse(&src).unwrap_or_else(|e| panic!("{e} in {body}"))
}

fn run(m: &Module, inputs: &[[u64; 3]]) -> Vec<u64> {
    let mut mem = HostMemory::new();
    let bytes: Vec<u8> = inputs.iter().flat_map(|t| t.iter().flat_map(|w| w.to_le_bytes())).collect();
    let pin = mem.alloc_bytes(&bytes);
    let pout = mem.alloc(8 * inputs.len() as u64);
    let mut params = pin.to_le_bytes().to_vec();
    params.extend_from_slice(&pout.to_le_bytes());
    let cfg = LaunchConfig { grid: [1, 1, 1], block: [inputs.len() as u32, 1, 1], dynamic_shared_bytes: 0, cooperative: false };
    launch(m, "t", &cfg, &params, &|_| None, &mem, &Pool::new(1)).unwrap();
    mem.read(pout, 8 * inputs.len()).chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect()
}

type Ref = Box<dyn Fn(u64, u64, u64) -> u64>;
/// Rounding-mode name and its reference rounding function.
type Mode = (&'static str, fn(f64) -> f64);
/// Comparison name and its predicate on an ordering.
type CmpRef = (&'static str, fn(std::cmp::Ordering) -> bool);

/// Run every (body, reference) pair on the same random inputs.
fn family(cases: Vec<(String, Ref)>, strat: impl Strategy<Value = [u64; 3]> + Clone) {
    let mods: Vec<(String, Module, Ref)> = cases.into_iter().map(|(b, r)| { let m = kernel(&b); (b, m, r) }).collect();
    let mut runner = TestRunner::new(Config { cases: 24, failure_persistence: None, ..Config::default() });
    runner
        .run(&proptest::collection::vec(strat, LANES), |inputs| {
            for (body, m, r) in &mods {
                let got = run(m, &inputs);
                for (k, t) in inputs.iter().enumerate() {
                    let want = r(t[0], t[1], t[2]);
                    prop_assert_eq!(got[k], want, "{} with a={:#x} b={:#x} c={:#x}", body, t[0], t[1], t[2]);
                }
            }
            Ok(())
        })
        .unwrap();
}

fn u32s() -> impl Strategy<Value = [u64; 3]> + Clone {
    let edge = prop_oneof![any::<u32>(), Just(0u32), Just(1), Just(u32::MAX), Just(0x8000_0000), 0u32..40];
    [edge.clone(), edge.clone(), edge].prop_map(|v| v.map(|x| x as u64))
}

fn r32(f: impl Fn(u32, u32, u32) -> u32 + 'static) -> Ref {
    Box::new(move |a, b, c| f(a as u32, b as u32, c as u32) as u64)
}

const ST32: &str = "cvt.u64.u32 %d, %rd;";

#[test]
fn integer_32bit_arithmetic_matches_rust() {
    let b = |op: &str| format!("{op}\n  {ST32}");
    let ops: Vec<(String, Ref)> = vec![
        (b("add.s32 %rd, %ra, %rb;"), r32(|a, b, _| a.wrapping_add(b))),
        (b("sub.s32 %rd, %ra, %rb;"), r32(|a, b, _| a.wrapping_sub(b))),
        (b("mul.lo.s32 %rd, %ra, %rb;"), r32(|a, b, _| a.wrapping_mul(b))),
        (b("mul.hi.s32 %rd, %ra, %rb;"), r32(|a, b, _| ((a as i32 as i64 * b as i32 as i64) >> 32) as u32)),
        (b("mul.hi.u32 %rd, %ra, %rb;"), r32(|a, b, _| ((a as u64 * b as u64) >> 32) as u32)),
        (b("mad.lo.s32 %rd, %ra, %rb, %rc;"), r32(|a, b, c| a.wrapping_mul(b).wrapping_add(c))),
        (b("min.s32 %rd, %ra, %rb;"), r32(|a, b, _| (a as i32).min(b as i32) as u32)),
        (b("max.u32 %rd, %ra, %rb;"), r32(|a, b, _| a.max(b))),
        (b("shl.b32 %rd, %ra, %rb;"), r32(|a, b, _| if b >= 32 { 0 } else { a << b })),
        (b("shr.s32 %rd, %ra, %rb;"), r32(|a, b, _| ((a as i32) >> b.min(31)) as u32)),
        (b("shr.u32 %rd, %ra, %rb;"), r32(|a, b, _| if b >= 32 { 0 } else { a >> b })),
        (b("and.b32 %rd, %ra, %rb;"), r32(|a, b, _| a & b)),
        (b("or.b32 %rd, %ra, %rb;"), r32(|a, b, _| a | b)),
        (b("xor.b32 %rd, %ra, %rb;"), r32(|a, b, _| a ^ b)),
        (b("not.b32 %rd, %ra;"), r32(|a, _, _| !a)),
        (b("neg.s32 %rd, %ra;"), r32(|a, _, _| (a as i32).wrapping_neg() as u32)),
        (b("abs.s32 %rd, %ra;"), r32(|a, _, _| (a as i32).wrapping_abs() as u32)),
        (b("clz.b32 %rd, %ra;"), r32(|a, _, _| a.leading_zeros())),
        (b("popc.b32 %rd, %ra;"), r32(|a, _, _| a.count_ones())),
        (b("brev.b32 %rd, %ra;"), r32(|a, _, _| a.reverse_bits())),
        (b("prmt.b32 %rd, %ra, %rb, %rc;"), r32(|a, b, c| {
            let bytes = ((b as u64) << 32 | a as u64).to_le_bytes();
            (0..4).fold(0u32, |r, k| {
                let sel = (c >> (4 * k)) & 15;
                let mut v = bytes[(sel & 7) as usize];
                if sel & 8 != 0 {
                    v = if v & 0x80 != 0 { 0xff } else { 0 };
                }
                r | (v as u32) << (8 * k)
            })
        })),
        (b("bfe.u32 %rd, %ra, %rb, %rc;"), r32(|a, b, c| {
            let (pos, len) = (b & 0xff, c & 0xff);
            let mut r = 0u32;
            for i in 0..len.min(32) {
                let bit = if pos + i < 32 { (a >> (pos + i)) & 1 } else { 0 };
                r |= bit << i;
            }
            r
        })),
        (b("bfe.s32 %rd, %ra, %rb, %rc;"), r32(|a, b, c| {
            let (pos, len) = (b & 0xff, c & 0xff);
            let sbit = if len == 0 { 0 } else if pos + len - 1 < 32 { (a >> (pos + len - 1)) & 1 } else { a >> 31 };
            let mut r = 0u32;
            for i in 0..32 {
                let bit = if i < len { if pos + i < 32 { (a >> (pos + i)) & 1 } else { a >> 31 } } else { sbit };
                r |= bit << i;
            }
            r
        })),
        (b("bfi.b32 %rd, %ra, %rb, %rc, 8;"), r32(|a, b, c| {
            let pos = c & 0xff;
            let mut r = b;
            for i in 0..8 {
                if pos + i < 32 {
                    r = (r & !(1 << (pos + i))) | (((a >> i) & 1) << (pos + i));
                }
            }
            r
        })),
    ];
    family(ops, u32s());
}

#[test]
fn integer_division_by_nonzero_matches_rust() {
    let nz = prop_oneof![any::<u32>(), 1u32..10, Just(u32::MAX)];
    let strat = [any::<u32>().boxed(), nz.clone().boxed(), nz.boxed()].prop_map(|v| v.map(|x| x as u64));
    let b = |op: &str| format!("{op}\n  {ST32}");
    family(
        vec![
            (b("div.s32 %rd, %ra, %rb;"), r32(|a, b, _| (a as i32).wrapping_div(b as i32) as u32)),
            (b("rem.s32 %rd, %ra, %rb;"), r32(|a, b, _| (a as i32).wrapping_rem(b as i32) as u32)),
            (b("div.u32 %rd, %ra, %rb;"), r32(|a, b, _| a / b)),
            (b("rem.u32 %rd, %ra, %rb;"), r32(|a, b, _| a % b)),
            ("div.s64 %d, %a, %b;".into(), Box::new(|a, b, _| if b == 0 { u64::MAX } else { (a as i64).wrapping_div(b as i64) as u64 })),
            ("rem.u64 %d, %a, %b;".into(), Box::new(|a, b, _| if b == 0 { a } else { a % b })),
        ],
        strat,
    );
}

#[test]
fn integer_64bit_and_wide_arithmetic_matches_rust() {
    let strat = [any::<u64>(), any::<u64>(), any::<u64>()];
    family(
        vec![
            ("add.s64 %d, %a, %b;".into(), Box::new(|a: u64, b: u64, _| a.wrapping_add(b)) as Ref),
            ("mul.lo.s64 %d, %a, %b;".into(), Box::new(|a: u64, b: u64, _| a.wrapping_mul(b))),
            ("mul.hi.u64 %d, %a, %b;".into(), Box::new(|a: u64, b: u64, _| ((a as u128 * b as u128) >> 64) as u64)),
            ("mul.hi.s64 %d, %a, %b;".into(), Box::new(|a: u64, b: u64, _| ((a as i64 as i128 * b as i64 as i128) >> 64) as u64)),
            ("mul.wide.s32 %d, %ra, %rb;".into(), Box::new(|a: u64, b: u64, _| (a as u32 as i32 as i64 * b as u32 as i32 as i64) as u64)),
            ("mul.wide.u32 %d, %ra, %rb;".into(), Box::new(|a: u64, b: u64, _| (a as u32 as u64) * (b as u32 as u64))),
            ("mad.wide.s32 %d, %ra, %rb, %c;".into(), Box::new(|a: u64, b: u64, c| ((a as u32 as i32 as i64 * b as u32 as i32 as i64) as u64).wrapping_add(c))),
            ("shr.s64 %d, %a, %rb;".into(), Box::new(|a: u64, b: u64, _| ((a as i64) >> (b as u32).min(63)) as u64)),
            ("min.u64 %d, %a, %b;".into(), Box::new(|a: u64, b: u64, _| a.min(b))),
            ("max.s64 %d, %a, %b;".into(), Box::new(|a: u64, b: u64, _| (a as i64).max(b as i64) as u64)),
            ("clz.b64 %rd, %a;\n  cvt.u64.u32 %d, %rd;".into(), Box::new(|a: u64, _, _| a.leading_zeros() as u64)),
            ("popc.b64 %rd, %a;\n  cvt.u64.u32 %d, %rd;".into(), Box::new(|a: u64, _, _| a.count_ones() as u64)),
            // 64-bit add through the carry chain, as nvcc emits for 128-bit arithmetic.
            (
                "add.cc.u32 %rd, %ra, %rb;\n  addc.u32 %rc, 0, 0;\n  cvt.u64.u32 %d, %rc;".into(),
                Box::new(|a: u64, b: u64, _| (a as u32 as u64 + b as u32 as u64) >> 32),
            ),
            (
                "sub.cc.u32 %rd, %ra, %rb;\n  subc.u32 %rc, 5, 0;\n  cvt.u64.u32 %d, %rc;".into(),
                Box::new(|a: u64, b: u64, _| if (a as u32) < (b as u32) { 4 } else { 5 }),
            ),
        ],
        strat,
    );
}

/// Exact result → f32 under a rounding mode (reference: compare the f64 candidates).
fn round_f32(exact: f64, mode: &str) -> f32 {
    let r = exact as f32;
    let d = r as f64;
    match mode {
        "rz" if d.abs() > exact.abs() => if r > 0.0 { r.next_down() } else { r.next_up() },
        "rm" if d > exact => r.next_down(),
        "rp" if d < exact => r.next_up(),
        _ => r,
    }
}

/// Finite-range floats and specials whose f64 sums and products are exact.
fn f32_exact() -> impl Strategy<Value = [u64; 3]> + Clone {
    let f = prop_oneof![-1e6f32..1e6f32, -1.0f32..1.0, Just(0.0f32), Just(-0.0f32), Just(f32::NAN), Just(f32::INFINITY)];
    [f.clone(), f.clone(), f].prop_map(|v| v.map(|x| x.to_bits() as u64))
}

fn f32_bits() -> impl Strategy<Value = [u64; 3]> + Clone {
    let f = prop_oneof![
        -1e6f32..1e6f32,
        -1.0f32..1.0,
        Just(0.0f32),
        Just(-0.0f32),
        Just(f32::NAN),
        Just(f32::INFINITY),
        Just(1e-40f32)
    ];
    [f.clone(), f.clone(), f].prop_map(|v| v.map(|x| x.to_bits() as u64))
}

fn rf(f: impl Fn(f32, f32, f32) -> f32 + 'static) -> Ref {
    Box::new(move |a, b, c| {
        let r = f(f32::from_bits(a as u32), f32::from_bits(b as u32), f32::from_bits(c as u32));
        // Canonical NaN, as the emulated device produces (bit patterns of NaN differ).
        if r.is_nan() {
            0x7fff_ffff
        } else {
            r.to_bits() as u64
        }
    })
}

const STF: &str = "mov.b32 %rd, %fd;\n  setp.nan.f32 %p, %fd, %fd;\n  selp.b32 %rd, 0x7fffffff, %rd, %p;\n  cvt.u64.u32 %d, %rd;";

#[test]
fn float_32bit_arithmetic_with_rounding_modes_matches_exact_reference() {
    let b = |op: &str| format!("{op}\n  {STF}");
    let mut ops: Vec<(String, Ref)> = Vec::new();
    for m in ["rn", "rz", "rm", "rp"] {
        let mm = m.to_string();
        // |a|,|b| < 2^20 (or special): the f64 sum and product are exact.
        ops.push((b(&format!("add.{m}.f32 %fd, %fa, %fb;")), rf(move |a, b, _| if a.is_finite() && b.is_finite() { round_f32(a as f64 + b as f64, &mm) } else { a + b })));
        let mm = m.to_string();
        ops.push((b(&format!("mul.{m}.f32 %fd, %fa, %fb;")), rf(move |a, b, _| if a.is_finite() && b.is_finite() { round_f32(a as f64 * b as f64, &mm) } else { a * b })));
        let mm = m.to_string();
        ops.push((b(&format!("sub.{m}.f32 %fd, %fa, %fb;")), rf(move |a, b, _| if a.is_finite() && b.is_finite() { round_f32(a as f64 - b as f64, &mm) } else { a - b })));
    }
    family(std::mem::take(&mut ops), f32_exact());
    ops.push((b("fma.rn.f32 %fd, %fa, %fb, %fc;"), rf(|a, b, c| a.mul_add(b, c))));
    ops.push((b("div.rn.f32 %fd, %fa, %fb;"), rf(|a, b, _| a / b)));
    ops.push((b("sqrt.rn.f32 %fd, %fa;"), rf(|a, _, _| a.sqrt())));
    ops.push((b("rcp.rn.f32 %fd, %fa;"), rf(|a, _, _| 1.0 / a)));
    ops.push((b("min.f32 %fd, %fa, %fb;"), rf(|a, b, _| a.min(b))));
    ops.push((b("max.f32 %fd, %fa, %fb;"), rf(|a, b, _| a.max(b))));
    ops.push((b("abs.f32 %fd, %fa;"), rf(|a, _, _| a.abs())));
    ops.push((b("neg.f32 %fd, %fa;"), rf(|a, _, _| -a)));
    ops.push((b("copysign.f32 %fd, %fa, %fb;"), rf(|a, b, _| b.copysign(a))));
    let ftz = |x: f32| if x.is_subnormal() { 0.0f32.copysign(x) } else { x };
    ops.push((b("add.ftz.f32 %fd, %fa, %fb;"), rf(move |a, b, _| ftz(ftz(a) + ftz(b)))));
    ops.push((b("mul.rn.sat.f32 %fd, %fa, %fb;"), rf(|a, b, _| { let r = a * b; if r.is_nan() { 0.0 } else { r.clamp(0.0, 1.0) } })));
    ops.push((b("selp.f32 %fd, %fa, %fb, %pc;"), Box::new(|a, b, c| if c as u32 != 0 { rf(|a, _, _| a)(a, b, c) } else { rf(|_, b, _| b)(a, b, c) })));
    family(ops, f32_bits());
}

#[test]
fn float_64bit_arithmetic_matches_rust() {
    let f = prop_oneof![-1e12f64..1e12, Just(0.0f64), Just(f64::NAN), Just(f64::NEG_INFINITY), -1.0f64..1.0];
    let strat = [f.clone(), f.clone(), f].prop_map(|v| v.map(|x| x.to_bits()));
    let canon = |r: f64| if r.is_nan() { 0x7ff8_0000_0000_0000 } else { r.to_bits() };
    let st = "setp.nan.f64 %p, %dd, %dd;\n  mov.b64 %d, %dd;\n  selp.b64 %d, 0x7ff8000000000000, %d, %p;";
    let b = |op: &str| format!("{op}\n  {st}");
    let rd = move |f: fn(f64, f64, f64) -> f64| -> Ref { Box::new(move |a, b, c| canon(f(f64::from_bits(a), f64::from_bits(b), f64::from_bits(c)))) };
    family(
        vec![
            (b("add.rn.f64 %dd, %da, %db;"), rd(|a, b, _| a + b)),
            (b("sub.f64 %dd, %da, %db;"), rd(|a, b, _| a - b)),
            (b("mul.rn.f64 %dd, %da, %db;"), rd(|a, b, _| a * b)),
            (b("fma.rn.f64 %dd, %da, %db, %dc;"), rd(|a, b, c| a.mul_add(b, c))),
            (b("div.rn.f64 %dd, %da, %db;"), rd(|a, b, _| a / b)),
            (b("sqrt.rn.f64 %dd, %da;"), rd(|a, _, _| a.sqrt())),
            (b("rcp.rn.f64 %dd, %da;"), rd(|a, _, _| 1.0 / a)),
            (b("abs.f64 %dd, %da;"), rd(|a, _, _| a.abs())),
            (b("neg.f64 %dd, %da;"), rd(|a, _, _| -a)),
            (b("min.f64 %dd, %da, %db;"), rd(|a, b, _| a.min(b))),
            (b("cvt.rzi.f64.f64 %dd, %da;"), rd(|a, _, _| a.trunc())),
            (b("cvt.rpi.f64.f64 %dd, %da;"), rd(|a, _, _| a.ceil())),
        ],
        strat,
    );
}

#[test]
fn compares_follow_ordered_and_unordered_semantics() {
    let mut ops: Vec<(String, Ref)> = Vec::new();
    let cmps: [CmpRef; 6] = [
        ("eq", |o| o.is_eq()),
        ("ne", |o| o.is_ne()),
        ("lt", |o| o.is_lt()),
        ("le", |o| o.is_le()),
        ("gt", |o| o.is_gt()),
        ("ge", |o| o.is_ge()),
    ];
    for (name, f) in cmps {
        ops.push((format!("setp.{name}.s32 %p, %ra, %rb;\n  selp.u64 %d, 1, 0, %p;"), Box::new(move |a, b, _| f((a as u32 as i32).cmp(&(b as u32 as i32))) as u64)));
        ops.push((format!("setp.{name}.u32 %p, %ra, %rb;\n  selp.u64 %d, 1, 0, %p;"), Box::new(move |a, b, _| f((a as u32).cmp(&(b as u32))) as u64)));
        ops.push((format!("setp.{name}.f32 %p, %fa, %fb;\n  selp.u64 %d, 1, 0, %p;"), Box::new(move |a, b, _| {
            f32::from_bits(a as u32).partial_cmp(&f32::from_bits(b as u32)).is_some_and(f) as u64
        })));
        ops.push((format!("setp.{name}u.f32 %p, %fa, %fb;\n  selp.u64 %d, 1, 0, %p;"), Box::new(move |a, b, _| {
            f32::from_bits(a as u32).partial_cmp(&f32::from_bits(b as u32)).is_none_or(f) as u64
        })));
    }
    ops.push(("setp.lt.and.s32 %p|%q, %ra, %rb, %pc;\n  selp.u64 %d, 1, 0, %q;".into(), Box::new(|a, b, c| (((a as u32 as i32) >= (b as u32 as i32)) && c as u32 != 0) as u64)));
    ops.push(("setp.num.f32 %p, %fa, %fb;\n  selp.u64 %d, 1, 0, %p;".into(), Box::new(|a, b, _| (!f32::from_bits(a as u32).is_nan() && !f32::from_bits(b as u32).is_nan()) as u64)));
    ops.push(("setp.gt.u64 %p, %a, %b;\n  selp.u64 %d, 1, 0, %p;".into(), Box::new(|a, b, _| (a > b) as u64)));
    let strat = prop_oneof![f32_bits(), u32s()];
    family(ops, strat);
}

#[test]
fn conversions_round_and_saturate_like_ptx() {
    let mut ops: Vec<(String, Ref)> = Vec::new();
    let sat_i32 = |x: f64| if x.is_nan() { 0 } else { x.clamp(i32::MIN as f64, i32::MAX as f64) as i32 };
    let modes: [Mode; 4] = [("rni", f64::round_ties_even), ("rzi", f64::trunc), ("rmi", f64::floor), ("rpi", f64::ceil)];
    for (m, f) in modes {
        ops.push((format!("cvt.{m}.s32.f32 %rd, %fa;\n  {ST32}"), Box::new(move |a, _, _| sat_i32(f(f32::from_bits(a as u32) as f64)) as u32 as u64)));
        ops.push((format!("cvt.{m}.u32.f32 %rd, %fa;\n  {ST32}"), Box::new(move |a, _, _| {
            let x = f(f32::from_bits(a as u32) as f64);
            if x.is_nan() { 0 } else { x.clamp(0.0, u32::MAX as f64) as u32 as u64 }
        })));
        ops.push((format!("cvt.{m}.f32.f32 %fd, %fa;\n  {STF}"), rf(move |a, _, _| f(a as f64) as f32)));
    }
    for m in ["rn", "rz", "rm", "rp"] {
        let mm = m.to_string();
        ops.push((format!("cvt.{m}.f32.f64 %fd, %da;\n  {STF}"), rf(move |_, _, _| 0.0)));
        let _ = mm;
    }
    // The f64 → f32 cases above read %da = a's 64 bits; replace their references.
    let n = ops.len();
    for (k, m) in ["rn", "rz", "rm", "rp"].iter().enumerate() {
        let mm = m.to_string();
        ops[n - 4 + k].1 = Box::new(move |a, _, _| {
            let x = f64::from_bits(a);
            let r = if x.is_finite() && (x as f32).is_finite() {
                round_f32(x, &mm)
            } else if x.is_finite() {
                // Overflow: directed modes toward zero stop at the largest finite value.
                let toward_zero = mm == "rz" || (mm == "rm" && x > 0.0) || (mm == "rp" && x < 0.0);
                if toward_zero { f32::MAX.copysign(x as f32) } else { x as f32 }
            } else {
                x as f32
            };
            if r.is_nan() { 0x7fff_ffff } else { r.to_bits() as u64 }
        });
    }
    ops.push((format!("cvt.rn.f32.s32 %fd, %ra;\n  {STF}"), Box::new(|a, _, _| (a as u32 as i32 as f32).to_bits() as u64)));
    ops.push((format!("cvt.rn.f32.u32 %fd, %ra;\n  {STF}"), Box::new(|a, _, _| (a as u32 as f32).to_bits() as u64)));
    ops.push(("cvt.rn.f64.s64 %dd, %a;\n  mov.b64 %d, %dd;".into(), Box::new(|a, _, _| (a as i64 as f64).to_bits())));
    ops.push(("cvt.s64.s32 %d, %ra;".into(), Box::new(|a, _, _| a as u32 as i32 as i64 as u64)));
    ops.push(("cvt.u64.u32 %d, %ra;".into(), Box::new(|a, _, _| a as u32 as u64)));
    ops.push((format!("cvt.s32.s8 %rd, %ra;\n  {ST32}"), Box::new(|a, _, _| a as u8 as i8 as i32 as u32 as u64)));
    ops.push((format!("cvt.sat.u8.s32 %rd, %ra;\n  {ST32}"), Box::new(|a, _, _| (a as u32 as i32).clamp(0, 255) as u64)));
    ops.push((format!("cvt.u32.u16 %rd, %ha;\n  {ST32}"), Box::new(|a, _, _| a & 0xffff)));
    // f16x2: pack two conversions, take the max lane-wise, unpack the high half.
    ops.push((
        format!("cvt.rn.f16x2.f32 %rd, %fa, %fb;\n  max.f16x2 %rd, %rd, %rd;\n  mov.b32 {{%ha, %hb}}, %rd;\n  cvt.f32.f16 %fd, %hb;\n  {STF}"),
        rf(|a, _, _| if a.is_nan() { f32::NAN } else { half_of(a) }),
    ));
    ops.push((format!("cvt.sat.f32.f32 %fd, %fa;\n  {STF}"), rf(|a, _, _| if a.is_nan() { 0.0 } else { a.clamp(0.0, 1.0) })));
    ops.push(("cvt.f64.f32 %dd, %fa;\n  mov.b64 %d, %dd;\n  setp.nan.f64 %p, %dd, %dd;\n  selp.b64 %d, 0, %d, %p;".into(), Box::new(|a, _, _| {
        let x = f32::from_bits(a as u32) as f64;
        if x.is_nan() { 0 } else { x.to_bits() }
    })));
    // f32 → f16 → f32 round trip through the half conversion.
    ops.push((format!("cvt.rn.f16.f32 %hd, %fa;\n  cvt.f32.f16 %fd, %hd;\n  {STF}"), rf(|a, _, _| {
        // Reference: round to 11 significant bits, ties to even, within the normal range.
        if !a.is_finite() || a.abs() >= 65520.0 || a.abs() < 6.1035156e-5 { return half_ref(a); }
        let e = a.abs().log2().floor();
        let q = 2f64.powf(e as f64 - 10.0);
        ((a as f64 / q).round_ties_even() * q) as f32
    })));
    let strat = prop_oneof![f32_bits(), u32s(), [any::<u64>(), any::<u64>(), any::<u64>()]];
    family(ops, strat);
}

fn half_ref(a: f32) -> f32 {
    if a.is_nan() {
        f32::NAN
    } else if a.abs() >= 65520.0 {
        f32::INFINITY.copysign(a)
    } else {
        // Subnormal halves: multiples of 2^-24.
        let q = 2f64.powi(-24);
        ((a as f64 / q).round_ties_even() * q) as f32
    }
}

/// f32 → f16 → f32 for the f16x2 case (reference rounding, normal range or special).
fn half_of(a: f32) -> f32 {
    if !a.is_finite() || a.abs() >= 65520.0 || a.abs() < 6.1035156e-5 {
        return half_ref(a);
    }
    let e = a.abs().log2().floor();
    let q = 2f64.powf(e as f64 - 10.0);
    ((a as f64 / q).round_ties_even() * q) as f32
}

#[test]
fn bit_and_media_instructions_match_rust() {
    let b = |op: &str| format!("{op}\n  {ST32}");
    let ops: Vec<(String, Ref)> = vec![
        (b("bfind.u32 %rd, %ra;"), r32(|a, _, _| if a == 0 { u32::MAX } else { 31 - a.leading_zeros() })),
        (b("bfind.s32 %rd, %ra;"), r32(|a, _, _| {
            let v = if (a as i32) < 0 { !a } else { a };
            if v == 0 { u32::MAX } else { 31 - v.leading_zeros() }
        })),
        (b("bfind.shiftamt.u32 %rd, %ra;"), r32(|a, _, _| if a == 0 { u32::MAX } else { a.leading_zeros() })),
        (b("cnot.b32 %rd, %ra;"), r32(|a, _, _| (a == 0) as u32)),
        (b("lop3.b32 %rd, %ra, %rb, %rc, 0x96;"), r32(|a, b, c| a ^ b ^ c)),
        (b("lop3.b32 %rd, %ra, %rb, %rc, 0xe8;"), r32(|a, b, c| (a & b) | (a & c) | (b & c))),
        (b("shf.l.wrap.b32 %rd, %ra, %rb, %rc;"), r32(|a, b, c| ((((b as u64) << 32 | a as u64) << (c & 31)) >> 32) as u32)),
        (b("shf.r.clamp.b32 %rd, %ra, %rb, %rc;"), r32(|a, b, c| (((b as u64) << 32 | a as u64) >> c.min(32)) as u32)),
        (b("sad.u32 %rd, %ra, %rb, %rc;"), r32(|a, b, c| c.wrapping_add(a.abs_diff(b)))),
        (b("mul24.lo.u32 %rd, %ra, %rb;"), r32(|a, b, _| (a & 0xff_ffff).wrapping_mul(b & 0xff_ffff))),
        (b("mad24.lo.s32 %rd, %ra, %rb, %rc;"), r32(|a, b, c| (((a << 8) as i32 >> 8).wrapping_mul((b << 8) as i32 >> 8) as u32).wrapping_add(c))),
        (b("dp4a.s32.s32 %rd, %ra, %rb, %rc;"), r32(|a, b, c| {
            (0..4).fold(c as i32, |acc, k| acc.wrapping_add((a >> (8 * k)) as u8 as i8 as i32 * (b >> (8 * k)) as u8 as i8 as i32)) as u32
        })),
        (b("set.lt.u32.s32 %rd, %ra, %rb;"), r32(|a, b, _| if (a as i32) < (b as i32) { u32::MAX } else { 0 })),
        (b("slct.u32.s32 %rd, %ra, %rb, %rc;"), r32(|a, b, c| if c as i32 >= 0 { a } else { b })),
        (b("add.sat.s32 %rd, %ra, %rb;"), r32(|a, b, _| (a as i32).saturating_add(b as i32) as u32)),
        (b("sub.sat.s32 %rd, %ra, %rb;"), r32(|a, b, _| (a as i32).saturating_sub(b as i32) as u32)),
        ("mul.wide.u16 %rd, %ha, %hb;\n  cvt.u64.u32 %d, %rd;".into(), Box::new(|a, b, _| (a & 0xffff) * (b & 0xffff))),
        ("min.s16 %hd, %ha, %hb;\n  cvt.u64.u16 %d, %hd;".into(), Box::new(|a, b, _| (a as u16 as i16).min(b as u16 as i16) as u16 as u64)),
        ("shr.s16 %hd, %ha, 3;\n  cvt.u64.u16 %d, %hd;".into(), Box::new(|a, _, _| ((a as u16 as i16) >> 3) as u16 as u64)),
        ("cvt.s32.s16 %rd, %ha;\n  cvt.u64.u32 %d, %rd;".into(), Box::new(|a, _, _| a as u16 as i16 as i32 as u32 as u64)),
        ("testp.finite.f32 %p, %fa;\n  selp.u64 %d, 1, 0, %p;".into(), Box::new(|a, _, _| f32::from_bits(a as u32).is_finite() as u64)),
        ("testp.subnormal.f32 %p, %fa;\n  selp.u64 %d, 1, 0, %p;".into(), Box::new(|a, _, _| f32::from_bits(a as u32).is_subnormal() as u64)),
    ];
    family(ops, prop_oneof![u32s(), f32_bits()]);
}
