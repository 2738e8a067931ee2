//! Helpers shared by the `ckpt` integration tests.
#![allow(dead_code)]

/// `len` bytes of xorshift noise from `seed` (incompressible, reproducible).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
