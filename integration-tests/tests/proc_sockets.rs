//! Sockets: socketpairs of every type with data in flight, Unix listeners (path and
//! abstract), TCP listeners (IPv4, IPv6), UDP, options and shutdowns come back and are
//! checked from inside at every step (restart of a restart included); a connection to a
//! server outside the process comes back closed after the bytes that had arrived, named
//! when the image is written; a socket crum cannot restore is still named; state a restart
//! could not bring back exactly (descriptors in flight, datagrams with their senders,
//! connections waiting to be accepted by a Unix listener, a half-closed TCP connection, one
//! between two descriptors of the process, a removed socket file)
//! refuses the checkpoint and leaves the program as it was.
mod proc_common;
use proc_common::*;

use std::io::Write;

#[test]
fn sockets_of_one_process_survive_restart_with_data_in_flight() {
    scenario("sockets", &["40", "100"]);
}

/// What CRIU's zdtm found lost: a UDP socket's shutdown, pair ends whose other end is closed
/// with messages waiting, a datagram socket connected to its own name, datagrams waiting in a
/// bound socket with their senders' addresses (a path, none, an abstract name), SO_BUF_LOCK,
/// TCP_CORK, SO_DONTROUTE, SO_NO_CHECK (and SO_MARK, SO_BINDTODEVICE as root).
#[test]
fn shutdowns_closed_peers_and_more_options_survive_restart() {
    scenario("socket_states", &["24", "100"]);
}

#[test]
fn socket_state_a_restart_cannot_bring_back_refuses_the_checkpoint_and_leaves_the_program_as_it_was() {
    let prog = build_c("socket_refusals");
    for (mode, want) in [
        ("scm", "1 file descriptor(s) in flight in it (SCM_RIGHTS) cannot be carried"),
        ("dgram", "send.sock (a socket file of another process) cannot be carried with its sender"),
        ("listen", "1 connection(s) waiting to be accepted cannot be carried"),
        ("tcp-half", "is CLOSE_WAIT"),
        ("tcp-self", "of the same process: crum cannot make the connection again"),
        ("removed", "gone.sock was removed after the bind"),
    ] {
        let sb = Sandbox::new();
        let mut p = run_under_crum(&sb, &prog, &[mode], &[], "run.out");
        p.wait_lines(1);
        let c = checkpoint_output(&sb, p.pid());
        let err = String::from_utf8_lossy(&c.stderr);
        assert!(!c.status.success(), "{mode}: an image was written: {err}");
        assert!(err.contains(want) && err.contains("fd ") && err.contains("socket"), "{mode}: the refusal does not name it: {err}");
        assert!(sb.list_images().is_empty(), "{mode}: an image is left: {:?}", sb.list_images());
        // The program goes on with its state as it was.
        std::fs::write(sb.path("run/go"), "").unwrap();
        assert_eq!(p.wait_exit(), 0, "{mode}: {}", p.output());
        assert!(p.output().ends_with("PASS\n"), "{mode}: {}", p.output());
    }
}

#[test]
fn a_connection_to_an_outside_server_comes_back_closed_after_the_bytes_that_had_arrived() {
    let sb = Sandbox::new();
    let prog = build_c("tcp_client");
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port().to_string();
    // The program reads from step 100 on: the greeting waits in its socket until then.
    let mut p = run_under_crum(&sb, &prog, &["2000", "5", &port, "100"], &[], "run.out");
    let (mut conn, _) = server.accept().unwrap();
    conn.write_all(b"hello from outside").unwrap();
    p.wait_lines(3);
    let c = checkpoint_output(&sb, p.pid());
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(c.status.success(), "{err}");
    assert!(
        err.contains("warning") && err.contains("tcp socket") && err.contains("comes back closed") && err.contains("18 bytes"),
        "the connection is not named: {err}"
    );
    let img = std::path::PathBuf::from(String::from_utf8_lossy(&c.stdout).trim());
    // --strict refuses to write such an image.
    let c = checkpoint_output_with(&sb, p.pid(), &["--strict"]);
    assert!(!c.status.success(), "--strict wrote an image");
    p.kill9();
    drop(conn);

    let mut r = restart(&sb, &img, "restart.out");
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    let out = r.output();
    assert!(out.contains("got 18 bytes: hello from outside\npeer closed after 18 bytes\n"), "{out}");

    // Restart of a restart: the socket is by then one end of a Unix socket pair whose other
    // end is closed, which comes back as it is (with nothing to name).
    let mut r = restart(&sb, &img, "restart2.out");
    r.wait_lines(2);
    let c = checkpoint_output(&sb, r.pid());
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(c.status.success() && !err.contains("warning"), "{err}");
    let img2 = std::path::PathBuf::from(String::from_utf8_lossy(&c.stdout).trim());
    r.kill9();
    let mut r = restart(&sb, &img2, "restart3.out");
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert!(r.output().contains("got 18 bytes: hello from outside\npeer closed after 18 bytes\n"), "{}", r.output());
}
