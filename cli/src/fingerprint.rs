//! Fingerprints of NVIDIA's static CUDA runtime, to find its entry points in a **stripped**
//! executable (no `.symtab`), where `preload/src/static_runtime.c` cannot find them by name
//! (docs/driver-api.md § 4.1, "Stripped executables").
//!
//! `libcudart_static.a` is linked into a program byte for byte except where the linker
//! writes relocated fields. In the archives seen so far the whole runtime is one object with
//! one `.text` section, and an input section stays contiguous in the output, so the runtime's
//! code is one block in the executable, every function at its offset in the archive's
//! `.text`. A fingerprint of one runtime version ([`Fingerprint`]) holds
//! - an *anchor*: a run of bytes of that `.text` that no relocation touches, unique in it,
//!   to find candidate positions of the block quickly (`memmem`);
//! - for every runtime entry point (`cuda*`, `__cuda*`, the names the name-based patcher
//!   redirects): its offset and size in the block, the ranges that relocations cover
//!   (masked: they differ in every program) and a hash (FNV-1a, 64-bit: simple enough for
//!   the audit library's C to compute too) of its bytes with the masked
//!   ones zeroed.
//!
//! [`locate`] accepts a position only when **every** function's masked bytes hash as in the
//! fingerprint, and only when exactly one position of the executable does: a set that is all
//! of one runtime version, each function at one place. Masks are widened where the linker may
//! rewrite instructions around a relocation (GOT-relative loads relaxed to `lea`, TLS
//! sequences relaxed to local-exec), so a relaxed program still matches.
//!
//! The fingerprints of the toolkit crum is built and tested with are checked in
//! (`cli/cudart-fingerprints/*.txt`, written by `crum cudart-fingerprint`, see
//! `scripts/cudart-fingerprints.sh`); `CRUM_CUDART_STATIC=path/libcudart_static.a[:…]`
//! adds others at run time.

use std::fmt::Write as _;

use object::read::elf::ElfFile64;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, RelocationFlags, SectionIndex, SymbolKind};

/// The length of the anchor searched for in the executable.
const ANCHOR_LEN: usize = 48;

/// The fingerprint files checked in: (file name, text).
/// The newest patch release of each CUDA 13 minor version (PyPI's `nvidia-cuda-runtime`),
/// newest first.
const BUILT_IN: &[(&str, &str)] = &[
    ("13.5.37.txt", include_str!("../cudart-fingerprints/13.5.37.txt")),
    ("13.4.92.txt", include_str!("../cudart-fingerprints/13.4.92.txt")),
    ("13.3.29.txt", include_str!("../cudart-fingerprints/13.3.29.txt")),
    ("13.2.86.txt", include_str!("../cudart-fingerprints/13.2.86.txt")),
    ("13.1.80.txt", include_str!("../cudart-fingerprints/13.1.80.txt")),
    ("13.0.96.txt", include_str!("../cudart-fingerprints/13.0.96.txt")),
];

/// The first line of a fingerprint file.
const MAGIC: &str = "crum-cudart-fingerprint 1";

/// Why a fingerprint could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum FingerprintError {
    #[error("not an archive or object file")]
    Parse(#[source] object::read::Error),
    #[error("no runtime entry points (cuda*, __cuda*) defined")]
    NoRuntime,
    #[error("the runtime's entry points are in {sections} sections (one was expected)")]
    Scattered { sections: usize },
    #[error("no run of {ANCHOR_LEN} unrelocated bytes is unique in the runtime's code")]
    NoAnchor,
    #[error("fingerprint line {line}: {what}")]
    Syntax { line: usize, what: String },
}

/// One entry point of the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncPrint {
    pub name: String,
    /// Offset in the runtime's code block.
    pub off: u64,
    pub size: u64,
    /// (start, length) relative to the function: bytes relocations cover.
    pub masked: Vec<(u32, u32)>,
    /// FNV-1a (64-bit) of the function's bytes with the masked ones zeroed.
    pub hash: u64,
}

/// One runtime version's fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// As the generator was told (e.g. the wheel's `13.5.37`).
    pub version: String,
    /// Length of the runtime's code block.
    pub text_len: u64,
    pub anchor_off: u64,
    pub anchor: Vec<u8>,
    pub funcs: Vec<FuncPrint>,
}

/// An entry point: (name, offset or address, size).
pub type Entry = (String, u64, u64);

/// Whether `name` is a runtime entry point's (`cuda*`, `__cuda*`), as `elf_patch.h` says.
fn runtime_name(name: &str) -> bool {
    name.starts_with("cuda") || name.starts_with("__cuda")
}

/// The bytes a relocation of type `r_type` (x86-64) at `off` may change, as (start, end)
/// relative to `off`: the field, and where the linker may relax the instruction, the
/// instruction bytes before it (and the call after a TLS sequence).
fn relocation_window(r_type: u32) -> (i64, i64) {
    use object::elf::*;
    match r_type {
        R_X86_64_NONE => (0, 0),
        R_X86_64_64 | R_X86_64_PC64 | R_X86_64_GOTOFF64 | R_X86_64_GOTPC64 | R_X86_64_GOT64 | R_X86_64_GOTPCREL64
        | R_X86_64_GOTPLT64 | R_X86_64_SIZE64 | R_X86_64_DTPOFF64 | R_X86_64_TPOFF64 | R_X86_64_DTPMOD64 => (0, 8),
        R_X86_64_PC32 | R_X86_64_PLT32 | R_X86_64_32 | R_X86_64_32S | R_X86_64_GOT32 | R_X86_64_DTPOFF32
        | R_X86_64_TPOFF32 | R_X86_64_SIZE32 | R_X86_64_GOTPC32 => (0, 4),
        // `mov x@GOTPCREL(%rip)` may become `lea`, `call *x@GOTPCREL` `addr32 call`, an
        // initial-exec TLS load a local-exec `mov $imm`: opcode, ModRM and REX rewritten.
        R_X86_64_GOTPCREL | R_X86_64_GOTPCRELX | R_X86_64_REX_GOTPCRELX | R_X86_64_GOTTPOFF
        | R_X86_64_GOTPC32_TLSDESC => (-3, 4),
        // General and local dynamic TLS: the whole `lea` + `call __tls_get_addr` sequence.
        R_X86_64_TLSGD => (-4, 12),
        R_X86_64_TLSLD => (-3, 10),
        R_X86_64_TLSDESC_CALL => (0, 2),
        R_X86_64_16 | R_X86_64_PC16 => (0, 2),
        R_X86_64_8 | R_X86_64_PC8 => (0, 1),
        _ => (-4, 8),
    }
}

/// Masked bytes of a code block of `len` bytes with relocations `relocs` (offset, x86-64
/// type).
fn relocation_mask(len: usize, relocs: impl IntoIterator<Item = (u64, u32)>) -> Vec<bool> {
    let mut mask = vec![false; len];
    for (off, ty) in relocs {
        let (a, b) = relocation_window(ty);
        let lo = (off as i64 + a).clamp(0, len as i64) as usize;
        let hi = (off as i64 + b).clamp(0, len as i64) as usize;
        mask[lo..hi].iter_mut().for_each(|m| *m = true);
    }
    mask
}

/// FNV-1a (64-bit) of `bytes` with the bytes `mask` marks zeroed (`preload/src/audit.c`
/// computes the same).
fn masked_hash(bytes: &[u8], mask: &[bool]) -> u64 {
    bytes.iter().zip(mask).fold(0xcbf2_9ce4_8422_2325, |h: u64, (&b, &m)| {
        (h ^ u64::from(if m { 0 } else { b })).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The runs of `true` in `mask` as (start, length).
fn runs(mask: &[bool]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < mask.len() {
        if mask[i] {
            let s = i;
            while i < mask.len() && mask[i] {
                i += 1;
            }
            out.push((s as u32, (i - s) as u32));
        } else {
            i += 1;
        }
    }
    out
}

/// A unique run of [`ANCHOR_LEN`] unmasked bytes of `code`, not padding (at least 16
/// distinct byte values): its offset. Longest unmasked stretches first.
fn choose_anchor(code: &[u8], mask: &[bool]) -> Option<usize> {
    let mut stretches: Vec<(usize, usize)> =
        runs(&mask.iter().map(|m| !m).collect::<Vec<_>>()).into_iter().map(|(s, l)| (s as usize, l as usize)).collect();
    stretches.retain(|&(_, l)| l >= ANCHOR_LEN);
    stretches.sort_by_key(|&(s, l)| (std::cmp::Reverse(l), s));
    for (s, l) in stretches {
        for at in (s..=s + l - ANCHOR_LEN).step_by(ANCHOR_LEN) {
            let a = &code[at..at + ANCHOR_LEN];
            let mut seen = [false; 256];
            a.iter().for_each(|&b| seen[b as usize] = true);
            if seen.iter().filter(|&&x| x).count() >= 16 && memchr::memmem::find_iter(code, a).take(2).count() == 1 {
                return Some(at);
            }
        }
    }
    None
}

/// The fingerprint of one code block: its bytes, relocations and entry points (name, offset,
/// size).
pub fn fingerprint_code(
    version: &str,
    code: &[u8],
    relocs: impl IntoIterator<Item = (u64, u32)>,
    funcs: &[Entry],
) -> Result<Fingerprint, FingerprintError> {
    let mask = relocation_mask(code.len(), relocs);
    let anchor_off = choose_anchor(code, &mask).ok_or(FingerprintError::NoAnchor)?;
    let mut prints: Vec<FuncPrint> = funcs
        .iter()
        .filter(|(_, off, size)| *size > 0 && off.checked_add(*size).is_some_and(|e| e <= code.len() as u64))
        .map(|(name, off, size)| {
            let r = *off as usize..(*off + *size) as usize;
            FuncPrint {
                name: name.clone(),
                off: *off,
                size: *size,
                masked: runs(&mask[r.clone()]),
                hash: masked_hash(&code[r.clone()], &mask[r]),
            }
        })
        .collect();
    prints.sort_by(|a, b| (a.off, &a.name).cmp(&(b.off, &b.name)));
    if prints.is_empty() {
        return Err(FingerprintError::NoRuntime);
    }
    Ok(Fingerprint {
        version: version.to_owned(),
        text_len: code.len() as u64,
        anchor_off: anchor_off as u64,
        anchor: code[anchor_off..anchor_off + ANCHOR_LEN].to_vec(),
        funcs: prints,
    })
}

/// The members of a Unix `ar` archive (`!<arch>`, System V/GNU names), less its symbol and name
/// tables; None if `data` is not one.
fn archive_members(data: &[u8]) -> Option<Vec<&[u8]>> {
    let mut at = data.strip_prefix(b"!<arch>\n").map(|_| 8)?;
    let mut out = Vec::new();
    while at + 60 <= data.len() {
        let head = &data[at..at + 60];
        let size: usize = std::str::from_utf8(&head[48..58]).ok()?.trim().parse().ok()?;
        let body = data.get(at + 60..(at + 60).checked_add(size)?)?;
        let name = &head[..16];
        if !name.starts_with(b"/ ") && !name.starts_with(b"// ") && !name.starts_with(b"/SYM64/") {
            out.push(body);
        }
        at += 60 + size + (size & 1);
    }
    Some(out)
}

/// The fingerprint of the static runtime in `data`: an archive (`libcudart_static.a`) or one
/// relocatable object, whose runtime entry points must all lie in one section.
pub fn fingerprint_archive(version: &str, data: &[u8]) -> Result<Fingerprint, FingerprintError> {
    let members = archive_members(data).unwrap_or_else(|| vec![data]);
    let mut found: Vec<(usize, usize)> = Vec::new();
    let mut result = None;
    let mut last_err = None;
    for (k, member) in members.iter().enumerate() {
        // ELF parsing needs the member 8-byte aligned, which its place in an archive is not
        // always.
        let mut buf = vec![0u8; member.len() + 8];
        let at = buf.as_ptr().align_offset(8);
        buf[at..at + member.len()].copy_from_slice(member);
        let member = &buf[at..at + member.len()];
        let file = match object::File::parse(member) {
            Ok(f) => f,
            Err(e) => {
                last_err = Some(e);
                continue;
            }
        };
        let mut by_section: std::collections::BTreeMap<usize, Vec<Entry>> = Default::default();
        for sym in file.symbols() {
            let (Ok(name), Some(sec)) = (sym.name(), sym.section_index()) else { continue };
            if sym.kind() == SymbolKind::Text && sym.is_definition() && runtime_name(name) {
                by_section.entry(sec.0).or_default().push((name.to_owned(), sym.address(), sym.size()));
            }
        }
        for (sec, funcs) in by_section {
            found.push((k, sec));
            let section = file.section_by_index(SectionIndex(sec)).map_err(FingerprintError::Parse)?;
            let code = section.data().map_err(FingerprintError::Parse)?;
            let relocs = section.relocations().map(|(off, r)| match r.flags() {
                RelocationFlags::Elf { r_type } => (off, r_type),
                _ => (off, u32::MAX),
            });
            result = Some(fingerprint_code(version, code, relocs, &funcs));
        }
    }
    match (found.len(), result) {
        (1, Some(r)) => r,
        (0, _) => match last_err {
            Some(e) if members.len() == 1 => Err(FingerprintError::Parse(e)),
            _ => Err(FingerprintError::NoRuntime),
        },
        (n, _) => Err(FingerprintError::Scattered { sections: n }),
    }
}

impl Fingerprint {
    /// The text form (checked in, one file per version).
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "{MAGIC}\n# Generated by `crum cudart-fingerprint` (scripts/cudart-fingerprints.sh); do not edit.\n\
             # f NAME OFFSET SIZE HASH MASKED(start+len,...): hexadecimal, see cli/src/fingerprint.rs\n\
             version {}\ntext {:x}\nanchor {:x} ",
            self.version, self.text_len, self.anchor_off
        );
        self.anchor.iter().for_each(|b| {
            let _ = write!(s, "{b:02x}");
        });
        s.push('\n');
        for f in &self.funcs {
            let masked = if f.masked.is_empty() {
                "-".to_owned()
            } else {
                f.masked.iter().map(|(a, l)| format!("{a:x}+{l:x}")).collect::<Vec<_>>().join(",")
            };
            let _ = writeln!(s, "f {} {:x} {:x} {:016x} {masked}", f.name, f.off, f.size, f.hash);
        }
        s
    }

    /// Reads [`Fingerprint::to_text`]'s form.
    pub fn from_text(text: &str) -> Result<Fingerprint, FingerprintError> {
        let bad = |line: usize, what: &str| FingerprintError::Syntax { line, what: what.to_owned() };
        let hex = |line: usize, s: &str| u64::from_str_radix(s, 16).map_err(|_| bad(line, "bad number"));
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l)).filter(|(_, l)| !l.starts_with('#'));
        if lines.next().map(|(_, l)| l) != Some(MAGIC) {
            return Err(bad(1, "not a crum fingerprint (first line)"));
        }
        let mut fp = Fingerprint { version: String::new(), text_len: 0, anchor_off: 0, anchor: Vec::new(), funcs: Vec::new() };
        for (n, line) in lines {
            let w: Vec<&str> = line.split_ascii_whitespace().collect();
            match w.as_slice() {
                [] => {}
                ["version", v] => fp.version = (*v).to_owned(),
                ["text", len] => fp.text_len = hex(n, len)?,
                ["anchor", off, bytes] => {
                    fp.anchor_off = hex(n, off)?;
                    fp.anchor = (0..bytes.len() / 2)
                        .map(|i| bytes.get(2 * i..2 * i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
                        .collect::<Option<_>>()
                        .ok_or_else(|| bad(n, "bad anchor bytes"))?;
                }
                ["f", name, off, size, hash, masked] => {
                    let masked = if *masked == "-" {
                        Vec::new()
                    } else {
                        masked
                            .split(',')
                            .map(|r| {
                                let (a, l) = r.split_once('+').ok_or_else(|| bad(n, "bad mask"))?;
                                Ok((hex(n, a)? as u32, hex(n, l)? as u32))
                            })
                            .collect::<Result<_, FingerprintError>>()?
                    };
                    fp.funcs.push(FuncPrint {
                        name: (*name).to_owned(),
                        off: hex(n, off)?,
                        size: hex(n, size)?,
                        masked,
                        hash: hex(n, hash)?,
                    });
                }
                _ => return Err(bad(n, "unknown line")),
            }
        }
        let end_ok = |off: u64, len: u64| off.checked_add(len).is_some_and(|e| e <= fp.text_len);
        if fp.version.is_empty()
            || fp.anchor.len() != ANCHOR_LEN
            || !end_ok(fp.anchor_off, ANCHOR_LEN as u64)
            || fp.funcs.is_empty()
            || !fp.funcs.iter().all(|f| {
                end_ok(f.off, f.size) && f.masked.iter().all(|&(a, l)| (a as u64).saturating_add(l as u64) <= f.size)
            })
        {
            return Err(bad(0, "incomplete or out of range"));
        }
        Ok(fp)
    }

    /// Whether function `f` is at `at` of `code`.
    fn matches(f: &FuncPrint, code: &[u8], at: usize) -> bool {
        let Some(bytes) = at.checked_add(f.size as usize).and_then(|end| code.get(at..end)) else {
            return false;
        };
        let mut mask = vec![false; bytes.len()];
        for &(a, l) in &f.masked {
            mask[a as usize..(a + l) as usize].iter_mut().for_each(|m| *m = true);
        }
        masked_hash(bytes, &mask) == f.hash
    }
}

/// The built-in fingerprints, then those of `CRUM_CUDART_STATIC`'s archives (colon-separated
/// paths, each named by its path).
pub fn known() -> anyhow::Result<Vec<Fingerprint>> {
    use anyhow::Context as _;
    let mut all = Vec::new();
    for (file, text) in BUILT_IN {
        all.push(Fingerprint::from_text(text).with_context(|| format!("built-in fingerprint {file}"))?);
    }
    if let Some(paths) = std::env::var_os("CRUM_CUDART_STATIC") {
        for p in std::env::split_paths(&paths).filter(|p| !p.as_os_str().is_empty()) {
            let data = std::fs::read(&p).with_context(|| format!("CRUM_CUDART_STATIC: reading {}", p.display()))?;
            let fp = fingerprint_archive(&p.display().to_string(), &data)
                .with_context(|| format!("CRUM_CUDART_STATIC: fingerprinting {}", p.display()))?;
            all.push(fp);
        }
    }
    Ok(all)
}

/// The runtime found in an executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub version: String,
    /// (name, link-time address, size) of every entry point.
    pub funcs: Vec<Entry>,
}

/// Why no runtime was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocateError {
    #[error("its static CUDA runtime matches none of crum's fingerprints (of CUDA {})", .known.join(", "))]
    Unknown { known: Vec<String> },
    #[error(
        "its static CUDA runtime looks like CUDA {version}'s, but {} of its {total} entry points differ: {}",
        .missing.len(), .missing.join(" ")
    )]
    Partial { version: String, total: usize, missing: Vec<String> },
    #[error("CUDA {version}'s static runtime matches at {} places ({}): crum cannot tell which is the program's",
        .at.len(), .at.iter().map(|a| format!("{a:#x}")).collect::<Vec<_>>().join(", "))]
    Ambiguous { version: String, at: Vec<u64> },
}

/// A block of code of the executable: its bytes and the address of the first.
pub struct CodeRange<'a> {
    pub addr: u64,
    pub bytes: &'a [u8],
}

/// The executable segments (`PF_X` program headers) of an ELF file.
pub fn code_ranges(data: &[u8]) -> Vec<CodeRange<'_>> {
    let Ok(elf) = ElfFile64::<object::Endianness>::parse(data) else {
        return Vec::new();
    };
    elf.segments()
        .filter(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
        .filter_map(|s| Some(CodeRange { addr: s.address(), bytes: s.data().ok()? }))
        .collect()
}

/// Finds one of `prints`' runtimes in `code`: the one position where every entry point of a
/// fingerprint matches. With none, the partial match that matched most (at least half its
/// functions) is reported by name, else that none is known.
pub fn locate(code: &[CodeRange<'_>], prints: &[Fingerprint]) -> Result<Located, LocateError> {
    let mut best: Option<LocateError> = None;
    let mut best_hits = 0;
    for fp in prints {
        let mut full = Vec::new();
        for range in code {
            for hit in memchr::memmem::find_iter(range.bytes, &fp.anchor) {
                let Some(base) = hit.checked_sub(fp.anchor_off as usize) else { continue };
                let missing: Vec<&FuncPrint> =
                    fp.funcs.iter().filter(|f| !Fingerprint::matches(f, range.bytes, base + f.off as usize)).collect();
                if missing.is_empty() {
                    full.push(range.addr + base as u64);
                } else {
                    let hits = fp.funcs.len() - missing.len();
                    if hits * 2 >= fp.funcs.len() && hits > best_hits {
                        best_hits = hits;
                        best = Some(LocateError::Partial {
                            version: fp.version.clone(),
                            total: fp.funcs.len(),
                            missing: missing.iter().map(|f| f.name.clone()).collect(),
                        });
                    }
                }
            }
        }
        match full.as_slice() {
            [] => {}
            [base] => {
                return Ok(Located {
                    version: fp.version.clone(),
                    funcs: fp.funcs.iter().map(|f| (f.name.clone(), base + f.off, f.size)).collect(),
                })
            }
            _ => return Err(LocateError::Ambiguous { version: fp.version.clone(), at: full }),
        }
    }
    Err(best.unwrap_or_else(|| LocateError::Unknown { known: prints.iter().map(|f| f.version.clone()).collect() }))
}

/// The CUDA release that compiled the program's kernels, told by the PTX ISA version of its
/// `.nv_fatbin` (nvcc strips the PTX's header comments, which name the release): PTX ISA 9.m
/// is CUDA 13.m's, the toolkit whose runtime was most likely linked with it. Other ISA
/// versions are named as such.
pub fn kernels_toolkit(data: &[u8]) -> Option<String> {
    let file = object::File::parse(data).ok()?;
    let fatbin = file.section_by_name(".nv_fatbin")?.data().ok()?;
    let images = crum_ptx::fatbin::extract_ptx(fatbin).ok()?;
    let isa = images
        .iter()
        .filter_map(|img| {
            let v = img.ptx.lines().find_map(|l| l.trim().strip_prefix(".version "))?;
            let (major, minor) = v.trim().split_once('.')?;
            Some((major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?))
        })
        .max()?;
    Some(match isa {
        (9, m) => format!("CUDA 13.{m} (PTX ISA 9.{m})"),
        (major, minor) => format!("PTX ISA {major}.{minor}"),
    })
}

/// The hand-over to `preload/src/static_runtime.c` (`CRUM_STATIC_RUNTIME`): the executable's
/// identity (device, inode, size, modification time in s and ns, so a child that executes
/// another program ignores it) and each entry point as `name=address+size` (hexadecimal,
/// link-time addresses).
pub fn handover(path: &std::path::Path, found: &Located) -> std::io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    let mut s = format!("{}:{}:{}:{}:{}|", m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec());
    for (k, (name, addr, size)) in found.funcs.iter().enumerate() {
        if k > 0 {
            s.push(',');
        }
        let _ = write!(s, "{name}={addr:x}+{size:x}");
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pseudo-random bytes (xorshift), so anchors are unique.
    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// A code block of 4 KiB with two functions and relocations in each.
    fn block() -> (Vec<u8>, Vec<(u64, u32)>, Vec<Entry>) {
        let code = noise(4096, 7);
        let relocs = vec![(0x105, object::elf::R_X86_64_PLT32), (0x230, object::elf::R_X86_64_REX_GOTPCRELX)];
        let funcs = vec![("cudaMalloc".to_owned(), 0x100, 0x40), ("__cudaRegisterFatBinary".to_owned(), 0x200, 0x80)];
        (code, relocs, funcs)
    }

    /// `code` placed at `at` in a program of `len` noise bytes, its relocated fields changed.
    fn program_with(code: &[u8], relocs: &[(u64, u32)], len: usize, at: usize) -> Vec<u8> {
        let mut prog = noise(len, 99);
        prog[at..at + code.len()].copy_from_slice(code);
        for &(off, _) in relocs {
            prog[at + off as usize..at + off as usize + 4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        }
        prog
    }

    #[test]
    fn relocated_fields_are_masked_and_the_functions_found_at_their_offsets() {
        let (code, relocs, funcs) = block();
        let fp = fingerprint_code("13.5.37", &code, relocs.iter().copied(), &funcs).unwrap();
        assert_eq!(fp.funcs[0].masked, vec![(5, 4)]);
        // REX_GOTPCRELX: the REX prefix, opcode and ModRM before the field too.
        assert_eq!(fp.funcs[1].masked, vec![(0x2d, 7)]);

        let prog = program_with(&code, &relocs, 20000, 5000);
        let found = locate(&[CodeRange { addr: 0x40_0000, bytes: &prog }], &[fp]).unwrap();

        assert_eq!(found.version, "13.5.37");
        assert_eq!(
            found.funcs,
            vec![
                ("cudaMalloc".to_owned(), 0x40_0000 + 5000 + 0x100, 0x40),
                ("__cudaRegisterFatBinary".to_owned(), 0x40_0000 + 5000 + 0x200, 0x80)
            ]
        );
    }

    #[test]
    fn a_changed_unrelocated_byte_is_reported_by_function_name() {
        let (code, relocs, funcs) = block();
        let fp = fingerprint_code("13.5.37", &code, relocs.iter().copied(), &funcs).unwrap();
        let mut prog = program_with(&code, &relocs, 20000, 5000);
        prog[5000 + 0x210] ^= 0xff;

        let err = locate(&[CodeRange { addr: 0, bytes: &prog }], &[fp]).unwrap_err();

        assert_eq!(
            err,
            LocateError::Partial { version: "13.5.37".into(), total: 2, missing: vec!["__cudaRegisterFatBinary".into()] }
        );
        assert!(err.to_string().contains("1 of its 2 entry points differ: __cudaRegisterFatBinary"), "{err}");
    }

    #[test]
    fn two_copies_of_the_runtime_are_ambiguous() {
        let (code, relocs, funcs) = block();
        let fp = fingerprint_code("13.5.37", &code, relocs.iter().copied(), &funcs).unwrap();
        let mut prog = program_with(&code, &relocs, 20000, 1000);
        prog[12000..12000 + code.len()].copy_from_slice(&code);

        let err = locate(&[CodeRange { addr: 0x1000, bytes: &prog }], &[fp]).unwrap_err();

        assert_eq!(err, LocateError::Ambiguous { version: "13.5.37".into(), at: vec![0x1000 + 1000, 0x1000 + 12000] });
    }

    #[test]
    fn a_program_without_the_runtime_names_the_versions_known() {
        let (code, relocs, funcs) = block();
        let fp = fingerprint_code("13.5.37", &code, relocs.iter().copied(), &funcs).unwrap();
        let prog = noise(20000, 3);

        let err = locate(&[CodeRange { addr: 0, bytes: &prog }], &[fp]).unwrap_err();

        assert_eq!(err, LocateError::Unknown { known: vec!["13.5.37".into()] });
    }

    #[test]
    fn the_text_form_round_trips_and_rejects_out_of_range_functions() {
        let (code, relocs, funcs) = block();
        let fp = fingerprint_code("13.5.37", &code, relocs.iter().copied(), &funcs).unwrap();

        let text = fp.to_text();

        assert_eq!(Fingerprint::from_text(&text).unwrap(), fp);
        let broken = text.replace("f cudaMalloc 100 40", "f cudaMalloc ffff 40");
        assert!(Fingerprint::from_text(&broken).is_err());
    }

    #[test]
    fn padding_is_never_an_anchor() {
        let mut code = vec![0xccu8; 4096];
        code[100..100 + ANCHOR_LEN].copy_from_slice(&noise(ANCHOR_LEN, 5));
        let mask = vec![false; code.len()];

        assert_eq!(choose_anchor(&code, &mask), Some(96));
    }

    /// The toolkit `scripts/setup-cuda.sh` installed (`.cuda-venv`): its archive and version
    /// (the wheel's), when there is one.
    fn installed_runtime() -> Option<(String, std::path::PathBuf)> {
        let site = std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cuda-venv/lib"))
            .ok()?
            .flatten()
            .map(|e| e.path().join("site-packages"))
            .find(|p| p.is_dir())?;
        let version = std::fs::read_dir(&site).ok()?.flatten().find_map(|e| {
            let name = e.file_name().into_string().ok()?;
            Some(name.strip_prefix("nvidia_cuda_runtime-")?.strip_suffix(".dist-info")?.to_owned())
        })?;
        let archive = std::fs::read_dir(site.join("nvidia"))
            .ok()?
            .flatten()
            .map(|e| e.path().join("lib/libcudart_static.a"))
            .find(|p| p.is_file())?;
        Some((version, archive))
    }

    /// The installed toolkit's runtime has its fingerprint checked in, as its archive gives
    /// it (when the toolkit moves on: scripts/cudart-fingerprints.sh, then list the file in
    /// `BUILT_IN`). Where no toolkit is installed there is nothing to compare.
    #[test]
    fn the_installed_runtimes_fingerprint_is_checked_in() {
        let Some((version, archive)) = installed_runtime() else {
            eprintln!("no .cuda-venv toolkit: nothing to compare");
            return;
        };
        let fp = fingerprint_archive(&version, &std::fs::read(&archive).unwrap()).unwrap();

        let file = format!("{version}.txt");
        let (_, text) = BUILT_IN
            .iter()
            .find(|(f, _)| *f == file)
            .unwrap_or_else(|| panic!("no checked-in fingerprint for CUDA {version}: run scripts/cudart-fingerprints.sh"));
        assert_eq!(Fingerprint::from_text(text).unwrap(), fp, "regenerate with scripts/cudart-fingerprints.sh");
        assert_eq!(fp.to_text(), *text);
    }

    #[test]
    fn the_built_in_fingerprints_parse() {
        let all = known().unwrap();
        assert!(all.iter().any(|f| f.version == "13.5.37" && f.funcs.iter().any(|f| f.name == "cudaMalloc")));
    }
}
