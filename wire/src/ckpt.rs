//! Device state in a checkpoint image, independent of the backend it was taken on.
//!
//! A CUDA program's image carries two extra sections (written by the interposer's
//! checkpoint hooks): [`SECTION_DEVICE`], a bincode-2 encoded [`DeviceState`] (the objects to
//! re-create and where), and [`SECTION_DEVICE_DATA`], the contents of every saved region
//! concatenated (region `i` at `regions[i].data_offset`, `regions[i].len` bytes). A restart
//! replays the state on a fresh proxy, on any backend (`crum restart --device ...`).

use bincode::de::read::Reader;
use bincode::de::{Decode, Decoder};
use bincode::error::DecodeError;
use bincode::Encode;

use crate::msg::{AllocKind, Dim3, TexDesc, TexLevel, TexMip};

/// Image section holding the encoded [`DeviceState`].
pub const SECTION_DEVICE: &str = "crum.device";
/// Image section holding the saved device memory.
pub const SECTION_DEVICE_DATA: &str = "crum.device.data";
/// Version of [`DeviceState`]'s encoding (2 added the saved queue and the cut calls; 3 the
/// cut `cudaFree`, [`Carried::Free`]; 4 the cut module unload and device reset,
/// [`Carried::Unload`], [`Carried::Reset`], and the levels of mipmapped textures,
/// [`TexDesc::mip`]; 5 the state the backend could not save, [`DeviceState::unsaved`];
/// versions 1 to 4 are still read).
pub const DEVICE_STATE_VERSION: u32 = 5;

/// Everything a restart needs to rebuild the device side of a program.
///
/// Its `Decode` (and that of [`SavedFunction`] and [`SavedMemory`]) is written by hand, in
/// field order, so that every list and string length is checked against the bytes left
/// before anything is allocated (see [`bounded_len`]); the encoding is bincode's own.
#[derive(Debug, Clone, PartialEq, Encode)]
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
    /// Work queued on streams and not started at the cut, in submission order: replayed
    /// after the restart before the program runs.
    pub queue: Vec<QueuedWork>,
    /// Calls of the program that the checkpoint cut while they waited (a synchronize, a
    /// synchronous copy), or whose reply the program had not read: the restarted program
    /// resumes them by name (`Request::Resume`).
    pub carried: Vec<CarriedCall>,
    /// What the cut did with the work running on the device, and why (the policy's choice:
    /// drained, stopped at a block boundary, flushed).
    pub cut_notes: Vec<String>,
    /// Device state the program held that the backend could not save (one line each, e.g.
    /// blocks on a GPU driver's device heap): named at the checkpoint (a warning, an error
    /// under `--strict`), lost by a restart. Version 5.
    pub unsaved: Vec<String>,
}

/// One unit of stream work not started at the cut.
#[derive(Debug, Clone, PartialEq, Encode)]
pub struct QueuedWork {
    pub stream: u64,
    /// Its sequence number on its stream in the proxy it was saved from (the waits of
    /// [`CarriedCall`]s and of later [`QueuedOp::WaitFor`]s name it).
    pub seq: u64,
    pub op: QueuedOp,
}

/// What a unit of stream work does.
#[derive(Debug, Clone, PartialEq, Encode)]
pub enum QueuedOp {
    Launch {
        func: u64,
        grid: Dim3,
        block: Dim3,
        shared: u32,
        cooperative: bool,
        params: Vec<u8>,
        /// Blocks before this one (linear index) ran before the cut (or are in `contexts`):
        /// the kernel was stopped and runs the rest after the restart.
        first_block: u64,
        /// Blocks saved in the middle (context save): the engine's encoded block contexts
        /// (`crum_ptx::BlockContext`), resumed first.
        contexts: Vec<Vec<u8>>,
    },
    /// A 1-D or 2-D copy; `staged`: the bytes taken from pageable memory when it was
    /// enqueued (then `src` is unused).
    Copy {
        dst: u64,
        dpitch: u64,
        src: u64,
        spitch: u64,
        width: u64,
        height: u64,
        staged: Option<Vec<u8>>,
    },
    Memset {
        dst: u64,
        pitch: u64,
        value: u8,
        width: u64,
        height: u64,
    },
    EventRecord {
        event: u64,
    },
    /// Wait for work `seq` of `stream` (`cudaStreamWaitEvent`; a later recording of the
    /// event does not change what it waits for).
    WaitFor {
        on_stream: u64,
        on_seq: u64,
    },
    HostFunc {
        func: u64,
        data: u64,
    },
    /// A point in the legacy stream a synchronizing call waits for.
    Marker,
}

impl QueuedOp {
    /// Short name for `crum inspect` and logs.
    pub fn name(&self) -> &'static str {
        match self {
            QueuedOp::Launch { .. } => "launch",
            QueuedOp::Copy { .. } => "copy",
            QueuedOp::Memset { .. } => "memset",
            QueuedOp::EventRecord { .. } => "event record",
            QueuedOp::WaitFor { .. } => "wait",
            QueuedOp::HostFunc { .. } => "host function",
            QueuedOp::Marker => "sync point",
        }
    }
}

/// A call of the program cut by the checkpoint: named by the channel, lane and reply number
/// it waited for on the proxy of the checkpoint.
#[derive(Debug, Clone, PartialEq, Encode)]
pub struct CarriedCall {
    pub channel: u64,
    pub lane: u32,
    pub seq: u32,
    pub what: Carried,
}

#[derive(Debug, Clone, PartialEq, Encode)]
pub enum Carried {
    /// Answered already, not read: the encoded reply.
    Reply(Vec<u8>),
    /// Waiting for these (stream, seq) points; then it answers like the synchronizing call it
    /// is (pending errors and printf output go with it when `syncing`).
    Wait { points: Vec<(u64, u64)>, syncing: bool },
    /// `cudaFree(addr)`, which synchronizes the device: waiting for these points, then it
    /// frees (version 3).
    Free { points: Vec<(u64, u64)>, addr: u64 },
    /// A module unload (`cudaLibraryUnload`, `cuModuleUnload`), which synchronizes the device:
    /// waiting for these points, then it unloads the module (version 4).
    Unload { points: Vec<(u64, u64)>, module: u64 },
    /// `cudaDeviceReset`, which synchronizes the device: waiting for these points, then it
    /// resets (version 4).
    Reset { points: Vec<(u64, u64)> },
}


/// A module: its fat binary lives in the program's memory (restored with the process).
#[derive(Debug, Clone, PartialEq, Eq, Encode, bincode::Decode)]
pub struct SavedModule {
    pub handle: u64,
    /// Address and length of the fat binary in the program.
    pub image_addr: u64,
    pub image_len: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Encode)]
pub struct SavedFunction {
    pub handle: u64,
    pub module: u64,
    pub name: String,
    /// `cudaFuncAttributeMaxDynamicSharedMemorySize` if the program set it.
    pub max_dynamic_shared: Option<i32>,
}

/// Whether a region's bytes are copied into the program at the checkpoint's cut (while it is
/// stopped) rather than read later from the proxy's copy-on-write snapshot: everything when
/// there is no snapshot; with one, managed and pinned memory, which are shared mappings the
/// program changes too (a fork of the proxy does not copy them on write).
pub fn copied_at_cut(kind: AllocKind, snapshot: bool) -> bool {
    !snapshot || kind != AllocKind::Device
}

/// One region of memory the device side owns.
#[derive(Debug, Clone, PartialEq, Eq, Encode)]
pub struct SavedMemory {
    pub addr: u64,
    pub len: u64,
    pub kind: AllocKind,
    /// A module variable: (module handle, name).
    pub symbol: Option<(u64, String)>,
    /// Offset of its bytes in [`SECTION_DEVICE_DATA`].
    pub data_offset: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, bincode::Decode)]
pub struct SavedStream {
    pub handle: u64,
    pub flags: u32,
    pub priority: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, bincode::Decode)]
pub struct SavedEvent {
    pub handle: u64,
    pub flags: u32,
    /// Recorded and complete: how long before the checkpoint it completed (nanoseconds), so
    /// `cudaEventElapsedTime` between saved events still works. None: never recorded.
    pub completed_ago_ns: Option<u64>,
}

/// A list or string length read from untrusted bytes, refused unless at least that many
/// bytes are left: every element of every list takes at least one byte, so a larger length
/// is a lie, and refusing it here means nothing is allocated for it. Needs a reader that can
/// peek (a slice: [`DeviceState::decode`]); others refuse every non-empty list.
fn bounded_len<D: Decoder>(d: &mut D) -> Result<usize, DecodeError> {
    let len = u64::decode(d)?;
    let len = usize::try_from(len).map_err(|_| DecodeError::OutsideUsizeRange(len))?;
    if d.reader().peek_read(len).is_none() {
        return Err(DecodeError::OtherString(format!("a length of {len} runs past the end of the data")));
    }
    Ok(len)
}

fn bounded_vec<C, T: Decode<C>, D: Decoder<Context = C>>(d: &mut D) -> Result<Vec<T>, DecodeError> {
    let len = bounded_len(d)?;
    d.claim_container_read::<T>(len)?;
    let mut v = Vec::with_capacity(len);
    for _ in 0..len {
        d.unclaim_bytes_read(std::mem::size_of::<T>());
        v.push(T::decode(d)?);
    }
    Ok(v)
}

fn bounded_bytes<D: Decoder>(d: &mut D) -> Result<Vec<u8>, DecodeError> {
    let len = bounded_len(d)?;
    d.claim_container_read::<u8>(len)?;
    let mut v = vec![0u8; len];
    d.reader().read(&mut v)?;
    Ok(v)
}

fn bounded_string<D: Decoder>(d: &mut D) -> Result<String, DecodeError> {
    String::from_utf8(bounded_bytes(d)?).map_err(|e| DecodeError::Utf8 { inner: e.utf8_error() })
}

/// A list of strings, each length checked like [`bounded_string`]'s.
fn bounded_strings<D: Decoder>(d: &mut D) -> Result<Vec<String>, DecodeError> {
    let n = bounded_len(d)?;
    (0..n).map(|_| bounded_string(d)).collect()
}

/// `Option<T>` as bincode writes it: a 0/1 tag, then the value.
fn option<C, T, D: Decoder<Context = C>>(
    d: &mut D,
    value: impl FnOnce(&mut D) -> Result<T, DecodeError>,
) -> Result<Option<T>, DecodeError> {
    match u8::decode(d)? {
        0 => Ok(None),
        1 => value(d).map(Some),
        _ => Err(DecodeError::Other("an option tag is neither 0 nor 1")),
    }
}

/// A texture description of a state of `version` (before 4 without `mip`).
fn tex_desc<C, D: Decoder<Context = C>>(d: &mut D, version: u32) -> Result<TexDesc, DecodeError> {
    Ok(TexDesc {
        base: Decode::decode(d)?,
        width: Decode::decode(d)?,
        height: Decode::decode(d)?,
        depth: Decode::decode(d)?,
        pitch: Decode::decode(d)?,
        bits: Decode::decode(d)?,
        format_kind: Decode::decode(d)?,
        address_mode: Decode::decode(d)?,
        filter_mode: Decode::decode(d)?,
        read_mode: Decode::decode(d)?,
        normalized: Decode::decode(d)?,
        mip: if version >= 4 {
            option(d, |d| {
                Ok(TexMip {
                    levels: bounded_vec::<C, TexLevel, D>(d)?,
                    filter_mode: Decode::decode(d)?,
                    bias: Decode::decode(d)?,
                    min_clamp: Decode::decode(d)?,
                    max_clamp: Decode::decode(d)?,
                })
            })?
        } else {
            None
        },
    })
}

fn textures<C, D: Decoder<Context = C>>(d: &mut D, version: u32) -> Result<Vec<(u64, TexDesc)>, DecodeError> {
    let n = bounded_len(d)?;
    let mut v = Vec::new();
    for _ in 0..n {
        v.push((Decode::decode(d)?, tex_desc(d, version)?));
    }
    Ok(v)
}

impl<C> Decode<C> for DeviceState {
    fn decode<D: Decoder<Context = C>>(d: &mut D) -> Result<Self, DecodeError> {
        let version: u32 = Decode::decode(d)?;
        Ok(DeviceState {
            version,
            backend: bounded_string(d)?,
            device_name: bounded_string(d)?,
            next_handle: Decode::decode(d)?,
            modules: bounded_vec(d)?,
            functions: bounded_vec(d)?,
            regions: bounded_vec(d)?,
            registered: bounded_vec(d)?,
            streams: bounded_vec(d)?,
            events: bounded_vec(d)?,
            textures: textures(d, version)?,
            data_len: Decode::decode(d)?,
            pending_error: Decode::decode(d)?,
            sticky_error: Decode::decode(d)?,
            printf: bounded_bytes(d)?,
            queue: Vec::new(),
            carried: Vec::new(),
            cut_notes: Vec::new(),
            unsaved: Vec::new(),
        })
        .and_then(|mut s| {
            // Version 1 ends here.
            if s.version >= 2 {
                s.queue = bounded_vec(d)?;
                s.carried = bounded_vec(d)?;
                s.cut_notes = bounded_strings(d)?;
            }
            if s.version >= 5 {
                s.unsaved = bounded_strings(d)?;
            }
            Ok(s)
        })
    }
}
bincode::impl_borrow_decode!(DeviceState);

impl<C> Decode<C> for QueuedWork {
    fn decode<D: Decoder<Context = C>>(d: &mut D) -> Result<Self, DecodeError> {
        let stream = Decode::decode(d)?;
        let seq = Decode::decode(d)?;
        let op = match u32::decode(d)? {
            0 => QueuedOp::Launch {
                func: Decode::decode(d)?,
                grid: Decode::decode(d)?,
                block: Decode::decode(d)?,
                shared: Decode::decode(d)?,
                cooperative: Decode::decode(d)?,
                params: bounded_bytes(d)?,
                first_block: Decode::decode(d)?,
                contexts: {
                    let n = bounded_len(d)?;
                    let mut v = Vec::new();
                    for _ in 0..n {
                        v.push(bounded_bytes(d)?);
                    }
                    v
                },
            },
            1 => QueuedOp::Copy {
                dst: Decode::decode(d)?,
                dpitch: Decode::decode(d)?,
                src: Decode::decode(d)?,
                spitch: Decode::decode(d)?,
                width: Decode::decode(d)?,
                height: Decode::decode(d)?,
                staged: option(d, |d| bounded_bytes(d))?,
            },
            2 => QueuedOp::Memset {
                dst: Decode::decode(d)?,
                pitch: Decode::decode(d)?,
                value: Decode::decode(d)?,
                width: Decode::decode(d)?,
                height: Decode::decode(d)?,
            },
            3 => QueuedOp::EventRecord { event: Decode::decode(d)? },
            4 => QueuedOp::WaitFor { on_stream: Decode::decode(d)?, on_seq: Decode::decode(d)? },
            5 => QueuedOp::HostFunc { func: Decode::decode(d)?, data: Decode::decode(d)? },
            6 => QueuedOp::Marker,
            v => return Err(DecodeError::OtherString(format!("unknown queued work kind {v}"))),
        };
        Ok(QueuedWork { stream, seq, op })
    }
}
bincode::impl_borrow_decode!(QueuedWork);

impl<C> Decode<C> for CarriedCall {
    fn decode<D: Decoder<Context = C>>(d: &mut D) -> Result<Self, DecodeError> {
        let channel = Decode::decode(d)?;
        let lane = Decode::decode(d)?;
        let seq = Decode::decode(d)?;
        let what = match u32::decode(d)? {
            0 => Carried::Reply(bounded_bytes(d)?),
            1 => Carried::Wait { points: bounded_vec(d)?, syncing: Decode::decode(d)? },
            2 => Carried::Free { points: bounded_vec(d)?, addr: Decode::decode(d)? },
            3 => Carried::Unload { points: bounded_vec(d)?, module: Decode::decode(d)? },
            4 => Carried::Reset { points: bounded_vec(d)? },
            v => return Err(DecodeError::OtherString(format!("unknown cut call kind {v}"))),
        };
        Ok(CarriedCall { channel, lane, seq, what })
    }
}
bincode::impl_borrow_decode!(CarriedCall);

impl<C> Decode<C> for SavedFunction {
    fn decode<D: Decoder<Context = C>>(d: &mut D) -> Result<Self, DecodeError> {
        Ok(SavedFunction {
            handle: Decode::decode(d)?,
            module: Decode::decode(d)?,
            name: bounded_string(d)?,
            max_dynamic_shared: option(d, |d| i32::decode(d))?,
        })
    }
}
bincode::impl_borrow_decode!(SavedFunction);

impl<C> Decode<C> for SavedMemory {
    fn decode<D: Decoder<Context = C>>(d: &mut D) -> Result<Self, DecodeError> {
        Ok(SavedMemory {
            addr: Decode::decode(d)?,
            len: Decode::decode(d)?,
            kind: Decode::decode(d)?,
            symbol: option(d, |d| Ok((u64::decode(d)?, bounded_string(d)?)))?,
            data_offset: Decode::decode(d)?,
        })
    }
}
bincode::impl_borrow_decode!(SavedMemory);

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
            queue: Vec::new(),
            carried: Vec::new(),
            cut_notes: Vec::new(),
            unsaved: Vec::new(),
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
        if !(1..=DEVICE_STATE_VERSION).contains(&s.version) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(n: usize, printf: Vec<u8>) -> DeviceState {
        let mut s = DeviceState::empty();
        s.backend = "emu".into();
        s.device_name = "crum emulated device".into();
        s.next_handle = 0x40;
        let mut off = 0;
        for i in 0..n as u64 {
            s.modules.push(SavedModule { handle: i, image_addr: 0x5555_0000_0000 + i, image_len: 100 + i });
            s.functions.push(SavedFunction {
                handle: 0x100 + i,
                module: i,
                name: format!("_Z6kernel{i}"),
                max_dynamic_shared: (i % 2 == 0).then_some(1024 * i as i32),
            });
            s.regions.push(SavedMemory {
                addr: crate::DEVICE_VA_BASE + (i << 20),
                len: 4096 * (i + 1),
                kind: [AllocKind::Device, AllocKind::Managed, AllocKind::PinnedHost][i as usize % 3],
                symbol: (i % 2 == 1).then(|| (i, format!("var{i}"))),
                data_offset: off,
            });
            off += 4096 * (i + 1);
            s.registered.push((0x7f00_0000_0000 + (i << 12), 4096));
            s.streams.push(SavedStream { handle: 0x200 + i, flags: 1, priority: -(i as i32) });
            s.events.push(SavedEvent { handle: 0x300 + i, flags: 2, completed_ago_ns: Some(i) });
            s.textures.push((0x400 + i, TexDesc {
                    base: 0x1000,
                    width: 4,
                    height: 1,
                    depth: 1,
                    pitch: 16,
                    bits: [32, 0, 0, 0],
                    format_kind: 2,
                    address_mode: [0; 3],
                    filter_mode: 0,
                    read_mode: 0,
                    normalized: false,
                    mip: (i % 2 == 1).then(|| TexMip {
                        levels: vec![TexLevel { base: 0x1000, width: 4, height: 1, depth: 1, pitch: 512 }; i as usize],
                        filter_mode: 1,
                        bias: 0.5f32.to_bits(),
                        min_clamp: 0,
                        max_clamp: 3.0f32.to_bits(),
                    }),
                }));
        }
        s.data_len = off;
        s.printf = printf;
        for i in 0..n as u64 {
            let op = match i % 7 {
                0 => QueuedOp::Launch { func: 0x100, grid: [2, 1, 1], block: [32, 1, 1], shared: 0, cooperative: false, params: vec![i as u8; 16], first_block: i, contexts: vec![vec![1, 2, 3]; i as usize % 2] },
                1 => QueuedOp::Copy { dst: 1, dpitch: 4, src: 2, spitch: 4, width: 4, height: 1, staged: Some(vec![7; 4]) },
                2 => QueuedOp::Memset { dst: 1, pitch: 8, value: 3, width: 8, height: 2 },
                3 => QueuedOp::EventRecord { event: 0x300 },
                4 => QueuedOp::WaitFor { on_stream: 0x200, on_seq: 9 },
                5 => QueuedOp::HostFunc { func: 0x4000, data: 0x5000 },
                _ => QueuedOp::Marker,
            };
            s.queue.push(QueuedWork { stream: 0x200 + i, seq: 10 + i, op });
            let what = if i % 2 == 0 { Carried::Reply(vec![1, 2, 3]) } else { Carried::Wait { points: vec![(0, i)], syncing: true } };
            s.carried.push(CarriedCall { channel: 0xabc, lane: i as u32, seq: 5, what });
            s.cut_notes.push(format!("kernel {i}: stopped at a block boundary"));
            s.unsaved.push(format!("device heap: kernel k{i}"));
        }
        s
    }

    /// bincode's varint for `v` (as the encoder writes lengths).
    fn varint(v: u64) -> Vec<u8> {
        bincode::encode_to_vec(v, crate::msg::config_unlimited()).unwrap()
    }

    proptest! {
        #[test]
        fn device_state_round_trips(n in 0usize..6, printf in proptest::collection::vec(any::<u8>(), 0..40)) {
            let s = sample(n, printf);
            prop_assert_eq!(DeviceState::decode(&s.encode()).unwrap(), s);
        }

        /// The decoder on damaged bytes: a flipped byte, or a huge length written over any
        /// position (where a list or string length lies, it must be refused before anything
        /// is allocated). Every outcome is a value or an error; a panic or an abort on a huge
        /// allocation fails the test.
        #[test]
        fn device_state_decode_of_damaged_bytes_never_panics(
            n in 0usize..4,
            at in any::<prop::sample::Index>(),
            flip in any::<u8>(),
            huge in prop_oneof![Just(u64::MAX), Just(1u64 << 40), Just(1u64 << 32), 1u64..1 << 20],
            insert in any::<bool>(),
        ) {
            let mut b = sample(n, b"out".to_vec()).encode();
            let i = at.index(b.len());
            if insert {
                let v = varint(huge);
                b.splice(i..(i + v.len()).min(b.len()), v);
            } else {
                b[i] ^= flip | 1;
            }
            let _ = DeviceState::decode(&b);
        }
    }

    /// `b`, the encoding of `s` whose textures have no levels, as a state before version 4
    /// wrote it: without the `mip` option's tag (a 0) after each texture.
    fn without_mip_tags(s: &DeviceState, mut b: Vec<u8>) -> Vec<u8> {
        for (_, t) in &s.textures {
            assert!(t.mip.is_none());
            let tex = bincode::encode_to_vec(t, crate::msg::config_unlimited()).unwrap();
            let pos = b.windows(tex.len()).position(|w| w == tex.as_slice()).unwrap();
            assert_eq!(b[pos + tex.len() - 1], 0, "the None tag of mip");
            b.remove(pos + tex.len() - 1);
        }
        b
    }

    /// `s` as a state before version 5 wrote it: without the (empty) unsaved list at the end.
    fn before_v5(s: &mut DeviceState) -> Vec<u8> {
        s.unsaved.clear();
        let mut b = s.encode();
        assert_eq!(b.pop(), Some(0), "the empty unsaved list");
        b
    }

    #[test]
    fn a_version_4_state_without_unsaved_state_is_still_read() {
        let mut s = sample(2, b"p".to_vec());
        s.version = 4;
        let b = before_v5(&mut s);
        assert_eq!(DeviceState::decode(&b).unwrap(), s);
    }

    #[test]
    fn a_version_3_state_without_mipmap_levels_is_still_read() {
        let mut s = sample(1, b"p".to_vec());
        s.version = 3;
        let b = before_v5(&mut s);
        let b = without_mip_tags(&s, b);
        assert_eq!(DeviceState::decode(&b).unwrap(), s);
    }

    #[test]
    fn a_version_1_state_without_queue_is_still_read() {
        let mut s = sample(2, b"p".to_vec());
        s.queue.clear();
        s.carried.clear();
        s.cut_notes.clear();
        s.version = 1;
        for (_, t) in &mut s.textures {
            t.mip = None;
        }
        let b = before_v5(&mut s);
        let mut b = without_mip_tags(&s, b);
        // Version 1 ended with printf: drop the three empty lists.
        b.truncate(b.len() - 3);
        assert_eq!(DeviceState::decode(&b).unwrap(), s);
    }

    #[test]
    fn a_list_or_string_length_beyond_the_input_is_refused_before_allocating() {
        // version 1, then each length-prefixed field in turn given a length of 2^40 (or
        // u64::MAX: a capacity overflow before the fix) with nothing after it.
        let head = |fields_before: &[&[u8]]| {
            let mut b = varint(1);
            for f in fields_before {
                b.extend_from_slice(f);
            }
            b
        };
        let empty = [0u8];
        let handle = varint(0x40);
        for huge in [1u64 << 40, u64::MAX, 1 << 20] {
            let cases: Vec<(&str, Vec<u8>)> = vec![
                ("backend", head(&[])),
                ("modules", head(&[&empty, &empty, &handle])),
                ("functions", head(&[&empty, &empty, &handle, &empty])),
                ("regions", head(&[&empty, &empty, &handle, &empty, &empty])),
                ("textures", head(&[&empty, &empty, &handle, &empty, &empty, &empty, &empty, &empty, &empty])),
            ];
            for (what, mut b) in cases {
                b.extend(varint(huge));
                b.extend_from_slice(&[0u8; 16]);
                let e = DeviceState::decode(&b).unwrap_err();
                assert!(e.contains("runs past the end") || e.contains("OutsideUsizeRange"), "{what}/{huge}: {e}");
            }
        }
        // printf, the last field, after a valid state.
        let mut b = DeviceState::empty().encode();
        b.pop();
        b.extend(varint(1 << 40));
        assert!(DeviceState::decode(&b).unwrap_err().contains("runs past the end"));
        // A function name inside a list.
        let s = sample(1, Vec::new());
        let mut b = s.encode();
        let name = b"_Z6kernel0";
        let at = b.windows(name.len()).position(|w| w == name).unwrap();
        assert_eq!(b[at - 1], name.len() as u8);
        b.splice(at - 1..at, varint(u64::MAX / 2));
        assert!(DeviceState::decode(&b).unwrap_err().contains("runs past the end"));
    }
}
