//! Sockets in an image: Unix, IPv4 and IPv6 sockets of stream, datagram and seqpacket type
//! are described for a restart ([`SocketState`]) instead of refusing it.
//!
//! - Listening sockets and unconnected ones are bound again (and listen again); connected
//!   datagram sockets are connected again.
//! - A connected Unix socket whose other end is open in the process too (a `socketpair`,
//!   or both sides of a connection) comes back as a socket pair with the data waiting at
//!   each end. The kernel's sock_diag tells each socket's peer (by inode).
//! - A connection to anything outside the process comes back closed, with the bytes that
//!   had arrived and were not read yet: as after a network failure, and named when the
//!   image is written ([`SocketState::lost`]).
//!
//! - One end of a pair whose other end is closed comes back so, with what waits in it.
//! - Datagrams waiting in a bound Unix datagram socket are taken with their senders'
//!   addresses and sent again from sockets of those names ([`SocketRole::Queued`]).
//! - What a restart could not bring back exactly — descriptors in flight (`SCM_RIGHTS`),
//!   datagrams whose senders cannot send again, connections waiting to be accepted, a half-closed
//!   TCP connection, a removed socket file — is [`SocketState::refuse`]: no image.
//!
//! Runs while the program's threads are stopped; queues are peeked (`SO_PEEK_OFF`), or, where
//! a peek cannot see past an empty message, taken and sent back at once, so the program sees
//! them as before.
#![allow(unsafe_code)]

use std::collections::HashMap;

use crate::state::{FdKind, FdState, SockOpt, SocketRole, SocketState};

/// What sock_diag tells about a Unix socket.
#[derive(Default, Clone, Copy, Debug)]
pub struct UnixDiag {
    /// The connected peer's inode (0: none).
    pub peer: u32,
    shutdown: u8,
    /// Listening: connections waiting to be accepted, and the backlog.
    pending: u32,
    backlog: u32,
}

/// Every Unix socket of this network namespace, by inode (sock_diag dump). Empty if the
/// kernel does not answer.
pub fn unix_diag() -> HashMap<u32, UnixDiag> {
    use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST};
    use netlink_packet_sock_diag::unix::{ShowFlags, StateFlags, UnixRequest};
    use netlink_packet_sock_diag::SockDiagMessage;
    use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};

    let mut out = HashMap::new();
    let Ok(mut sock) = Socket::new(NETLINK_SOCK_DIAG) else { return out };
    if sock.bind_auto().is_err() || sock.connect(&SocketAddr::new(0, 0)).is_err() {
        return out;
    }
    let mut hdr = NetlinkHeader::default();
    hdr.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let req = UnixRequest {
        // Every state: unconnected, connected, listening, closing.
        state_flags: StateFlags::from_bits_retain(u32::MAX),
        inode: 0,
        show_flags: ShowFlags::PEER | ShowFlags::RQLEN,
        cookie: [0xff; 8],
    };
    let mut msg = NetlinkMessage::new(hdr, SockDiagMessage::UnixRequest(req).into());
    msg.finalize();
    let mut buf = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut buf);
    if sock.send(&buf, 0).is_err() {
        return out;
    }
    let mut rx = vec![0u8; 1 << 16];
    'recv: while let Ok(n) = sock.recv(&mut &mut rx[..], 0) {
        let mut off = 0;
        while off < n {
            let Ok(m) = NetlinkMessage::<SockDiagMessage>::deserialize(&rx[off..n]) else { break 'recv };
            let len = m.header.length as usize;
            match m.payload {
                NetlinkPayload::InnerMessage(SockDiagMessage::UnixResponse(r)) => {
                    let listening = r.header.state == 10; // TCP_LISTEN
                    out.insert(
                        r.header.inode,
                        UnixDiag {
                            peer: r.peer().unwrap_or(0),
                            shutdown: r.shutdown_state().unwrap_or(0),
                            pending: if listening { r.number_of_pending_connection().unwrap_or(0) } else { 0 },
                            backlog: if listening { r.max_number_of_pending_connection().unwrap_or(0) } else { 0 },
                        },
                    );
                }
                NetlinkPayload::InnerMessage(_) | NetlinkPayload::Noop => {}
                _ => break 'recv,
            }
            if len == 0 {
                break 'recv;
            }
            off += len;
        }
    }
    out
}

fn opt_int(fd: i32, level: i32, name: i32) -> Option<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live local.
    let r = unsafe { libc::getsockopt(fd, level, name, &mut v as *mut libc::c_int as *mut libc::c_void, &mut len) };
    (r == 0).then_some(v)
}

/// The raw option value (up to 32 bytes), if the socket has that option.
pub fn opt_bytes(fd: i32, level: i32, name: i32) -> Option<Vec<u8>> {
    let mut v = [0u8; 32];
    let mut len = v.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live buffer.
    let r = unsafe { libc::getsockopt(fd, level, name, v.as_mut_ptr() as *mut libc::c_void, &mut len) };
    (r == 0).then(|| v[..(len as usize).min(v.len())].to_vec())
}

/// The options a restart sets again where they differ from a new socket's.
pub fn option_list(domain: i32, ty: i32) -> Vec<(i32, i32)> {
    use libc::*;
    let mut v = vec![
        (SOL_SOCKET, SO_REUSEADDR),
        (SOL_SOCKET, SO_REUSEPORT),
        (SOL_SOCKET, SO_KEEPALIVE),
        (SOL_SOCKET, SO_BROADCAST),
        (SOL_SOCKET, SO_PASSCRED),
        (SOL_SOCKET, SO_OOBINLINE),
        (SOL_SOCKET, SO_PRIORITY),
        (SOL_SOCKET, SO_RCVLOWAT),
        (SOL_SOCKET, SO_RCVBUF),
        (SOL_SOCKET, SO_SNDBUF),
        (SOL_SOCKET, SO_RCVTIMEO),
        (SOL_SOCKET, SO_SNDTIMEO),
        (SOL_SOCKET, SO_LINGER),
        (SOL_SOCKET, SO_MARK),
        (SOL_SOCKET, SO_PASSSEC),
        (SOL_SOCKET, SO_DONTROUTE),
        (SOL_SOCKET, SO_NO_CHECK),
        (SOL_SOCKET, SO_BINDTODEVICE),
        // After the buffer sizes, which lock them when set.
        (SOL_SOCKET, SO_BUF_LOCK),
        // After the filter ([`filter`], first in the list): a locked filter cannot be set.
        (SOL_SOCKET, SO_LOCK_FILTER),
    ];
    if domain == AF_INET6 {
        v.push((IPPROTO_IPV6, IPV6_V6ONLY));
    }
    if domain != AF_UNIX && ty == SOCK_STREAM {
        v.extend([
            (IPPROTO_TCP, TCP_NODELAY),
            (IPPROTO_TCP, TCP_CORK),
            (IPPROTO_TCP, TCP_KEEPIDLE),
            (IPPROTO_TCP, TCP_KEEPINTVL),
            (IPPROTO_TCP, TCP_KEEPCNT),
            (IPPROTO_TCP, TCP_USER_TIMEOUT),
            (IPPROTO_TCP, TCP_NOTSENT_LOWAT),
        ]);
    }
    v
}

/// The filter attached to a socket.
pub enum Filter {
    None,
    /// A classic BPF filter (`SO_ATTACH_FILTER`): its instructions' bytes.
    Classic(Vec<u8>),
    /// One that cannot be read back (an eBPF program, `SO_ATTACH_BPF`).
    Unreadable,
}

/// The filter attached to the socket at `fd`.
pub fn filter(fd: i32) -> Filter {
    // The length asked and answered is in instructions (8 bytes each), not bytes.
    let mut len: libc::socklen_t = 0;
    // SAFETY: with a length of 0 the kernel writes only the length.
    if unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, std::ptr::null_mut(), &mut len) } != 0 {
        return if std::io::Error::last_os_error().raw_os_error() == Some(libc::EACCES) { Filter::Unreadable } else { Filter::None };
    }
    if len == 0 {
        return Filter::None;
    }
    let mut v = vec![0u8; len as usize * 8];
    // SAFETY: room for `len` instructions.
    if unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, v.as_mut_ptr().cast(), &mut len) } != 0 {
        return Filter::Unreadable;
    }
    v.truncate(len as usize * 8);
    Filter::Classic(v)
}

/// getsockname (`peer`: getpeername) as raw bytes; empty if it fails.
pub fn address(fd: i32, peer: bool) -> Vec<u8> {
    // SAFETY: sockaddr_storage is plain bytes.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let p = &mut ss as *mut libc::sockaddr_storage as *mut libc::sockaddr;
    // SAFETY: the kernel writes at most `len` bytes into the live storage.
    let r = unsafe { if peer { libc::getpeername(fd, p, &mut len) } else { libc::getsockname(fd, p, &mut len) } };
    if r != 0 {
        return Vec::new();
    }
    // SAFETY: `len` bytes of the storage were written (capped at its size).
    let b = unsafe { std::slice::from_raw_parts(p as *const u8, (len as usize).min(std::mem::size_of_val(&ss))) };
    b.to_vec()
}

/// Whether a socket address names something: a Unix path or abstract name, an IP port or
/// address (an unbound socket's name is all zeros).
pub fn is_named(domain: i32, a: &[u8]) -> bool {
    match domain {
        libc::AF_UNIX => a.len() > 2,
        libc::AF_INET => a.len() >= 8 && a[2..8].iter().any(|&b| b != 0),
        libc::AF_INET6 => a.len() >= 24 && (a[2..4].iter().any(|&b| b != 0) || a[8..24].iter().any(|&b| b != 0)),
        _ => false,
    }
}

/// Bytes waiting to be read (a datagram socket: the first message's).
fn inq(fd: i32) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes an int.
    if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } != 0 {
        return 0;
    }
    n.max(0) as usize
}

/// One message from `fd` (`peek`: left in the queue), without waiting; None when there is
/// none. File descriptors it carried are closed here and counted in `fds_lost`.
fn recv_one(fd: i32, max: usize, peek: bool, fds_lost: &mut usize) -> Option<Vec<u8>> {
    let flags = libc::MSG_DONTWAIT | if peek { libc::MSG_PEEK } else { 0 };
    let (buf, fds, _) = recv_msg(fd, max.max(1), flags, false)?;
    close_all(&fds);
    *fds_lost += fds.len();
    Some(buf)
}

/// One message received from `fd` with `flags` (and `MSG_CMSG_CLOEXEC`): its bytes (at most
/// `max`), the descriptors it carried (open here now: the caller closes or passes them on),
/// and, with `want_from`, the sender's address as the kernel wrote it. None when there is
/// none.
fn recv_msg(fd: i32, max: usize, flags: i32, want_from: bool) -> Option<(Vec<u8>, Vec<i32>, Vec<u8>)> {
    let mut buf = vec![0u8; max];
    let mut ctl = [0u64; 64];
    // SAFETY: sockaddr_storage is plain bytes.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: msghdr is plain data; every pointer set below is to a live buffer.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    if want_from {
        mh.msg_name = &mut from as *mut libc::sockaddr_storage as *mut libc::c_void;
        mh.msg_namelen = std::mem::size_of_val(&from) as libc::socklen_t;
    }
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.as_mut_ptr() as *mut libc::c_void;
    mh.msg_controllen = std::mem::size_of_val(&ctl);
    // SAFETY: as above.
    let n = unsafe { libc::recvmsg(fd, &mut mh, flags | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return None;
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `ctl`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&mh);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const i32;
                let count = ((*c).cmsg_len as usize - (data as usize - c as usize)) / 4;
                fds.extend((0..count).map(|i| data.add(i).read_unaligned()));
            }
            c = libc::CMSG_NXTHDR(&mh, c);
        }
    }
    buf.truncate((n as usize).min(buf.len()));
    let len = if want_from { (mh.msg_namelen as usize).min(std::mem::size_of_val(&from)) } else { 0 };
    // SAFETY: `len` bytes of the storage were written by the kernel (capped at its size).
    let addr = unsafe { std::slice::from_raw_parts(&from as *const libc::sockaddr_storage as *const u8, len) }.to_vec();
    Some((buf, fds, addr))
}

/// Closes descriptors this process received in a message.
fn close_all(fds: &[i32]) {
    for &f in fds {
        // SAFETY: our own copies, received just now.
        unsafe { libc::close(f) };
    }
}

/// A socket's description, its inode and its connected peer's inode (Unix sockets; 0:
/// none). `Unsupported` for families and types crum does not restore.
///
/// `job`: this process's sockets that are the job's ([`crate::job::job_sockets`]): (inode,
/// the other end's inode, 0: shared but not a connection between the job's processes).
pub fn describe(fd: i32, ino: u64, diag: &mut Option<HashMap<u32, UnixDiag>>, job: &[(u64, u64)]) -> (FdKind, u32) {
    let link = format!("socket:[{ino}]");
    let (Some(domain), Some(ty), Some(protocol)) =
        (opt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN), opt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE), opt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL))
    else {
        return (FdKind::Unsupported { what: link }, 0);
    };
    let family = match domain {
        libc::AF_UNIX => "unix",
        libc::AF_INET => "IPv4",
        libc::AF_INET6 => "IPv6",
        libc::AF_NETLINK => "netlink",
        libc::AF_PACKET => "packet",
        _ => "",
    };
    if !matches!(domain, libc::AF_UNIX | libc::AF_INET | libc::AF_INET6) {
        let f = if family.is_empty() { format!("address family {domain}") } else { family.to_string() };
        return (FdKind::Unsupported { what: format!("{link}, a {f} socket (crum restores unix, IPv4 and IPv6 sockets)") }, 0);
    }
    if !matches!(ty, libc::SOCK_STREAM | libc::SOCK_DGRAM | libc::SOCK_SEQPACKET)
        || (domain != libc::AF_UNIX && !matches!(protocol, 0 | libc::IPPROTO_TCP | libc::IPPROTO_UDP))
    {
        return (FdKind::Unsupported { what: format!("{link}, a {family} socket of type {ty}, protocol {protocol}") }, 0);
    }
    let local = address(fd, false);
    let local = if is_named(domain, &local) { local } else { Vec::new() };
    let peer = address(fd, true);
    // A filter travels as an option of its own name whose value is its instructions, set
    // first (before `SO_LOCK_FILTER`).
    let (filter, filter_lost) = match filter(fd) {
        Filter::None => (None, false),
        Filter::Classic(f) => (Some(f), false),
        Filter::Unreadable => (None, true),
    };
    let options = filter
        .map(|value| SockOpt { level: libc::SOL_SOCKET, name: libc::SO_ATTACH_FILTER, value })
        .into_iter()
        .chain(
            option_list(domain, ty)
                .into_iter()
                .filter_map(|(level, name)| opt_bytes(fd, level, name).map(|value| SockOpt { level, name, value })),
        )
        .collect();
    let listening = opt_int(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN) == Some(1);
    let mut s = SocketState {
        domain,
        ty,
        protocol,
        local,
        peer,
        options,
        shutdown: 0,
        role: SocketRole::Unconnected,
        lost: String::new(),
        refuse: String::new(),
    };
    if filter_lost {
        s.lost = "the eBPF program attached to it (SO_ATTACH_BPF) cannot be read back: it comes back without it".into();
    }
    let mut peer_ino = 0;
    if domain == libc::AF_UNIX {
        let all = diag.get_or_insert_with(unix_diag);
        let d = all.get(&(ino as u32)).copied().unwrap_or_default();
        s.shutdown = d.shutdown & 3;
        peer_ino = d.peer;
        // A peer the kernel still names but no longer lists was closed (a datagram socket
        // keeps pointing at the peer it was connected to; a stream or seqpacket socket whose
        // peer closed is shut down both ways — one in another network namespace is not
        // listed either, and is not taken for closed).
        if peer_ino != 0 && !all.is_empty() && !all.contains_key(&peer_ino) && (ty == libc::SOCK_DGRAM || s.shutdown == 3) {
            peer_ino = 0;
        }
        if let Some(why) = removed_socket_file(&s.local) {
            add_lost(&mut s.refuse, &why);
        }
        if let Some(why) = foreign_peer_credentials(fd) {
            add_lost(&mut s.refuse, &why);
        }
        if listening {
            s.role = SocketRole::Listening { backlog: d.backlog.max(1) };
            if d.pending > 0 {
                add_lost(
                    &mut s.refuse,
                    &format!("{} connection(s) waiting to be accepted cannot be carried (a restart would cut their clients off)", d.pending),
                );
            }
        } else if peer_ino != 0 {
            // Decided in `pair_up` once every descriptor is known.
            s.role = SocketRole::Pair { id: 0, first: false, queued: Vec::new() };
        } else if !s.peer.is_empty() && !is_named(domain, &s.peer) {
            // Its unnamed peer (the other end of a socket pair) is closed: one end of a pair
            // whose other end is gone, with what waits in it.
            let queued = if ty == libc::SOCK_STREAM {
                let mut fds_lost = 0;
                let b = peek_stream(fd, &mut fds_lost, &mut s.refuse);
                refuse_fds(&mut s.refuse, fds_lost);
                if b.is_empty() { Vec::new() } else { vec![b] }
            } else {
                peek_messages(fd, ty, s.shutdown, &mut s.refuse)
            };
            s.role = SocketRole::Pair { id: ino, first: true, queued };
        } else if !s.peer.is_empty() && ty != libc::SOCK_DGRAM {
            closed(fd, &mut s);
        } else if !s.peer.is_empty() {
            s.role = SocketRole::Connected;
        }
    } else if listening {
        s.role = SocketRole::Listening { backlog: libc::SOMAXCONN as u32 };
        if readable(fd) {
            // Clients outside are cut off, as by a network failure (a client of this process
            // comes back closed, named too).
            add_lost(&mut s.lost, "connections waiting to be accepted are not in the image: their clients are cut off");
        }
    } else if ty == libc::SOCK_STREAM && tcp_state(fd).is_some_and(|st| !matches!(st, 1 | 7)) {
        // Neither established nor closed (nor a socket never connected, which is CLOSE too).
        let st = tcp_state(fd).unwrap_or(0);
        add_lost(
            &mut s.refuse,
            &format!("the TCP connection is {} (state {}): crum cannot make a half-closed or closing connection again", tcp_state_name(st), st),
        );
    } else if !s.peer.is_empty() {
        if ty == libc::SOCK_DGRAM {
            s.role = SocketRole::Connected;
            s.shutdown = inet_shutdown(domain, ino).unwrap_or(0) & 3;
        } else if job.iter().any(|j| j.0 == ino && j.1 != 0) {
            // A connection between processes of the job: decided in `pair_up`.
            s.role = SocketRole::Pair { id: 0, first: false, queued: Vec::new() };
        } else {
            closed(fd, &mut s);
        }
    }
    if matches!(s.role, SocketRole::Unconnected | SocketRole::Connected | SocketRole::Listening { .. }) && ty != libc::SOCK_STREAM {
        if has_messages(fd, s.shutdown) {
            if domain == libc::AF_UNIX && ty == libc::SOCK_DGRAM && is_named(domain, &s.local) && s.shutdown & 1 == 0 {
                // Taken with their senders' addresses; whether each sender can send again is
                // decided in `pair_up`, once every socket is known.
                let queued = peek_datagrams(fd, &mut s.refuse);
                let role = std::mem::replace(&mut s.role, SocketRole::Unconnected);
                s.role = SocketRole::Queued { role: Box::new(role), queued };
            } else {
                add_lost(&mut s.refuse, "datagrams waiting to be read in it cannot be carried (with their senders' addresses)");
            }
        }
    } else if domain != libc::AF_UNIX && ty == libc::SOCK_DGRAM && matches!(s.role, SocketRole::Unconnected) {
        // Shut down without a peer (the kernel allows it on a UDP socket).
        if let Some(sh) = inet_shutdown(domain, ino).filter(|&b| b & 3 != 0) {
            add_lost(&mut s.refuse, &format!("it is shut down ({}) without being connected: crum cannot shut it down again", shutdown_name(sh)));
        }
    }
    (FdKind::Socket(Box::new(s)), peer_ino)
}

/// Refuses a socket with descriptors in flight (`SCM_RIGHTS`): a restart cannot make the
/// files they name again.
/// The credentials the kernel gives for a Unix socket's peer (`SO_PEERCRED`: those of the
/// process that made a socket pair, or that connected) are recorded when the socket is made
/// and cannot be set: a restart makes it again with the restarting process's user and group.
/// A peer of another user or group (a pair made by a child that changed its credentials:
/// CRIU's sock_peercred) would come back with the program's own.
fn foreign_peer_credentials(fd: i32) -> Option<String> {
    let mut c = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live struct.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, &mut c as *mut libc::ucred as *mut libc::c_void, &mut len) };
    // SAFETY: geteuid/getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // No peer (pid 0, uid and gid overflow ids) says nothing.
    if r != 0 || c.pid == 0 || (c.uid == uid && c.gid == gid) {
        return None;
    }
    Some(format!(
        "its peer's credentials (SO_PEERCRED: uid {}, gid {}) are not this process's (uid {uid}, gid {gid}): a restart would make it again with this process's",
        c.uid, c.gid
    ))
}

fn refuse_fds(refuse: &mut String, fds: usize) {
    if fds > 0 {
        add_lost(refuse, &format!("{fds} file descriptor(s) in flight in it (SCM_RIGHTS) cannot be carried"));
    }
}

/// The messages waiting in a datagram or seqpacket socket, one by one, left in place (peeked
/// with a peek offset, `SO_PEEK_OFF`). What cannot be taken exactly is added to `refuse`:
/// descriptors in flight, an empty message (a peek offset cannot step over it), a kernel
/// that cannot peek.
///
/// A socket shut down for receiving (`shutdown` bit 0, or its peer closed) reads as empty
/// once its queue is: for a seqpacket socket the bytes waiting in all (`SIOCINQ`) tell
/// the end from an empty message; for a datagram socket the memory its queue holds.
fn peek_messages(fd: i32, ty: i32, shutdown: u8, refuse: &mut String) -> Vec<Vec<u8>> {
    let mut queued = Vec::new();
    if !has_messages(fd, shutdown) {
        return queued;
    }
    let mut fds_lost = 0;
    let before = opt_int(fd, libc::SOL_SOCKET, libc::SO_PEEK_OFF).unwrap_or(-1);
    let set = |v: libc::c_int| {
        // SAFETY: setsockopt reads one int.
        unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_PEEK_OFF, &v as *const libc::c_int as *const libc::c_void, 4) == 0 }
    };
    if set(0) {
        let total = inq(fd);
        while let Some(m) = recv_one(fd, 1 << 18, true, &mut fds_lost) {
            if m.is_empty() && shutdown & 1 != 0 {
                // The end of the queue, or an empty message before it?
                let seen: usize = queued.iter().map(Vec::len).sum();
                let end = if ty == libc::SOCK_SEQPACKET { seen >= total } else { queued.is_empty() && rmem_alloc(fd) == Some(0) };
                if !end {
                    add_lost(refuse, "an empty message waiting in this shut-down socket cannot be told from its end");
                }
                break;
            }
            if m.is_empty() || queued.len() >= 1 << 16 {
                add_lost(refuse, "messages waiting in it after an empty one cannot be carried");
                break;
            }
            queued.push(m);
        }
        set(before);
    } else {
        add_lost(refuse, "the messages waiting in it cannot be carried (the kernel cannot peek at them)");
    }
    refuse_fds(refuse, fds_lost);
    queued
}

/// Takes every message waiting at `fd` (one end of a socket pair whose other end `other`
/// is open here) and sends it back through `other` at once, in order, with the descriptors
/// it carried (so the program loses nothing); descriptors in flight still refuse the image.
fn take_and_send_back(fd: i32, other: i32, refuse: &mut String) -> Vec<Vec<u8>> {
    // All taken first (what is sent back arrives at `fd` again), then sent back in order.
    let mut taken: Vec<(Vec<u8>, Vec<i32>)> = Vec::new();
    while let Some((buf, fds, _)) = recv_msg(fd, 1 << 18, libc::MSG_DONTWAIT, false) {
        taken.push((buf, fds));
    }
    let mut fds_seen = 0;
    for (buf, fds) in &taken {
        let mut sctl = [0u64; 64];
        let mut siov = libc::iovec { iov_base: buf.as_ptr() as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: msghdr is plain data; every pointer set below is to a live buffer.
        let mut sh: libc::msghdr = unsafe { std::mem::zeroed() };
        sh.msg_iov = &mut siov;
        sh.msg_iovlen = 1;
        if !fds.is_empty() {
            let len = fds.len() * 4;
            // SAFETY: `sctl` has room for one header and the descriptors (no more than the
            // receive buffer of the same size held).
            unsafe {
                sh.msg_control = sctl.as_mut_ptr() as *mut libc::c_void;
                sh.msg_controllen = libc::CMSG_SPACE(len as u32) as usize;
                let c = libc::CMSG_FIRSTHDR(&sh);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(len as u32) as usize;
                std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c) as *mut i32, fds.len());
            }
        }
        // SAFETY: sends from live buffers on our own socket; then closes our copies.
        unsafe {
            libc::sendmsg(other, &sh, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL);
            for f in fds {
                libc::close(*f);
            }
        }
        fds_seen += fds.len();
    }
    refuse_fds(refuse, fds_seen);
    taken.into_iter().map(|(b, _)| b).collect()
}

/// Whether two Unix socket addresses name the same socket (a path's bytes up to its NUL;
/// an abstract name's whole length).
pub fn sun_eq(a: &[u8], b: &[u8]) -> bool {
    let name = |x: &[u8]| -> Vec<u8> {
        if x.len() > 2 && x[2] == 0 {
            x[2..].to_vec()
        } else {
            x.get(2..).unwrap_or(&[]).split(|&c| c == 0).next().unwrap_or(&[]).to_vec()
        }
    };
    a.len() >= 2 && b.len() >= 2 && a[..2] == b[..2] && name(a) == name(b)
}

/// The datagrams waiting in a Unix datagram socket with their senders' addresses, in order,
/// left in place (peeked with a peek offset). What cannot be taken exactly is added to
/// `refuse`.
fn peek_datagrams(fd: i32, refuse: &mut String) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut queued = Vec::new();
    let before = opt_int(fd, libc::SOL_SOCKET, libc::SO_PEEK_OFF).unwrap_or(-1);
    let set = |v: libc::c_int| {
        // SAFETY: setsockopt reads one int.
        unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_PEEK_OFF, &v as *const libc::c_int as *const libc::c_void, 4) == 0 }
    };
    if !set(0) {
        add_lost(refuse, "the datagrams waiting in it cannot be carried (the kernel cannot peek at them)");
        return queued;
    }
    let mut fds_lost = 0;
    // The descriptors a peek gives are copies, closed here.
    while let Some((buf, fds, addr)) = recv_msg(fd, 1 << 18, libc::MSG_DONTWAIT | libc::MSG_PEEK, true) {
        close_all(&fds);
        fds_lost += fds.len();
        if buf.is_empty() || queued.len() >= 1 << 16 {
            add_lost(refuse, "datagrams waiting in it after an empty one cannot be carried");
            break;
        }
        queued.push((addr, buf));
    }
    set(before);
    refuse_fds(refuse, fds_lost);
    queued
}

/// Whether messages wait in a socket: a socket shut down for receiving polls readable
/// whether or not they do, so there only the bytes or memory its queue holds count.
fn has_messages(fd: i32, shutdown: u8) -> bool {
    if shutdown & 1 == 0 {
        return inq(fd) > 0 || readable(fd);
    }
    inq(fd) > 0 || rmem_alloc(fd).is_none_or(|m| m > 0)
}

/// The memory a socket's receive queue holds (`SO_MEMINFO`'s `SK_MEMINFO_RMEM_ALLOC`).
fn rmem_alloc(fd: i32) -> Option<u32> {
    let mut v = [0u32; 9];
    let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live array.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_MEMINFO, v.as_mut_ptr() as *mut libc::c_void, &mut len) };
    (r == 0).then_some(v[0])
}

/// A TCP socket's state (`TCP_INFO`: 1 established, 7 closed, 10 listening, …).
fn tcp_state(fd: i32) -> Option<u8> {
    let mut info = [0u8; 8];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live buffer.
    let r = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, info.as_mut_ptr() as *mut libc::c_void, &mut len) };
    (r == 0).then_some(info[0])
}

fn tcp_state_name(st: u8) -> &'static str {
    match st {
        2 => "SYN_SENT",
        3 => "SYN_RECV",
        4 => "FIN_WAIT1",
        5 => "FIN_WAIT2",
        6 => "TIME_WAIT",
        8 => "CLOSE_WAIT",
        9 => "LAST_ACK",
        11 => "CLOSING",
        _ => "not established",
    }
}

fn shutdown_name(bits: u8) -> &'static str {
    match bits & 3 {
        1 => "for receiving",
        2 => "for sending",
        _ => "both ways",
    }
}

/// Whether the Unix socket file a socket is bound to (`local`, a path) was removed or
/// replaced by something else than a socket since the bind: a restart would make it again.
fn removed_socket_file(local: &[u8]) -> Option<String> {
    if local.len() <= 2 || local[2] == 0 {
        return None;
    }
    let path: Vec<u8> = local[2..].split(|&c| c == 0).next().unwrap_or(&[]).to_vec();
    let shown = String::from_utf8_lossy(&path).into_owned();
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: stat is plain data; lstat of a NUL-terminated path into the live local.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::lstat(c.as_ptr(), &mut st) } != 0 {
        return Some(format!("its socket file {shown} was removed after the bind: a restart would make it again"));
    }
    (st.st_mode & libc::S_IFMT != libc::S_IFSOCK)
        .then(|| format!("its socket file {shown} was replaced by another file: a restart could not bind it again"))
}

/// A UDP or TCP socket's shutdown state (bit 0: no more receiving, bit 1: no more
/// sending), from the kernel's inet_diag (`INET_DIAG_SHUTDOWN`), by inode. None where the
/// kernel does not answer.
pub fn inet_shutdown(domain: i32, ino: u64) -> Option<u8> {
    use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST};
    use netlink_packet_sock_diag::inet::{nlas::Nla, ExtensionFlags, InetRequest, SocketId, StateFlags};
    use netlink_packet_sock_diag::SockDiagMessage;
    use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};

    let mut sock = Socket::new(NETLINK_SOCK_DIAG).ok()?;
    sock.bind_auto().ok()?;
    sock.connect(&SocketAddr::new(0, 0)).ok()?;
    let mut hdr = NetlinkHeader::default();
    hdr.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let req = InetRequest {
        family: domain as u8,
        protocol: libc::IPPROTO_UDP as u8,
        extensions: ExtensionFlags::empty(),
        states: StateFlags::all(),
        socket_id: if domain == libc::AF_INET6 { SocketId::new_v6() } else { SocketId::new_v4() },
    };
    let mut msg = NetlinkMessage::new(hdr, SockDiagMessage::InetRequest(req).into());
    msg.finalize();
    let mut buf = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut buf);
    sock.send(&buf, 0).ok()?;
    let mut rx = vec![0u8; 1 << 16];
    while let Ok(n) = sock.recv(&mut &mut rx[..], 0) {
        let mut off = 0;
        while off < n {
            let m = NetlinkMessage::<SockDiagMessage>::deserialize(&rx[off..n]).ok()?;
            let len = m.header.length as usize;
            match m.payload {
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => {
                    if u64::from(r.header.inode) == ino {
                        return r.nlas.iter().find_map(|a| if let Nla::Shutdown(b) = a { Some(*b) } else { None }).or(Some(0));
                    }
                }
                NetlinkPayload::InnerMessage(_) | NetlinkPayload::Noop => {}
                _ => return None,
            }
            if len == 0 {
                return None;
            }
            off += len;
        }
    }
    None
}

/// Adds `what` to what a restart does not bring back.
fn add_lost(lost: &mut String, what: &str) {
    if what.is_empty() {
        return;
    }
    if !lost.is_empty() {
        lost.push_str("; ");
    }
    lost.push_str(what);
}

/// Whether a read (or accept) would not wait.
fn readable(fd: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: poll on one live pollfd, no waiting.
    unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLIN != 0 }
}

/// The bytes waiting in a stream socket, left in it. Where one peek cannot see them all (a
/// message with other credentials or descriptors stops it), `refuse` says so.
fn peek_stream(fd: i32, fds_lost: &mut usize, refuse: &mut String) -> Vec<u8> {
    let n = inq(fd);
    if n == 0 {
        return Vec::new();
    }
    let b = recv_one(fd, n, true, fds_lost).unwrap_or_default();
    if b.len() < n {
        add_lost(refuse, &format!("only the first {} of the {n} bytes waiting in it can be carried", b.len()));
    }
    b
}

/// A connection to outside the process: comes back closed with what had arrived (a stream's
/// bytes, peeked: the running program still reads them).
fn closed(fd: i32, s: &mut SocketState) {
    let mut fds_lost = 0;
    let queued = if s.ty == libc::SOCK_STREAM { peek_stream(fd, &mut fds_lost, &mut s.refuse) } else { Vec::new() };
    let mut lost = if s.peer.is_empty() || !is_named(s.domain, &s.peer) {
        "its peer is outside the process: it comes back closed".to_string()
    } else {
        "the connection is to outside the process: it comes back closed".to_string()
    };
    if !queued.is_empty() {
        lost += &format!(" (after the {} bytes that had arrived)", queued.len());
    } else if s.ty != libc::SOCK_STREAM && has_messages(fd, s.shutdown) {
        add_lost(&mut s.refuse, "the messages waiting in it cannot be carried (its peer is outside the process)");
    }
    refuse_fds(&mut s.refuse, fds_lost);
    if !s.lost.is_empty() {
        lost = format!("{lost}; {}", s.lost);
    }
    s.lost = lost;
    s.role = SocketRole::Closed { queued };
}

/// Turns the connected Unix sockets of `out` into pairs where both ends are open here
/// (`socks`: fd, inode, peer inode), taking the messages waiting at each end; the others
/// are connections to outside. Sockets of the job (`job`, as in [`describe`]) become its
/// pairs and shared sockets instead ([`SocketRole::JobPair`], [`SocketRole::JobShared`]).
pub fn pair_up(out: &mut [FdState], socks: &[(i32, u64, u32)], job: &[(u64, u64)]) {
    for e in out.iter_mut() {
        let fd = e.fd;
        let FdKind::Socket(s) = &mut e.kind else { continue };
        let Some(&(_, ino, peer)) = socks.iter().find(|e| e.0 == fd) else { continue };
        if let Some(&(_, other)) = job.iter().find(|j| j.0 == ino && j.1 != 0) {
            if matches!(s.role, SocketRole::Pair { .. }) {
                job_pair(fd, ino, other, s);
                continue;
            }
        }
        // Not a pair, or one whose other end is closed (decided in `describe`).
        if !matches!(s.role, SocketRole::Pair { id: 0, .. }) {
            continue;
        }
        // (A datagram socket connected to its own address is its own peer: connected again.)
        let other = socks.iter().find(|e| e.1 == peer as u64 && e.2 as u64 == ino && peer as u64 != ino).map(|e| e.0);
        let Some(other) = other else {
            if s.ty == libc::SOCK_DGRAM && is_named(s.domain, &s.peer) {
                s.role = SocketRole::Connected;
            } else {
                closed(fd, s);
            }
            continue;
        };
        let mut queued = Vec::new();
        if s.ty == libc::SOCK_STREAM {
            let mut fds_lost = 0;
            let b = peek_stream(fd, &mut fds_lost, &mut s.refuse);
            refuse_fds(&mut s.refuse, fds_lost);
            if !b.is_empty() {
                queued.push(b);
            }
        } else {
            // Peeked one by one (left in place), sent again through the other end at restart.
            let mut why = String::new();
            queued = peek_messages(fd, s.ty, s.shutdown, &mut why);
            if why.contains("after an empty one") && s.shutdown == 0 {
                // A peek offset cannot step over an empty message: taken one by one instead
                // and sent back at once through the other end (descriptors included).
                why.clear();
                queued = take_and_send_back(fd, other, &mut why);
            }
            add_lost(&mut s.refuse, &why);
        }
        if is_named(s.domain, &s.local) || is_named(s.domain, &s.peer) {
            add_lost(&mut s.lost, "it comes back as an unnamed socket pair: its address is not reported after a restart");
        }
        s.role = SocketRole::Pair { id: ino.min(peer as u64), first: ino < peer as u64, queued };
    }
    // A TCP connection whose both ends are this process's: closing both would break the
    // program's own connection, with nothing outside to blame.
    let ends: Vec<(i32, Vec<u8>, Vec<u8>)> = out
        .iter()
        .filter_map(|e| match &e.kind {
            FdKind::Socket(s) if s.domain != libc::AF_UNIX && s.ty == libc::SOCK_STREAM && matches!(s.role, SocketRole::Closed { .. }) => {
                Some((e.fd, s.local.clone(), s.peer.clone()))
            }
            _ => None,
        })
        .collect();
    for e in out.iter_mut() {
        let FdKind::Socket(s) = &mut e.kind else { continue };
        if !matches!(s.role, SocketRole::Closed { .. }) || s.domain == libc::AF_UNIX || s.ty != libc::SOCK_STREAM {
            continue;
        }
        if let Some(other) = ends.iter().find(|o| o.0 != e.fd && o.1 == s.peer && o.2 == s.local) {
            add_lost(
                &mut s.refuse,
                &format!("the other end of this TCP connection is fd {} of the same process: crum cannot make the connection again", other.0),
            );
        }
    }
    // Datagrams waiting with their senders: each sender must be able to send again — a
    // socket of this process with that name, an abstract name, or no name; to a connected
    // socket only its peer can send.
    let named: Vec<Vec<u8>> = out
        .iter()
        .filter_map(|e| match &e.kind {
            FdKind::Socket(s) if s.domain == libc::AF_UNIX && is_named(s.domain, &s.local) => Some(s.local.clone()),
            _ => None,
        })
        .collect();
    for e in out.iter_mut() {
        let FdKind::Socket(s) = &mut e.kind else { continue };
        let SocketRole::Queued { role, queued } = &s.role else { continue };
        let Some(&(_, ino, _)) = socks.iter().find(|x| x.0 == e.fd) else { continue };
        let mut why = String::new();
        if job.iter().any(|j| j.0 == ino) {
            why = "datagrams waiting in a socket shared with other processes of the job cannot be carried".into();
        }
        for (from, _) in queued {
            let ours = is_named(libc::AF_UNIX, from) && named.iter().any(|n| sun_eq(n, from));
            let connected = matches!(**role, SocketRole::Connected);
            if connected && !(ours && sun_eq(from, &s.peer)) {
                why = "datagrams waiting in this connected socket from a sender that is not its peer of this process cannot be carried".into();
                break;
            }
            let abstract_name = from.len() > 2 && from[2] == 0;
            if is_named(libc::AF_UNIX, from) && !ours && !abstract_name {
                why = format!(
                    "a datagram waiting in it from {} (a socket file of another process) cannot be carried with its sender",
                    crate::state::sockaddr_text(from)
                );
                break;
            }
        }
        add_lost(&mut s.refuse, &why);
    }
    // Held by several processes of the job: made once by its restart, as it is.
    for e in out.iter_mut() {
        let FdKind::Socket(s) = &mut e.kind else { continue };
        let Some(&(_, ino, _)) = socks.iter().find(|x| x.0 == e.fd) else { continue };
        if job.contains(&(ino, 0)) && !matches!(s.role, SocketRole::JobPair { .. } | SocketRole::JobShared { .. }) {
            let role = std::mem::replace(&mut s.role, SocketRole::Unconnected);
            s.role = SocketRole::JobShared { id: ino, role: Box::new(role) };
        }
    }
}

/// One end (`ino`) of a connection between processes of the job, the other end `other`:
/// the messages waiting at it, left in place (a datagram or seqpacket socket's one by one
/// with a peek offset).
fn job_pair(fd: i32, ino: u64, other: u64, s: &mut SocketState) {
    let mut queued = Vec::new();
    if s.ty == libc::SOCK_STREAM {
        let mut fds_lost = 0;
        let b = peek_stream(fd, &mut fds_lost, &mut s.refuse);
        refuse_fds(&mut s.refuse, fds_lost);
        if !b.is_empty() {
            queued.push(b);
        }
    } else {
        queued = peek_messages(fd, s.ty, s.shutdown, &mut s.refuse);
    }
    if s.domain != libc::AF_UNIX {
        // Bytes the program wrote that TCP has not sent yet (the other end's window was
        // full): only the kernel's send queue has them.
        let mut unsent: libc::c_int = 0;
        // SAFETY: SIOCOUTQNSD writes an int.
        if unsafe { libc::ioctl(fd, 0x894B /* SIOCOUTQNSD */, &mut unsent) } == 0 && unsent > 0 {
            add_lost(&mut s.refuse, &format!("{unsent} bytes written to it and not sent yet cannot be carried"));
        }
    }
    if s.domain == libc::AF_UNIX && s.ty == libc::SOCK_DGRAM && (is_named(s.domain, &s.local) || is_named(s.domain, &s.peer)) {
        add_lost(&mut s.lost, "it comes back as an unnamed socket pair: its address is not reported after a restart");
    }
    s.role = SocketRole::JobPair { id: ino.min(other), first: ino < other, queued };
}
