//! Channel framing tests: messages round-trip through encode/decode and through a real
//! channel (client and server lanes on one mapping, in two threads).

use std::sync::Arc;

use proptest::prelude::*;

use crate::channel::{Channel, LANES};
use crate::ChannelError;
use crate::msg::*;

fn arb_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        any::<u32>().prop_map(|pid| Request::Hello { pid }),
        (any::<u64>(), 0u64..1 << 40).prop_map(|(size, a)| Request::Malloc {
            size: size ^ a,
            kind: AllocKind::Device
        }),
        (
            any::<u64>(),
            any::<[u32; 3]>(),
            any::<[u32; 3]>(),
            any::<u32>(),
            any::<u64>(),
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..4096)
        )
            .prop_map(|(func, grid, block, shared, stream, cooperative, params)| {
                Request::Launch {
                    func,
                    grid,
                    block,
                    shared,
                    stream,
                    cooperative,
                    params,
                }
            }),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<bool>()
        )
            .prop_map(|(dst, src, len, stream, sync)| Request::Memcpy {
                dst,
                src,
                len,
                kind: CopyKind::DeviceToHost,
                stream,
                sync
            }),
        (any::<u64>(), ".{0,200}").prop_map(|(module, name)| Request::GetFunction { module, name }),
        any::<u64>().prop_map(|stream| Request::StreamSync { stream }),
    ]
}

proptest! {
    #[test]
    fn any_request_roundtrips_through_bincode(req in arb_request()) {
        let mut buf = vec![0u8; 1 << 16];
        let n = encode_into(&req, &mut buf).unwrap();
        let back: Request = decode(&buf[..n]).unwrap();
        prop_assert_eq!(back, req);
    }

    #[test]
    fn truncated_request_is_rejected_not_panicking(req in arb_request(), cut in 0usize..64) {
        let mut buf = vec![0u8; 1 << 16];
        let n = encode_into(&req, &mut buf).unwrap();
        let cut = cut.min(n.saturating_sub(1));
        prop_assert!(decode::<Request>(&buf[..cut]).is_err());
    }

    #[test]
    fn garbage_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode::<Request>(&bytes);
    }

    #[test]
    fn request_sequences_arrive_in_order_through_the_ring(reqs in proptest::collection::vec(arb_request(), 1..200)) {
        let ch = Arc::new(Channel::create().unwrap());
        let mut client = ch.claim_lane().unwrap();
        let mut server = ch.accept_lanes(std::time::Duration::ZERO).pop().unwrap();
        let n = reqs.len();
        let sent = reqs.clone();
        let t = std::thread::spawn(move || {
            let mut got = Vec::new();
            while got.len() < n {
                let inc = server.recv(&|| true).unwrap();
                let wants = inc.wants_reply;
                got.push(inc.request.unwrap());
                if wants {
                    server.reply(&Reply::ok(Body::Value(got.len() as u64)));
                }
            }
            got
        });
        for (i, r) in sent.iter().enumerate() {
            if i % 7 == 3 {
                let rep = client.call(r).unwrap();
                prop_assert_eq!(rep.body, Body::Value(i as u64 + 1));
            } else {
                client.send(r).unwrap();
            }
        }
        let got = t.join().unwrap();
        prop_assert_eq!(got, reqs);
        std::mem::forget(client);
    }
}

#[test]
fn ring_wraps_many_times_without_losing_messages() {
    let ch = Arc::new(Channel::create().unwrap());
    let mut client = ch.claim_lane().unwrap();
    let mut server = ch.accept_lanes(std::time::Duration::ZERO).pop().unwrap();
    let t = std::thread::spawn(move || {
        let mut sum = 0u64;
        for _ in 0..5000 {
            if let Ok(Request::Launch { params, .. }) = server.recv(&|| true).unwrap().request {
                sum += params.len() as u64;
            }
        }
        sum
    });
    let mut expect = 0u64;
    for i in 0..5000u64 {
        let params = vec![7u8; (i % 3000) as usize];
        expect += params.len() as u64;
        client
            .send(&Request::Launch {
                func: i,
                grid: [1; 3],
                block: [1; 3],
                shared: 0,
                stream: 0,
                cooperative: false,
                params,
            })
            .unwrap();
    }
    assert_eq!(t.join().unwrap(), expect);
    std::mem::forget(client);
}

#[test]
fn call_fails_with_proxy_gone_when_proxy_marked_dead() {
    let ch = Arc::new(Channel::create().unwrap());
    ch.set_ready(std::process::id());
    let mut client = ch.claim_lane().unwrap();
    let ch2 = ch.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        ch2.set_dead();
    });
    let r = client.call(&Request::DeviceSync);
    assert!(matches!(r, Err(crate::ChannelError::ProxyGone)));
    std::mem::forget(client);
}

#[test]
fn call_fails_with_proxy_gone_when_the_watched_proxy_is_an_unreaped_zombie() {
    // The "proxy": a child that ends at once and that nobody reaps (as crum's proxy after a
    // restart, the child of a program that does not reap it): `kill(pid, 0)` still succeeds.
    let mut proxy = std::process::Command::new("true").spawn().unwrap();
    let ch = Arc::new(Channel::create().unwrap());
    ch.set_ready(proxy.id());
    let fd = ch.watch_proxy(|fd| fd).unwrap();
    assert!(fd >= 0 && ch.watch_fd() == fd);
    assert_eq!(ch.watch_proxy(|_| unreachable!()).unwrap(), fd, "watched once");
    let mut client = ch.claim_lane().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = client.call(&Request::DeviceSync);
        std::mem::forget(client);
        let _ = tx.send(matches!(r, Err(crate::ChannelError::ProxyGone)));
    });
    let gone = rx.recv_timeout(std::time::Duration::from_secs(60));
    assert_eq!(gone, Ok(true), "the call must fail with ProxyGone, not hang");
    // The channel reaped its dead proxy (its own child here).
    assert!(proxy.try_wait().is_err(), "the zombie was reaped by the channel");
}

#[test]
fn a_watched_peer_is_seen_to_exit_while_a_zombie() {
    let mut child = std::process::Command::new("sleep").arg("600").spawn().unwrap();
    let w = crate::PeerWatch::open(child.id() as i32).unwrap();
    assert!(!w.exited());
    child.kill().unwrap();
    // Not reaped yet: a zombie, which `kill(pid, 0)` would take for alive.
    let t0 = std::time::Instant::now();
    while !w.exited() {
        assert!(t0.elapsed() < std::time::Duration::from_secs(60), "exit not seen");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    child.wait().unwrap();
    assert!(w.exited());
}

#[test]
fn watching_a_proxy_that_is_gone_fails() {
    let mut proxy = std::process::Command::new("true").spawn().unwrap();
    proxy.wait().unwrap();
    let ch = Channel::create().unwrap();
    assert!(ch.watch_proxy(|fd| fd).is_err(), "not ready yet");
    ch.set_ready(proxy.id());
    assert!(matches!(ch.watch_proxy(|fd| fd), Err(crate::ChannelError::ProxyGone)));
}

#[test]
fn released_lane_can_be_claimed_again() {
    let ch = Arc::new(Channel::create().unwrap());
    let client = ch.claim_lane().unwrap();
    let idx = client.index();
    let mut server = ch.accept_lanes(std::time::Duration::ZERO).pop().unwrap();
    drop(client);
    assert!(matches!(
        server.recv(&|| true).unwrap().request,
        Ok(Request::Close)
    ));
    server.release();
    let again = ch.claim_lane().unwrap();
    assert_eq!(again.index(), idx);
    std::mem::forget(again);
}

#[test]
fn pending_requests_are_seen_until_the_server_reads_them() {
    let ch = Arc::new(Channel::create().unwrap());
    let mut client = ch.claim_lane().unwrap();
    let mut server = ch.accept_lanes(std::time::Duration::ZERO).pop().unwrap();
    let other = LANES - 1;
    assert!(!ch.any_pending(other));
    client.send(&Request::DeviceSync).unwrap();
    assert!(ch.any_pending(other));
    assert!(!ch.any_pending(client.index()), "the excepted lane is not looked at");
    server.recv(&|| true).unwrap();
    assert!(!ch.any_pending(other));
    std::mem::forget(client);
}

/// `recv_counting` counts a request before it leaves the ring, so an observer never sees a
/// lane empty with nothing counted while a request taken from it is not yet handled (the
/// proxy's drain before a checkpoint relies on it).
#[test]
fn a_request_is_counted_before_the_lane_looks_empty() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    const N: usize = 300;
    let ch = Arc::new(Channel::create().unwrap());
    let mut client = ch.claim_lane().unwrap();
    let mut server = ch.accept_lanes(std::time::Duration::ZERO).pop().unwrap();
    let taken = Arc::new(AtomicUsize::new(0));
    let handled = Arc::new(AtomicUsize::new(0));
    let (t2, h2) = (taken.clone(), handled.clone());
    let t = std::thread::spawn(move || {
        for _ in 0..N {
            server.recv_counting(&|| true, Some(&t2)).unwrap();
            // Taken, not yet handled: a lane thread descheduled here.
            std::thread::sleep(std::time::Duration::from_micros(200));
            h2.fetch_add(1, SeqCst);
            t2.fetch_sub(1, SeqCst);
        }
    });
    for i in 0..N {
        client.send(&Request::StreamSync { stream: i as u64 }).unwrap();
        // Watch the lane until this request is handled.
        while handled.load(SeqCst) <= i {
            let pending = ch.any_pending(LANES);
            let busy = taken.load(SeqCst);
            let done = handled.load(SeqCst);
            assert!(pending || busy > 0 || done > i, "request {i}: the lane looked empty and idle before it was handled");
        }
    }
    t.join().unwrap();
    std::mem::forget(client);
}

/// A retired channel's zero pages look like free lanes; a lane claimed there would be taken
/// for a lane of the new proxy (a call cut twice under one name after a restart). None is.
#[test]
fn a_retired_channel_has_no_lane_to_claim() {
    let ch = Arc::new(Channel::create().unwrap());
    ch.set_ready(std::process::id());
    let held = ch.claim_lane().unwrap();
    ch.retire();
    assert!(ch.claim_lane().is_none());
    std::mem::forget(held);
}

/// A request that finds its lane's channel retired was never written, so the old proxy
/// cannot have carried it across the checkpoint: the lane says so (`RetiredUnsent`, sent
/// again as a new request), unlike a call that was waiting for its reply (`Retired`, resumed
/// by name). Both for calls and pipelined sends; the lane's next call name is unchanged, so
/// the thread that did wait on it at the cut still owns that name.
#[test]
fn a_request_on_a_retired_channel_is_reported_unsent() {
    let ch = Arc::new(Channel::create().unwrap());
    ch.set_ready(std::process::id());
    let mut lane = ch.claim_lane().unwrap();
    let name = lane.next_call();
    ch.retire();
    assert!(matches!(lane.call(&Request::DeviceSync), Err(ChannelError::RetiredUnsent)));
    assert!(matches!(lane.send(&Request::StreamSync { stream: 1 }), Err(ChannelError::RetiredUnsent)));
    assert_eq!(lane.next_call(), name);
    std::mem::forget(lane);
}
