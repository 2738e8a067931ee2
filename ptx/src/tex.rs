//! Texture fetches through texture objects: `tex.1d` with integer coordinates
//! (`tex1Dfetch` on linear memory) and float coordinates with point or linear filtering,
//! address modes and normalized coordinates for 1D/2D/3D textures; mipmapped textures with
//! `tex.level` (`tex2DLod`…) and `tex.grad` (`tex2DGrad`…), a plain `tex` reading level 0
//! (plus the bias), point or linear filtering between levels.

use crate::api::{AddressMode, ChannelKind, LaunchError, Mipmap, TextureDesc};
use crate::exec::{Block, Thread};
use crate::fp;
use crate::ir::{Inst, Opd, Ty};

pub(crate) fn fetch(b: &mut Block, t: &Thread, i: &Inst) -> Result<[u64; 4], LaunchError> {
    let Opd::Tex(h, c) = &i.a else { return Err(LaunchError::Unsupported("texture reference operand".into())) };
    let handle = b.val_pub(t, h);
    let desc = b.mem().mem().texture(handle).ok_or(LaunchError::IllegalAddress { addr: handle })?;
    let coords: Vec<u64> = match &**c {
        Opd::Vec(v) => v.iter().map(|o| b.val_pub(t, o)).collect(),
        o => vec![b.val_pub(t, o)],
    };
    let out = match &desc.mip {
        None => sample(b, i, &desc, &coords)?,
        Some(mip) => {
            let lod = level_of_detail(b, t, i, &desc, mip);
            let n = mip.levels.len().max(1);
            if mip.linear {
                // Between the two nearest levels, with the hardware's 8-bit fraction.
                let l0 = lod.floor();
                let f = ((lod - l0) * 256.0).round() / 256.0;
                let l0 = (l0 as usize).min(n - 1);
                let a = sample_level(b, i, &desc, mip, l0, &coords)?;
                if f == 0.0 || l0 + 1 >= n {
                    a
                } else {
                    let z = sample_level(b, i, &desc, mip, l0 + 1, &coords)?;
                    std::array::from_fn(|k| a[k] * (1.0 - f) + z[k] * f)
                }
            } else {
                // The nearest level (OpenGL's rule: ceil(lod + 1/2) - 1).
                let l = ((lod + 0.5).ceil() - 1.0).max(0.0) as usize;
                sample_level(b, i, &desc, mip, l.min(n - 1), &coords)?
            }
        }
    };
    Ok(out.map(|v| match i.ty {
        Ty::F32 => v.to_bits() as u64,
        Ty::F16 => fp::f32_to_f16(v) as u64,
        _ => v.to_bits() as u64,
    }))
}

/// The level of detail of a fetch from a mipmapped texture: the instruction's (`.level`),
/// from the gradients (`.grad`: log2 of the longer of the two gradient vectors in level-0
/// texels), or 0; then the texture's bias and clamps, and at most the last level.
fn level_of_detail(b: &mut Block, t: &Thread, i: &Inst, desc: &TextureDesc, mip: &Mipmap) -> f32 {
    let f = |b: &mut Block, o: &Opd| -> Vec<f32> {
        match o {
            Opd::Vec(v) => v.iter().map(|o| f32::from_bits(b.val_pub(t, o) as u32)).collect(),
            Opd::None => Vec::new(),
            o => vec![f32::from_bits(b.val_pub(t, o) as u32)],
        }
    };
    let lod = match i.m.lod {
        1 => f(b, &i.b).first().copied().unwrap_or(0.0),
        2 => {
            let ext = [desc.width.max(1), desc.height.max(1), desc.depth.max(1)];
            let len = |g: &[f32]| -> f32 {
                g.iter()
                    .enumerate()
                    .take(3)
                    .map(|(k, v)| {
                        let v = if desc.normalized_coords { v * ext[k] as f32 } else { *v };
                        v * v
                    })
                    .sum::<f32>()
                    .sqrt()
            };
            let (dx, dy) = (f(b, &i.b), f(b, &i.c));
            len(&dx).max(len(&dy)).log2()
        }
        _ => 0.0,
    };
    let last = mip.levels.len().saturating_sub(1) as f32;
    let lod = lod + mip.bias;
    // NaN (a zero gradient gives -inf, which the clamps take care of) reads level 0.
    let lod = if lod.is_nan() { 0.0 } else { lod };
    lod.max(mip.min_clamp).min(mip.max_clamp).clamp(0.0, last)
}

/// Sample level `l` of a mipmapped texture: the same sampling over that level's memory, with
/// unnormalized coordinates (given in level-0 texels) scaled to the level.
fn sample_level(b: &mut Block, i: &Inst, desc: &TextureDesc, mip: &Mipmap, l: usize, coords: &[u64]) -> Result<[f32; 4], LaunchError> {
    let Some(lv) = mip.levels.get(l) else { return sample(b, i, desc, coords) };
    let mut d = desc.clone();
    (d.base, d.width, d.height, d.depth, d.pitch) = (lv.base, lv.width, lv.height, lv.depth, lv.pitch);
    d.mip = None;
    let cube = matches!(i.m.geom, 6 | 7);
    if l == 0 || desc.normalized_coords || cube || i.ty2 != Ty::F32 {
        return sample(b, i, &d, coords);
    }
    let layered = matches!(i.m.geom, 4 | 5);
    let first = layered as usize;
    let ext0 = [desc.width.max(1), desc.height.max(1), desc.depth.max(1)];
    let ext = [d.width.max(1), d.height.max(1), d.depth.max(1)];
    let scaled: Vec<u64> = coords
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            if k < first || k - first >= 3 {
                return v;
            }
            let x = f32::from_bits(v as u32) * ext[k - first] as f32 / ext0[k - first] as f32;
            x.to_bits() as u64
        })
        .collect();
    sample(b, i, &d, &scaled)
}

/// One texture sample from `desc`'s memory (no level of detail), as f32 lanes.
fn sample(b: &mut Block, i: &Inst, desc: &TextureDesc, coords: &[u64]) -> Result<[f32; 4], LaunchError> {
    let coords = coords.to_vec();
    // Layered textures (`a1d`, `a2d`) take the layer index first; it selects the row (1D)
    // or slice (2D) and is never filtered.
    let cube = matches!(i.m.geom, 6 | 7);
    let (dims, layered) = match i.m.geom {
        1 => (1, false),
        2 => (2, false),
        3 => (3, false),
        4 => (2, true),
        5 => (1, true),
        // A cube map: six square faces, read as the layers of a 2-D layered texture; a
        // layered cube map (`acube`): cube map `l` is layers 6l..6l+5.
        6 | 7 => (2, true),
        _ => return Err(LaunchError::Unsupported(format!("texture geometry {}", i.m.geom))),
    };
    let (layer, coords) = if cube {
        if i.ty2 != Ty::F32 {
            return Err(LaunchError::Unsupported("cube-map texture fetch with integer coordinates".into()));
        }
        // `acube` takes the cube map's index first (an integer), then the direction.
        let (cube_index, dir) = if i.m.geom == 7 {
            (coords.first().map_or(0, |v| (*v as u32 as i32).max(0) as i64), &coords[1.min(coords.len())..])
        } else {
            (0, &coords[..])
        };
        let f = |k: usize| dir.get(k).map_or(0.0, |v| f32::from_bits(*v as u32));
        let (face, s, t) = cube_face(f(0), f(1), f(2));
        let face = cube_index * 6 + face;
        // Face coordinates are normalized; scaled here (the generic path scales only when
        // the texture asks for normalized coordinates).
        let (w, h) = (desc.width.max(1) as f32, desc.height.max(1) as f32);
        let scale = if desc.normalized_coords { (1.0, 1.0) } else { (w, h) };
        (face, vec![(s * scale.0).to_bits() as u64, (t * scale.1).to_bits() as u64])
    } else if layered {
        (coords[0] as u32 as i32 as i64, coords[1..].to_vec())
    } else {
        (0, coords)
    };
    let layers = if layered { [desc.height.max(1), desc.depth.max(1)][dims - 1] as i64 } else { 1 };
    let layer = layer.clamp(0, layers - 1);
    let texel = |b: &mut Block, xyz: [i64; 3]| -> Result<[f32; 4], LaunchError> { texel(b, desc, xyz, i.ty) };
    let mut out = [0f32; 4];
    if i.ty2 != Ty::F32 {
        // Integer coordinates: no filtering; out of range reads 0.
        let c = |k: usize| if k < dims { coords.get(k).map_or(0, |v| *v as u32 as i32 as i64) } else if layered && k == dims { layer } else { 0 };
        let (x, y, z) = (c(0), c(1), c(2));
        let w = desc.width.max(1) as i64;
        let hgt = desc.height.max(1) as i64;
        let d = desc.depth.max(1) as i64;
        if x >= 0 && x < w && y >= 0 && y < hgt && z >= 0 && z < d {
            out = texel(b, [x, y, z])?;
        }
    } else {
        let f: Vec<f32> = coords.iter().map(|v| f32::from_bits(*v as u32)).collect();
        let ext = [desc.width.max(1), desc.height.max(1), desc.depth.max(1)];
        let mut u = [0f32; 3];
        for k in 0..dims {
            u[k] = f.get(k).copied().unwrap_or(0.0) * if desc.normalized_coords { ext[k] as f32 } else { 1.0 };
        }
        if desc.linear_filter && (desc.kind == ChannelKind::Float || desc.normalized_float) {
            // Linear filtering: weights from the coordinate minus 0.5, 8-bit fixed point
            // fraction like the hardware.
            let mut base = [0i64; 3];
            let mut frac = [0f32; 3];
            for k in 0..dims {
                let x = u[k] - 0.5;
                base[k] = x.floor() as i64;
                frac[k] = ((x - x.floor()) * 256.0).round() / 256.0;
            }
            for corner in 0..(1 << dims) {
                let mut wgt = 1.0f32;
                let mut p = [0i64; 3];
                for k in 0..dims {
                    let hi = corner >> k & 1 == 1;
                    wgt *= if hi { frac[k] } else { 1.0 - frac[k] };
                    p[k] = address(base[k] + hi as i64, ext[k] as i64, desc.address_mode[k]);
                }
                if layered {
                    p[dims] = layer;
                }
                if wgt == 0.0 {
                    continue;
                }
                let v = if p.iter().any(|&c| c < 0) { [0.0; 4] } else { texel(b, p)? };
                for c in 0..4 {
                    out[c] += wgt * v[c];
                }
            }
        } else {
            let mut p = [0i64; 3];
            for k in 0..dims {
                p[k] = address(u[k].floor() as i64, ext[k] as i64, desc.address_mode[k]);
            }
            if layered {
                p[dims] = layer;
            }
            if p.iter().all(|&c| c >= 0) {
                out = texel(b, p)?;
            }
        }
    }
    Ok(out)
}

/// The face of a cube map a direction points at and the normalized (s, t) on it, as the CUDA
/// programming guide's cubemap table gives them: the major axis picks the face (+x, -x, +y,
/// -y, +z, -z = 0..5), s = (sc / |ma| + 1) / 2, t = (tc / |ma| + 1) / 2.
fn cube_face(x: f32, y: f32, z: f32) -> (i64, f32, f32) {
    let (ax, ay, az) = (x.abs(), y.abs(), z.abs());
    let (face, sc, tc, ma) = if ax >= ay && ax >= az {
        if x >= 0.0 { (0, -z, -y, ax) } else { (1, z, -y, ax) }
    } else if ay >= az {
        if y >= 0.0 { (2, x, z, ay) } else { (3, x, -z, ay) }
    } else if z >= 0.0 {
        (4, x, -y, az)
    } else {
        (5, -x, -y, az)
    };
    if ma == 0.0 {
        return (0, 0.5, 0.5);
    }
    (face, (sc / ma + 1.0) / 2.0, (tc / ma + 1.0) / 2.0)
}

/// Apply the address mode; -1 = border (reads zero).
fn address(x: i64, n: i64, m: AddressMode) -> i64 {
    match m {
        AddressMode::Wrap => x.rem_euclid(n),
        AddressMode::Mirror => {
            let p = x.rem_euclid(2 * n);
            if p < n {
                p
            } else {
                2 * n - 1 - p
            }
        }
        AddressMode::Border => {
            if x < 0 || x >= n {
                -1
            } else {
                x
            }
        }
        AddressMode::Clamp => x.clamp(0, n - 1),
    }
}

/// Read one element; values come back as f32 lanes holding either the float value or the
/// raw integer bits (for integer reads without normalization).
fn texel(b: &mut Block, d: &TextureDesc, p: [i64; 3], dty: Ty) -> Result<[f32; 4], LaunchError> {
    let chans: Vec<u32> = d.bits.iter().copied().filter(|&x| x > 0).collect();
    let esize: u64 = chans.iter().map(|&x| (x / 8) as u64).sum::<u64>().max(1);
    let pitch = if d.pitch > 0 { d.pitch } else { d.width * esize };
    let addr = d.base + p[2] as u64 * pitch * d.height.max(1) + p[1] as u64 * pitch + p[0] as u64 * esize;
    let mut out = [0f32; 4];
    let mut off = 0u64;
    for (k, &bits) in chans.iter().enumerate().take(4) {
        let sz = bits / 8;
        let raw = b.mem().read(addr + off, sz)?;
        off += sz as u64;
        out[k] = match d.kind {
            ChannelKind::Float => match bits {
                16 => fp::f16_to_f32(raw as u16),
                32 => f32::from_bits(raw as u32),
                _ => f64::from_bits(raw) as f32,
            },
            ChannelKind::Unsigned if d.normalized_float => raw as f32 / ((1u64 << bits) - 1) as f32,
            ChannelKind::Signed if d.normalized_float => {
                let s = 64 - bits;
                let v = ((raw << s) as i64 >> s) as f32;
                (v / ((1u64 << (bits - 1)) - 1) as f32).max(-1.0)
            }
            ChannelKind::Signed => {
                let s = 64 - bits;
                let v = (raw << s) as i64 >> s;
                if dty == Ty::F32 {
                    v as f32
                } else {
                    f32::from_bits(v as u32)
                }
            }
            ChannelKind::Unsigned => {
                if dty == Ty::F32 {
                    raw as f32
                } else {
                    f32::from_bits(raw as u32)
                }
            }
        };
    }
    Ok(out)
}
