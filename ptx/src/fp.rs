//! Floating point with PTX semantics: directed rounding (`.rz/.rm/.rp`) derived from the
//! round-to-nearest result and the sign of its exact error, `.ftz` flushing, `.sat`
//! clamping, and half-precision conversions.

use crate::ir::Rnd;
use std::cmp::Ordering;

/// Adjust a round-to-nearest result `r` given the sign of (exact − r).
fn adjust32(r: f32, err: Ordering, rnd: Rnd) -> f32 {
    if r.is_nan() {
        return r;
    }
    if r.is_infinite() {
        // Overflowed under round-to-nearest; directed modes may stop at the largest finite.
        return match (rnd, r > 0.0) {
            (Rnd::Rz | Rnd::Rzi, true) | (Rnd::Rm | Rnd::Rmi, true) => f32::MAX,
            (Rnd::Rz | Rnd::Rzi, false) | (Rnd::Rp | Rnd::Rpi, false) => f32::MIN,
            _ => r,
        };
    }
    match (rnd, err) {
        (_, Ordering::Equal) => r,
        (Rnd::Rz | Rnd::Rzi, o) => {
            if (r > 0.0 && o == Ordering::Less) || (r < 0.0 && o == Ordering::Greater) {
                if r > 0.0 {
                    r.next_down()
                } else {
                    r.next_up()
                }
            } else {
                r
            }
        }
        (Rnd::Rm | Rnd::Rmi, Ordering::Less) => r.next_down(),
        (Rnd::Rp | Rnd::Rpi, Ordering::Greater) => r.next_up(),
        _ => r,
    }
}

fn adjust64(r: f64, err: Ordering, rnd: Rnd) -> f64 {
    if r.is_nan() {
        return r;
    }
    if r.is_infinite() {
        return match (rnd, r > 0.0) {
            (Rnd::Rz | Rnd::Rzi, true) | (Rnd::Rm | Rnd::Rmi, true) => f64::MAX,
            (Rnd::Rz | Rnd::Rzi, false) | (Rnd::Rp | Rnd::Rpi, false) => f64::MIN,
            _ => r,
        };
    }
    match (rnd, err) {
        (_, Ordering::Equal) => r,
        (Rnd::Rz | Rnd::Rzi, o) => {
            if (r > 0.0 && o == Ordering::Less) || (r < 0.0 && o == Ordering::Greater) {
                if r > 0.0 {
                    r.next_down()
                } else {
                    r.next_up()
                }
            } else {
                r
            }
        }
        (Rnd::Rm | Rnd::Rmi, Ordering::Less) => r.next_down(),
        (Rnd::Rp | Rnd::Rpi, Ordering::Greater) => r.next_up(),
        _ => r,
    }
}

fn sign(x: f64) -> Ordering {
    x.partial_cmp(&0.0).unwrap_or(Ordering::Equal)
}

fn directed(rnd: Rnd) -> bool {
    !matches!(rnd, Rnd::None | Rnd::Rn | Rnd::Rni)
}

pub(crate) fn add32(a: f32, b: f32, rnd: Rnd) -> f32 {
    let r = a + b;
    if !directed(rnd) || !a.is_finite() || !b.is_finite() {
        return r;
    }
    // TwoSum: the exact error of the rounded sum.
    let bb = r - a;
    let err = (a - (r - bb)) + (b - bb);
    adjust32(r, sign(err as f64), rnd)
}

pub(crate) fn mul32(a: f32, b: f32, rnd: Rnd) -> f32 {
    let r = a * b;
    if !directed(rnd) || !a.is_finite() || !b.is_finite() {
        return r;
    }
    // The product of two f32 is exact in f64.
    let p = a as f64 * b as f64;
    adjust32(r, p.partial_cmp(&(r as f64)).unwrap_or(Ordering::Equal), rnd)
}

pub(crate) fn fma32(a: f32, b: f32, c: f32, rnd: Rnd) -> f32 {
    if !directed(rnd) {
        return a.mul_add(b, c);
    }
    // a*b exact in f64; one more f64 rounding before the directed f32 rounding (documented).
    let x = (a as f64).mul_add(b as f64, c as f64);
    f64_to_f32(x, rnd)
}

pub(crate) fn div32(a: f32, b: f32, rnd: Rnd) -> f32 {
    let q = a / b;
    if !directed(rnd) || !q.is_finite() || q == 0.0 {
        return q;
    }
    let res = (a as f64) - (q as f64) * (b as f64);
    adjust32(q, sign(res * b.signum() as f64), rnd)
}

pub(crate) fn sqrt32(a: f32, rnd: Rnd) -> f32 {
    let r = a.sqrt();
    if !directed(rnd) || !r.is_finite() {
        return r;
    }
    adjust32(r, sign(a as f64 - (r as f64) * (r as f64)), rnd)
}

pub(crate) fn add64(a: f64, b: f64, rnd: Rnd) -> f64 {
    let r = a + b;
    if !directed(rnd) || !a.is_finite() || !b.is_finite() {
        return r;
    }
    let bb = r - a;
    let err = (a - (r - bb)) + (b - bb);
    adjust64(r, sign(err), rnd)
}

pub(crate) fn mul64(a: f64, b: f64, rnd: Rnd) -> f64 {
    let r = a * b;
    if !directed(rnd) || !a.is_finite() || !b.is_finite() {
        return r;
    }
    adjust64(r, sign(a.mul_add(b, -r)), rnd)
}

pub(crate) fn fma64(a: f64, b: f64, c: f64, rnd: Rnd) -> f64 {
    let r = a.mul_add(b, c);
    if !directed(rnd) || !r.is_finite() {
        return r;
    }
    // Error estimate: exact product error plus the sum error (exact except in rare
    // cancellation cases; documented).
    let p = a * b;
    let pe = a.mul_add(b, -p);
    let s = p + c;
    let bb = s - p;
    let se = (p - (s - bb)) + (c - bb);
    let err = (s - r) + se + pe;
    adjust64(r, sign(err), rnd)
}

pub(crate) fn div64(a: f64, b: f64, rnd: Rnd) -> f64 {
    let q = a / b;
    if !directed(rnd) || !q.is_finite() || q == 0.0 {
        return q;
    }
    adjust64(q, sign((-q).mul_add(b, a) * b.signum()), rnd)
}

pub(crate) fn sqrt64(a: f64, rnd: Rnd) -> f64 {
    let r = a.sqrt();
    if !directed(rnd) || !r.is_finite() {
        return r;
    }
    adjust64(r, sign((-r).mul_add(r, a)), rnd)
}

/// f64 → f32 under a rounding mode.
pub(crate) fn f64_to_f32(x: f64, rnd: Rnd) -> f32 {
    let r = x as f32;
    if !directed(rnd) || x.is_nan() {
        return r;
    }
    if r.is_infinite() && x.is_finite() {
        return adjust32(r, Ordering::Equal, rnd);
    }
    adjust32(r, x.partial_cmp(&(r as f64)).unwrap_or(Ordering::Equal), rnd)
}

/// Round to an integral value (cvt `.rni/.rzi/.rmi/.rpi`).
pub(crate) fn round_int64(x: f64, rnd: Rnd) -> f64 {
    match rnd {
        Rnd::Rzi | Rnd::Rz => x.trunc(),
        Rnd::Rmi | Rnd::Rm => x.floor(),
        Rnd::Rpi | Rnd::Rp => x.ceil(),
        _ => x.round_ties_even(),
    }
}

pub(crate) fn round_int32(x: f32, rnd: Rnd) -> f32 {
    match rnd {
        Rnd::Rzi | Rnd::Rz => x.trunc(),
        Rnd::Rmi | Rnd::Rm => x.floor(),
        Rnd::Rpi | Rnd::Rp => x.ceil(),
        _ => x.round_ties_even(),
    }
}

/// `.ftz`: subnormal f32 → signed zero.
#[inline]
pub(crate) fn ftz32(x: f32) -> f32 {
    if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

/// `.sat`: clamp to [0, 1], NaN → 0.
#[inline]
pub(crate) fn sat32(x: f32) -> f32 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}

#[inline]
pub(crate) fn sat64(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}

/// IEEE half → f32 (exact).
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let s = ((h >> 15) as u32) << 31;
    let e = ((h >> 10) & 0x1f) as u32;
    let m = (h & 0x3ff) as u32;
    let bits = if e == 0 {
        if m == 0 {
            s
        } else {
            // Subnormal: value = m * 2^-24.
            let v = (m as f32) * (2f32).powi(-24);
            return if s != 0 { -v } else { v };
        }
    } else if e == 31 {
        s | 0x7f80_0000 | (m << 13)
    } else {
        s | ((e + 112) << 23) | (m << 13)
    };
    f32::from_bits(bits)
}

/// f32 → IEEE half, round to nearest even.
pub(crate) fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let s = ((b >> 16) & 0x8000) as u16;
    if x.is_nan() {
        return s | 0x7e00;
    }
    let a = x.abs();
    if a >= 65520.0 {
        return s | 0x7c00;
    }
    if a < 6.103_515_6e-5 {
        // Subnormal half: quantum 2^-24, ties to even via f32 rounding.
        let q = (a * 16_777_216.0).round_ties_even() as u16;
        return s | q;
    }
    let e = ((b >> 23) & 0xff) as i32 - 127 + 15;
    let m = b & 0x7f_ffff;
    let mut h = ((e as u32) << 10) | (m >> 13);
    let rest = m & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && (h & 1) == 1) {
        h += 1;
    }
    s | h as u16
}

/// bfloat16 → f32 (exact).
pub(crate) fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 → bfloat16, round to nearest even.
pub(crate) fn f32_to_bf16(x: f32) -> u16 {
    if x.is_nan() {
        return 0x7fc0;
    }
    let b = x.to_bits();
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1));
    (r >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reference: exact rational arithmetic via f64 for f32 sums/products.
    fn ref_round(exact: f64, rnd: Rnd) -> f32 {
        let r = exact as f32;
        let e = exact.partial_cmp(&(r as f64)).unwrap();
        adjust32(r, e, rnd)
    }

    proptest! {
        #[test]
        fn mul32_directed_matches_exact_f64_reference(a in -1e30f32..1e30, b in -1e5f32..1e5) {
            for rnd in [Rnd::Rn, Rnd::Rz, Rnd::Rm, Rnd::Rp] {
                let want = ref_round(a as f64 * b as f64, rnd);
                prop_assert_eq!(mul32(a, b, rnd).to_bits(), want.to_bits());
            }
        }

        #[test]
        fn add32_directed_matches_exact_f64_reference(a in -1e6f32..1e6, b in -1e6f32..1e6) {
            // |a|,|b| < 2^20 and both f32: the sum is exact in f64.
            for rnd in [Rnd::Rn, Rnd::Rz, Rnd::Rm, Rnd::Rp] {
                let want = ref_round(a as f64 + b as f64, rnd);
                prop_assert_eq!(add32(a, b, rnd).to_bits(), want.to_bits());
            }
        }

        #[test]
        fn half_roundtrips_every_half_value(h in 0u16..0x7c00) {
            let f = f16_to_f32(h);
            prop_assert_eq!(f32_to_f16(f), h);
            prop_assert_eq!(f32_to_f16(-f), h | 0x8000);
        }

        #[test]
        fn div32_rz_never_exceeds_exact_magnitude(a in 1f32..1e6, b in 1f32..1e6) {
            let q = div32(a, b, Rnd::Rz) as f64;
            prop_assert!(q <= a as f64 / b as f64 * (1.0 + 1e-15));
            prop_assert!(div32(a, b, Rnd::Rp) >= div32(a, b, Rnd::Rm));
        }
    }

    #[test]
    fn rounding_modes_bracket_one_third() {
        let (lo, hi) = (div32(1.0, 3.0, Rnd::Rm), div32(1.0, 3.0, Rnd::Rp));
        assert_eq!(hi, lo.next_up());
        assert_eq!(div32(1.0, 3.0, Rnd::Rz), lo);
        assert!(f64_to_f32(1e300, Rnd::Rz) == f32::MAX);
    }

    #[test]
    fn ftz_and_sat_follow_ptx() {
        assert_eq!(ftz32(f32::from_bits(1)).to_bits(), 0);
        assert_eq!(ftz32(-f32::from_bits(1)).to_bits(), 0x8000_0000);
        assert_eq!(sat32(f32::NAN), 0.0);
        assert_eq!(sat32(2.0), 1.0);
        assert_eq!(sat32(-2.0), 0.0);
    }
}
