//! Device state in a checkpoint image, independent of the backend it was taken on.
//!
//! A CUDA program's image carries two extra sections (written by the interposer's
//! checkpoint hooks): [`SECTION_DEVICE`], a bincode-2 encoded [`DeviceState`] (the objects to
//! re-create and where), and [`SECTION_DEVICE_DATA`], the contents of every saved region
//! concatenated (region `i` at `regions[i].data_offset`, `regions[i].len` bytes). A restart
//! replays the state on a fresh proxy, on any backend (`crum restart --device ...`).

use bincode::{Decode, Encode};

use crate::msg::{AllocKind, TexDesc};

/// Image section holding the encoded [`DeviceState`].
pub const SECTION_DEVICE: &str = "crum.device";
/// Image section holding the saved device memory.
pub const SECTION_DEVICE_DATA: &str = "crum.device.data";
/// Version of [`DeviceState`]'s encoding.
pub const DEVICE_STATE_VERSION: u32 = 1;

/// Everything a restart needs to rebuild the device side of a program.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub struct DeviceState {
    pub version: u32,
    /// Backend the image was taken on (`emu`, `cuda`); informational.
    pub backend: String,
    /// Device name as the program saw it.
    pub device_name: String,
    /// The proxy's next handle value (handles are never reused).
    pub next_handle: u64,
    /// Loaded modules, in load order.
    pub modules: Vec<SavedModule>,
    /// Kernels whose handles the program holds.
    pub functions: Vec<SavedFunction>,
    /// Device, managed and pinned memory, module variables; in address order.
    pub regions: Vec<SavedMemory>,
    /// `cudaHostRegister`ed application ranges: (address, length).
    pub registered: Vec<(u64, u64)>,
    pub streams: Vec<SavedStream>,
    pub events: Vec<SavedEvent>,
    /// Texture objects: (handle, description).
    pub textures: Vec<(u64, TexDesc)>,
    /// Total bytes of [`SECTION_DEVICE_DATA`].
    pub data_len: u64,
    /// Asynchronous error not yet reported to the program (0: none).
    pub pending_error: u32,
    /// Sticky error of the context (0: none).
    pub sticky_error: u32,
    /// Device printf output not yet delivered (it appears at the program's next
    /// synchronization, after a restart too).
    pub printf: Vec<u8>,
}

/// A module: its fat binary lives in the program's memory (restored with the process).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct SavedModule {
    pub handle: u64,
    /// Address and length of the fat binary in the program.
    pub image_addr: u64,
    pub image_len: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct SavedFunction {
    pub handle: u64,
    pub module: u64,
    pub name: String,
    /// `cudaFuncAttributeMaxDynamicSharedMemorySize` if the program set it.
    pub max_dynamic_shared: Option<i32>,
}

/// One region of memory the device side owns.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct SavedMemory {
    pub addr: u64,
    pub len: u64,
    pub kind: AllocKind,
    /// A module variable: (module handle, name).
    pub symbol: Option<(u64, String)>,
    /// Offset of its bytes in [`SECTION_DEVICE_DATA`].
    pub data_offset: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub struct SavedStream {
    pub handle: u64,
    pub flags: u32,
    pub priority: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub struct SavedEvent {
    pub handle: u64,
    pub flags: u32,
    /// Recorded and complete: how long before the checkpoint it completed (nanoseconds), so
    /// `cudaEventElapsedTime` between saved events still works. None: never recorded.
    pub completed_ago_ns: Option<u64>,
}

impl DeviceState {
    /// The state of a program that has not used the device yet.
    pub fn empty() -> DeviceState {
        DeviceState {
            version: DEVICE_STATE_VERSION,
            backend: String::new(),
            device_name: String::new(),
            next_handle: 0,
            modules: Vec::new(),
            functions: Vec::new(),
            regions: Vec::new(),
            registered: Vec::new(),
            streams: Vec::new(),
            events: Vec::new(),
            textures: Vec::new(),
            data_len: 0,
            pending_error: 0,
            sticky_error: 0,
            printf: Vec::new(),
        }
    }

    /// Encode for the image.
    pub fn encode(&self) -> Vec<u8> {
        bincode::encode_to_vec(self, crate::msg::config_unlimited()).unwrap_or_default()
    }

    /// Decode from the image, checking the version and that every region lies inside the
    /// data section.
    pub fn decode(b: &[u8]) -> Result<DeviceState, String> {
        let (s, n): (DeviceState, usize) = bincode::decode_from_slice(b, crate::msg::config_unlimited())
            .map_err(|e| format!("the device state is corrupt: {e}"))?;
        if n != b.len() {
            return Err("the device state has trailing bytes".into());
        }
        if s.version != DEVICE_STATE_VERSION {
            return Err(format!(
                "the device state has version {} (this crum reads {DEVICE_STATE_VERSION})",
                s.version
            ));
        }
        for r in &s.regions {
            if r.data_offset.checked_add(r.len).is_none_or(|e| e > s.data_len) {
                return Err(format!("device region {:#x} lies outside the saved data", r.addr));
            }
        }
        Ok(s)
    }

    /// Bytes of device memory proper / managed / pinned (for `crum inspect`).
    pub fn bytes_of(&self, kind: AllocKind) -> u64 {
        self.regions.iter().filter(|r| r.kind == kind).map(|r| r.len).sum()
    }
}
