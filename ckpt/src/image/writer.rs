//! The image writer, usable in the forked child of a multi-threaded process.
//!
//! [`ImageWriter::prepare`] runs in the parent before `fork`: it allocates every buffer,
//! builds every path as a C string, opens the parent directory and sets up a zstd compression
//! context on a preallocated workspace (`ZSTD_initStaticCCtx`), so compression never calls
//! malloc. After the fork, the child calls [`ImageWriter::add_section`],
//! [`ImageWriter::add_region`] and [`ImageWriter::commit`], which use only raw system calls
//! (`mkdirat`, `openat`, `write`, `pwrite`, `fsync`, `renameat2`) and those buffers: no
//! allocation, no stdio, no logging, no lock that a thread stopped in the parent could hold.
//! The child must then leave with `_exit` without dropping the writer (dropping frees
//! memory). A test binary (`tests/image_noalloc.rs`) proves no allocation happens.
//!
//! Durability: everything goes to `<parent>/.tmp-<name>`; files are fsynced, then the
//! directory, then it is renamed (never over an existing name) to `<parent>/<name>` and the
//! parent is fsynced. A crash or a full disk mid-write leaves only a temporary directory,
//! which readers ignore and rotation cleans; older images are never touched.
//!
//! Liveness: the temporary directory holds a `lock` file the writer keeps `flock`ed while
//! it writes. The directory is born as `.new-<name>`, gets its locked `lock`, and only then is
//! renamed to `.tmp-<name>`, so a `.tmp-` directory without a lock holder is always a dead
//! writer's, whatever its pid was: [`super::clean_leftovers`] removes exactly those (the lock
//! goes away with the writer's last descriptor, also when it is killed).
//!
//! # Safety
//! The unsafe code here calls libc and zstd. Invariants: every pointer/length pair passed to
//! a system call comes from a live Rust slice; file descriptors stored in the writer are
//! owned by it (opened here, closed exactly once, `-1` when closed); the zstd context pointer
//! points into `cctx_mem`, which the writer owns, never reallocates and frees only on drop,
//! after which the pointer is not used.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use libc::c_int;
use zstd::zstd_safe::zstd_sys;

use super::chain::{chunk_hash, chunks_header, encode_chain, name_key, Base, ChunkKey, SECTION_CHAIN, SECTION_CHUNKS};
use super::format::*;
use super::{ImageError, IMAGE_PREFIX, NEW_PREFIX, SECTION_PAGES, SECTION_REGIONS, TEMP_PREFIX};

/// Options of [`ImageWriter::prepare`].
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Process id recorded in the image name.
    pub pid: u32,
    /// Checkpoint sequence number recorded in the image name.
    pub seq: u64,
    /// Bytes of memory per chunk (a power of two, 64 KiB to 64 MiB; default 4 MiB).
    pub chunk_size: u32,
    /// zstd level (1 to 3 recommended; 0 stores every chunk raw; negative = faster levels).
    pub level: i32,
    /// How many [`ImageWriter::add_section`] calls the writer has room for.
    pub max_sections: usize,
    /// Final directory name instead of `ckpt-<utc>-<pid>-<seq>` (tests, tools).
    pub dir_name: Option<String>,
    /// Creation time to record instead of now (reproducible images for tests).
    pub created_unix_ms: Option<u64>,
    /// Kernel release to record instead of this machine's (reproducible images for tests).
    pub kernel_release: Option<String>,
    /// An earlier image of the same directory whose chunks this one may keep there instead
    /// of storing them again (an incremental image; `super::chain`).
    pub base: Option<std::sync::Arc<Base>>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            pid: crate::threads::real_pid() as u32,
            seq: 0,
            chunk_size: 4 << 20,
            level: 1,
            max_sections: 64,
            dir_name: None,
            created_unix_ms: None,
            kernel_release: None,
            base: None,
        }
    }
}

/// Description of one memory region given to [`ImageWriter::add_region`].
#[derive(Debug, Clone, Copy)]
pub struct RegionMeta<'a> {
    /// Start address.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// Protection (`PROT_*` bits as the producer defines them).
    pub prot: u32,
    /// Producer-defined flags (shared/private, file-backed, stack, …); stored as given.
    pub flags: u32,
    /// Offset into the mapped file, for file-backed regions.
    pub offset: u64,
    /// Mapped file path or pseudo name (`[heap]`, `[stack]`), at most 4096 bytes.
    pub name: &'a [u8],
}

struct SectionSlot {
    name: [u8; SECTION_NAME_FIELD],
    file: [u8; SECTION_FILE_FIELD],
    flags: u32,
    crc: u32,
    size: u64,
}

/// Largest chunk record: fixed part + bitmap of the largest chunk at the smallest page.
pub(crate) const MAX_BITMAP: usize = (MAX_CHUNK / MIN_PAGE / 8) as usize;
const MAX_CHUNK_RECORD: usize = CHUNK_RECORD_FIXED + MAX_BITMAP + 8;
/// Size of the buffer in front of the `regions` file.
const REGIONS_BUF: usize = 256 * 1024;
/// Chunks at least this big are first tried on a sample; incompressible ones are stored raw
/// without compressing the whole chunk (keeps random data at disk speed).
const SAMPLE_THRESHOLD: usize = 256 * 1024;
const SAMPLE_LEN: usize = 64 * 1024;
/// Size of the buffer in front of the `chunks` file.
const CHUNKS_BUF: usize = 64 * 1024;

/// Fills a piece of a region with its bytes at an offset ([`ImageWriter::add_region_filled`]).
pub type Fill<'a> = dyn FnMut(u64, &mut [u8]) -> Result<(), ImageError> + 'a;

/// Writes one image; see the module documentation for the fork protocol.
pub struct ImageWriter {
    final_path: PathBuf,
    parent_fd: OwnedFd,
    tmp_name: CString,
    /// `.new-<name>`: the directory before its lock is held (see the module docs).
    new_name: CString,
    final_name: CString,
    dir_fd: c_int,
    /// The `lock` file, `flock`ed while this writer writes.
    lock_fd: c_int,
    pages_fd: c_int,
    regions_fd: c_int,
    begun: bool,
    failed: bool,
    committed: bool,
    regions_buf: Vec<u8>,
    regions_len: usize,
    regions_crc: crc32fast::Hasher,
    regions_total: u64,
    region_count: u32,
    sections: Vec<SectionSlot>,
    max_sections: usize,
    pages_off: u64,
    pages_end: u64,
    pack: Vec<u8>,
    comp: Vec<u8>,
    /// Owns the memory the zstd context lives in (only reached through `cctx`).
    _cctx_mem: Vec<u64>,
    cctx: *mut zstd_sys::ZSTD_CCtx,
    level: i32,
    chunk_size: u32,
    page_size: u32,
    inventory: Vec<u8>,
    producer: [u8; PRODUCER_LEN],
    arch: [u8; ARCH_LEN],
    kernel: [u8; KERNEL_LEN],
    created_ms: u64,
    /// The `chunks` file: one content hash per chunk written (`super::chain`).
    chunks_fd: c_int,
    chunks_buf: Vec<u8>,
    chunks_len: usize,
    chunks_crc: crc32fast::Hasher,
    chunks_total: u64,
    /// The key of the next chunk: its region's start and name key, its index there.
    key: ChunkKey,
    base: Option<std::sync::Arc<Base>>,
    /// The `chain` section, written if a chunk is kept in an earlier image.
    chain: Vec<u8>,
    /// Whether a chunk was kept in an earlier image.
    referenced: bool,
}

// SAFETY: the only non-Send field is the zstd context pointer, which points into `cctx_mem`
// owned by this writer and is used only through `&mut self`; moving the writer to another
// thread moves that ownership with it.
unsafe impl Send for ImageWriter {}

fn last_err(op: &'static str) -> ImageError {
    ImageError::Write {
        op,
        source: io::Error::last_os_error(),
    }
}

fn check(ret: c_int, op: &'static str) -> Result<c_int, ImageError> {
    if ret < 0 {
        Err(last_err(op))
    } else {
        Ok(ret)
    }
}

/// `write(2)` until all of `buf` is written (retries on EINTR and short writes).
fn write_all(fd: c_int, mut buf: &[u8], op: &'static str) -> Result<(), ImageError> {
    while !buf.is_empty() {
        // SAFETY: `buf` is a live slice; `fd` is an open descriptor owned by the writer.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(ImageError::Write { op, source: e });
        }
        if n == 0 {
            return Err(ImageError::Write {
                op,
                source: io::Error::from(io::ErrorKind::WriteZero),
            });
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// `pwrite(2)` until all of `buf` is written at `off`.
fn pwrite_all(fd: c_int, mut buf: &[u8], mut off: u64, op: &'static str) -> Result<(), ImageError> {
    while !buf.is_empty() {
        // SAFETY: `buf` is a live slice; `fd` is an open descriptor owned by the writer.
        let n = unsafe { libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), off as libc::off_t) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(ImageError::Write { op, source: e });
        }
        if n == 0 {
            return Err(ImageError::Write {
                op,
                source: io::Error::from(io::ErrorKind::WriteZero),
            });
        }
        buf = &buf[n as usize..];
        off += n as u64;
    }
    Ok(())
}

fn fsync(fd: c_int, op: &'static str) -> Result<(), ImageError> {
    // SAFETY: plain system call on a descriptor owned by the writer.
    check(unsafe { libc::fsync(fd) }, op).map(|_| ())
}

fn close(fd: &mut c_int) {
    if *fd >= 0 {
        // SAFETY: the descriptor is owned by the writer and closed exactly once (then -1).
        unsafe { libc::close(*fd) };
        *fd = -1;
    }
}

/// Creates `name` in directory `dir` for writing, owner-only, failing if it exists.
fn create_file(dir: c_int, name: &CStr, op: &'static str) -> Result<c_int, ImageError> {
    let fd = check(
        // SAFETY: `name` is a NUL-terminated C string; `dir` is an open directory descriptor.
        unsafe {
            libc::openat(
                dir,
                name.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            )
        },
        op,
    )?;
    // The umask may have removed bits, never added them; set exactly 0600.
    // SAFETY: `fd` was just opened.
    unsafe { libc::fchmod(fd, 0o600) };
    Ok(fd)
}

/// True when every byte of `p` is zero. Checks 256-byte blocks with a branch-free OR so the
/// compiler vectorizes it, exiting at the first non-zero block.
/// Which pages of a chunk may hold data: see [`ImageWriter::add_region_sparse`].
pub type Resident<'a> = dyn FnMut(*const u8, usize, &mut [u8]) + 'a;

fn is_zero(p: &[u8]) -> bool {
    let mut blocks = p.chunks_exact(256);
    for b in &mut blocks {
        let mut acc = 0u64;
        for w in b.chunks_exact(8) {
            acc |= u64::from_ne_bytes(w.try_into().expect("8 bytes"));
        }
        if acc != 0 {
            return false;
        }
    }
    blocks.remainder().iter().all(|&b| b == 0)
}

/// The file name `s-<index>` of a metadata section, NUL-terminated, built on the stack.
fn section_file_name(index: usize, out: &mut [u8; 32]) -> usize {
    let mut digits = [0u8; 20];
    let d = fmt_u64(index as u64, &mut digits);
    out[..2].copy_from_slice(b"s-");
    out[2..2 + d.len()].copy_from_slice(d);
    out[2 + d.len()] = 0;
    2 + d.len() + 1
}

impl ImageWriter {
    /// Prepares an image under `parent` (created owner-only if missing). Runs in the parent
    /// process before `fork`; allocates everything the child will need.
    pub fn prepare(parent: &Path, opts: &WriterOptions) -> Result<ImageWriter, ImageError> {
        let cs = opts.chunk_size;
        if !cs.is_power_of_two() || !(MIN_CHUNK..=MAX_CHUNK).contains(&cs) {
            return Err(ImageError::Invalid(
                "chunk size must be a power of two from 64 KiB to 64 MiB",
            ));
        }
        if !(-7..=19).contains(&opts.level) {
            return Err(ImageError::Invalid("zstd level must be from -7 to 19"));
        }
        if opts.max_sections > MAX_SECTIONS - 2 {
            return Err(ImageError::Invalid("too many sections requested"));
        }
        let page_size = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .map(|v| v as u32)
            .unwrap_or(4096);
        if !page_size.is_power_of_two()
            || !(MIN_PAGE..=MAX_PAGE).contains(&page_size)
            || page_size > cs
        {
            return Err(ImageError::Invalid("unsupported page size"));
        }

        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| ImageError::io(parent, e))?;
        let parent_fd: OwnedFd = std::fs::File::open(parent)
            .map_err(|e| ImageError::io(parent, e))?
            .into();

        let created_ms = opts.created_unix_ms.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0)
        });
        let name = match &opts.dir_name {
            Some(n) => {
                if n.is_empty() || n.contains('/') || n.starts_with('.') {
                    return Err(ImageError::Invalid(
                        "image name must be a plain name not starting with '.'",
                    ));
                }
                n.clone()
            }
            None => format!(
                "{IMAGE_PREFIX}{}-{}-{}",
                utc_stamp(created_ms),
                opts.pid,
                opts.seq
            ),
        };
        let final_path = parent.join(&name);
        if final_path.exists() {
            return Err(ImageError::io(
                &final_path,
                io::Error::from(io::ErrorKind::AlreadyExists),
            ));
        }
        let tmp_name = CString::new(format!("{TEMP_PREFIX}{name}"))
            .map_err(|_| ImageError::Invalid("NUL in name"))?;
        let new_name = CString::new(format!("{NEW_PREFIX}{name}"))
            .map_err(|_| ImageError::Invalid("NUL in name"))?;
        let final_name = CString::new(name).map_err(|_| ImageError::Invalid("NUL in name"))?;

        let mut producer = [0u8; PRODUCER_LEN];
        put_str(
            &mut producer,
            concat!("crum ", env!("CARGO_PKG_VERSION")).as_bytes(),
        );
        let mut arch = [0u8; ARCH_LEN];
        put_str(&mut arch, std::env::consts::ARCH.as_bytes());
        let mut kernel = [0u8; KERNEL_LEN];
        let release = match &opts.kernel_release {
            Some(k) => k.clone(),
            None => nix::sys::utsname::uname()
                .map(|u| u.release().to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        let rb = release.as_bytes();
        put_str(&mut kernel, &rb[..rb.len().min(KERNEL_LEN - 1)]);

        // zstd: a context on our own workspace, big enough for any input at this level.
        let clevel = opts.level.max(1);
        // SAFETY: pure function of its argument.
        let ws_bytes = unsafe { zstd_sys::ZSTD_estimateCCtxSize(clevel) };
        let mut cctx_mem = vec![0u64; ws_bytes.div_ceil(8) + 1];
        // SAFETY: the workspace is 8-aligned, at least `ws_bytes` long, owned by the writer
        // and never reallocated; zstd keeps it as the context's only memory.
        let cctx = unsafe {
            zstd_sys::ZSTD_initStaticCCtx(cctx_mem.as_mut_ptr().cast(), cctx_mem.len() * 8)
        };
        if cctx.is_null() {
            return Err(ImageError::Compress("static context workspace too small"));
        }
        // SAFETY: pure function of its argument.
        let bound = unsafe { zstd_sys::ZSTD_compressBound(cs as usize) };

        let max_sections = opts.max_sections;
        // A base of another chunk or page size cannot be referred to: a full image.
        let base = opts.base.clone().filter(|b| b.sizes == (cs, page_size));
        let chain = match &base {
            Some(b) => encode_chain(b.chain())?,
            None => Vec::new(),
        };
        Ok(ImageWriter {
            final_path,
            parent_fd,
            tmp_name,
            new_name,
            final_name,
            dir_fd: -1,
            lock_fd: -1,
            pages_fd: -1,
            regions_fd: -1,
            begun: false,
            failed: false,
            committed: false,
            regions_buf: vec![0u8; REGIONS_BUF],
            regions_len: 0,
            regions_crc: crc32fast::Hasher::new(),
            regions_total: 0,
            region_count: 0,
            sections: Vec::with_capacity(max_sections + 4),
            max_sections,
            pages_off: 0,
            pages_end: 0,
            pack: vec![0u8; cs as usize],
            comp: vec![0u8; bound],
            _cctx_mem: cctx_mem,
            cctx,
            level: opts.level,
            chunk_size: cs,
            page_size,
            inventory: Vec::with_capacity(
                INVENTORY_HEADER_LEN + (max_sections + 4) * SECTION_ENTRY_LEN + 4,
            ),
            producer,
            arch,
            kernel,
            created_ms,
            chunks_fd: -1,
            chunks_buf: vec![0u8; CHUNKS_BUF],
            chunks_len: 0,
            chunks_crc: crc32fast::Hasher::new(),
            chunks_total: 0,
            key: (0, 0, 0),
            base,
            chain,
            referenced: false,
        })
    }

    /// Where the image will be once [`commit`](Self::commit) succeeds (known before the fork,
    /// so the parent can report it when the child exits successfully).
    pub fn chunk_size(&self) -> usize {
        self.chunk_size as usize
    }

    pub fn final_path(&self) -> &Path {
        &self.final_path
    }

    /// Where the image is written before it is complete (`<parent>/.tmp-<name>`).
    pub fn temp_path(&self) -> PathBuf {
        self.final_path.with_file_name(self.tmp_name.to_string_lossy().as_ref())
    }

    /// In the process that prepared the writer, once the process that wrote with it is gone
    /// (a forked writer that failed or was killed): removes its partial image, if any.
    /// Returns whether there was one. Never touches a complete image.
    pub fn remove_partial(&self) -> Result<bool, ImageError> {
        let mut found = false;
        for name in [&self.tmp_name, &self.new_name] {
            let p = self.final_path.with_file_name(name.to_string_lossy().as_ref());
            match super::rotate::remove_dir(&p) {
                Ok(()) => found = true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(ImageError::io(p, e)),
            }
        }
        Ok(found)
    }

    /// Creates the temporary directory and the memory files (first call only).
    fn begin(&mut self) -> Result<(), ImageError> {
        if self.failed {
            return Err(ImageError::Invalid("an earlier write of this image failed"));
        }
        if self.begun {
            return Ok(());
        }
        self.begun = true;
        let pfd = self.parent_fd.as_raw_fd();
        // Born as `.new-<name>`: no cleaner looks at it before its lock is held.
        check(
            // SAFETY: `new_name` is a NUL-terminated C string; `pfd` is the open parent directory.
            unsafe { libc::mkdirat(pfd, self.new_name.as_ptr(), 0o700) },
            "create temporary directory",
        )?;
        self.dir_fd = check(
            // SAFETY: as above.
            unsafe {
                libc::openat(
                    pfd,
                    self.new_name.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            },
            "open temporary directory",
        )?;
        // SAFETY: `dir_fd` was just opened.
        unsafe { libc::fchmod(self.dir_fd, 0o700) };
        self.lock_fd = create_file(self.dir_fd, c"lock", "create lock file")?;
        check(
            // SAFETY: plain system call on the descriptor just opened.
            unsafe { libc::flock(self.lock_fd, libc::LOCK_EX | libc::LOCK_NB) },
            "lock the temporary directory",
        )?;
        check(
            // SAFETY: both names are NUL-terminated C strings relative to the open parent fd.
            unsafe {
                libc::renameat2(
                    pfd,
                    self.new_name.as_ptr(),
                    pfd,
                    self.tmp_name.as_ptr(),
                    libc::RENAME_NOREPLACE,
                )
            },
            "rename temporary directory",
        )?;
        self.pages_fd = create_file(self.dir_fd, c"pages", "create pages file")?;
        self.regions_fd = create_file(self.dir_fd, c"regions", "create regions file")?;
        self.chunks_fd = create_file(self.dir_fd, c"chunks", "create chunks file")?;
        self.chunks_write(&chunks_header())?;
        let mut hdr = [0u8; REGIONS_HEADER_LEN];
        let mut p = Put::new(&mut hdr);
        p.bytes(&REGIONS_MAGIC);
        p.u32(self.chunk_size);
        p.u32(self.page_size);
        p.u32(bitmap_bytes(self.chunk_size, self.page_size) as u32);
        p.zeros(REGIONS_HEADER_LEN - p.pos());
        self.regions_write(&hdr)
    }

    fn regions_write(&mut self, bytes: &[u8]) -> Result<(), ImageError> {
        if self.regions_len + bytes.len() > self.regions_buf.len() {
            self.regions_flush()?;
        }
        if bytes.len() > self.regions_buf.len() {
            write_all(self.regions_fd, bytes, "write regions file")?;
            self.regions_crc.update(bytes);
        } else {
            self.regions_buf[self.regions_len..self.regions_len + bytes.len()]
                .copy_from_slice(bytes);
            self.regions_len += bytes.len();
        }
        self.regions_total += bytes.len() as u64;
        Ok(())
    }

    fn chunks_write(&mut self, bytes: &[u8]) -> Result<(), ImageError> {
        if self.chunks_len + bytes.len() > self.chunks_buf.len() {
            self.chunks_flush()?;
        }
        self.chunks_buf[self.chunks_len..self.chunks_len + bytes.len()].copy_from_slice(bytes);
        self.chunks_len += bytes.len();
        self.chunks_total += bytes.len() as u64;
        Ok(())
    }

    fn chunks_flush(&mut self) -> Result<(), ImageError> {
        let n = self.chunks_len;
        write_all(self.chunks_fd, &self.chunks_buf[..n], "write chunks file")?;
        self.chunks_crc.update(&self.chunks_buf[..n]);
        self.chunks_len = 0;
        Ok(())
    }

    fn regions_flush(&mut self) -> Result<(), ImageError> {
        let n = self.regions_len;
        write_all(
            self.regions_fd,
            &self.regions_buf[..n],
            "write regions file",
        )?;
        self.regions_crc.update(&self.regions_buf[..n]);
        self.regions_len = 0;
        Ok(())
    }

    /// Writes a metadata section `name` (at most 47 bytes, not `regions`/`pages`, unique)
    /// holding `data`. No allocation; usable in the forked child.
    pub fn add_section(
        &mut self,
        name: &str,
        required: bool,
        data: &[u8],
    ) -> Result<(), ImageError> {
        if name.is_empty() || [SECTION_REGIONS, SECTION_PAGES, SECTION_CHUNKS, SECTION_CHAIN].contains(&name) {
            return Err(ImageError::Invalid("section name is empty or reserved"));
        }
        let mut slot = SectionSlot {
            name: [0; SECTION_NAME_FIELD],
            file: [0; SECTION_FILE_FIELD],
            flags: if required { SECTION_REQUIRED } else { 0 },
            crc: crc32fast::hash(data),
            size: data.len() as u64,
        };
        if !put_str(&mut slot.name, name.as_bytes()) {
            return Err(ImageError::Invalid("section name too long or contains NUL"));
        }
        if self.sections.iter().any(|s| s.name == slot.name) {
            return Err(ImageError::Invalid("duplicate section name"));
        }
        if self.sections.len() >= self.max_sections {
            return Err(ImageError::Capacity(
                "more sections than WriterOptions::max_sections",
            ));
        }
        self.begin()?;
        let mut fname = [0u8; 32];
        let n = section_file_name(self.sections.len(), &mut fname);
        let cname = CStr::from_bytes_with_nul(&fname[..n]).expect("built with one NUL");
        slot.file[..n - 1].copy_from_slice(&fname[..n - 1]);
        let result = (|| {
            let mut fd = create_file(self.dir_fd, cname, "create section file")?;
            let r = write_all(fd, data, "write section file")
                .and_then(|_| fsync(fd, "fsync section file"));
            close(&mut fd);
            r
        })();
        if let Err(e) = result {
            self.failed = true;
            return Err(e);
        }
        // Within the capacity reserved in prepare: no reallocation.
        self.sections.push(slot);
        Ok(())
    }

    /// Writes one memory region. `data` is the region's contents (read from this process's
    /// memory, `data.len() == meta.len`) or empty to record the region without contents.
    /// Zero pages are skipped, chunks compressed and checksummed. No allocation.
    pub fn add_region(&mut self, meta: &RegionMeta<'_>, data: &[u8]) -> Result<(), ImageError> {
        self.add_region_sparse(meta, data, None)
    }

    /// [`ImageWriter::add_region`], reading only the pages `resident` marks: called once a
    /// chunk with the chunk's address in `data` and a zeroed bitmap of its pages, it sets the
    /// bit of each page that may hold data (the others are recorded as zero pages and never
    /// touched: memory that was never used stays unused in the writer too).
    pub fn add_region_sparse(
        &mut self,
        meta: &RegionMeta<'_>,
        data: &[u8],
        resident: Option<&mut Resident<'_>>,
    ) -> Result<(), ImageError> {
        if meta.name.len() > MAX_NAME_LEN {
            return Err(ImageError::Invalid("region name longer than 4096 bytes"));
        }
        if !data.is_empty() && data.len() as u64 != meta.len {
            return Err(ImageError::Invalid(
                "region data length differs from the region length",
            ));
        }
        if meta.start.checked_add(meta.len).is_none() {
            return Err(ImageError::Invalid("region wraps around the address space"));
        }
        if self.region_count >= MAX_REGIONS {
            return Err(ImageError::Capacity("too many regions"));
        }
        self.begin()?;
        let r = self.add_region_inner(meta, data, resident, None);
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    /// Writes one memory region whose bytes are not in this process's memory as one slice:
    /// `fill(offset, piece)` fills `piece` with the region's bytes at `offset`, one chunk at a
    /// time, into `buf` (at least one chunk long, owned by the caller so that nothing is
    /// allocated here). Zero pages are skipped, chunks compressed and checksummed, as
    /// [`ImageWriter::add_region`]. An error of `fill` fails the image.
    pub fn add_region_filled(
        &mut self,
        meta: &RegionMeta<'_>,
        buf: &mut [u8],
        fill: &mut Fill<'_>,
    ) -> Result<(), ImageError> {
        if meta.name.len() > MAX_NAME_LEN {
            return Err(ImageError::Invalid("region name longer than 4096 bytes"));
        }
        if buf.len() < self.chunk_size as usize {
            return Err(ImageError::Invalid("fill buffer shorter than a chunk"));
        }
        if meta.start.checked_add(meta.len).is_none() {
            return Err(ImageError::Invalid("region wraps around the address space"));
        }
        if self.region_count >= MAX_REGIONS {
            return Err(ImageError::Capacity("too many regions"));
        }
        self.begin()?;
        let r = self.add_region_inner(meta, &[], None, Some((buf, fill)));
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn add_region_inner(
        &mut self,
        meta: &RegionMeta<'_>,
        data: &[u8],
        mut resident: Option<&mut Resident<'_>>,
        filled: Option<(&mut [u8], &mut Fill<'_>)>,
    ) -> Result<(), ImageError> {
        let has_data = !data.is_empty() || (filled.is_some() && meta.len > 0);
        let chunk_count = if has_data {
            (meta.len as usize).div_ceil(self.chunk_size as usize)
        } else {
            0
        };
        let chunk_count =
            u32::try_from(chunk_count).map_err(|_| ImageError::Capacity("region too large"))?;
        let mut rec = [0u8; REGION_RECORD_LEN];
        let mut p = Put::new(&mut rec);
        p.u64(meta.start);
        p.u64(meta.len);
        p.u64(meta.offset);
        p.u32(meta.prot);
        p.u32(meta.flags);
        p.u32(meta.name.len() as u32);
        p.u32(if has_data { REGION_HAS_DATA } else { 0 });
        p.u32(chunk_count);
        p.u32(0);
        self.regions_write(&rec)?;
        self.regions_write(meta.name)?;
        let pad = meta.name.len().next_multiple_of(8) - meta.name.len();
        self.regions_write(&[0u8; 8][..pad])?;
        self.key = (meta.start, name_key(meta.name), 0);
        if let Some((buf, fill)) = filled {
            let cs = self.chunk_size as u64;
            let mut at = 0u64;
            while at < meta.len {
                let n = cs.min(meta.len - at) as usize;
                fill(at, &mut buf[..n])?;
                self.write_chunk(&buf[..n], None)?;
                at += n as u64;
            }
            self.region_count += 1;
            return Ok(());
        }
        for chunk in data.chunks(self.chunk_size as usize) {
            match resident.as_mut() {
                Some(f) => {
                    let mut mask = [0u8; MAX_BITMAP];
                    let npages = chunk.len().div_ceil(self.page_size as usize);
                    f(chunk.as_ptr(), npages, &mut mask[..npages.div_ceil(8)]);
                    self.write_chunk(chunk, Some(&mask))?;
                }
                None => self.write_chunk(chunk, None)?,
            }
        }
        self.region_count += 1;
        Ok(())
    }

    /// Compresses `src` as one zstd frame into `comp`; returns the frame's length.
    fn compress(&mut self, src: &[u8]) -> Result<usize, ImageError> {
        // SAFETY: `cctx` is the static context on `cctx_mem` (alive); `comp` has
        // `ZSTD_compressBound(chunk_size)` bytes and `src.len() <= chunk_size`.
        let n = unsafe {
            zstd_sys::ZSTD_compressCCtx(
                self.cctx,
                self.comp.as_mut_ptr().cast(),
                self.comp.len(),
                src.as_ptr().cast(),
                src.len(),
                self.level,
            )
        };
        // SAFETY: pure function of its argument.
        if unsafe { zstd_sys::ZSTD_isError(n) } != 0 {
            return Err(ImageError::Compress("ZSTD_compressCCtx reported an error"));
        }
        Ok(n)
    }

    /// `mask`: the pages that may hold data (None: all); the others are not read.
    fn write_chunk(&mut self, chunk: &[u8], mask: Option<&[u8; MAX_BITMAP]>) -> Result<(), ImageError> {
        let ps = self.page_size as usize;
        let bm_len = bitmap_bytes(self.chunk_size, self.page_size);
        let mut bitmap = [0u8; MAX_BITMAP];
        let npages = chunk.len().div_ceil(ps);
        let mut present = 0usize;
        let mut packed_len = 0usize;
        for (j, page) in chunk.chunks(ps).enumerate() {
            let maybe = mask.is_none_or(|m| m[j / 8] & (1 << (j % 8)) != 0);
            if maybe && !is_zero(page) {
                bitmap[j / 8] |= 1 << (j % 8);
                present += 1;
                packed_len += page.len();
            }
        }
        let mut enc = Encoding::Zero;
        let mut stored_len = 0usize;
        let mut off = 0u64;
        let mut crc = 0u32;
        let mut home = 0u8;
        // Present pages, contiguous: the chunk itself when nothing is missing.
        let packed_in_pack = present > 0 && present != npages;
        if packed_in_pack {
            let mut o = 0;
            for (j, page) in chunk.chunks(ps).enumerate() {
                if bitmap[j / 8] & (1 << (j % 8)) != 0 {
                    self.pack[o..o + page.len()].copy_from_slice(page);
                    o += page.len();
                }
            }
        }
        let hash = chunk_hash(
            chunk.len(),
            &bitmap[..bm_len],
            if present == 0 {
                &[]
            } else if packed_in_pack {
                &self.pack[..packed_len]
            } else {
                chunk
            },
        );
        let key = self.key;
        self.key.2 += 1;
        self.chunks_write(&hash.to_le_bytes())?;
        let kept = match &self.base {
            Some(b) if present > 0 => b.find(key).filter(|&(h, _)| h == hash).map(|(_, i)| i),
            _ => None,
        };
        if let Some(i) = kept {
            // Unchanged since the base: kept in the image of the chain that stores it.
            enc = Encoding::Ancestor;
            home = i;
            self.referenced = true;
        } else if present > 0 {
            // Borrow juggling: take the source from `pack` or `chunk` by raw range.
            let compressed = if self.level == 0 {
                None
            } else {
                let src: &[u8] = if packed_in_pack {
                    &self.pack[..packed_len]
                } else {
                    chunk
                };
                let (ptr, len) = (src.as_ptr(), src.len());
                // SAFETY: `src` points into `self.pack` or the caller's `chunk`; `compress`
                // writes only `self.comp` and the zstd workspace, never `pack`, so the bytes
                // stay valid and unaliased by writes for the duration of the call.
                let src = unsafe { std::slice::from_raw_parts(ptr, len) };
                let worth = if len >= SAMPLE_THRESHOLD {
                    let n = self.compress(&src[..SAMPLE_LEN])?;
                    n * 8 < SAMPLE_LEN * 7
                } else {
                    true
                };
                if worth {
                    let n = self.compress(src)?;
                    (n + n / 32 < len).then_some(n)
                } else {
                    None
                }
            };
            off = self.pages_off;
            let stored: &[u8] = match compressed {
                Some(n) => {
                    enc = Encoding::Zstd;
                    &self.comp[..n]
                }
                None => {
                    enc = Encoding::Raw;
                    if packed_in_pack {
                        &self.pack[..packed_len]
                    } else {
                        chunk
                    }
                }
            };
            stored_len = stored.len();
            crc = crc32fast::hash(stored);
            pwrite_all(self.pages_fd, stored, off, "write pages file")?;
            // Start writeback now so the disk works while the next chunk is compressed.
            // SAFETY: plain system call on our descriptor; a failure is only a lost hint.
            unsafe {
                libc::sync_file_range(
                    self.pages_fd,
                    off as libc::off_t,
                    stored_len as libc::off_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
            let end = off + stored_len as u64;
            self.pages_end = end;
            self.pages_off = end.next_multiple_of(u64::from(self.page_size));
        }
        let mut rec = [0u8; MAX_CHUNK_RECORD];
        let rlen = chunk_record_len(bm_len);
        let mut p = Put::new(&mut rec[..rlen]);
        p.u64(off);
        p.u32(stored_len as u32);
        p.u32(packed_len as u32);
        p.u32(crc);
        p.u8(enc.to_u8());
        p.u8(home);
        p.zeros(2);
        p.bytes(&bitmap[..bm_len]);
        self.regions_write(&rec[..rlen])
    }

    /// Finishes the image: writes the region table and the inventory, fsyncs, renames the
    /// temporary directory to its final name and fsyncs the parent. No allocation. On error
    /// the temporary directory is removed (best effort) and no image appears.
    pub fn commit(&mut self) -> Result<(), ImageError> {
        if self.committed {
            return Err(ImageError::Invalid("image already committed"));
        }
        let r = self.begin().and_then(|_| self.commit_inner());
        match r {
            Ok(()) => {
                self.committed = true;
                Ok(())
            }
            Err(e) => {
                self.failed = true;
                self.abandon();
                Err(e)
            }
        }
    }

    fn commit_inner(&mut self) -> Result<(), ImageError> {
        let mut trailer = [0u8; REGIONS_TRAILER_LEN];
        let mut p = Put::new(&mut trailer);
        p.bytes(&REGIONS_END_MAGIC);
        p.u32(self.region_count);
        p.u32(0);
        self.regions_write(&trailer)?;
        self.regions_flush()?;
        fsync(self.regions_fd, "fsync regions file")?;
        close(&mut self.regions_fd);
        fsync(self.pages_fd, "fsync pages file")?;
        close(&mut self.pages_fd);
        self.chunks_flush()?;
        fsync(self.chunks_fd, "fsync chunks file")?;
        close(&mut self.chunks_fd);
        let mut chunks = SectionSlot {
            name: [0; SECTION_NAME_FIELD],
            file: [0; SECTION_FILE_FIELD],
            flags: 0,
            crc: self.chunks_crc.clone().finalize(),
            size: self.chunks_total,
        };
        put_str(&mut chunks.name, SECTION_CHUNKS.as_bytes());
        put_str(&mut chunks.file, b"chunks");
        let mut chain = SectionSlot {
            name: [0; SECTION_NAME_FIELD],
            file: [0; SECTION_FILE_FIELD],
            flags: SECTION_REQUIRED,
            crc: crc32fast::hash(&self.chain),
            size: self.chain.len() as u64,
        };
        put_str(&mut chain.name, SECTION_CHAIN.as_bytes());
        put_str(&mut chain.file, b"chain");
        if self.referenced {
            let mut fd = create_file(self.dir_fd, c"chain", "create chain file")?;
            let r = write_all(fd, &self.chain, "write chain file").and_then(|_| fsync(fd, "fsync chain file"));
            close(&mut fd);
            r?;
        }
        let extra = if self.referenced { 2 } else { 1 };

        let mut regions = SectionSlot {
            name: [0; SECTION_NAME_FIELD],
            file: [0; SECTION_FILE_FIELD],
            flags: SECTION_REQUIRED,
            crc: self.regions_crc.clone().finalize(),
            size: self.regions_total,
        };
        put_str(&mut regions.name, SECTION_REGIONS.as_bytes());
        put_str(&mut regions.file, b"regions");
        let mut pages = SectionSlot {
            name: [0; SECTION_NAME_FIELD],
            file: [0; SECTION_FILE_FIELD],
            flags: SECTION_REQUIRED | SECTION_CHUNKED,
            crc: 0,
            size: self.pages_end,
        };
        put_str(&mut pages.name, SECTION_PAGES.as_bytes());
        put_str(&mut pages.file, b"pages");

        // Inventory: header, section entries (ours first), trailing checksum.
        let total = self.sections.len() + 2 + extra;
        let len = INVENTORY_HEADER_LEN + total * SECTION_ENTRY_LEN + 4;
        self.inventory.clear();
        self.inventory.resize(len, 0); // within the capacity reserved in prepare
        let mut p = Put::new(&mut self.inventory[..]);
        p.bytes(&INVENTORY_MAGIC);
        p.u16(FORMAT_MAJOR);
        p.u16(FORMAT_MINOR);
        p.u32(total as u32);
        p.u32(self.page_size);
        p.u32(0);
        p.u64(self.created_ms);
        p.bytes(&self.producer);
        p.bytes(&self.arch);
        p.bytes(&self.kernel);
        debug_assert_eq!(p.pos(), INVENTORY_HEADER_LEN);
        let ours = [&regions, &pages, &chunks, &chain];
        for s in ours[..2 + extra].iter().copied().chain(self.sections.iter()) {
            p.bytes(&s.name);
            p.u32(s.flags);
            p.u32(s.crc);
            p.u64(s.size);
            p.bytes(&s.file);
        }
        let crc = crc32fast::hash(&self.inventory[..len - 4]);
        self.inventory[len - 4..].copy_from_slice(&crc.to_le_bytes());

        let mut fd = create_file(self.dir_fd, c"inventory", "create inventory")?;
        let r = write_all(fd, &self.inventory, "write inventory")
            .and_then(|_| fsync(fd, "fsync inventory"));
        close(&mut fd);
        r?;
        fsync(self.dir_fd, "fsync image directory")?;

        let pfd = self.parent_fd.as_raw_fd();
        // RENAME_NOREPLACE: never replace an existing image of the same name.
        check(
            // SAFETY: both names are NUL-terminated C strings relative to the open parent fd.
            unsafe {
                libc::renameat2(
                    pfd,
                    self.tmp_name.as_ptr(),
                    pfd,
                    self.final_name.as_ptr(),
                    libc::RENAME_NOREPLACE,
                )
            },
            "rename image into place",
        )?;
        // The image is complete: its lock file goes (the directory descriptor followed the
        // rename). A crash before this leaves an empty `lock` file, which readers ignore.
        // SAFETY: NUL-terminated name relative to the open image directory.
        unsafe { libc::unlinkat(self.dir_fd, c"lock".as_ptr(), 0) };
        close(&mut self.dir_fd);
        close(&mut self.lock_fd);
        fsync(pfd, "fsync parent directory")
    }

    /// Removes what this writer created (best effort, raw system calls only). Called by
    /// [`commit`](Self::commit) on failure; the child may call it after a failed
    /// `add_*`. Nothing is removed once the image is committed.
    pub fn abandon(&mut self) {
        self.failed = true;
        if !self.begun || self.committed {
            return;
        }
        close(&mut self.pages_fd);
        close(&mut self.regions_fd);
        close(&mut self.chunks_fd);
        let pfd = self.parent_fd.as_raw_fd();
        if self.dir_fd < 0 {
            for name in [&self.tmp_name, &self.new_name] {
                // SAFETY: NUL-terminated name relative to the open parent directory.
                self.dir_fd = unsafe {
                    libc::openat(
                        pfd,
                        name.as_ptr(),
                        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                    )
                };
                if self.dir_fd >= 0 {
                    break;
                }
            }
        }
        if self.dir_fd >= 0 {
            let unlink = |name: &CStr| {
                // SAFETY: NUL-terminated name relative to the open temporary directory.
                unsafe { libc::unlinkat(self.dir_fd, name.as_ptr(), 0) };
            };
            unlink(c"inventory");
            unlink(c"regions");
            unlink(c"pages");
            unlink(c"chunks");
            unlink(c"chain");
            unlink(c"lock");
            for i in 0..self.sections.len() {
                let mut fname = [0u8; 32];
                let n = section_file_name(i, &mut fname);
                unlink(CStr::from_bytes_with_nul(&fname[..n]).expect("built with one NUL"));
            }
            close(&mut self.dir_fd);
        }
        for name in [&self.tmp_name, &self.new_name] {
            // SAFETY: NUL-terminated name relative to the open parent directory.
            unsafe { libc::unlinkat(pfd, name.as_ptr(), libc::AT_REMOVEDIR) };
        }
        close(&mut self.lock_fd);
    }
}

impl Drop for ImageWriter {
    /// In the process that began writing (tests, synchronous checkpoints): an uncommitted
    /// image is removed. A parent that only prepared and forked has nothing to remove.
    fn drop(&mut self) {
        if self.begun && !self.committed {
            self.abandon();
        }
        close(&mut self.pages_fd);
        close(&mut self.regions_fd);
        close(&mut self.chunks_fd);
        close(&mut self.dir_fd);
        close(&mut self.lock_fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_zero_detects_single_nonzero_byte_anywhere() {
        let mut p = vec![0u8; 4096 + 7];
        assert!(is_zero(&p));
        for i in [0, 255, 256, 4095, 4100] {
            p[i] = 1;
            assert!(!is_zero(&p), "byte {i}");
            p[i] = 0;
        }
    }

    #[test]
    fn section_file_name_is_nul_terminated_decimal() {
        let mut b = [0u8; 32];
        let n = section_file_name(42, &mut b);
        assert_eq!(&b[..n], b"s-42\0");
    }
}
