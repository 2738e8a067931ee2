//! Stream attributes (`cudaStreamSetAttribute/GetAttribute/CopyAttributes`), the persisting
//! L2 set-aside (`cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize)`,
//! `cudaCtxResetPersistingL2Cache`) and stream ids (`cudaStreamGetId`).
//!
//! The attributes are per-stream state a program reads back, so the interposer keeps them
//! (this module's tables live in the program's memory and are saved with it by a checkpoint)
//! and forwards each one to the proxy, whose backend hands it to the driver (`cuda`:
//! `cuStreamSetAttribute`; `emu` has no cache and records nothing). A restarted proxy is a
//! new context whose streams carry no attributes: [`replay_after_restart`] sends every
//! remembered attribute and the set-aside again before the program's threads run. Work the
//! checkpoint saved unstarted is replayed by the restore itself, before that, so it runs
//! without the L2 hint — a cache hint, which never changes a result.
// `#[no_mangle]` exports count as unsafe code.
#![allow(unsafe_code, non_upper_case_globals)]

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use crum_wire::{cuda, AccessPolicy, Request, StreamAttr};

use crate::abi_gen::*;
use crate::client::call;
use crate::errors::CudaResult;
use crate::ffi::*;
use crate::state::*;

/// Bytes of a `cudaStreamAttrValue` (`cudaLaunchAttributeValue`).
const VALUE_SIZE: usize = CUDALAUNCHATTRIBUTE_ST_SIZE - CUDALAUNCHATTRIBUTE_ST_VAL;

/// The attributes a program set on one stream (`None`: never set, the driver's default).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Attrs {
    window: Option<AccessPolicy>,
    sync_policy: Option<u32>,
    domain: Option<u32>,
    domain_map: Option<(u8, u8)>,
}

/// What the driver reports for an attribute never set: an empty window (0 bytes, normal
/// accesses), automatic synchronization, the default domain, and the default domain map
/// (default → 0, remote → 1).
const EMPTY_WINDOW: AccessPolicy = AccessPolicy { base: 0, bytes: 0, hit_ratio: 0.0, hit_prop: 0, miss_prop: 0 };
const DEFAULT_DOMAIN_MAP: (u8, u8) = (0, 1);
const DEFAULTS: Attrs = Attrs {
    window: Some(EMPTY_WINDOW),
    sync_policy: Some(cudaSyncPolicyAuto),
    domain: Some(cudaLaunchMemSyncDomainDefault),
    domain_map: Some(DEFAULT_DOMAIN_MAP),
};

impl Attrs {
    /// Every attribute, the default where never set.
    fn or_defaults(self) -> (AccessPolicy, u32, u32, (u8, u8)) {
        (
            self.window.unwrap_or(EMPTY_WINDOW),
            self.sync_policy.unwrap_or(cudaSyncPolicyAuto),
            self.domain.unwrap_or(cudaLaunchMemSyncDomainDefault),
            self.domain_map.unwrap_or(DEFAULT_DOMAIN_MAP),
        )
    }

    fn each(&self) -> impl Iterator<Item = StreamAttr> {
        [
            self.window.map(StreamAttr::AccessPolicyWindow),
            self.sync_policy.map(StreamAttr::SyncPolicy),
            self.domain.map(StreamAttr::MemSyncDomain),
            self.domain_map.map(|(d, r)| StreamAttr::MemSyncDomainMap(d, r)),
        ]
        .into_iter()
        .flatten()
    }

    fn set(&mut self, a: StreamAttr) {
        match a {
            StreamAttr::AccessPolicyWindow(w) => self.window = Some(w),
            StreamAttr::SyncPolicy(p) => self.sync_policy = Some(p),
            StreamAttr::MemSyncDomain(d) => self.domain = Some(d),
            StreamAttr::MemSyncDomainMap(d, r) => self.domain_map = Some((d, r)),
        }
    }
}

/// Resolved stream handle → its attributes.
static ATTRS: Mutex<Option<HashMap<u64, Attrs>>> = Mutex::new(None);
/// The persisting L2 set-aside in force (clamped), once a program set one.
static PERSISTING_L2: Mutex<Option<u64>> = Mutex::new(None);

fn with_attrs<R>(f: impl FnOnce(&mut HashMap<u64, Attrs>) -> R) -> R {
    let mut g = ATTRS.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// A stream the program may name: the legacy or per-thread stream, or one it created.
fn known_stream(stream: *mut c_void, ptsz: bool) -> CudaResult<u64> {
    let h = stream as u64;
    let s = resolve_stream(h, ptsz)?;
    if h <= STREAM_PER_THREAD || state().streams.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&s) {
        Ok(s)
    } else {
        Err(cuda::ERROR_INVALID_RESOURCE_HANDLE)
    }
}

/// Check an access policy window as CUDA documents it: at most
/// `cudaDevAttrMaxAccessPolicyWindowSize` bytes, `hitRatio` in [0, 1], `hitProp` one of the
/// three properties, `missProp` normal or streaming.
pub(crate) fn check_window(w: &AccessPolicy) -> CudaResult<()> {
    let max = props()?.max_access_policy_window.max(0) as u64;
    let ok = w.bytes <= max
        && (0.0..=1.0).contains(&w.hit_ratio)
        && w.hit_prop <= cudaAccessPropertyPersisting
        && matches!(w.miss_prop, cudaAccessPropertyNormal | cudaAccessPropertyStreaming);
    if ok {
        Ok(())
    } else {
        Err(cuda::ERROR_INVALID_VALUE)
    }
}

/// Read a `cudaAccessPolicyWindow` at `p`.
pub(crate) fn read_window(p: *const u8) -> CudaResult<AccessPolicy> {
    Ok(AccessPolicy {
        base: field(p, CUDAACCESSPOLICYWINDOW_BASE_PTR)?,
        bytes: field(p, CUDAACCESSPOLICYWINDOW_NUM_BYTES)?,
        hit_ratio: field(p, CUDAACCESSPOLICYWINDOW_HITRATIO)?,
        hit_prop: field(p, CUDAACCESSPOLICYWINDOW_HITPROP)?,
        miss_prop: field(p, CUDAACCESSPOLICYWINDOW_MISSPROP)?,
    })
}

/// Decode and check the value of stream attribute `id`.
fn decode(id: u32, v: *const u8) -> CudaResult<StreamAttr> {
    if v.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    match id {
        cudaLaunchAttributeAccessPolicyWindow => {
            let w = read_window(v)?;
            check_window(&w)?;
            Ok(StreamAttr::AccessPolicyWindow(w))
        }
        cudaLaunchAttributeSynchronizationPolicy => match field::<u32>(v, 0)? {
            p @ cudaSyncPolicyAuto..=cudaSyncPolicyBlockingSync => Ok(StreamAttr::SyncPolicy(p)),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        },
        cudaLaunchAttributeMemSyncDomain => match field::<u32>(v, 0)? {
            d @ (cudaLaunchMemSyncDomainDefault | cudaLaunchMemSyncDomainRemote) => {
                Ok(StreamAttr::MemSyncDomain(d))
            }
            _ => Err(cuda::ERROR_INVALID_VALUE),
        },
        cudaLaunchAttributeMemSyncDomainMap => {
            let [d, r]: [u8; 2] = field(v, 0)?;
            Ok(StreamAttr::MemSyncDomainMap(d, r))
        }
        _ => Err(cuda::ERROR_INVALID_VALUE),
    }
}

fn set_attr(stream: *mut c_void, id: u32, value: *const u8, ptsz: bool) -> CudaResult<()> {
    let s = known_stream(stream, ptsz)?;
    if id == cudaLaunchAttributePriority {
        // A priority is fixed when the emulated or real stream is created here.
        return Err(crate::errors::unsupported("cudaStreamSetAttribute(cudaStreamAttributePriority)"));
    }
    let a = decode(id, value)?;
    call(&Request::StreamSetAttr { stream: s, attr: a })?;
    with_attrs(|m| m.entry(s).or_default().set(a));
    Ok(())
}

fn get_attr(stream: *mut c_void, id: u32, out_v: *mut u8, ptsz: bool) -> CudaResult<()> {
    let s = known_stream(stream, ptsz)?;
    let a = with_attrs(|m| m.get(&s).copied()).unwrap_or_default();
    let priority = || {
        state().streams.lock().unwrap_or_else(|p| p.into_inner()).get(&s).map_or(0, |&(_, p)| p)
    };
    // Check the id before writing anything.
    if !matches!(
        id,
        cudaLaunchAttributeAccessPolicyWindow
            | cudaLaunchAttributeSynchronizationPolicy
            | cudaLaunchAttributeMemSyncDomain
            | cudaLaunchAttributeMemSyncDomainMap
            | cudaLaunchAttributePriority
    ) {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    zero(out_v, VALUE_SIZE)?;
    let (w, sync_policy, domain, (dm, rm)) = a.or_defaults();
    match id {
        cudaLaunchAttributeAccessPolicyWindow => {
            set_field(out_v, CUDAACCESSPOLICYWINDOW_BASE_PTR, w.base);
            set_field(out_v, CUDAACCESSPOLICYWINDOW_NUM_BYTES, w.bytes);
            set_field(out_v, CUDAACCESSPOLICYWINDOW_HITRATIO, w.hit_ratio);
            set_field(out_v, CUDAACCESSPOLICYWINDOW_HITPROP, w.hit_prop);
            set_field(out_v, CUDAACCESSPOLICYWINDOW_MISSPROP, w.miss_prop);
        }
        cudaLaunchAttributeSynchronizationPolicy => set_field(out_v, 0, sync_policy),
        cudaLaunchAttributeMemSyncDomain => set_field(out_v, 0, domain),
        cudaLaunchAttributeMemSyncDomainMap => set_field(out_v, 0, [dm, rm]),
        _ => set_field(out_v, 0, priority()),
    }
    Ok(())
}

fn copy_attrs(dst: *mut c_void, src: *mut c_void, ptsz: bool) -> CudaResult<()> {
    let d = known_stream(dst, ptsz)?;
    let s = known_stream(src, ptsz)?;
    let (from, to) = with_attrs(|m| (m.get(&s).copied().unwrap_or_default(), m.get(&d).copied().unwrap_or_default()));
    // The destination takes every attribute of the source: what the source never set goes
    // back to the driver's default where the destination had set it.
    let defaults = DEFAULTS;
    let send = Attrs {
        window: from.window.or(to.window.and(defaults.window)),
        sync_policy: from.sync_policy.or(to.sync_policy.and(defaults.sync_policy)),
        domain: from.domain.or(to.domain.and(defaults.domain)),
        domain_map: from.domain_map.or(to.domain_map.and(defaults.domain_map)),
    };
    for attr in send.each() {
        call(&Request::StreamSetAttr { stream: d, attr })?;
    }
    with_attrs(|m| m.insert(d, from));
    Ok(())
}

/// `cudaStreamGetId`: the stream's handle, unique for the life of the context and the same
/// after a restart (the proxy re-creates streams behind their saved handles); the legacy
/// stream is 0.
fn stream_id(stream: *mut c_void, id: *mut u64, ptsz: bool) -> CudaResult<()> {
    if id.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    out(id, known_stream(stream, ptsz)?)
}

/// `cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, bytes)`: clamped to the device's
/// `persistingL2CacheMaxSize`, as CUDA does; a device without the feature has no such limit.
pub(crate) fn set_persisting_limit(bytes: u64) -> CudaResult<u64> {
    let max = props()?.max_persisting_l2.max(0) as u64;
    if max == 0 {
        return Err(cuda::ERROR_UNSUPPORTED_LIMIT);
    }
    let v = bytes.min(max);
    call(&Request::SetPersistingL2Limit { bytes: v })?;
    *PERSISTING_L2.lock().unwrap_or_else(|p| p.into_inner()) = Some(v);
    Ok(v)
}

/// A destroyed stream's attributes go with it.
pub(crate) fn forget(stream: u64) {
    with_attrs(|m| m.remove(&stream));
}

/// `cudaDeviceReset`: streams and limits are gone.
pub(crate) fn reset() {
    with_attrs(|m| m.clear());
    *PERSISTING_L2.lock().unwrap_or_else(|p| p.into_inner()) = None;
}

/// After a restart, the new proxy connected, before the device state is replayed (threads
/// stopped): the device heap's size the program set. The new device makes a heap of that
/// size (the blocks of the old one come back with the device memory); it must know it before
/// the saved queue runs a kernel that calls `malloc`.
pub(crate) fn replay_before_restore() -> Result<(), String> {
    if let Some(bytes) = super::device::heap_limit() {
        crate::client::agent_call(&Request::SetHeapLimit { bytes })
            .map_err(|e| format!("cannot set the device heap size again: {e}"))?;
    }
    Ok(())
}

/// After a restart (threads stopped, new proxy connected, streams re-created behind their
/// handles): give the new context every attribute and the set-aside again.
pub(crate) fn replay_after_restart() -> Result<(), String> {
    let limit = *PERSISTING_L2.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(bytes) = limit {
        crate::client::agent_call(&Request::SetPersistingL2Limit { bytes })
            .map_err(|e| format!("cannot set the persisting L2 limit again: {e}"))?;
    }
    let all: Vec<(u64, Attrs)> = with_attrs(|m| m.iter().map(|(&s, &a)| (s, a)).collect());
    for (stream, a) in all {
        for attr in a.each() {
            crate::client::agent_call(&Request::StreamSetAttr { stream, attr })
                .map_err(|e| format!("cannot set attribute {attr:?} of stream {stream:#x} again: {e}"))?;
        }
    }
    Ok(())
}

crate::export! {
    fn cudaStreamSetAttribute(stream: *mut c_void, id: u32, value: *const u8) {
        set_attr(stream, id, value, false)
    }
    fn cudaStreamSetAttribute_ptsz(stream: *mut c_void, id: u32, value: *const u8) {
        set_attr(stream, id, value, true)
    }
    fn cudaStreamGetAttribute(stream: *mut c_void, id: u32, value: *mut u8) {
        get_attr(stream, id, value, false)
    }
    fn cudaStreamGetAttribute_ptsz(stream: *mut c_void, id: u32, value: *mut u8) {
        get_attr(stream, id, value, true)
    }
    fn cudaStreamCopyAttributes(dst: *mut c_void, src: *mut c_void) {
        copy_attrs(dst, src, false)
    }
    fn cudaStreamCopyAttributes_ptsz(dst: *mut c_void, src: *mut c_void) {
        copy_attrs(dst, src, true)
    }
    fn cudaStreamGetId(stream: *mut c_void, id: *mut u64) {
        stream_id(stream, id, false)
    }
    fn cudaStreamGetId_ptsz(stream: *mut c_void, id: *mut u64) {
        stream_id(stream, id, true)
    }
    fn cudaCtxResetPersistingL2Cache() {
        call(&Request::ResetPersistingL2).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attrs_each_lists_only_what_was_set_in_a_fixed_order() {
        let mut a = Attrs::default();
        a.set(StreamAttr::MemSyncDomain(1));
        a.set(StreamAttr::SyncPolicy(cudaSyncPolicyYield));
        let got: Vec<StreamAttr> = a.each().collect();
        assert_eq!(got, vec![StreamAttr::SyncPolicy(cudaSyncPolicyYield), StreamAttr::MemSyncDomain(1)]);
    }

    #[test]
    fn decode_rejects_unknown_ids_and_bad_enum_values() {
        let bad_policy = 9u32.to_ne_bytes();
        assert_eq!(decode(cudaLaunchAttributeSynchronizationPolicy, bad_policy.as_ptr()), Err(cuda::ERROR_INVALID_VALUE));
        let domain = 2u32.to_ne_bytes();
        assert_eq!(decode(cudaLaunchAttributeMemSyncDomain, domain.as_ptr()), Err(cuda::ERROR_INVALID_VALUE));
        assert_eq!(decode(cudaLaunchAttributeCooperative, domain.as_ptr()), Err(cuda::ERROR_INVALID_VALUE));
        assert_eq!(decode(cudaLaunchAttributeMemSyncDomain, std::ptr::null()), Err(cuda::ERROR_INVALID_VALUE));
        let spin = cudaSyncPolicySpin.to_ne_bytes();
        assert_eq!(decode(cudaLaunchAttributeSynchronizationPolicy, spin.as_ptr()), Ok(StreamAttr::SyncPolicy(cudaSyncPolicySpin)));
    }
}
