//! One conformance suite for every backend (crosvm's `suspendable_tests!` pattern):
//! `backend_conformance_tests!(path::to::constructor)` expands to the tests, run against the
//! emulated device everywhere (`emu::tests`) and against a real GPU where one exists. The
//! constructor returns a backend whose application is this test process (cross-memory attach
//! to our own pid).

/// Expand the conformance tests (in a module `conformance`) for a backend constructor
/// `fn() -> impl Backend`, named by a path valid inside that module (e.g. `super::emu`).
#[macro_export]
macro_rules! backend_conformance_tests {
    ($make:path) => {
        mod conformance {
            #[allow(unused_imports)]
            use crum_wire::{cuda, AllocKind};
            #[allow(unused_imports)]
            use std::sync::Arc;
            #[allow(unused_imports)]
            use $crate::backend::*;

            fn copy(dst: u64, src: u64, len: u64) -> CopyOp {
                CopyOp {
                    dst,
                    dpitch: len,
                    src: Endpoint::Addr(src),
                    spitch: len,
                    width: len,
                    height: 1,
                }
            }

            #[test]
            fn host_to_device_to_host_roundtrip_preserves_bytes() {
                let e = $make();
                let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
                let mut back = vec![0u8; src.len()];
                let d = e.malloc(src.len() as u64, AllocKind::Device).unwrap().addr;
                e.memcpy(
                    LEGACY_STREAM,
                    copy(d, src.as_ptr() as u64, src.len() as u64),
                )
                .unwrap();
                e.memcpy(
                    LEGACY_STREAM,
                    copy(back.as_mut_ptr() as u64, d, src.len() as u64),
                )
                .unwrap();
                e.stream_sync(LEGACY_STREAM).unwrap();
                assert_eq!(back, src);
            }

            #[test]
            fn memset_2d_touches_only_the_width_of_each_row() {
                let e = $make();
                let d = e.malloc(4 * 16, AllocKind::Device).unwrap().addr;
                e.memset(LEGACY_STREAM, d, 64, 0, 64, 1).unwrap();
                e.memset(LEGACY_STREAM, d, 16, 0xff, 4, 4).unwrap();
                let mut back = vec![9u8; 64];
                e.memcpy(LEGACY_STREAM, copy(back.as_mut_ptr() as u64, d, 64))
                    .unwrap();
                e.device_sync().unwrap();
                for (i, b) in back.iter().enumerate() {
                    assert_eq!(*b, if i % 16 < 4 { 0xff } else { 0 }, "byte {i}");
                }
            }

            #[test]
            fn copy_past_the_end_of_an_allocation_is_invalid_value() {
                let e = $make();
                let d = e.malloc(100, AllocKind::Device).unwrap().addr;
                let buf = vec![0u8; 200];
                let r = e.memcpy(LEGACY_STREAM, copy(d, buf.as_ptr() as u64, 200));
                assert_eq!(r, Err(BackendError::Cuda(cuda::ERROR_INVALID_VALUE)));
            }

            #[test]
            fn unknown_stream_is_invalid_resource_handle() {
                let e = $make();
                assert_eq!(
                    e.stream_sync(StreamId(0xdead)),
                    Err(BackendError::Cuda(cuda::ERROR_INVALID_RESOURCE_HANDLE))
                );
            }

            #[test]
            fn events_order_and_time_work_across_streams() {
                let e = $make();
                let s1 = e.stream_create(0, 0).unwrap();
                let s2 = e.stream_create(1, 0).unwrap();
                let (a, b) = (e.event_create(0).unwrap(), e.event_create(0).unwrap());
                let flag = Arc::new(std::sync::atomic::AtomicU32::new(0));
                e.event_record(a, s1).unwrap();
                let f = flag.clone();
                e.host_func(
                    s1,
                    Box::new(move || {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        f.store(1, std::sync::atomic::Ordering::SeqCst);
                    }),
                )
                .unwrap();
                e.event_record(b, s1).unwrap();
                e.stream_wait_event(s2, b).unwrap();
                let seen = Arc::new(std::sync::atomic::AtomicU32::new(7));
                let (f, s) = (flag.clone(), seen.clone());
                e.host_func(
                    s2,
                    Box::new(move || {
                        s.store(
                            f.load(std::sync::atomic::Ordering::SeqCst),
                            std::sync::atomic::Ordering::SeqCst,
                        )
                    }),
                )
                .unwrap();
                e.stream_sync(s2).unwrap();
                assert_eq!(
                    seen.load(std::sync::atomic::Ordering::SeqCst),
                    1,
                    "s2 waited for the event on s1"
                );
                let ms = e.event_elapsed(a, b).unwrap();
                assert!(ms >= 15.0, "elapsed {ms} ms");
            }

            #[test]
            fn legacy_stream_waits_for_blocking_streams_but_not_nonblocking_ones() {
                let e = $make();
                let blocking = e.stream_create(0, 0).unwrap();
                let flag = Arc::new(std::sync::atomic::AtomicU32::new(0));
                let f = flag.clone();
                e.host_func(
                    blocking,
                    Box::new(move || {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        f.store(1, std::sync::atomic::Ordering::SeqCst);
                    }),
                )
                .unwrap();
                e.stream_sync(LEGACY_STREAM).unwrap();
                assert_eq!(flag.load(std::sync::atomic::Ordering::SeqCst), 1);
            }

            #[test]
            fn event_query_reports_not_ready_until_done() {
                let e = $make();
                let s = e.stream_create(0, 0).unwrap();
                let ev = e.event_create(0).unwrap();
                let (tx, rx) = std::sync::mpsc::channel::<()>();
                e.host_func(
                    s,
                    Box::new(move || {
                        let _ = rx.recv();
                    }),
                )
                .unwrap();
                e.event_record(ev, s).unwrap();
                assert!(!e.event_query(ev).unwrap());
                tx.send(()).unwrap();
                e.event_sync(ev).unwrap();
                assert!(e.event_query(ev).unwrap());
            }

            #[test]
            fn mem_info_accounts_for_allocations() {
                let e = $make();
                let (free0, total) = e.mem_info().unwrap();
                e.malloc(1 << 20, AllocKind::Device).unwrap();
                let (free1, _) = e.mem_info().unwrap();
                assert_eq!(free0 - free1, 1 << 20);
                assert!(total >= free0);
            }
        }
    };
}
