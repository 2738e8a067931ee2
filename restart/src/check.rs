//! Checks of an image beyond its format, shared by `crum restart` (before it changes anything)
//! and `crum inspect` (`--verify`): crum's region flags, the hook sections the process state
//! lists, and a CUDA program's device sections (`crum.device` decoded and consistent with
//! `crum.device.data`, whose bytes are read and checksummed chunk by chunk).
//!
//! A hook section is stored as a metadata section, or (when large) as a [`REGION_BLOB`]
//! region of the same name; [`hook_section`] reads either.

use crum_ckpt::image::{ImageError, ImageReader, RegionInfo, SECTION_CHAIN, SECTION_PAGES, SECTION_REGIONS};
use crum_ckpt::state::{
    is_process_memory, ProcessState, REGION_BLOB, SECTION_PROCESS, REGION_GROWSDOWN, REGION_SHARED_ANON, REGION_SHARED_FILE,
};
use crum_wire::ckpt::{DeviceState, SECTION_DEVICE, SECTION_DEVICE_DATA};

use crate::RestartError;

/// Hook sections this crum understands (a restart refuses other required ones).
pub const UNDERSTOOD_HOOKS: [&str; 2] = [SECTION_DEVICE, SECTION_DEVICE_DATA];

/// Largest `crum.device` state read into memory.
const MAX_DEVICE_STATE: u64 = 1 << 30;

fn invalid(s: String) -> RestartError {
    RestartError::Invalid(s)
}

/// Where hook section `name` is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPlace {
    /// A metadata section of `size` bytes.
    Section { size: u64 },
    /// Region `index`, a [`REGION_BLOB`] of `len` bytes.
    Blob { index: usize, len: u64 },
}

impl HookPlace {
    pub fn bytes(self) -> u64 {
        match self {
            HookPlace::Section { size } => size,
            HookPlace::Blob { len, .. } => len,
        }
    }
}

/// Where hook section `name` is, or None; an error if it is stored twice.
pub fn find_hook(r: &ImageReader, name: &str) -> Result<Option<HookPlace>, RestartError> {
    let section = r.inventory().sections.iter().find(|s| s.name == name).map(|s| HookPlace::Section { size: s.size });
    let mut blobs = r
        .regions()
        .iter()
        .enumerate()
        .filter(|(_, g)| g.flags & REGION_BLOB != 0 && g.name == name.as_bytes())
        .map(|(index, g)| HookPlace::Blob { index, len: g.len });
    let blob = blobs.next();
    if blobs.next().is_some() || (blob.is_some() && section.is_some()) {
        return Err(invalid(format!("the image holds section `{name}` twice")));
    }
    Ok(section.or(blob))
}

/// The bytes of hook section `name` (checksums verified), or None if absent.
pub fn hook_section(r: &mut ImageReader, name: &str, max: u64) -> Result<Option<Vec<u8>>, RestartError> {
    let Some(place) = find_hook(r, name)? else { return Ok(None) };
    if place.bytes() > max {
        return Err(invalid(format!("section `{name}` is {} bytes, more than the limit of {max}", place.bytes())));
    }
    Ok(Some(match place {
        HookPlace::Section { .. } => r.section(name)?.unwrap_or_default(),
        HookPlace::Blob { index, .. } => r.read_region(index)?,
    }))
}

/// The decoded `crum.device` section and the size of `crum.device.data`, or None for the
/// image of a program that used no device: the state decodes, every saved region lies in
/// the data, and the data is as large as the state says. The data itself is not read.
pub fn device_state(r: &mut ImageReader) -> Result<Option<(DeviceState, u64)>, RestartError> {
    let data = find_hook(r, SECTION_DEVICE_DATA)?;
    let Some(bytes) = hook_section(r, SECTION_DEVICE, MAX_DEVICE_STATE)? else {
        if data.is_some() {
            return Err(invalid(format!(
                "the image has a `{SECTION_DEVICE_DATA}` section but no `{SECTION_DEVICE}` section"
            )));
        }
        return Ok(None);
    };
    let state = DeviceState::decode(&bytes)
        .map_err(|e| invalid(format!("the `{SECTION_DEVICE}` section cannot be decoded: {e}")))?;
    let data_size = data.map_or(0, HookPlace::bytes);
    if data_size != state.data_len {
        return Err(invalid(format!(
            "the `{SECTION_DEVICE}` section describes {} bytes of device data but `{SECTION_DEVICE_DATA}` holds {data_size}",
            state.data_len
        )));
    }
    Ok(Some((state, data_size)))
}

/// crum's rules for one region's flags (the format stores them as given): no unknown bit,
/// none contradicting another or the region, a hook-section blob only at address 0.
pub fn region_flags(g: &RegionInfo) -> Result<(), RestartError> {
    let known = REGION_SHARED_ANON | REGION_SHARED_FILE | REGION_GROWSDOWN | REGION_BLOB;
    let what = || format!("image region {:#x}+{:#x} ({})", g.start, g.len, g.name_lossy().escape_debug());
    if g.flags & !known != 0 {
        return Err(invalid(format!("{} has unknown flags {:#x}", what(), g.flags & !known)));
    }
    if g.prot & !((libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) as u32) != 0 {
        return Err(invalid(format!("{} has unknown protection bits {:#x}", what(), g.prot)));
    }
    if g.flags & REGION_BLOB != 0 {
        if g.flags != REGION_BLOB || g.start != 0 || g.prot != 0 || g.name.is_empty() {
            return Err(invalid(format!("{} is marked as a stored section but is not one", what())));
        }
        return Ok(());
    }
    let shared = g.flags & (REGION_SHARED_ANON | REGION_SHARED_FILE);
    if shared == REGION_SHARED_ANON | REGION_SHARED_FILE {
        return Err(invalid(format!("{} is marked both shared anonymous and shared file", what())));
    }
    if shared != 0 && g.flags & REGION_GROWSDOWN != 0 {
        return Err(invalid(format!("{} is marked both shared and as the stack", what())));
    }
    if g.flags & REGION_SHARED_FILE != 0 {
        if !g.name.starts_with(b"/") {
            return Err(invalid(format!("{} is a shared file mapping without a file path", what())));
        }
        if g.has_data {
            return Err(invalid(format!("{} is a shared file mapping with stored contents", what())));
        }
    }
    Ok(())
}

/// Refuses a required section nobody restoring the image understands: besides the format's
/// own and `process`, the hook sections this crum knows ([`UNDERSTOOD_HOOKS`]) and those the
/// process state lists (written by the program's own hooks, which restore them).
pub fn required_sections(r: &ImageReader, st: &ProcessState) -> Result<(), RestartError> {
    for s in r.inventory().sections.iter().filter(|s| s.required) {
        let known = [SECTION_REGIONS, SECTION_PAGES, SECTION_PROCESS, SECTION_CHAIN].contains(&s.name.as_str())
            || UNDERSTOOD_HOOKS.contains(&s.name.as_str())
            || st.hook_sections.contains(&s.name);
        if !known {
            return Err(ImageError::UnknownRequiredSection { name: s.name.clone() }.into());
        }
    }
    Ok(())
}

/// The hook sections the process state lists are all there, and none is there that it does
/// not list (a version 1 state lists none: then any this crum understands may be there).
pub fn hook_sections(r: &ImageReader, st: &ProcessState) -> Result<(), RestartError> {
    for name in &st.hook_sections {
        if find_hook(r, name)?.is_none() {
            return Err(invalid(format!(
                "the image lacks its `{}` section (the process state lists it)",
                name.escape_debug()
            )));
        }
    }
    let blobs = r.regions().iter().filter(|g| !is_process_memory(g.flags)).map(|g| g.name_lossy());
    let sections = r.inventory().sections.iter().map(|s| s.name.clone()).filter(|n| UNDERSTOOD_HOOKS.contains(&n.as_str()));
    for name in blobs.chain(sections) {
        let listed = if st.version < 2 {
            UNDERSTOOD_HOOKS.contains(&name.as_str())
        } else {
            st.hook_sections.contains(&name)
        };
        if !listed {
            return Err(invalid(format!(
                "the image holds a section `{}` its process state does not list",
                name.escape_debug()
            )));
        }
    }
    Ok(())
}

/// Every section of the image checked, as `crum restart` needs before it changes anything
/// and as `crum inspect --verify` reports: metadata sections and section blobs read and
/// checksummed (process memory too with `memory`; a restart checks it as it maps it, still
/// before it touches any file), and the device sections decoded and consistent. Returns the
/// device state, if any. (Region flags are crum's process-level rules, checked by the
/// restart with [`region_flags`]; the format stores them as given.)
pub fn image(r: &mut ImageReader, memory: bool) -> Result<Option<(DeviceState, u64)>, RestartError> {
    if memory {
        r.verify()?;
    } else {
        r.verify_sections()?;
        let blobs: Vec<usize> =
            r.regions().iter().enumerate().filter(|(_, g)| !is_process_memory(g.flags)).map(|(i, _)| i).collect();
        for i in blobs {
            r.verify_region(i)?;
        }
    }
    device_state(r)
}
