//! The on-disk checkpoint image: a directory holding a versioned inventory, small metadata
//! sections, and process memory in large chunks (zstd-compressed, checksummed, all-zero
//! pages skipped). The byte-by-byte layout is documented in `docs/image-format.md`.
//!
//! - [`ImageWriter`] is built for the forked child of a checkpointed process:
//!   [`ImageWriter::prepare`] runs in the parent before the fork and allocates everything;
//!   in the child, [`ImageWriter::add_section`], [`ImageWriter::add_region`] and
//!   [`ImageWriter::commit`] use only raw system calls and the preallocated buffers (no
//!   malloc, no stdio, no logging), so locks held by threads that do not exist in the child
//!   are never touched.
//! - [`ImageReader`] opens an image, checks everything it reads (it is untrusted input) and
//!   decompresses memory straight into a caller-supplied destination.
//! - [`keep_newest`], [`latest_image`] and [`list_images`] manage a directory of images.
//!
//! Reading rule (as Firecracker's snapshots): the format major must equal ours and the minor
//! be at most ours; an unknown optional section is skipped, an unknown required section is
//! refused with an error naming it.

mod chain;
mod format;
mod reader;
mod rotate;
mod writer;

use std::io;
use std::path::PathBuf;

pub use chain::{chunk_hash, decode_chain, Base, ChainEntry, MAX_CHAIN, SECTION_CHAIN, SECTION_CHUNKS};
pub use format::{
    utc_stamp, Encoding, FORMAT_MAJOR, FORMAT_MINOR, MAX_NAME_LEN, MAX_SECTION_NAME_LEN,
};
pub use reader::{read_chain, ChunkInfo, ImageReader, Inventory, RegionInfo, SectionInfo};
pub use rotate::{clean_leftovers, keep_newest, keep_newest_of, latest_image, list_images, ImageEntry};
pub use writer::{ImageWriter, RegionMeta, WriterOptions};

/// Name of the reserved section holding the region table (chunk index included).
pub const SECTION_REGIONS: &str = "regions";
/// Name of the reserved section holding the memory chunk data.
pub const SECTION_PAGES: &str = "pages";
/// Prefix of complete image directory names (`ckpt-<utc>-<pid>-<seq>`).
pub const IMAGE_PREFIX: &str = "ckpt-";
/// Prefix of directories being written (never read as images; cleaned when their writer died).
pub const TEMP_PREFIX: &str = ".tmp-";
/// Prefix of a directory being written before its writer holds its lock (it is renamed to
/// [`TEMP_PREFIX`] at once; see the writer's module docs).
pub const NEW_PREFIX: &str = ".new-";

/// Everything that can go wrong writing or reading an image. Each message is one line that
/// names the problem; writer variants carry only static data so that building them in the
/// forked child never allocates.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("image directory {path} does not exist")]
    Missing { path: PathBuf },
    #[error("{path} is not a complete crum image (no inventory file)")]
    NotAnImage { path: PathBuf },
    #[error("{file} is not a crum image file (bad magic)")]
    BadMagic { file: String },
    #[error("image format {major}.{minor} cannot be read by this crum (it reads {our_major}.0 to {our_major}.{our_minor})")]
    Version {
        major: u16,
        minor: u16,
        our_major: u16,
        our_minor: u16,
    },
    #[error("image was taken on {image} but this machine is {ours}")]
    Architecture { image: String, ours: &'static str },
    #[error("image requires section `{name}`, which this crum does not understand")]
    UnknownRequiredSection { name: String },
    #[error("image has no `{name}` section")]
    MissingSection { name: String },
    #[error("{file} is truncated (expected {expected} bytes, found {found})")]
    Truncated {
        file: String,
        expected: u64,
        found: u64,
    },
    #[error("earlier image {image} of this incremental image: {detail}")]
    Chain { image: PathBuf, detail: String },
    #[error("checksum mismatch in {what}")]
    Checksum { what: String },
    #[error("checksum mismatch in chunk {chunk} of region {region} ({addr:#x})")]
    ChunkChecksum {
        region: usize,
        chunk: usize,
        addr: u64,
    },
    #[error("corrupt {file}: {detail}")]
    Corrupt { file: String, detail: String },
    #[error("region {index} does not exist (the image has {count})")]
    NoSuchRegion { index: usize, count: usize },
    #[error("region {index} is {len} bytes but the destination is {dst} bytes")]
    DestinationSize { index: usize, len: u64, dst: usize },
    #[error("I/O error on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    // Writer errors: static data only (no allocation in the forked child).
    #[error("image write failed: {op}")]
    Write {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("invalid image writer input: {0}")]
    Invalid(&'static str),
    #[error("image writer capacity exceeded: {0}")]
    Capacity(&'static str),
    #[error("zstd compression failed: {0}")]
    Compress(&'static str),
}

impl ImageError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        ImageError::Io {
            path: path.into(),
            source,
        }
    }
    /// What failed and why, without allocating: for the forked child, which must report an
    /// error through a raw `write` (e.g. `("write pages file", "no space left on device")`).
    /// The second part is empty when there is no system error behind it.
    pub fn parts_no_alloc(&self) -> (&'static str, &'static str) {
        match self {
            ImageError::Write { op, source } => (op, source.raw_os_error().map_or("", errno_text)),
            ImageError::Invalid(s) | ImageError::Capacity(s) | ImageError::Compress(s) => (s, ""),
            _ => ("image error", ""),
        }
    }

    pub(crate) fn corrupt(file: &str, detail: impl Into<String>) -> Self {
        ImageError::Corrupt {
            file: file.to_string(),
            detail: detail.into(),
        }
    }
}

/// Text of the errors a write can meet, as static strings (no allocation, unlike
/// `io::Error`'s `Display`).
fn errno_text(errno: i32) -> &'static str {
    match errno {
        libc::ENOSPC => "no space left on device",
        libc::EDQUOT => "disk quota exceeded",
        libc::EIO => "input/output error",
        libc::EACCES | libc::EPERM => "permission denied",
        libc::EROFS => "read-only file system",
        libc::EEXIST => "file exists",
        libc::ENOENT => "no such file or directory",
        libc::ENOTEMPTY => "directory not empty",
        libc::EFBIG => "file too large",
        libc::EMFILE | libc::ENFILE => "too many open files",
        libc::ENOMEM => "out of memory",
        libc::EBADF => "bad file descriptor",
        _ => "system error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_no_alloc_names_operation_and_errno() {
        let e = ImageError::Write {
            op: "write pages file",
            source: io::Error::from_raw_os_error(libc::ENOSPC),
        };
        assert_eq!(
            e.parts_no_alloc(),
            ("write pages file", "no space left on device")
        );
        assert_eq!(
            ImageError::Capacity("too many regions").parts_no_alloc(),
            ("too many regions", "")
        );
    }
}
