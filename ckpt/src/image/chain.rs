//! Incremental images (issue 15): an image may keep chunks of memory that are unchanged
//! since an earlier image of the same directory in that earlier image, instead of storing
//! them again. Layout in `docs/image-format.md` (§ Incremental images).
//!
//! - Every image written by this crum has a `chunks` section: one 128-bit content hash per
//!   chunk of every region with data, in region-table order ([`chunk_hash`]).
//! - A checkpoint whose program has an earlier image (its last one, or the one it was
//!   restarted from) prepares a [`Base`] from it before the fork: that image's chunk hashes,
//!   keyed by region start, region name and chunk index, and the image holding each chunk's
//!   bytes. The writer hashes each chunk it writes; a chunk whose key and hash are in the
//!   base is recorded as [`super::Encoding::Ancestor`] with the index of the image that holds
//!   its bytes in the new image's chain. Deciding by content, not by dirty bits, needs no
//!   kernel feature (this machine's kernel has no soft-dirty bits) and cannot take a page
//!   the program dropped (`MADV_DONTNEED`) or a mapping it replaced for an unchanged one.
//! - An image with at least one such chunk has the `chain` section (required, so an older
//!   crum refuses the image instead of misreading it): the images it depends on, oldest
//!   first, each with its inventory checksum and creation time. Its references point straight
//!   at the image that stores the bytes, so a restart reads each chunk once, from one file.
//! - [`super::ImageReader::open`] resolves the references: each ancestor must be in the same
//!   directory, unchanged (inventory checksum), and hold a chunk with the same key, the same
//!   present pages and the same content hash.

use std::path::Path;

use xxhash_rust::xxh3::{xxh3_128_with_seed, xxh3_64};

use super::format::{get_str, put_str, Cursor, Put};
use super::ImageError;

/// The section listing the images an incremental image depends on.
pub const SECTION_CHAIN: &str = "chain";
/// The section of chunk content hashes.
pub const SECTION_CHUNKS: &str = "chunks";
/// Longest chain (the chunk record names the image holding a chunk in one byte).
pub const MAX_CHAIN: usize = 255;

const CHAIN_MAGIC: [u8; 8] = *b"CRUMCHN\0";
const CHUNKS_MAGIC: [u8; 8] = *b"CRUMHASH";
/// Chunk hash algorithm 1: [`chunk_hash`].
const HASH_XXH3_128: u32 = 1;
pub(crate) const CHUNKS_HEADER_LEN: usize = 16;
const CHAIN_HEADER_LEN: usize = 16;
const CHAIN_NAME_FIELD: usize = 64;
const CHAIN_ENTRY_LEN: usize = CHAIN_NAME_FIELD + 16;

/// The content hash of one chunk: XXH3-128 of its present pages, concatenated, seeded with
/// XXH3-64 of the chunk's length and its present-page bitmap (so two chunks hash alike only
/// if the same pages are non-zero with the same bytes, and they have the same length).
pub fn chunk_hash(chunk_len: usize, bitmap: &[u8], packed: &[u8]) -> u128 {
    let mut seed_in = [0u8; 8 + super::writer::MAX_BITMAP];
    seed_in[..8].copy_from_slice(&(chunk_len as u64).to_le_bytes());
    seed_in[8..8 + bitmap.len()].copy_from_slice(bitmap);
    xxh3_128_with_seed(packed, xxh3_64(&seed_in[..8 + bitmap.len()]))
}

/// A region's name as a key (its start alone does not name a hook section, all at 0).
pub fn name_key(name: &[u8]) -> u64 {
    xxh3_64(name)
}

/// One image of a chain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChainEntry {
    /// Its directory name, in the same directory as the image that depends on it.
    pub name: String,
    /// The checksum of its `inventory` (its last four bytes).
    pub inventory_crc: u32,
    pub created_unix_ms: u64,
}

/// The `chain` section bytes of `entries` (oldest first).
pub fn encode_chain(entries: &[ChainEntry]) -> Result<Vec<u8>, ImageError> {
    if entries.len() > MAX_CHAIN {
        return Err(ImageError::Invalid("chain longer than 255 images"));
    }
    let mut v = vec![0u8; CHAIN_HEADER_LEN + entries.len() * CHAIN_ENTRY_LEN];
    let mut p = Put::new(&mut v);
    p.bytes(&CHAIN_MAGIC);
    p.u32(entries.len() as u32);
    p.u32(0);
    for e in entries {
        let mut name = [0u8; CHAIN_NAME_FIELD];
        if !put_str(&mut name, e.name.as_bytes()) {
            return Err(ImageError::Invalid("image name too long for a chain"));
        }
        p.bytes(&name);
        p.u32(e.inventory_crc);
        p.u32(0);
        p.u64(e.created_unix_ms);
    }
    Ok(v)
}

/// Decodes a `chain` section (untrusted).
pub fn decode_chain(b: &[u8]) -> Result<Vec<ChainEntry>, ImageError> {
    const F: &str = "chain section";
    let mut c = Cursor::new(b, F);
    if c.bytes(8)? != CHAIN_MAGIC {
        return Err(ImageError::BadMagic { file: F.into() });
    }
    let n = c.u32()? as usize;
    c.u32()?;
    if n == 0 || n > MAX_CHAIN || c.remaining() != n * CHAIN_ENTRY_LEN {
        return Err(ImageError::corrupt(F, format!("{n} images in {} bytes", b.len())));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let name = get_str(c.bytes(CHAIN_NAME_FIELD)?, F, "image name")?;
        if name.is_empty() || name.starts_with('.') || name.contains('/') || name.contains(char::is_control) {
            return Err(ImageError::corrupt(F, format!("`{}` is not an image name", name.escape_debug())));
        }
        let inventory_crc = c.u32()?;
        c.u32()?;
        let created_unix_ms = c.u64()?;
        out.push(ChainEntry { name, inventory_crc, created_unix_ms });
    }
    Ok(out)
}

/// The header of a `chunks` section (the hashes follow, 16 bytes each, little-endian).
pub(crate) fn chunks_header() -> [u8; CHUNKS_HEADER_LEN] {
    let mut h = [0u8; CHUNKS_HEADER_LEN];
    let mut p = Put::new(&mut h);
    p.bytes(&CHUNKS_MAGIC);
    p.u32(HASH_XXH3_128);
    p.u32(0);
    h
}

/// Decodes a `chunks` section of an image with `count` chunks (untrusted).
pub fn decode_chunks(b: &[u8], count: usize) -> Result<Vec<u128>, ImageError> {
    const F: &str = "chunks section";
    let mut c = Cursor::new(b, F);
    if c.bytes(8)? != CHUNKS_MAGIC {
        return Err(ImageError::BadMagic { file: F.into() });
    }
    let alg = c.u32()?;
    c.u32()?;
    if alg != HASH_XXH3_128 {
        return Err(ImageError::corrupt(F, format!("unknown hash algorithm {alg}")));
    }
    if c.remaining() != count * 16 {
        return Err(ImageError::corrupt(F, format!("{} bytes of hashes for {count} chunks", c.remaining())));
    }
    (0..count).map(|_| Ok(u128::from_le_bytes(c.bytes(16)?.try_into().expect("16 bytes")))).collect()
}

/// Where a chunk of a region lies, across images: region start, name key, chunk index.
pub(crate) type ChunkKey = (u64, u64, u32);

/// What a new image may take from earlier ones: see the module documentation.
#[derive(Debug, Clone)]
pub struct Base {
    /// The new image's chain if it refers to the base: the base's chain, then the base.
    pub(crate) chain: Vec<ChainEntry>,
    /// Sorted by key: the chunk's hash and the chain index (1-based) of the image holding it.
    entries: Vec<(ChunkKey, u128, u8)>,
    /// The chunk and page size of the base: an image of other sizes cannot keep chunks there.
    pub(crate) sizes: (u32, u32),
}

impl Base {
    /// The base for an image following the complete image `dir`, or None when a new image
    /// should be a full one: the chain would be longer than `max_chain`, `dir` has no chunk
    /// hashes (written by an older crum), or its name does not fit a chain entry.
    pub fn from_image(dir: &Path, max_chain: usize) -> Result<Option<Base>, ImageError> {
        let r = super::ImageReader::open(dir)?;
        let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
            return Ok(None);
        };
        if name.len() >= CHAIN_NAME_FIELD {
            return Ok(None);
        }
        let mut chain = r.chain().to_vec();
        chain.push(ChainEntry {
            name: name.to_string(),
            inventory_crc: r.inventory().checksum,
            created_unix_ms: r.inventory().created_unix_ms,
        });
        if chain.len() > max_chain.min(MAX_CHAIN) {
            return Ok(None);
        }
        let Some(hashes) = r.chunk_hashes()? else {
            return Ok(None);
        };
        let me = chain.len() as u8;
        let mut entries = Vec::with_capacity(hashes.len());
        let mut k = 0;
        for reg in r.regions() {
            let nk = name_key(&reg.name);
            for (ci, c) in reg.chunks.iter().enumerate() {
                let h = hashes[k];
                k += 1;
                if c.encoding == super::Encoding::Zero {
                    continue;
                }
                let home = if c.file == 0 { me } else { c.file };
                entries.push(((reg.start, nk, ci as u32), h, home));
            }
        }
        entries.sort_unstable_by_key(|e| e.0);
        // A key twice (two regions at one start with one name: not written by crum) is
        // never taken from the base.
        let mut dup = Vec::new();
        for w in entries.windows(2) {
            if w[0].0 == w[1].0 {
                dup.push(w[0].0);
            }
        }
        entries.retain(|e| !dup.contains(&e.0));
        Ok(Some(Base { chain, entries, sizes: (r.chunk_size(), r.inventory().page_size) }))
    }

    /// The hash of the base's chunk at `key` and the chain index of the image holding it.
    pub(crate) fn find(&self, key: ChunkKey) -> Option<(u128, u8)> {
        self.entries.binary_search_by_key(&key, |e| e.0).ok().map(|i| (self.entries[i].1, self.entries[i].2))
    }

    /// The images a new image on this base would depend on (oldest first).
    pub fn chain(&self) -> &[ChainEntry] {
        &self.chain
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_section_round_trips_and_refuses_bad_names() {
        let e = vec![
            ChainEntry { name: "ckpt-20260101T000001.000Z-5-1".into(), inventory_crc: 7, created_unix_ms: 9 },
            ChainEntry { name: "ckpt-20260101T000002.000Z-5-2".into(), inventory_crc: 8, created_unix_ms: 10 },
        ];
        assert_eq!(decode_chain(&encode_chain(&e).unwrap()).unwrap(), e);
        let bad = vec![ChainEntry { name: "../x".into(), inventory_crc: 0, created_unix_ms: 0 }];
        assert!(decode_chain(&encode_chain(&bad).unwrap()).is_err());
        assert!(decode_chain(&encode_chain(&[]).unwrap()).is_err());
        let mut cut = encode_chain(&e).unwrap();
        cut.pop();
        assert!(decode_chain(&cut).is_err());
    }

    #[test]
    fn chunk_hash_depends_on_length_pages_and_bytes() {
        let a = chunk_hash(8192, &[1], &[5u8; 4096]);
        assert_eq!(a, chunk_hash(8192, &[1], &[5u8; 4096]));
        assert_ne!(a, chunk_hash(4096, &[1], &[5u8; 4096]), "length");
        assert_ne!(a, chunk_hash(8192, &[2], &[5u8; 4096]), "which page");
        let mut b = [5u8; 4096];
        b[4095] = 6;
        assert_ne!(a, chunk_hash(8192, &[1], &b), "bytes");
    }
}
