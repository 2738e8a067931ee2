//! Sockets: socketpairs of every type with data in flight, Unix listeners (path and
//! abstract), TCP listeners (IPv4, IPv6), UDP, options and shutdowns come back and are
//! checked from inside at every step (restart of a restart included); a connection to a
//! server outside the process comes back closed after the bytes that had arrived, named
//! when the image is written; a socket crum cannot restore is still named.
mod proc_common;
use proc_common::*;

use std::io::Write;

#[test]
fn sockets_of_one_process_survive_restart_with_data_in_flight() {
    scenario("sockets", &["40", "15"]);
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

    // Restart of a restart: its image names the connection again (closed now, nothing queued).
    let mut r = restart(&sb, &img, "restart2.out");
    r.wait_lines(2);
    let c = checkpoint_output(&sb, r.pid());
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(c.status.success() && err.contains("comes back closed"), "{err}");
    let img2 = std::path::PathBuf::from(String::from_utf8_lossy(&c.stdout).trim());
    r.kill9();
    let mut r = restart(&sb, &img2, "restart3.out");
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    assert!(r.output().contains("got 18 bytes: hello from outside\npeer closed after 18 bytes\n"), "{}", r.output());
}
