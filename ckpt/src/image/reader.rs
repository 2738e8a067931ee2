//! The image reader. An image is untrusted input: every size is capped, every offset and
//! length checked (checked arithmetic), every file's size compared with the inventory, the
//! inventory, region table and metadata sections checksummed as wholes and memory per chunk.
//!
//! # Safety
//! The unsafe code is `madvise(MADV_POPULATE_WRITE)` and `posix_fadvise` hints (the madvise
//! range is rounded inward to whole pages inside a live `&mut [u8]` owned by the caller, and
//! populating never changes memory contents), zstd's static decompression context, and a
//! fallible zeroed allocation handed to a `Vec` with the layout it was made with.
#![allow(unsafe_code)]

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use zstd::zstd_safe::{self, zstd_sys};

use super::chain::{decode_chain, decode_chunks, name_key, ChainEntry, SECTION_CHAIN, SECTION_CHUNKS};
use super::format::*;
use super::{ImageError, SECTION_PAGES, SECTION_REGIONS};

/// The decoded `inventory` file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Inventory {
    pub major: u16,
    pub minor: u16,
    pub producer: String,
    pub arch: String,
    pub kernel_release: String,
    pub page_size: u32,
    pub created_unix_ms: u64,
    pub sections: Vec<SectionInfo>,
    /// The inventory's own checksum (its last four bytes): names this image in a chain.
    pub checksum: u32,
}

/// One entry of the inventory's section list.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SectionInfo {
    pub name: String,
    /// Restoring needs it: a reader that does not understand it must refuse the image.
    pub required: bool,
    /// Protected per chunk (the `pages` file) rather than by `crc32`.
    pub chunked: bool,
    /// File name inside the image directory.
    pub file: String,
    pub size: u64,
    pub crc32: u32,
}

/// One memory chunk as recorded in the region table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ChunkInfo {
    /// Offset of the stored bytes in the `pages` file.
    pub offset: u64,
    pub stored_len: u32,
    /// Bytes of the chunk's non-zero pages (uncompressed).
    pub packed_len: u32,
    /// crc32 of the stored bytes.
    pub crc32: u32,
    pub encoding: Encoding,
    /// Where the bytes are: 0 in this image, `i` in image `i` (1-based) of its chain. Once
    /// the reader has resolved a reference ([`Encoding::Ancestor`]), `offset`, `stored_len`,
    /// `crc32` and `encoding` are those of the chunk in that image.
    pub file: u8,
    /// Bit `i` set: page `i` of the chunk is stored (non-zero); clear: the page is zero.
    #[serde(skip)]
    pub bitmap: Vec<u8>,
}

impl ChunkInfo {
    /// Whether page `page` of the chunk is stored (else it is zero).
    pub fn present(&self, page: usize) -> bool {
        self.bitmap[page / 8] & (1 << (page % 8)) != 0
    }
}

/// One memory region as recorded in the region table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RegionInfo {
    pub start: u64,
    pub len: u64,
    pub file_offset: u64,
    pub prot: u32,
    pub flags: u32,
    /// File path or pseudo name, as bytes (paths need not be UTF-8).
    #[serde(skip)]
    pub name: Vec<u8>,
    /// The contents are stored (else only the description).
    pub has_data: bool,
    #[serde(skip)]
    pub chunks: Vec<ChunkInfo>,
}

impl RegionInfo {
    /// The name for display.
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
    /// Bytes this region occupies in this image's `pages` file (chunks kept in earlier
    /// images of the chain not counted).
    pub fn stored_bytes(&self) -> u64 {
        self.chunks.iter().filter(|c| c.file == 0).map(|c| u64::from(c.stored_len)).sum()
    }
    /// Bytes of its non-zero pages.
    pub fn nonzero_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| u64::from(c.packed_len)).sum()
    }
}

/// An open image.
pub struct ImageReader {
    dir: PathBuf,
    inventory: Inventory,
    regions: Vec<RegionInfo>,
    chunk_size: u32,
    page_size: u32,
    /// This image's `pages` file, then those of its chain (index = [`ChunkInfo::file`]).
    pages: Vec<File>,
    /// The paths of `pages`, for messages.
    page_paths: Vec<PathBuf>,
    /// The images this one keeps chunks in (oldest first; empty for a full image).
    chain: Vec<ChainEntry>,
    work: ChunkWork,
}

/// Opens a file of the image: never through a symlink, never a FIFO or device (an image is
/// untrusted and must not make the reader block or read elsewhere).
fn open_image_file(path: &Path, file: &str) -> Result<(File, u64), ImageError> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| ImageError::io(path, e))?;
    let md = f.metadata().map_err(|e| ImageError::io(path, e))?;
    if !md.is_file() {
        return Err(ImageError::corrupt(file, "is not a regular file"));
    }
    Ok((f, md.len()))
}

fn read_capped(
    path: &Path,
    file: &str,
    cap: u64,
    expected: Option<u64>,
) -> Result<Vec<u8>, ImageError> {
    let (mut f, len) = open_image_file(path, file)?;
    if let Some(exp) = expected {
        if len < exp {
            return Err(ImageError::Truncated {
                file: file.to_string(),
                expected: exp,
                found: len,
            });
        }
        if len > exp {
            return Err(ImageError::corrupt(
                file,
                format!("{len} bytes where the inventory says {exp}"),
            ));
        }
    }
    if len > cap {
        return Err(ImageError::corrupt(
            file,
            format!("{len} bytes is more than the limit of {cap}"),
        ));
    }
    let mut v = Vec::with_capacity(len as usize);
    f.read_to_end(&mut v).map_err(|e| ImageError::io(path, e))?;
    if v.len() as u64 != len {
        return Err(ImageError::Truncated {
            file: file.to_string(),
            expected: len,
            found: v.len() as u64,
        });
    }
    Ok(v)
}

fn plain_file_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.contains('/') && !name.contains(char::is_control)
}

fn parse_inventory(buf: &[u8]) -> Result<Inventory, ImageError> {
    const F: &str = "inventory";
    if buf.len() < 8 || buf[..8] != INVENTORY_MAGIC {
        return Err(ImageError::BadMagic { file: F.into() });
    }
    let mut c = Cursor::new(buf, F);
    c.bytes(8)?;
    let major = c.u16()?;
    let minor = c.u16()?;
    if major != FORMAT_MAJOR || minor > FORMAT_MINOR {
        return Err(ImageError::Version {
            major,
            minor,
            our_major: FORMAT_MAJOR,
            our_minor: FORMAT_MINOR,
        });
    }
    let count = c.u32()? as usize;
    if count > MAX_SECTIONS {
        return Err(ImageError::corrupt(
            F,
            format!("{count} sections is more than the limit of {MAX_SECTIONS}"),
        ));
    }
    let expected = INVENTORY_HEADER_LEN + count * SECTION_ENTRY_LEN + 4;
    if buf.len() < expected {
        return Err(ImageError::Truncated {
            file: F.into(),
            expected: expected as u64,
            found: buf.len() as u64,
        });
    }
    if buf.len() > expected {
        return Err(ImageError::corrupt(
            F,
            format!("{} bytes after the section list", buf.len() - expected),
        ));
    }
    let stored_crc = u32::from_le_bytes(buf[expected - 4..].try_into().expect("4 bytes"));
    if crc32fast::hash(&buf[..expected - 4]) != stored_crc {
        return Err(ImageError::Checksum { what: F.into() });
    }
    let page_size = c.u32()?;
    if !page_size.is_power_of_two() || !(MIN_PAGE..=MAX_PAGE).contains(&page_size) {
        return Err(ImageError::corrupt(
            F,
            format!("page size {page_size} is not supported"),
        ));
    }
    c.u32()?;
    let created_unix_ms = c.u64()?;
    let producer = get_str(c.bytes(PRODUCER_LEN)?, F, "producer")?;
    let arch = get_str(c.bytes(ARCH_LEN)?, F, "architecture")?;
    let kernel_release = get_str(c.bytes(KERNEL_LEN)?, F, "kernel release")?;
    if arch != std::env::consts::ARCH {
        return Err(ImageError::Architecture {
            image: arch,
            ours: std::env::consts::ARCH,
        });
    }
    let mut sections: Vec<SectionInfo> = Vec::with_capacity(count);
    for _ in 0..count {
        let name = get_str(c.bytes(SECTION_NAME_FIELD)?, F, "section name")?;
        let flags = c.u32()?;
        let crc32 = c.u32()?;
        let size = c.u64()?;
        let file = get_str(c.bytes(SECTION_FILE_FIELD)?, F, "section file")?;
        if name.is_empty() || name.contains(char::is_control) || !plain_file_name(&file) {
            return Err(ImageError::corrupt(
                F,
                format!("section `{}` has an invalid name or file name `{}`", name.escape_debug(), file.escape_debug()),
            ));
        }
        if sections.iter().any(|s| s.name == name || s.file == file) {
            return Err(ImageError::corrupt(
                F,
                format!("section `{name}` or its file appears twice"),
            ));
        }
        if flags & !SECTION_FLAGS != 0 {
            return Err(ImageError::corrupt(
                F,
                format!("section `{name}` has unknown flags {:#x}", flags & !SECTION_FLAGS),
            ));
        }
        // Only `pages` is protected per chunk; every other file has its checksum here.
        if (flags & SECTION_CHUNKED != 0) != (name == SECTION_PAGES) {
            return Err(ImageError::corrupt(
                F,
                format!("section `{name}` is wrongly marked as chunked or not"),
            ));
        }
        sections.push(SectionInfo {
            name,
            required: flags & SECTION_REQUIRED != 0,
            chunked: flags & SECTION_CHUNKED != 0,
            file,
            size,
            crc32,
        });
    }
    Ok(Inventory {
        major,
        minor,
        producer,
        arch,
        kernel_release,
        page_size,
        created_unix_ms,
        sections,
        checksum: stored_crc,
    })
}

/// The chain of the image in `dir` (oldest first; empty for a full image), read from its
/// inventory and `chain` section only: for rotation, which must not remove an image that a
/// kept one keeps memory in.
pub fn read_chain(dir: &Path) -> Result<Vec<ChainEntry>, ImageError> {
    let inv = read_capped(&dir.join("inventory"), "inventory", MAX_INVENTORY_BYTES, None)?;
    let inventory = parse_inventory(&inv)?;
    let Some(s) = inventory.sections.iter().find(|s| s.name == SECTION_CHAIN) else {
        return Ok(Vec::new());
    };
    let data = read_capped(&dir.join(&s.file), &s.file, MAX_SECTION_FILE, Some(s.size))?;
    if crc32fast::hash(&data) != s.crc32 {
        return Err(ImageError::Checksum { what: format!("section `{SECTION_CHAIN}`") });
    }
    decode_chain(&data)
}

/// Parses the region table and checks each chunk against the `pages` file's size.
fn parse_regions(
    buf: &[u8],
    page_size: u32,
    pages_len: u64,
) -> Result<(u32, Vec<RegionInfo>), ImageError> {
    const F: &str = "regions";
    if buf.len() < 8 || buf[..8] != REGIONS_MAGIC {
        return Err(ImageError::BadMagic { file: F.into() });
    }
    if buf.len() < REGIONS_HEADER_LEN + REGIONS_TRAILER_LEN {
        return Err(ImageError::Truncated {
            file: F.into(),
            expected: (REGIONS_HEADER_LEN + REGIONS_TRAILER_LEN) as u64,
            found: buf.len() as u64,
        });
    }
    let body_end = buf.len() - REGIONS_TRAILER_LEN;
    let mut t = Cursor::new(&buf[body_end..], F);
    if t.bytes(8)? != REGIONS_END_MAGIC {
        return Err(ImageError::corrupt(F, "trailer missing (file cut short?)"));
    }
    let count = t.u32()?;
    if count > MAX_REGIONS {
        return Err(ImageError::corrupt(
            F,
            format!("{count} regions is more than the limit of {MAX_REGIONS}"),
        ));
    }
    let mut c = Cursor::new(&buf[..body_end], F);
    c.bytes(8)?;
    let chunk_size = c.u32()?;
    let ps = c.u32()?;
    let bm = c.u32()? as usize;
    c.bytes(REGIONS_HEADER_LEN - 20)?;
    if !chunk_size.is_power_of_two() || !(MIN_CHUNK..=MAX_CHUNK).contains(&chunk_size) {
        return Err(ImageError::corrupt(
            F,
            format!("chunk size {chunk_size} is not supported"),
        ));
    }
    if ps != page_size || chunk_size < ps || bm != bitmap_bytes(chunk_size, ps) {
        return Err(ImageError::corrupt(
            F,
            "page size or bitmap size disagrees with the inventory",
        ));
    }
    let rec_len = chunk_record_len(bm);
    let max_stored = zstd_safe::compress_bound(chunk_size as usize) as u64;
    let mut regions = Vec::with_capacity(count as usize);
    for ri in 0..count as usize {
        let start = c.u64()?;
        let len = c.u64()?;
        let file_offset = c.u64()?;
        let prot = c.u32()?;
        let flags = c.u32()?;
        let name_len = c.u32()? as usize;
        let dflags = c.u32()?;
        let nchunks = c.u32()? as u64;
        c.u32()?;
        if name_len > MAX_NAME_LEN {
            return Err(ImageError::corrupt(
                F,
                format!("region {ri} has a {name_len}-byte name"),
            ));
        }
        if start.checked_add(len).is_none() {
            return Err(ImageError::corrupt(
                F,
                format!("region {ri} wraps around the address space"),
            ));
        }
        let name = c.bytes(name_len)?.to_vec();
        c.bytes(name_len.next_multiple_of(8) - name_len)?;
        let has_data = dflags & REGION_HAS_DATA != 0;
        let want = if has_data {
            len.div_ceil(u64::from(chunk_size))
        } else {
            0
        };
        if nchunks != want {
            return Err(ImageError::corrupt(
                F,
                format!("region {ri} has {nchunks} chunks, expected {want}"),
            ));
        }
        // Each chunk record takes bytes of this file, so this bounds the allocation too.
        if nchunks.saturating_mul(rec_len as u64) > c.remaining() as u64 {
            return Err(ImageError::corrupt(
                F,
                format!("region {ri}: chunk table runs past the end"),
            ));
        }
        let mut chunks = Vec::with_capacity(nchunks as usize);
        for ci in 0..nchunks {
            let clen = (len - ci * u64::from(chunk_size)).min(u64::from(chunk_size));
            let npages = clen.div_ceil(u64::from(ps)) as usize;
            let mut r = Cursor::new(c.bytes(rec_len)?, F);
            let offset = r.u64()?;
            let stored_len = r.u32()?;
            let packed_len = r.u32()?;
            let crc32 = r.u32()?;
            let enc = r.u8()?;
            let home = r.u8()?;
            r.bytes(2)?;
            let bitmap = r.bytes(bm)?.to_vec();
            let bad = |d: &str| ImageError::corrupt(F, format!("chunk {ci} of region {ri}: {d}"));
            let encoding = Encoding::from_u8(enc).ok_or_else(|| bad("unknown encoding"))?;
            let mut expect_packed = 0u64;
            for p in 0..bm * 8 {
                if bitmap[p / 8] & (1 << (p % 8)) != 0 {
                    if p >= npages {
                        return Err(bad("bitmap marks pages past the chunk's end"));
                    }
                    expect_packed += (clen - p as u64 * u64::from(ps)).min(u64::from(ps));
                }
            }
            if u64::from(packed_len) != expect_packed {
                return Err(bad("stored page count disagrees with its bitmap"));
            }
            match encoding {
                Encoding::Zero if stored_len != 0 || packed_len != 0 => {
                    return Err(bad("zero chunk with data"))
                }
                Encoding::Raw if stored_len != packed_len || stored_len == 0 => {
                    return Err(bad("raw chunk of wrong size"))
                }
                Encoding::Zstd
                    if stored_len == 0 || u64::from(stored_len) > max_stored || packed_len == 0 =>
                {
                    return Err(bad("compressed chunk of impossible size"))
                }
                Encoding::Ancestor if stored_len != 0 || offset != 0 || packed_len == 0 || home == 0 => {
                    return Err(bad("reference to an earlier image with stored bytes, or no image named"))
                }
                Encoding::Zero | Encoding::Raw | Encoding::Zstd if home != 0 => {
                    return Err(bad("stored chunk naming an earlier image"))
                }
                _ => {}
            }
            if offset
                .checked_add(u64::from(stored_len))
                .is_none_or(|e| e > pages_len)
            {
                return Err(bad("lies outside the pages file"));
            }
            chunks.push(ChunkInfo {
                offset,
                stored_len,
                packed_len,
                crc32,
                encoding,
                file: home,
                bitmap,
            });
        }
        regions.push(RegionInfo {
            start,
            len,
            file_offset,
            prot,
            flags,
            name,
            has_data,
            chunks,
        });
    }
    if c.remaining() != 0 {
        return Err(ImageError::corrupt(
            F,
            format!("{} unexpected bytes before the trailer", c.remaining()),
        ));
    }
    Ok((chunk_size, regions))
}

/// A zeroed buffer of `len` bytes from the global allocator, or None if it refuses (where
/// `vec![0; len]` would abort). Zeroed allocations of fresh memory are not written.
fn zeroed_vec(len: usize) -> Option<Vec<u8>> {
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(len).ok()?;
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` was allocated by the global allocator with the layout of `[u8; len]`, so
    // capacity `len` matches it; all `len` bytes are initialized (zero).
    Some(unsafe { Vec::from_raw_parts(p, len, len) })
}

/// Faults in the whole pages of `dst` in one system call before it is filled: much cheaper
/// than one page fault per 4 KiB when restoring into fresh memory. A failure (old kernel)
/// only loses the speed-up.
fn prefault(dst: &mut [u8]) {
    const P: usize = 4096;
    let start = (dst.as_mut_ptr() as usize).next_multiple_of(P);
    let end = (dst.as_mut_ptr() as usize + dst.len()) & !(P - 1);
    if end > start {
        // SAFETY: [start, end) lies inside `dst`, which we borrow mutably; MADV_POPULATE_WRITE
        // only populates page tables and does not modify the contents.
        unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                end - start,
                libc::MADV_POPULATE_WRITE,
            )
        };
    }
}

impl ImageReader {
    /// Opens the image in `dir` for inspection: checks the inventory (magic, version,
    /// architecture, checksum), the region table and file sizes. Unknown sections are listed,
    /// not refused (see [`open_for_restore`](Self::open_for_restore)).
    ///
    /// An incremental image's chain is opened too: each earlier image it keeps chunks in
    /// must be in the same directory and unchanged, and hold each such chunk with the same
    /// content hash; otherwise the image is refused, naming the image and the chunk.
    pub fn open(dir: &Path) -> Result<ImageReader, ImageError> {
        let mut r = Self::open_alone(dir)?;
        r.resolve_chain()?;
        Ok(r)
    }

    /// [`open`](Self::open) without opening the chain: chunks kept in earlier images
    /// stay unresolved ([`Encoding::Ancestor`]) and cannot be read.
    fn open_alone(dir: &Path) -> Result<ImageReader, ImageError> {
        if !dir.exists() {
            return Err(ImageError::Missing {
                path: dir.to_path_buf(),
            });
        }
        let inv_path = dir.join("inventory");
        if !dir.is_dir() || !inv_path.exists() {
            return Err(ImageError::NotAnImage {
                path: dir.to_path_buf(),
            });
        }
        let inv = read_capped(&inv_path, "inventory", MAX_INVENTORY_BYTES, None)?;
        let inventory = parse_inventory(&inv)?;
        let find = |name: &str| {
            inventory
                .sections
                .iter()
                .find(|s| s.name == name)
                .cloned()
                .ok_or_else(|| ImageError::MissingSection {
                    name: name.to_string(),
                })
        };
        let regions_sec = find(SECTION_REGIONS)?;
        let pages_sec = find(SECTION_PAGES)?;
        let pages_path = dir.join(&pages_sec.file);
        let (pages, pages_len) = open_image_file(&pages_path, &pages_sec.file)?;
        if pages_len < pages_sec.size {
            return Err(ImageError::Truncated {
                file: pages_sec.file.clone(),
                expected: pages_sec.size,
                found: pages_len,
            });
        }
        if pages_len > pages_sec.size {
            return Err(ImageError::corrupt(
                &pages_sec.file,
                "larger than the inventory says",
            ));
        }
        let rbuf = read_capped(
            &dir.join(&regions_sec.file),
            &regions_sec.file,
            MAX_REGIONS_FILE,
            Some(regions_sec.size),
        )?;
        if crc32fast::hash(&rbuf) != regions_sec.crc32 {
            return Err(ImageError::Checksum {
                what: "regions file".into(),
            });
        }
        let (chunk_size, regions) = parse_regions(&rbuf, inventory.page_size, pages_len)?;
        // SAFETY: a hint on a descriptor we own; failure is harmless.
        unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(&pages),
                0,
                0,
                libc::POSIX_FADV_SEQUENTIAL,
            )
        };
        Ok(ImageReader {
            dir: dir.to_path_buf(),
            page_size: inventory.page_size,
            inventory,
            regions,
            chunk_size,
            pages: vec![pages],
            page_paths: vec![pages_path],
            chain: Vec::new(),
            work: ChunkWork::new(),
        })
    }

    /// Opens the images of this image's chain and points every chunk kept there at its
    /// bytes (see [`open`](Self::open)).
    fn resolve_chain(&mut self) -> Result<(), ImageError> {
        let refs = self.regions.iter().flat_map(|r| &r.chunks).any(|c| c.encoding == Encoding::Ancestor);
        let Some(bytes) = self.section(SECTION_CHAIN)? else {
            if refs {
                return Err(ImageError::corrupt("regions", "chunks refer to earlier images but the image has no chain"));
            }
            return Ok(());
        };
        let chain = decode_chain(&bytes)?;
        let Some(own) = self.chunk_hashes()? else {
            return Err(ImageError::MissingSection { name: SECTION_CHUNKS.into() });
        };
        let parent = self.dir.parent().unwrap_or(Path::new("."));
        let mut ancestors = Vec::with_capacity(chain.len());
        for e in &chain {
            let path = parent.join(&e.name);
            let a = Self::open_alone(&path).map_err(|err| ImageError::Chain {
                image: path.clone(),
                detail: format!("this image keeps memory in it, and it cannot be opened: {err}"),
            })?;
            if a.inventory.checksum != e.inventory_crc || a.inventory.created_unix_ms != e.created_unix_ms {
                return Err(ImageError::Chain {
                    image: path,
                    detail: "it is not the image this one was written against (its inventory changed)".into(),
                });
            }
            let hashes = a.chunk_hashes()?.ok_or_else(|| ImageError::Chain {
                image: path.clone(),
                detail: "it has no chunk hashes".into(),
            })?;
            ancestors.push((a, hashes));
        }
        let mut k = 0;
        for ri in 0..self.regions.len() {
            let (start, nk) = (self.regions[ri].start, name_key(&self.regions[ri].name));
            for ci in 0..self.regions[ri].chunks.len() {
                let hash = own[k];
                k += 1;
                let c = &self.regions[ri].chunks[ci];
                if c.encoding != Encoding::Ancestor {
                    continue;
                }
                let clen = self.chunk_len(ri, ci);
                let at = start + ci as u64 * u64::from(self.chunk_size);
                let bad = |d: &str| ImageError::corrupt("regions", format!("chunk {ci} of region {ri} ({at:#x}): {d}"));
                let (a, hashes) =
                    ancestors.get(c.file as usize - 1).ok_or_else(|| bad("names an image past the end of the chain"))?;
                if a.chunk_size != self.chunk_size || a.page_size != self.page_size {
                    return Err(bad("its earlier image has another chunk or page size"));
                }
                // The region of the same start and name there, and where its hashes begin.
                let mut hk = 0;
                let mut found = None;
                for (aj, ar) in a.regions.iter().enumerate() {
                    if ar.start == start && name_key(&ar.name) == nk && ar.name == self.regions[ri].name {
                        found = Some((aj, hk));
                        break;
                    }
                    hk += ar.chunks.len();
                }
                let (aj, hk) = found.ok_or_else(|| bad("its earlier image has no such region"))?;
                let home = a.regions[aj]
                    .chunks
                    .get(ci)
                    .filter(|_| a.chunk_len(aj, ci) == clen)
                    .ok_or_else(|| bad("its earlier image has no such chunk"))?;
                if matches!(home.encoding, Encoding::Ancestor | Encoding::Zero)
                    || home.bitmap != c.bitmap
                    || home.packed_len != c.packed_len
                    || hashes[hk + ci] != hash
                {
                    return Err(ImageError::Chain {
                        image: a.dir.clone(),
                        detail: format!("its chunk {ci} of region {aj} ({at:#x}) is not the memory this image keeps in it"),
                    });
                }
                let file = c.file;
                let home = home.clone();
                self.regions[ri].chunks[ci] = ChunkInfo { file, ..home };
            }
        }
        for (a, _) in ancestors {
            self.pages.extend(a.pages);
            self.page_paths.extend(a.page_paths);
        }
        self.chain = chain;
        Ok(())
    }

    /// The images this one keeps chunks in, oldest first (empty for a full image).
    pub fn chain(&self) -> &[ChainEntry] {
        &self.chain
    }

    /// The content hash of every chunk (regions with data, in order), or None for an image
    /// without them (written by an older crum).
    pub fn chunk_hashes(&self) -> Result<Option<Vec<u128>>, ImageError> {
        let Some(b) = self.section(SECTION_CHUNKS)? else {
            return Ok(None);
        };
        let count = self.regions.iter().map(|r| r.chunks.len()).sum();
        decode_chunks(&b, count).map(Some)
    }


    /// Opens the image for restoring: as [`open`](Self::open), and refuses the image if it
    /// has a required section not named in `understood` (besides `regions` and `pages`).
    pub fn open_for_restore(dir: &Path, understood: &[&str]) -> Result<ImageReader, ImageError> {
        let r = Self::open(dir)?;
        for s in &r.inventory.sections {
            let known = s.name == SECTION_REGIONS
                || s.name == SECTION_PAGES
                || understood.contains(&s.name.as_str());
            if s.required && !known {
                return Err(ImageError::UnknownRequiredSection {
                    name: s.name.clone(),
                });
            }
        }
        Ok(r)
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
    pub fn inventory(&self) -> &Inventory {
        &self.inventory
    }
    pub fn regions(&self) -> &[RegionInfo] {
        &self.regions
    }
    /// Bytes of memory per chunk in this image.
    pub fn chunk_size(&self) -> u32 {
        self.chunk_size
    }

    /// The descriptors of the `pages` files this reader reads (its own, then its chain's):
    /// a process forked to go on reading must keep them open.
    pub fn page_fds(&self) -> Vec<i32> {
        self.pages.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect()
    }

    /// The `pages` file, for callers that map raw chunks instead of reading them.
    pub fn pages_file(&self) -> &File {
        &self.pages[0]
    }

    /// Offset in [`pages_file`](Self::pages_file) of chunk `ci` of region `ri` when that
    /// chunk is stored raw with every page present at a page-aligned offset: it is then an
    /// exact copy of memory and can be mapped (`mmap(MAP_PRIVATE | MAP_FIXED)`) instead of
    /// read. Mapping does not check the chunk's CRC (call [`verify`](Self::verify) first).
    pub fn mappable_chunk(&self, ri: usize, ci: usize) -> Option<u64> {
        let r = self.regions.get(ri)?;
        let c = r.chunks.get(ci)?;
        let full = c.file == 0 && c.encoding == Encoding::Raw && c.packed_len as usize == self.chunk_len(ri, ci);
        (full && c.offset % u64::from(self.page_size) == 0).then_some(c.offset)
    }

    /// The contents of metadata section `name` (checksum verified), or None if absent.
    pub fn section(&self, name: &str) -> Result<Option<Vec<u8>>, ImageError> {
        let Some(s) = self.inventory.sections.iter().find(|s| s.name == name) else {
            return Ok(None);
        };
        if s.chunked {
            return Err(ImageError::Corrupt {
                file: s.file.clone(),
                detail: format!("section `{name}` is chunked memory, not a metadata blob"),
            });
        }
        let data = read_capped(&self.dir.join(&s.file), &s.file, MAX_SECTION_FILE, Some(s.size))?;
        if crc32fast::hash(&data) != s.crc32 {
            return Err(ImageError::Checksum {
                what: format!("section `{name}`"),
            });
        }
        Ok(Some(data))
    }

    /// Fills `dst` (exactly the region's length) with region `idx`'s contents, zero pages
    /// included. A region stored without data reads as zeros.
    pub fn read_region_into(&mut self, idx: usize, dst: &mut [u8]) -> Result<(), ImageError> {
        self.read_region_impl(idx, dst, false)
    }

    /// As [`read_region_into`](Self::read_region_into) for a destination already all zero
    /// (a fresh anonymous mapping): zero pages are not touched, so they cost no memory.
    pub fn read_region_into_zeroed(
        &mut self,
        idx: usize,
        dst: &mut [u8],
    ) -> Result<(), ImageError> {
        self.read_region_impl(idx, dst, true)
    }

    /// Region `idx`'s contents in a new buffer. The buffer is asked of the allocator as
    /// zeroed memory, and a refusal is an error, not an abort: the length of a region of
    /// zero chunks is not bounded by the image's size.
    pub fn read_region(&mut self, idx: usize) -> Result<Vec<u8>, ImageError> {
        let len = self.region(idx)?.len;
        let too_big = || {
            ImageError::corrupt(
                "regions",
                format!("region {idx} is {len} bytes, more than this process can allocate"),
            )
        };
        let n = usize::try_from(len).map_err(|_| too_big())?;
        let mut v = zeroed_vec(n).ok_or_else(too_big)?;
        self.read_region_impl(idx, &mut v, true)?;
        Ok(v)
    }

    /// Reads and checks every chunk and metadata section (what `crum inspect --verify` does).
    pub fn verify(&mut self) -> Result<(), ImageError> {
        self.verify_sections()?;
        for ri in 0..self.regions.len() {
            self.verify_region(ri)?;
        }
        Ok(())
    }

    /// Reads every metadata section and checks its checksum.
    pub fn verify_sections(&self) -> Result<(), ImageError> {
        for s in self.inventory.sections.iter().filter(|s| !s.chunked && s.name != SECTION_REGIONS) {
            self.section(&s.name)?;
        }
        Ok(())
    }

    /// Reads every chunk of region `idx` (one chunk's worth of memory at a time): checks its
    /// checksum and that it decompresses to its recorded size.
    pub fn verify_region(&mut self, idx: usize) -> Result<(), ImageError> {
        self.region(idx)?;
        let mut chunk = vec![0u8; self.chunk_size as usize];
        for ci in 0..self.regions[idx].chunks.len() {
            let clen = self.chunk_len(idx, ci);
            self.read_chunk(idx, ci, &mut chunk[..clen], false)?;
        }
        Ok(())
    }

    fn region(&self, idx: usize) -> Result<&RegionInfo, ImageError> {
        self.regions.get(idx).ok_or(ImageError::NoSuchRegion {
            index: idx,
            count: self.regions.len(),
        })
    }

    /// Bytes of memory chunk `ci` of region `ri` covers (the last one may be short).
    pub fn chunk_len(&self, ri: usize, ci: usize) -> usize {
        let r = &self.regions[ri];
        let cs = u64::from(self.chunk_size);
        (r.len - ci as u64 * cs).min(cs) as usize
    }

    fn read_region_impl(
        &mut self,
        idx: usize,
        dst: &mut [u8],
        zeroed: bool,
    ) -> Result<(), ImageError> {
        let r = self.region(idx)?;
        if dst.len() as u64 != r.len {
            return Err(ImageError::DestinationSize {
                index: idx,
                len: r.len,
                dst: dst.len(),
            });
        }
        if !r.has_data {
            if !zeroed {
                dst.fill(0);
            }
            return Ok(());
        }
        let cs = self.chunk_size as usize;
        for (ci, d) in dst.chunks_mut(cs).enumerate() {
            let ctx = ChunkCtx {
                pages: &self.pages,
                paths: &self.page_paths,
                chunk_size: self.chunk_size,
                page_size: self.page_size,
            };
            ctx.read_ahead(&self.regions[idx], ci + 1);
            self.read_chunk(idx, ci, d, zeroed)?;
        }
        Ok(())
    }

    fn read_chunk(
        &mut self,
        ri: usize,
        ci: usize,
        dst: &mut [u8],
        zeroed: bool,
    ) -> Result<(), ImageError> {
        let ctx = ChunkCtx {
            pages: &self.pages,
            paths: &self.page_paths,
            chunk_size: self.chunk_size,
            page_size: self.page_size,
        };
        ctx.read_chunk(&self.regions[ri], ri, ci, dst, zeroed, &mut self.work)
    }

    /// Fills `dst` (exactly the chunk's length, [`chunk_len`](Self::chunk_len)) with chunk
    /// `ci` of region `ri`, zero pages included, checking it as a whole region read does.
    /// Chunk by chunk is how a lazy restart's page server reads (`crum_restart::lazy`).
    pub fn read_chunk_into(&mut self, ri: usize, ci: usize, dst: &mut [u8]) -> Result<(), ImageError> {
        let r = self.region(ri)?;
        if ci >= r.chunks.len() || dst.len() != self.chunk_len(ri, ci) {
            return Err(ImageError::corrupt("regions", format!("chunk {ci} of region {ri} asked with {} bytes", dst.len())));
        }
        let ctx = ChunkCtx { pages: &self.pages, paths: &self.page_paths, chunk_size: self.chunk_size, page_size: self.page_size };
        ctx.read_ahead(&self.regions[ri], ci + 1);
        self.read_chunk(ri, ci, dst, false)
    }

    /// As [`read_region_into_zeroed`](Self::read_region_into_zeroed) with `threads` threads
    /// (each reading and decompressing a contiguous share of the chunks): faster on
    /// compressed images when cores are free. The threads are joined before it returns;
    /// their stacks are mapped wherever the kernel chooses, so a restorer that maps memory
    /// at fixed addresses afterwards must account for them (or use the single-threaded call).
    pub fn read_region_into_zeroed_parallel(
        &mut self,
        idx: usize,
        dst: &mut [u8],
        threads: usize,
    ) -> Result<(), ImageError> {
        let r = self.region(idx)?;
        if dst.len() as u64 != r.len {
            return Err(ImageError::DestinationSize {
                index: idx,
                len: r.len,
                dst: dst.len(),
            });
        }
        let threads = threads.max(1);
        if !r.has_data || threads == 1 || r.chunks.len() < 2 {
            return self.read_region_impl(idx, dst, true);
        }
        let ctx = ChunkCtx {
            pages: &self.pages,
            paths: &self.page_paths,
            chunk_size: self.chunk_size,
            page_size: self.page_size,
        };
        let region = &self.regions[idx];
        let mut slices: Vec<(usize, &mut [u8])> = dst
            .chunks_mut(self.chunk_size as usize)
            .enumerate()
            .collect();
        let per = slices.len().div_ceil(threads);
        std::thread::scope(|sc| {
            let workers: Vec<_> = slices
                .chunks_mut(per)
                .map(|share| {
                    sc.spawn(move || -> Result<(), ImageError> {
                        let mut work = ChunkWork::new();
                        for (ci, d) in share.iter_mut() {
                            ctx.read_ahead(region, *ci + 1);
                            ctx.read_chunk(region, idx, *ci, d, true, &mut work)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            workers
                .into_iter()
                .try_for_each(|w| w.join().expect("image reader thread panicked"))
        })
    }
}

/// Reusable buffers and decompression context of one reading thread.
struct ChunkWork {
    buf: Vec<u8>,
    scratch: Vec<u8>,
    dctx: Dctx,
}

impl ChunkWork {
    fn new() -> ChunkWork {
        ChunkWork {
            buf: Vec::new(),
            scratch: Vec::new(),
            dctx: Dctx::new(),
        }
    }
}

/// A zstd decompression context on a workspace of ours, so that zstd never calls `malloc`:
/// a restored process opens its image while its threads are still stopped, possibly inside
/// `malloc` holding its locks (the writer's context is made the same way).
struct Dctx {
    _mem: Vec<u64>,
    ctx: *mut zstd_sys::ZSTD_DCtx,
}

impl Dctx {
    fn new() -> Dctx {
        // SAFETY: pure function.
        let bytes = unsafe { zstd_sys::ZSTD_estimateDCtxSize() };
        let mut mem = vec![0u64; bytes.div_ceil(8) + 1];
        // SAFETY: the workspace is 8-aligned, at least `bytes` long, owned by this value and
        // never reallocated; zstd keeps it as the context's only memory.
        let ctx = unsafe { zstd_sys::ZSTD_initStaticDCtx(mem.as_mut_ptr().cast(), mem.len() * 8) };
        assert!(!ctx.is_null(), "zstd: static decompression workspace too small");
        Dctx { _mem: mem, ctx }
    }

    /// Decompresses one whole frame into `dst`; the decompressed size, or zstd's error code.
    fn decompress(&mut self, dst: &mut [u8], src: &[u8]) -> Result<usize, usize> {
        // SAFETY: the context is ours; both buffers are live for the lengths given.
        let n = unsafe {
            zstd_sys::ZSTD_decompressDCtx(self.ctx, dst.as_mut_ptr().cast(), dst.len(), src.as_ptr().cast(), src.len())
        };
        // SAFETY: pure function.
        if unsafe { zstd_sys::ZSTD_isError(n) } != 0 {
            Err(n)
        } else {
            Ok(n)
        }
    }
}

// SAFETY: the context is plain memory owned by this value, used by one thread at a time.
unsafe impl Send for Dctx {}

/// What reading a chunk needs from the reader, shareable between threads.
#[derive(Clone, Copy)]
struct ChunkCtx<'a> {
    /// This image's `pages` file, then its chain's ([`ChunkInfo::file`]).
    pages: &'a [File],
    paths: &'a [PathBuf],
    chunk_size: u32,
    page_size: u32,
}

impl ChunkCtx<'_> {
    /// Asks the kernel to start reading chunks `ci..ci+READ_AHEAD` into the page cache, so
    /// the disk works while the current chunk is checked and decompressed.
    fn read_ahead(&self, region: &RegionInfo, ci: usize) {
        const READ_AHEAD: usize = 2;
        let wanted = region
            .chunks
            .iter()
            .skip(ci)
            .take(READ_AHEAD)
            .filter(|c| c.stored_len > 0);
        for c in wanted {
            // SAFETY: a hint on a descriptor we own; failure is harmless.
            unsafe {
                libc::posix_fadvise(
                    std::os::fd::AsRawFd::as_raw_fd(&self.pages[c.file as usize]),
                    c.offset as libc::off_t,
                    c.stored_len as libc::off_t,
                    libc::POSIX_FADV_WILLNEED,
                )
            };
        }
    }

    /// Reads chunk `ci` of `region` (number `ri`) into `dst` (exactly the chunk's length).
    fn read_chunk(
        &self,
        region: &RegionInfo,
        ri: usize,
        ci: usize,
        dst: &mut [u8],
        zeroed: bool,
        w: &mut ChunkWork,
    ) -> Result<(), ImageError> {
        let ps = self.page_size as usize;
        let c = &region.chunks[ci];
        let addr = region.start + ci as u64 * u64::from(self.chunk_size);
        let npages = dst.len().div_ceil(ps);
        let all_present = c.packed_len as usize == dst.len();
        let checksum = || ImageError::ChunkChecksum {
            region: ri,
            chunk: ci,
            addr,
        };
        let io = |e| ImageError::io(&self.paths[c.file as usize], e);
        let pages = &self.pages[c.file as usize];
        match c.encoding {
            Encoding::Ancestor => {
                return Err(ImageError::corrupt("regions", format!("chunk {ci} of region {ri} ({addr:#x}) is kept in an earlier image that was not opened")));
            }
            Encoding::Zero => {
                if !zeroed {
                    dst.fill(0);
                }
                return Ok(());
            }
            Encoding::Raw if all_present => {
                // Straight from the file into place: one copy.
                prefault(dst);
                pages.read_exact_at(dst, c.offset).map_err(io)?;
                if crc32fast::hash(dst) != c.crc32 {
                    return Err(checksum());
                }
                return Ok(());
            }
            _ => {}
        }
        w.buf.resize(c.stored_len as usize, 0);
        pages.read_exact_at(&mut w.buf, c.offset).map_err(io)?;
        if crc32fast::hash(&w.buf) != c.crc32 {
            return Err(checksum());
        }
        let packed: &[u8] = match c.encoding {
            Encoding::Zstd => {
                let out: &mut [u8] = if all_present {
                    prefault(dst);
                    dst
                } else {
                    w.scratch.resize(c.packed_len as usize, 0);
                    &mut w.scratch
                };
                let n = w.dctx.decompress(out, &w.buf).map_err(|code| {
                    ImageError::corrupt(
                        "pages",
                        format!(
                            "chunk {ci} of region {ri} ({addr:#x}): {}",
                            zstd_safe::get_error_name(code)
                        ),
                    )
                })?;
                if n != c.packed_len as usize {
                    return Err(ImageError::corrupt(
                        "pages",
                        format!(
                            "chunk {ci} of region {ri} ({addr:#x}) decompressed to the wrong size"
                        ),
                    ));
                }
                if all_present {
                    return Ok(());
                }
                &w.scratch[..n]
            }
            _ => &w.buf,
        };
        let mut o = 0;
        for (p, page) in dst.chunks_mut(ps).enumerate().take(npages) {
            if c.present(p) {
                page.copy_from_slice(&packed[o..o + page.len()]);
                o += page.len();
            } else if !zeroed {
                page.fill(0);
            }
        }
        Ok(())
    }
}
