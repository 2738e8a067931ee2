//! Byte layout of the image files (see `docs/image-format.md`): encoders that write into
//! caller-provided buffers without allocating (used in the forked child) and decoders that
//! bounds-check everything (used on untrusted images).

use super::ImageError;

/// Magic at the start of the `inventory` file.
pub const INVENTORY_MAGIC: [u8; 8] = *b"CRUMIMG\0";
/// Magic at the start of the `regions` file.
pub const REGIONS_MAGIC: [u8; 8] = *b"CRUMREGS";
/// Magic of the trailer at the end of the `regions` file.
pub const REGIONS_END_MAGIC: [u8; 8] = *b"REGSEND\0";
/// Format major version: readers refuse any other major.
pub const FORMAT_MAJOR: u16 = 1;
/// Format minor version: readers accept minors up to theirs (minors only add sections).
/// Minor 1 added incremental images: the `chunks` and `chain` sections and the chunk
/// encoding [`Encoding::Ancestor`] (only in an image with a `chain`, which is required).
pub const FORMAT_MINOR: u16 = 1;

pub const INVENTORY_HEADER_LEN: usize = 144;
pub const SECTION_ENTRY_LEN: usize = 112;
pub const PRODUCER_LEN: usize = 32;
pub const ARCH_LEN: usize = 16;
pub const KERNEL_LEN: usize = 64;
pub const SECTION_NAME_FIELD: usize = 48;
pub const SECTION_FILE_FIELD: usize = 48;
/// Longest section name in bytes (the field keeps a terminating NUL).
pub const MAX_SECTION_NAME_LEN: usize = SECTION_NAME_FIELD - 1;
/// Longest region name (mapped file path) in bytes.
pub const MAX_NAME_LEN: usize = 4096;

pub const REGIONS_HEADER_LEN: usize = 32;
pub const REGIONS_TRAILER_LEN: usize = 16;
pub const REGION_RECORD_LEN: usize = 48;
pub const CHUNK_RECORD_FIXED: usize = 24;

/// Section flag: restoring needs this section; a reader that does not know it must refuse.
pub const SECTION_REQUIRED: u32 = 1;
/// Section flag: the file is protected per chunk (by the region table), its checksum field is 0.
pub const SECTION_CHUNKED: u32 = 2;
/// Every section flag this reader knows; an entry with any other bit set is refused.
pub const SECTION_FLAGS: u32 = SECTION_REQUIRED | SECTION_CHUNKED;
/// Region data flag: the region's contents are stored (else only its description is).
pub const REGION_HAS_DATA: u32 = 1;

/// Caps on untrusted sizes.
pub const MAX_SECTIONS: usize = 4096;
pub const MAX_INVENTORY_BYTES: u64 =
    (INVENTORY_HEADER_LEN + MAX_SECTIONS * SECTION_ENTRY_LEN + 4) as u64;
pub const MAX_REGIONS: u32 = 1 << 20;
pub const MAX_REGIONS_FILE: u64 = 1 << 30;
/// Largest metadata section read into memory (large hook data goes through the chunk path).
pub const MAX_SECTION_FILE: u64 = 1 << 30;
pub const MIN_CHUNK: u32 = 64 * 1024;
pub const MAX_CHUNK: u32 = 64 * 1024 * 1024;
pub const MIN_PAGE: u32 = 4096;
pub const MAX_PAGE: u32 = 1 << 21;

/// How a chunk's present pages are stored in the `pages` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// Every page of the chunk is zero: nothing stored.
    Zero,
    /// Present pages stored as they are.
    Raw,
    /// Present pages concatenated and compressed as one zstd frame.
    Zstd,
    /// Stored in an earlier image of the chain (`chain` section), named by the record's
    /// image index byte: the chunk with the same region start, region name and index there.
    Ancestor,
}

impl Encoding {
    pub fn to_u8(self) -> u8 {
        match self {
            Encoding::Zero => 0,
            Encoding::Raw => 1,
            Encoding::Zstd => 2,
            Encoding::Ancestor => 3,
        }
    }
    pub fn from_u8(v: u8) -> Option<Encoding> {
        match v {
            0 => Some(Encoding::Zero),
            1 => Some(Encoding::Raw),
            2 => Some(Encoding::Zstd),
            3 => Some(Encoding::Ancestor),
            _ => None,
        }
    }
}

/// Bytes of the present-page bitmap of one chunk.
pub fn bitmap_bytes(chunk_size: u32, page_size: u32) -> usize {
    (chunk_size / page_size).div_ceil(8) as usize
}

/// Size of one chunk record (fixed part + bitmap, padded to 8).
pub fn chunk_record_len(bitmap_bytes: usize) -> usize {
    (CHUNK_RECORD_FIXED + bitmap_bytes).next_multiple_of(8)
}

/// Copies `s` into a NUL-padded fixed field; false if it does not fit with a NUL.
pub fn put_str(field: &mut [u8], s: &[u8]) -> bool {
    if s.len() >= field.len() || s.contains(&0) {
        return false;
    }
    field.fill(0);
    field[..s.len()].copy_from_slice(s);
    true
}

/// Reads a NUL-padded fixed field as UTF-8.
pub fn get_str(field: &[u8], file: &str, what: &str) -> Result<String, ImageError> {
    let end = field
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| ImageError::corrupt(file, format!("{what} is not NUL-terminated")))?;
    if field[end..].iter().any(|&b| b != 0) {
        return Err(ImageError::corrupt(
            file,
            format!("{what} has bytes after its end"),
        ));
    }
    String::from_utf8(field[..end].to_vec())
        .map_err(|_| ImageError::corrupt(file, format!("{what} is not UTF-8")))
}

/// Little-endian cursor over untrusted bytes: every read is bounds-checked.
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    file: &'a str,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8], file: &'a str) -> Self {
        Cursor { buf, pos: 0, file }
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], ImageError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                ImageError::corrupt(
                    self.file,
                    format!("record at byte {} runs past the end", self.pos),
                )
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8, ImageError> {
        Ok(self.bytes(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, ImageError> {
        Ok(u16::from_le_bytes(
            self.bytes(2)?.try_into().expect("2 bytes"),
        ))
    }
    pub fn u32(&mut self) -> Result<u32, ImageError> {
        Ok(u32::from_le_bytes(
            self.bytes(4)?.try_into().expect("4 bytes"),
        ))
    }
    pub fn u64(&mut self) -> Result<u64, ImageError> {
        Ok(u64::from_le_bytes(
            self.bytes(8)?.try_into().expect("8 bytes"),
        ))
    }
}

/// Little-endian writer into a fixed slice (no allocation); panics never: callers size the
/// slice from the record length constants.
pub struct Put<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Put<'a> {
    pub fn new(buf: &'a mut [u8]) -> Self {
        Put { buf, pos: 0 }
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }
    pub fn zeros(&mut self, n: usize) {
        self.buf[self.pos..self.pos + n].fill(0);
        self.pos += n;
    }
    pub fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }
    pub fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
}

/// Formats `v` in decimal into `out`, returning the digits (no allocation).
pub fn fmt_u64(v: u64, out: &mut [u8; 20]) -> &[u8] {
    let mut i = out.len();
    let mut v = v;
    loop {
        i -= 1;
        out[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &out[i..]
}

/// UTC calendar time of a Unix time in milliseconds as `YYYYMMDDTHHMMSS.mmmZ`, so that image
/// names sort chronologically (Howard Hinnant's civil-from-days algorithm).
pub fn utc_stamp(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let ms = unix_ms % 1000;
    let days = (secs / 86400) as i64;
    let sod = secs % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}.{ms:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamp_of_known_instant_matches_calendar() {
        // 2026-11-22 22:37:22.123 UTC
        assert_eq!(utc_stamp(1_795_387_042_123), "20261122T223722.123Z");
        assert_eq!(utc_stamp(0), "19700101T000000.000Z");
    }

    #[test]
    fn fmt_u64_writes_decimal_digits() {
        let mut b = [0u8; 20];
        assert_eq!(fmt_u64(0, &mut b), b"0");
        assert_eq!(fmt_u64(u64::MAX, &mut b), b"18446744073709551615");
    }

    #[test]
    fn cursor_past_end_is_a_corruption_error() {
        let mut c = Cursor::new(&[1, 2, 3], "f");
        assert_eq!(c.u16().unwrap(), 0x0201);
        assert!(matches!(c.u32(), Err(ImageError::Corrupt { .. })));
    }

    #[test]
    fn put_str_rejects_too_long_and_nul() {
        let mut f = [0u8; 4];
        assert!(put_str(&mut f, b"abc"));
        assert!(!put_str(&mut f, b"abcd"));
        assert!(!put_str(&mut f, b"a\0"));
    }
}
