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

/// Total byte size (header + entries) of the fat binary starting at `head` (>= 16 bytes).
pub fn fatbin_total_size(head: &[u8]) -> Result<usize, FatbinError> {
    let _ = head;
    Err(FatbinError::Truncated { len: 0 })
}

/// All PTX entries of one fat binary.
pub fn extract_ptx(fatbin: &[u8]) -> Result<Vec<PtxImage>, FatbinError> {
    let _ = fatbin;
    Err(FatbinError::Truncated { len: 0 })
}

/// The PTX entry with the highest architecture.
pub fn best_ptx(images: &[PtxImage]) -> Option<&PtxImage> {
    images.iter().max_by_key(|i| i.arch)
}
