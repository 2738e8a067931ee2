//! Device `printf`: nvcc turns `printf(fmt, ...)` into `vprintf(fmt, argbuf)` where `argbuf`
//! holds the promoted arguments, each aligned to its size. We format with C semantics.

use crate::api::LaunchError;
use crate::exec::{Block, Thread};
use crate::ir::Space;

const MAX_STR: usize = 1 << 16;

/// Read a NUL-terminated string at a generic address.
pub(crate) fn read_cstr(b: &mut Block, t: &Thread, addr: u64) -> Result<String, LaunchError> {
    let mut v = Vec::new();
    if addr == 0 {
        return Ok("(null)".into());
    }
    loop {
        let c = b.load(t, Space::Generic, addr + v.len() as u64, 1)? as u8;
        if c == 0 || v.len() >= MAX_STR {
            break;
        }
        v.push(c);
    }
    Ok(String::from_utf8_lossy(&v).into_owned())
}

/// Format and append to the block's printf buffer; returns the number of bytes printed.
pub(crate) fn vprintf(b: &mut Block, t: &Thread, fmt: u64, args: u64) -> Result<usize, LaunchError> {
    let f = read_cstr(b, t, fmt)?;
    let mut off = 0u64;
    let mut next = |b: &mut Block, size: u32| -> Result<u64, LaunchError> {
        off = off.div_ceil(size as u64) * size as u64;
        let v = b.load(t, Space::Generic, args + off, size)?;
        off += size as u64;
        Ok(v)
    };
    let mut out = String::new();
    let fb = f.as_bytes();
    let mut i = 0;
    while i < fb.len() {
        if fb[i] != b'%' {
            let st = i;
            while i < fb.len() && fb[i] != b'%' {
                i += 1;
            }
            out.push_str(&f[st..i]);
            continue;
        }
        i += 1;
        if i < fb.len() && fb[i] == b'%' {
            out.push('%');
            i += 1;
            continue;
        }
        let mut spec = Spec::default();
        while i < fb.len() && b"-+ 0#".contains(&fb[i]) {
            match fb[i] {
                b'-' => spec.left = true,
                b'+' => spec.plus = true,
                b' ' => spec.space = true,
                b'0' => spec.zero = true,
                _ => spec.alt = true,
            }
            i += 1;
        }
        while i < fb.len() && fb[i].is_ascii_digit() {
            spec.width = spec.width * 10 + (fb[i] - b'0') as usize;
            i += 1;
        }
        if i < fb.len() && fb[i] == b'.' {
            i += 1;
            let mut p = 0;
            while i < fb.len() && fb[i].is_ascii_digit() {
                p = p * 10 + (fb[i] - b'0') as usize;
                i += 1;
            }
            spec.prec = Some(p);
        }
        let mut long = false;
        while i < fb.len() && b"hlLqjzt".contains(&fb[i]) {
            if matches!(fb[i], b'l' | b'L' | b'q' | b'j' | b'z' | b't') {
                long = true;
            }
            i += 1;
        }
        let Some(&conv) = fb.get(i) else { break };
        i += 1;
        let body = match conv {
            b'd' | b'i' => {
                let v = if long { next(b, 8)? as i64 } else { next(b, 4)? as u32 as i32 as i64 };
                int_body(&spec, v < 0, v.unsigned_abs().to_string())
            }
            b'u' | b'x' | b'X' | b'o' => {
                let v = if long { next(b, 8)? } else { next(b, 4)? as u32 as u64 };
                let s = match conv {
                    b'u' => v.to_string(),
                    b'x' => format!("{v:x}"),
                    b'X' => format!("{v:X}"),
                    _ => format!("{v:o}"),
                };
                let s = if spec.alt && v != 0 {
                    match conv {
                        b'x' => format!("0x{s}"),
                        b'X' => format!("0X{s}"),
                        b'o' => format!("0{s}"),
                        _ => s,
                    }
                } else {
                    s
                };
                int_body(&Spec { plus: false, space: false, ..spec }, false, s)
            }
            b'c' => (next(b, 4)? as u8 as char).to_string(),
            b's' => {
                let p = next(b, 8)?;
                let mut s = read_cstr(b, t, p)?;
                if let Some(pr) = spec.prec {
                    s.truncate(pr);
                }
                s
            }
            b'p' => format!("0x{:x}", next(b, 8)?),
            b'f' | b'F' | b'e' | b'E' | b'g' | b'G' | b'a' | b'A' => {
                let v = f64::from_bits(next(b, 8)?);
                float_body(&spec, conv, v)
            }
            _ => {
                // Unknown conversion: print it as is, like CUDA's printf does.
                format!("%{}", conv as char)
            }
        };
        pad(&mut out, &spec, body);
    }
    b.printf.extend_from_slice(out.as_bytes());
    Ok(out.len())
}

#[derive(Default, Clone, Copy)]
struct Spec {
    left: bool,
    plus: bool,
    space: bool,
    zero: bool,
    alt: bool,
    width: usize,
    prec: Option<usize>,
}

fn int_body(spec: &Spec, neg: bool, digits: String) -> String {
    let mut d = digits;
    if let Some(p) = spec.prec {
        if d == "0" && p == 0 {
            d.clear();
        }
        while d.len() < p {
            d.insert(0, '0');
        }
    }
    let sign = if neg {
        "-"
    } else if spec.plus {
        "+"
    } else if spec.space {
        " "
    } else {
        ""
    };
    if spec.zero && !spec.left && spec.prec.is_none() {
        let mut body = d;
        while body.len() + sign.len() < spec.width {
            body.insert(0, '0');
        }
        return format!("{sign}{body}");
    }
    format!("{sign}{d}")
}

fn pad(out: &mut String, spec: &Spec, body: String) {
    let n = body.chars().count();
    if n >= spec.width {
        out.push_str(&body);
    } else if spec.left {
        out.push_str(&body);
        out.extend(std::iter::repeat_n(' ', spec.width - n));
    } else {
        out.extend(std::iter::repeat_n(' ', spec.width - n));
        out.push_str(&body);
    }
}

/// `%e` with C's exponent format (sign and at least two digits).
fn exp_fmt(v: f64, prec: usize, upper: bool, alt: bool) -> String {
    let s = format!("{:.*e}", prec, v.abs());
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    let m = if alt && prec == 0 { format!("{m}.") } else { m.to_string() };
    let r = format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    if upper {
        r.to_uppercase()
    } else {
        r
    }
}

fn float_body(spec: &Spec, conv: u8, v: f64) -> String {
    let upper = conv.is_ascii_uppercase();
    let neg = v.is_sign_negative() && !v.is_nan();
    let sign = if neg {
        "-"
    } else if spec.plus {
        "+"
    } else if spec.space {
        " "
    } else {
        ""
    };
    if !v.is_finite() {
        let s = if v.is_nan() { "nan" } else { "inf" };
        return format!("{sign}{}", if upper { s.to_uppercase() } else { s.to_string() });
    }
    let a = v.abs();
    let prec = spec.prec.unwrap_or(6);
    let body = match conv.to_ascii_lowercase() {
        b'f' => {
            let s = format!("{a:.prec$}");
            if spec.alt && prec == 0 {
                format!("{s}.")
            } else {
                s
            }
        }
        b'e' => exp_fmt(a, prec, upper, spec.alt),
        b'a' => format!("{a:e}"),
        _ => {
            let p = if prec == 0 { 1 } else { prec };
            let x = if a == 0.0 {
                0
            } else {
                let s = format!("{:.*e}", p - 1, a);
                s.split_once('e').and_then(|(_, e)| e.parse::<i32>().ok()).unwrap_or(0)
            };
            let mut s = if x < p as i32 && x >= -4 {
                format!("{a:.*}", (p as i32 - 1 - x) as usize)
            } else {
                exp_fmt(a, p - 1, upper, spec.alt)
            };
            if !spec.alt {
                // Strip trailing zeros of the fraction (before any exponent).
                let (m, e) = match s.find(['e', 'E']) {
                    Some(k) => (s[..k].to_string(), s[k..].to_string()),
                    None => (s.clone(), String::new()),
                };
                let m = if m.contains('.') { m.trim_end_matches('0').trim_end_matches('.').to_string() } else { m };
                s = format!("{m}{e}");
            }
            s
        }
    };
    if spec.zero && !spec.left {
        let mut b = body;
        while b.len() + sign.len() < spec.width {
            b.insert(0, '0');
        }
        return format!("{sign}{b}");
    }
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(conv: u8, prec: Option<usize>, v: f64) -> String {
        float_body(&Spec { prec, ..Spec::default() }, conv, v)
    }

    #[test]
    fn floats_format_like_c() {
        assert_eq!(f(b'f', None, 3.5), "3.500000");
        assert_eq!(f(b'f', Some(2), -0.125), "-0.12");
        assert_eq!(f(b'e', None, 12345.678), "1.234568e+04");
        assert_eq!(f(b'g', None, 0.0001), "0.0001");
        assert_eq!(f(b'g', None, 1e-5), "1e-05");
        assert_eq!(f(b'g', None, 100.0), "100");
        assert_eq!(f(b'g', None, 1234567.0), "1.23457e+06");
    }

    #[test]
    fn ints_pad_and_sign_like_c() {
        let mut out = String::new();
        let spec = Spec { width: 5, zero: true, ..Spec::default() };
        pad(&mut out, &spec, int_body(&spec, true, "42".into()));
        assert_eq!(out, "-0042");
        let mut out = String::new();
        let spec = Spec { width: 4, left: true, ..Spec::default() };
        pad(&mut out, &spec, int_body(&spec, false, "7".into()));
        assert_eq!(out, "7   ");
    }
}
