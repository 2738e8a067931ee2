//! Fat binaries as `__cudaRegisterFatBinary` receives them: the 16-byte header, the entries
//! that follow, and the PTX text inside them (plain, zstd, or the LZ4-like scheme of
//! CUDA 11/12, flag 0x2000). Layout facts: `shared/reference/fatbin-and-registration.md`.

/// One PTX entry of a fat binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxImage {
    /// Virtual architecture, e.g. 80 for `compute_80`.
    pub arch: u32,
    /// The PTX text.
    pub ptx: String,
}

/// Why a fat binary could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FatbinError {
    #[error("fat binary too short ({len} bytes)")]
    Truncated { len: usize },
    #[error("bad fat binary magic {magic:#x}")]
    BadMagic { magic: u32 },
    #[error("malformed fat binary entry at offset {offset:#x}: {what}")]
    BadEntry { offset: usize, what: &'static str },
    #[error("the program carries only SASS for sm_{archs:?} and no PTX; rebuild with PTX, e.g. -arch=sm_80")]
    SassOnly { archs: Vec<u32> },
    #[error("cannot decompress the PTX of entry at offset {offset:#x}: {what}")]
    Decompress { offset: usize, what: String },
    #[error("PTX of entry at offset {offset:#x} is not UTF-8")]
    NotText { offset: usize },
}

const FATBIN_MAGIC: u32 = 0xBA55_ED50;
const HEADER: usize = 16;
const KIND_PTX: u16 = 1;
const KIND_ELF: u16 = 2;
const FLAG_LZ4: u64 = 0x2000;
const FLAG_ZSTD: u64 = 0x8000;
/// PTX text larger than this is refused (hostile sizes must not drive allocation).
const MAX_PTX: u64 = 1 << 30;

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]))
}

/// Total byte size (header + entries) of the fat binary starting at `head` (>= 16 bytes).
pub fn fatbin_total_size(head: &[u8]) -> Result<usize, FatbinError> {
    if head.len() < HEADER {
        return Err(FatbinError::Truncated { len: head.len() });
    }
    let magic = u32_at(head, 0);
    if magic != FATBIN_MAGIC {
        return Err(FatbinError::BadMagic { magic });
    }
    let hs = u16_at(head, 6) as u64;
    let size = u64_at(head, 8);
    hs.checked_add(size)
        .filter(|&t| t <= isize::MAX as u64)
        .map(|t| t as usize)
        .ok_or(FatbinError::BadEntry { offset: 8, what: "size overflows" })
}

/// All PTX entries of one fat binary (and of any further fat binaries that follow it
/// back to back in `fatbin`, as in a `.nv_fatbin` section).
pub fn extract_ptx(fatbin: &[u8]) -> Result<Vec<PtxImage>, FatbinError> {
    Ok(ptx_per_fatbin(fatbin)?.into_iter().flatten().collect())
}

/// The PTX a program's module is made of: of each fat binary in `image` (back to back), its
/// highest-architecture PTX entry. One for a plain module; for a program built with
/// `nvcc -rdc=true`, one per object (the interposer hands over the device-link fat binary,
/// which carries SASS only, followed by every object's relocatable fat binary), to be linked
/// by [`crate::Module::link`]. Fat binaries without PTX (the device-link one) contribute
/// nothing; `SassOnly` when none has PTX.
pub fn program_ptx(image: &[u8]) -> Result<Vec<PtxImage>, FatbinError> {
    Ok(ptx_per_fatbin(image)?.into_iter().filter_map(|f| f.into_iter().max_by_key(|i| i.arch)).collect())
}

/// The PTX entries of each fat binary in `fatbin` (back to back), in order.
pub fn ptx_per_fatbin(fatbin: &[u8]) -> Result<Vec<Vec<PtxImage>>, FatbinError> {
    let mut all: Vec<Vec<PtxImage>> = Vec::new();
    let mut sass = Vec::new();
    let n = walk(fatbin, |e| {
        if all.len() <= e.fatbin {
            all.resize_with(e.fatbin + 1, Vec::new);
        }
        match e.kind {
            KIND_PTX => {
                let text = e.decode()?;
                let end = text.iter().position(|&c| c == 0).unwrap_or(text.len());
                let ptx = String::from_utf8(text[..end].to_vec()).map_err(|_| FatbinError::NotText { offset: e.at })?;
                all[e.fatbin].push(PtxImage { arch: e.arch, ptx });
            }
            KIND_ELF => sass.push(e.arch),
            _ => {}
        }
        Ok(())
    })?;
    all.resize_with(n, Vec::new);
    if all.iter().all(Vec::is_empty) && !sass.is_empty() {
        sass.sort_unstable();
        sass.dedup();
        return Err(FatbinError::SassOnly { archs: sass });
    }
    Ok(all)
}

/// The machine code (cubin ELF) entries of the fat binaries in `fatbin`, decompressed:
/// (architecture, e.g. 90 for `sm_90`; the ELF image).
pub fn elf_images(fatbin: &[u8]) -> Result<Vec<(u32, Vec<u8>)>, FatbinError> {
    let mut out = Vec::new();
    walk(fatbin, |e| {
        if e.kind == KIND_ELF {
            out.push((e.arch, e.decode()?));
        }
        Ok(())
    })?;
    Ok(out)
}

/// One entry of a fat binary, as [`walk`] finds it.
struct Entry<'a> {
    /// Which fat binary of the back-to-back sequence (0-based).
    fatbin: usize,
    kind: u16,
    arch: u32,
    /// Offset of the entry in the whole input (for messages).
    at: usize,
    payload: &'a [u8],
    csize: u64,
    dsize: u64,
    flags: u64,
}

impl Entry<'_> {
    fn decode(&self) -> Result<Vec<u8>, FatbinError> {
        decode_payload(self.payload, self.csize, self.dsize, self.flags, self.at)
    }
}

/// Visit every entry of each fat binary in `fatbin` (back to back), in order, checking every
/// size against the bytes there are; the number of fat binaries.
fn walk(fatbin: &[u8], mut visit: impl FnMut(Entry<'_>) -> Result<(), FatbinError>) -> Result<usize, FatbinError> {
    let mut pos = 0usize;
    let mut n = 0usize;
    loop {
        let rest = &fatbin[pos..];
        let total = fatbin_total_size(rest)?;
        if total < HEADER || total > rest.len() {
            return Err(FatbinError::Truncated { len: rest.len() });
        }
        let hs = u16_at(rest, 6) as usize;
        let mut off = hs;
        while off < total {
            let at = pos + off;
            if total - off < 64 {
                return Err(FatbinError::BadEntry { offset: at, what: "entry header truncated" });
            }
            let e = &rest[off..total];
            let ehs = u32_at(e, 4) as usize;
            let psize = u64_at(e, 8);
            if ehs < 64 || ehs > e.len() || psize > (e.len() - ehs) as u64 {
                return Err(FatbinError::BadEntry { offset: at, what: "sizes exceed the fat binary" });
            }
            visit(Entry {
                fatbin: n,
                kind: u16_at(e, 0),
                arch: u32_at(e, 28),
                at,
                payload: &e[ehs..ehs + psize as usize],
                csize: u32_at(e, 16) as u64,
                dsize: u64_at(e, 56),
                flags: u64_at(e, 40),
            })?;
            off += ehs + psize as usize;
        }
        n += 1;
        pos += total;
        if fatbin.len() - pos < HEADER || u32_at(fatbin, pos) != FATBIN_MAGIC {
            break;
        }
    }
    Ok(n)
}

fn decode_payload(payload: &[u8], csize: u64, dsize: u64, flags: u64, offset: usize) -> Result<Vec<u8>, FatbinError> {
    if flags & (FLAG_ZSTD | FLAG_LZ4) == 0 {
        return Ok(payload.to_vec());
    }
    if dsize > MAX_PTX {
        return Err(FatbinError::Decompress { offset, what: format!("decompressed size {dsize} too large") });
    }
    let input = &payload[..(csize as usize).min(payload.len())];
    if flags & FLAG_ZSTD != 0 {
        zstd::bulk::decompress(input, dsize as usize).map_err(|e| FatbinError::Decompress { offset, what: e.to_string() })
    } else {
        lz4_block(input, dsize as usize).map_err(|what| FatbinError::Decompress { offset, what: what.into() })
    }
}

/// The 0x2000 scheme of CUDA 11/12 fatbinaries: an LZ4 block (token: literal length high
/// nibble, match length − 4 low nibble, 0xff-continued extensions, 2-byte little-endian
/// back offset). Every read and copy is bounds-checked.
pub(crate) fn lz4_block(input: &[u8], out_len: usize) -> Result<Vec<u8>, &'static str> {
    let mut out: Vec<u8> = Vec::with_capacity(out_len);
    let mut i = 0usize;
    let byte = |i: usize| input.get(i).copied().ok_or("input truncated");
    while i < input.len() && out.len() < out_len {
        let tok = byte(i)?;
        i += 1;
        let mut lit = (tok >> 4) as usize;
        if lit == 15 {
            loop {
                let b = byte(i)?;
                i += 1;
                lit += b as usize;
                if b != 255 {
                    break;
                }
            }
        }
        let src = input.get(i..i + lit).ok_or("literal run past the input")?;
        out.extend_from_slice(src);
        i += lit;
        if i >= input.len() || out.len() >= out_len {
            break;
        }
        let back = byte(i)? as usize | (byte(i + 1)? as usize) << 8;
        i += 2;
        let mut mlen = (tok & 15) as usize + 4;
        if tok & 15 == 15 {
            loop {
                let b = byte(i)?;
                i += 1;
                mlen += b as usize;
                if b != 255 {
                    break;
                }
            }
        }
        if back == 0 || back > out.len() {
            return Err("match offset before the start of the output");
        }
        if out.len() + mlen > out_len {
            return Err("match runs past the declared size");
        }
        let start = out.len() - back;
        for k in 0..mlen {
            let c = out[start + k];
            out.push(c);
        }
    }
    if out.len() != out_len {
        return Err("decompressed size differs from the header");
    }
    Ok(out)
}

/// The PTX entry with the highest architecture.
pub fn best_ptx(images: &[PtxImage]) -> Option<&PtxImage> {
    images.iter().max_by_key(|i| i.arch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A fat binary with one PTX entry, built the way nvcc lays it out.
    fn fatbin(kind: u16, payload: &[u8], csize: u32, dsize: u64, flags: u64, arch: u32) -> Vec<u8> {
        let mut e = vec![0u8; 80];
        e[0..2].copy_from_slice(&kind.to_le_bytes());
        e[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
        e[4..8].copy_from_slice(&80u32.to_le_bytes());
        let psize = payload.len().div_ceil(8) * 8;
        e[8..16].copy_from_slice(&(psize as u64).to_le_bytes());
        e[16..20].copy_from_slice(&csize.to_le_bytes());
        e[28..32].copy_from_slice(&arch.to_le_bytes());
        e[40..48].copy_from_slice(&flags.to_le_bytes());
        e[56..64].copy_from_slice(&dsize.to_le_bytes());
        e.extend_from_slice(payload);
        e.resize(80 + psize, 0);
        let mut f = Vec::new();
        f.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        f.extend_from_slice(&1u16.to_le_bytes());
        f.extend_from_slice(&16u16.to_le_bytes());
        f.extend_from_slice(&(e.len() as u64).to_le_bytes());
        f.extend_from_slice(&e);
        f
    }

    #[test]
    fn plain_ptx_entry_is_extracted_without_its_nul() {
        let f = fatbin(1, b".version 8.0\0", 0, 0, 0x11, 80);
        assert_eq!(fatbin_total_size(&f).unwrap(), f.len());
        let v = extract_ptx(&f).unwrap();
        assert_eq!(v, vec![PtxImage { arch: 80, ptx: ".version 8.0".into() }]);
    }

    #[test]
    fn zstd_ptx_entry_is_decompressed() {
        let text = b".version 8.0\n.target sm_80\n".repeat(20);
        let c = zstd::bulk::compress(&text, 3).unwrap();
        let f = fatbin(1, &c, c.len() as u32, text.len() as u64, 0x8011, 86);
        assert_eq!(extract_ptx(&f).unwrap()[0].ptx.as_bytes(), &text[..]);
    }

    #[test]
    fn program_ptx_takes_the_best_ptx_of_each_fat_binary_and_skips_the_sass_only_one() {
        // As the interposer hands over an -rdc=true program: the device-link fat binary
        // (SASS), then each object's (PTX for two architectures, then one).
        let mut object_a = fatbin(1, b"a70\0", 0, 0, 0x11, 70);
        let second = fatbin(1, b"a80\0", 0, 0, 0x11, 80);
        object_a.extend_from_slice(&second[HEADER..]);
        let entries = (object_a.len() - HEADER) as u64;
        object_a[8..16].copy_from_slice(&entries.to_le_bytes());
        let mut image = fatbin(2, &[0x7f, b'E', b'L', b'F'], 0, 0, 0x11, 80);
        image.extend(&object_a);
        image.extend(fatbin(1, b"b80\0", 0, 0, 0x11, 80));
        let texts: Vec<String> = program_ptx(&image).unwrap().into_iter().map(|i| i.ptx).collect();
        assert_eq!(texts, ["a80", "b80"]);
        assert_eq!(ptx_per_fatbin(&image).unwrap().iter().map(Vec::len).collect::<Vec<_>>(), [0, 2, 1]);
        // SASS everywhere: the rebuild advice, as for a plain module.
        let mut sass = fatbin(2, &[0x7f, b'E', b'L', b'F'], 0, 0, 0x11, 80);
        sass.extend(fatbin(2, &[0x7f, b'E', b'L', b'F'], 0, 0, 0x11, 86));
        assert!(matches!(program_ptx(&sass), Err(FatbinError::SassOnly { archs }) if archs == [80, 86]));
    }

    #[test]
    fn sass_only_binary_says_how_to_rebuild() {
        let f = fatbin(2, &[0x7f, b'E', b'L', b'F'], 0, 0, 0x11, 80);
        let e = extract_ptx(&f).unwrap_err();
        assert!(matches!(e, FatbinError::SassOnly { ref archs } if archs == &[80]));
        assert!(e.to_string().contains("-arch=sm_80"));
    }

    #[test]
    fn lz4_overlapping_match_repeats_bytes() {
        // literal "ab", then a match of 6 at offset 2 → "abababab".
        let input = [0x22, b'a', b'b', 2, 0];
        assert_eq!(lz4_block(&input, 8).unwrap(), b"abababab");
        assert!(lz4_block(&[0x20, b'a', b'b', 9, 0], 8).is_err());
    }

    /// Minimal LZ4 block encoder (greedy, for the round trip below).
    fn lz4_encode(src: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut lit_start = 0;
        let mut i = 0;
        let put_len = |out: &mut Vec<u8>, mut n: usize| {
            while n >= 255 {
                out.push(255);
                n -= 255;
            }
            out.push(n as u8);
        };
        while i + 4 <= src.len() {
            let mut best = (0, 0);
            for back in 1..=i.min(64) {
                let mut l = 0;
                while i + l < src.len() && src[i + l] == src[i - back + l] {
                    l += 1;
                }
                if l > best.0 {
                    best = (l, back);
                }
            }
            if best.0 >= 4 {
                let lit = i - lit_start;
                let ml = best.0 - 4;
                out.push(((lit.min(15) as u8) << 4) | ml.min(15) as u8);
                if lit >= 15 {
                    put_len(&mut out, lit - 15);
                }
                out.extend_from_slice(&src[lit_start..i]);
                out.extend_from_slice(&(best.1 as u16).to_le_bytes());
                if ml >= 15 {
                    put_len(&mut out, ml - 15);
                }
                i += best.0;
                lit_start = i;
            } else {
                i += 1;
            }
        }
        let lit = src.len() - lit_start;
        out.push((lit.min(15) as u8) << 4);
        if lit >= 15 {
            put_len(&mut out, lit - 15);
        }
        out.extend_from_slice(&src[lit_start..]);
        out
    }

    proptest! {
        #[test]
        fn lz4_roundtrips_any_text(words in proptest::collection::vec("[a-d]{1,6}", 0..200)) {
            let src = words.concat().into_bytes();
            let enc = lz4_encode(&src);
            prop_assert_eq!(lz4_block(&enc, src.len()).unwrap(), src);
        }

        #[test]
        fn lz4_never_panics_on_garbage(data in proptest::collection::vec(any::<u8>(), 0..200), n in 0usize..500) {
            let _ = lz4_block(&data, n);
        }

        #[test]
        fn extract_never_panics_on_garbage(mut data in proptest::collection::vec(any::<u8>(), 16..300)) {
            data[0..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
            let _ = extract_ptx(&data);
        }
    }
}
