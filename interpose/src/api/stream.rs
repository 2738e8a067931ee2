//! Streams, events and host callbacks. Event records and stream waits are pipelined; queries
//! and synchronizations are calls. While a stream captures (`capture`), its work becomes
//! graph nodes instead. Host functions run on the interposer's callback thread,
//! in this process, when the proxy's stream reaches them.
#![allow(unsafe_code)]

use std::ffi::c_void;

use crum_wire::{cuda, Body, Request};

use crate::client::{call, send, start_callback_thread};
use crate::errors::CudaResult;
use crate::ffi::*;
use crate::state::*;

/// `cudaStreamNonBlocking`.
const NON_BLOCKING: u32 = 1;
/// Priorities of an sm_80 device: 0 (lowest) to -5 (highest).
const PRIO_LEAST: i32 = 0;
const PRIO_GREATEST: i32 = -5;
/// (least, greatest) priority, as `cudaDeviceGetStreamPriorityRange` reports them.
pub(crate) const PRIORITY_RANGE: (i32, i32) = (PRIO_LEAST, PRIO_GREATEST);

fn create_stream(s: *mut *mut c_void, flags: u32, priority: i32) -> CudaResult<()> {
    if s.is_null() || flags > NON_BLOCKING {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let priority = priority.clamp(PRIO_GREATEST, PRIO_LEAST);
    let Body::Value(h) = call(&Request::StreamCreate { flags, priority })? else {
        return Err(cuda::ERROR_UNKNOWN);
    };
    state()
        .streams
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(h, (flags, priority));
    out(s, h as *mut c_void)
}

/// `cudaStreamCallback_t` adapted to a host function: the boxed (callback, stream, data).
struct StreamCallback {
    cb: unsafe extern "C" fn(*mut c_void, u32, *mut c_void),
    stream: *mut c_void,
    data: *mut c_void,
}

unsafe extern "C" fn stream_callback_trampoline(p: *mut c_void) {
    // SAFETY: `p` is the Box<StreamCallback> leaked in cudaStreamAddCallback, run exactly once.
    let b = unsafe { Box::from_raw(p as *mut StreamCallback) };
    // SAFETY: the application's callback with its own arguments (status: success).
    unsafe { (b.cb)(b.stream, 0, b.data) };
}

fn host_func(stream: *mut c_void, func: u64, data: u64, ptsz: bool) -> CudaResult<()> {
    if func == 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let s = resolve_stream(stream as u64, ptsz)?;
    if crate::capture::record(s, || Ok(crate::graph::NodeKind::Host { func, data }))? {
        return Ok(());
    }
    host_func_on(s, func, data)
}

/// `cudaHostTaskSyncMode` of `cudaLaunchHostFunc_v2`: blocking (0) or spin-wait (1) says
/// how the stream waits for the function to finish; both run it in stream order on the
/// callback thread here, which is what either mode promises.
fn check_sync_mode(mode: u32) -> CudaResult<()> {
    if mode <= 1 {
        Ok(())
    } else {
        Err(cuda::ERROR_INVALID_VALUE)
    }
}

/// Queue host function `func(data)` on `stream` (resolved).
pub(crate) fn host_func_on(stream: u64, func: u64, data: u64) -> CudaResult<()> {
    start_callback_thread()?;
    send(&Request::HostFunc { stream, func, data })
}

/// `cudaEventRecordExternal` / `cudaEventWaitExternal`: in a capture, a node of the graph.
const EXTERNAL: u32 = 1;

fn record(event: *mut c_void, stream: *mut c_void, ptsz: bool, flags: u32) -> CudaResult<()> {
    if event.is_null() {
        return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
    }
    let s = resolve_stream(stream as u64, ptsz)?;
    if crate::capture::event_record(event as u64, s, flags & EXTERNAL != 0)? {
        return Ok(());
    }
    send(&Request::EventRecord {
        event: event as u64,
        stream: s,
    })
}

fn wait_event(stream: *mut c_void, event: *mut c_void, flags: u32, ptsz: bool) -> CudaResult<()> {
    if event.is_null() {
        return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
    }
    let s = resolve_stream(stream as u64, ptsz)?;
    if crate::capture::wait_event(s, event as u64, flags & EXTERNAL != 0)? {
        return Ok(());
    }
    send(&Request::StreamWaitEvent { stream: s, event: event as u64 })
}

fn sync_stream(stream: *mut c_void, ptsz: bool) -> CudaResult<()> {
    let s = resolve_stream(stream as u64, ptsz)?;
    crate::capture::check_sync(s)?;
    call(&Request::StreamSync { stream: s })?;
    crate::pool::after_sync();
    Ok(())
}

fn query_stream(stream: *mut c_void, ptsz: bool) -> CudaResult<()> {
    let s = resolve_stream(stream as u64, ptsz)?;
    crate::capture::check_sync(s)?;
    call(&Request::StreamQuery { stream: s }).map(|_| ())
}

/// `cudaStreamAddCallback` is not allowed in a capture (a host node takes its place).
fn add_callback(stream: *mut c_void, cb: Option<unsafe extern "C" fn(*mut c_void, u32, *mut c_void)>, data: *mut c_void, flags: u32, ptsz: bool) -> CudaResult<()> {
    let (Some(cb), 0) = (cb, flags) else { return Err(cuda::ERROR_INVALID_VALUE) };
    crate::capture::check_sync(resolve_stream(stream as u64, ptsz)?)?;
    let b = Box::into_raw(Box::new(StreamCallback { cb, stream, data }));
    host_func(stream, stream_callback_trampoline as *const () as u64, b as u64, ptsz)
}

crate::export! {
    fn cudaStreamCreate(s: *mut *mut c_void) {
        create_stream(s, 0, 0)
    }
    fn cudaStreamCreateWithFlags(s: *mut *mut c_void, flags: u32) {
        create_stream(s, flags, 0)
    }
    fn cudaStreamCreateWithPriority(s: *mut *mut c_void, flags: u32, priority: i32) {
        create_stream(s, flags, priority)
    }
    fn cudaStreamDestroy(stream: *mut c_void) {
        let h = stream as u64;
        if h <= STREAM_PER_THREAD {
            return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
        }
        call(&Request::StreamDestroy { stream: h })?;
        state().streams.lock().unwrap_or_else(|p| p.into_inner()).remove(&h);
        super::stream_attrs::forget(h);
        Ok(())
    }
    fn cudaStreamQuery(stream: *mut c_void) {
        query_stream(stream, false)
    }
    fn cudaStreamQuery_ptsz(stream: *mut c_void) {
        query_stream(stream, true)
    }
    fn cudaStreamSynchronize(stream: *mut c_void) {
        sync_stream(stream, false)
    }
    fn cudaStreamSynchronize_ptsz(stream: *mut c_void) {
        sync_stream(stream, true)
    }
    fn cudaStreamWaitEvent(stream: *mut c_void, event: *mut c_void, flags: u32) {
        wait_event(stream, event, flags, false)
    }
    fn cudaStreamWaitEvent_ptsz(stream: *mut c_void, event: *mut c_void, flags: u32) {
        wait_event(stream, event, flags, true)
    }
    fn cudaStreamGetFlags(stream: *mut c_void, flags: *mut u32) {
        let h = stream as u64;
        if h <= STREAM_PER_THREAD {
            return out(flags, 0);
        }
        let g = state().streams.lock().unwrap_or_else(|p| p.into_inner());
        let (f, _) = *g.get(&h).ok_or(cuda::ERROR_INVALID_RESOURCE_HANDLE)?;
        out(flags, f)
    }
    fn cudaStreamGetPriority(stream: *mut c_void, priority: *mut i32) {
        let h = stream as u64;
        if h <= STREAM_PER_THREAD {
            return out(priority, 0);
        }
        let g = state().streams.lock().unwrap_or_else(|p| p.into_inner());
        let (_, p) = *g.get(&h).ok_or(cuda::ERROR_INVALID_RESOURCE_HANDLE)?;
        out(priority, p)
    }
    fn cudaStreamGetFlags_ptsz(stream: *mut c_void, flags: *mut u32) {
        let h = stream as u64;
        if h <= STREAM_PER_THREAD {
            return out(flags, 0);
        }
        let g = state().streams.lock().unwrap_or_else(|p| p.into_inner());
        let (f, _) = *g.get(&h).ok_or(cuda::ERROR_INVALID_RESOURCE_HANDLE)?;
        out(flags, f)
    }
    fn cudaStreamGetPriority_ptsz(stream: *mut c_void, priority: *mut i32) {
        let h = stream as u64;
        if h <= STREAM_PER_THREAD {
            return out(priority, 0);
        }
        let g = state().streams.lock().unwrap_or_else(|p| p.into_inner());
        let (_, p) = *g.get(&h).ok_or(cuda::ERROR_INVALID_RESOURCE_HANDLE)?;
        out(priority, p)
    }
    fn cudaDeviceGetStreamPriorityRange(least: *mut i32, greatest: *mut i32) {
        if !least.is_null() {
            out(least, PRIO_LEAST)?;
        }
        if !greatest.is_null() {
            out(greatest, PRIO_GREATEST)?;
        }
        Ok(())
    }
    fn cudaStreamAddCallback(stream: *mut c_void, cb: Option<unsafe extern "C" fn(*mut c_void, u32, *mut c_void)>, data: *mut c_void, flags: u32) {
        add_callback(stream, cb, data, flags, false)
    }
    fn cudaLaunchHostFunc(stream: *mut c_void, func: *const c_void, data: *mut c_void) {
        host_func(stream, func as u64, data as u64, false)
    }
    fn cudaLaunchHostFunc_ptsz(stream: *mut c_void, func: *const c_void, data: *mut c_void) {
        host_func(stream, func as u64, data as u64, true)
    }
    fn cudaLaunchHostFunc_v2(stream: *mut c_void, func: *const c_void, data: *mut c_void, sync_mode: u32) {
        check_sync_mode(sync_mode)?;
        host_func(stream, func as u64, data as u64, false)
    }
    fn cudaLaunchHostFunc_v2_ptsz(stream: *mut c_void, func: *const c_void, data: *mut c_void, sync_mode: u32) {
        check_sync_mode(sync_mode)?;
        host_func(stream, func as u64, data as u64, true)
    }
    fn cudaEventCreate(event: *mut *mut c_void) {
        let Body::Value(h) = call(&Request::EventCreate { flags: 0 })? else { return Err(cuda::ERROR_UNKNOWN) };
        out(event, h as *mut c_void)
    }
    fn cudaEventCreateWithFlags(event: *mut *mut c_void, flags: u32) {
        if flags & !0x7 != 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let Body::Value(h) = call(&Request::EventCreate { flags })? else { return Err(cuda::ERROR_UNKNOWN) };
        out(event, h as *mut c_void)
    }
    fn cudaEventDestroy(event: *mut c_void) {
        if event.is_null() {
            return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
        }
        call(&Request::EventDestroy { event: event as u64 }).map(|_| ())
    }
    fn cudaEventRecord(event: *mut c_void, stream: *mut c_void) {
        record(event, stream, false, 0)
    }
    fn cudaEventRecord_ptsz(event: *mut c_void, stream: *mut c_void) {
        record(event, stream, true, 0)
    }
    fn cudaEventRecordWithFlags(event: *mut c_void, stream: *mut c_void, flags: u32) {
        record(event, stream, false, flags)
    }
    fn cudaEventRecordWithFlags_ptsz(event: *mut c_void, stream: *mut c_void, flags: u32) {
        record(event, stream, true, flags)
    }
    fn cudaEventQuery(event: *mut c_void) {
        if event.is_null() {
            return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
        }
        crate::capture::check_event(event as u64)?;
        call(&Request::EventQuery { event: event as u64 }).map(|_| ())
    }
    fn cudaEventSynchronize(event: *mut c_void) {
        if event.is_null() {
            return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
        }
        crate::capture::check_event(event as u64)?;
        call(&Request::EventSync { event: event as u64 })?;
        crate::pool::after_sync();
        Ok(())
    }
    fn cudaEventElapsedTime(ms: *mut f32, start: *mut c_void, end: *mut c_void) {
        if ms.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        crate::capture::check_event(start as u64)?;
        crate::capture::check_event(end as u64)?;
        let Body::Float(t) = call(&Request::EventElapsed { start: start as u64, end: end as u64 })? else { return Err(cuda::ERROR_UNKNOWN) };
        out(ms, t)
    }
    fn cudaStreamAddCallback_ptsz(stream: *mut c_void, cb: Option<unsafe extern "C" fn(*mut c_void, u32, *mut c_void)>, data: *mut c_void, flags: u32) {
        add_callback(stream, cb, data, flags, true)
    }
    fn cudaStreamIsCapturing(stream: *mut c_void, status: *mut u32) {
        if status.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        out(status, crate::capture::status(resolve_stream(stream as u64, false)?)?)
    }
    fn cudaStreamIsCapturing_ptsz(stream: *mut c_void, status: *mut u32) {
        if status.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        out(status, crate::capture::status(resolve_stream(stream as u64, true)?)?)
    }
    fn cudaStreamGetDevice(_stream: *mut c_void, dev: *mut i32) {
        out(dev, 0)
    }
    fn cudaStreamGetDevice_ptsz(_stream: *mut c_void, dev: *mut i32) {
        out(dev, 0)
    }
}
