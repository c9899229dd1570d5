//! Transparent egress: inside the sandbox's network namespace every address is local, and
//! the proxy holds the only sockets that listen there.
//!
//! While the shim still holds CAP_NET_ADMIN in the namespace it:
//!
//! 1. adds the routes `local 0.0.0.0/0 dev lo` and `local ::/0 dev lo` (rtnetlink), so a
//!    connection to any address, and a DNS query to any nameserver, is delivered on
//!    loopback; without IPv6 in the namespace only the first, and IPv6 connections fail;
//! 2. lets ports below 1024 be bound in this namespace (the sysctl
//!    `ip_unprivileged_port_start`; the shim has no CAP_NET_BIND_SERVICE, and the command's
//!    Landlock ruleset forbids every TCP bind where the kernel has TCP rules);
//! 3. binds, on every address, a TCP listener per egress port and a UDP socket on port 53;
//! 4. hands them to the broker after the proxy's own listener, in one SCM_RIGHTS message:
//!    proxy listener, DNS socket, egress listeners in the spec's order.
//!
//! No address routes out: the namespace has loopback only. A port with no listener
//! refuses the connection; UDP to any port but 53 goes nowhere.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{
    bind, listen, recv, sendmsg, sendto, setsockopt, socket, sockopt, AddressFamily, Backlog,
    ControlMessage, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, SockaddrIn,
    SockaddrIn6,
};

use wardcell_common::protocol::{self, ShimReport};

const RTM_NEWROUTE: u16 = 24;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_HOST: u8 = 254;
const RTN_LOCAL: u8 = 2;
const RTA_OIF: u16 = 4;
/// Loopback is the first interface of every network namespace.
const LOOPBACK_INDEX: u32 = 1;
/// The port the proxy answers DNS on.
const DNS_PORT: u16 = 53;

/// The RTM_NEWROUTE request for `local <any>/0 dev lo` in the main table. Pure, so the
/// bytes are unit-tested.
fn local_default_route(family: u8, seq: u32) -> Vec<u8> {
    let len = 16 + 12 + 8;
    let mut m = Vec::with_capacity(len);
    // nlmsghdr
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&RTM_NEWROUTE.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    // rtmsg: family, dst_len 0 (every address), src_len, tos, table, protocol, scope, type,
    // flags
    m.extend_from_slice(&[
        family,
        0,
        0,
        0,
        RT_TABLE_MAIN,
        RTPROT_BOOT,
        RT_SCOPE_HOST,
        RTN_LOCAL,
    ]);
    m.extend_from_slice(&0u32.to_ne_bytes());
    // RTA_OIF = lo
    m.extend_from_slice(&8u16.to_ne_bytes());
    m.extend_from_slice(&RTA_OIF.to_ne_bytes());
    m.extend_from_slice(&LOOPBACK_INDEX.to_ne_bytes());
    m
}

/// The kernel's answer to one request: Ok on an acknowledgement, else its errno.
fn acked(answer: &[u8], seq: u32) -> io::Result<()> {
    let bad = || io::Error::other("a malformed rtnetlink answer");
    if answer.len() < 20 {
        return Err(bad());
    }
    let kind = u16::from_ne_bytes([answer[4], answer[5]]);
    let got_seq = u32::from_ne_bytes(answer[8..12].try_into().map_err(|_| bad())?);
    if kind != NLMSG_ERROR || got_seq != seq {
        return Err(bad());
    }
    match i32::from_ne_bytes(answer[16..20].try_into().map_err(|_| bad())?) {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(-e)),
    }
}

/// Step 1. Returns whether IPv6 is routed too.
fn add_local_routes() -> Result<bool, String> {
    let nl = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .map_err(|e| format!("opening rtnetlink: {e}"))?;
    let kernel = NetlinkAddr::new(0, 0);
    let add = |family: AddressFamily, seq: u32| -> io::Result<()> {
        let req = local_default_route(family as u8, seq);
        sendto(nl.as_raw_fd(), &req, &kernel, MsgFlags::empty())?;
        let mut buf = [0u8; 512];
        let n = recv(nl.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        acked(&buf[..n], seq)
    };
    add(AddressFamily::Inet, 1).map_err(|e| format!("adding the route local 0.0.0.0/0: {e}"))?;
    // IPv6 may be disabled on this machine or in the namespace: then IPv4 only.
    Ok(add(AddressFamily::Inet6, 2).is_ok())
}

/// Step 2.
fn allow_low_ports() -> Result<(), String> {
    let path = "/proc/sys/net/ipv4/ip_unprivileged_port_start";
    std::fs::write(path, "0").map_err(|e| format!("writing {path}: {e}"))
}

/// A socket of `kind` bound to every address at `port` (dual-stack when `v6`).
fn bound(kind: SockType, port: u16, v6: bool) -> Result<OwnedFd, String> {
    let what = if kind == SockType::Stream {
        "TCP"
    } else {
        "UDP"
    };
    let err = |step: &str, e: nix::Error| format!("{step} a {what} socket on port {port}: {e}");
    let family = if v6 {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    let fd = socket(family, kind, SockFlag::SOCK_CLOEXEC, None).map_err(|e| err("opening", e))?;
    if v6 {
        setsockopt(&fd, sockopt::Ipv6V6Only, &false).map_err(|e| err("dual-stacking", e))?;
        let any = SockaddrIn6::from(std::net::SocketAddrV6::new(
            Ipv6Addr::UNSPECIFIED,
            port,
            0,
            0,
        ));
        bind(fd.as_raw_fd(), &any).map_err(|e| err("binding", e))?;
    } else {
        let any = SockaddrIn::from(std::net::SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
        bind(fd.as_raw_fd(), &any).map_err(|e| err("binding", e))?;
    }
    if kind == SockType::Stream {
        listen(&fd, Backlog::MAXCONN).map_err(|e| err("listening on", e))?;
    }
    Ok(fd)
}

/// Steps 1 to 4: the proxy's listener on 127.0.0.1:`port`, then the rest, to the broker.
pub fn hand_over(control: &mut UnixStream, port: u16, egress: &[u16]) -> Result<(), String> {
    let proxy = std::net::TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| format!("listening on 127.0.0.1:{port} for the proxy: {e}"))?;
    let v6 = add_local_routes()?;
    allow_low_ports()?;
    let mut fds: Vec<OwnedFd> = vec![
        OwnedFd::from(proxy),
        bound(SockType::Datagram, DNS_PORT, v6)?,
    ];
    for &p in egress {
        fds.push(bound(SockType::Stream, p, v6)?);
    }
    protocol::write_frame(control, &ShimReport::Listener).map_err(|e| e.to_string())?;
    let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let iov = [io::IoSlice::new(b"F")];
    sendmsg::<()>(
        control.as_raw_fd(),
        &iov,
        &[ControlMessage::ScmRights(&raw)],
        MsgFlags::empty(),
        None,
    )
    .map_err(|e| format!("handing over the listeners: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_request_is_a_local_default_route_on_loopback() {
        let m = local_default_route(libc::AF_INET6 as u8, 7);
        assert_eq!(m.len(), 36);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 36);
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), RTM_NEWROUTE);
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().unwrap()), 7);
        // family, /0, table main, boot, scope host, type local
        assert_eq!(&m[16..24], &[libc::AF_INET6 as u8, 0, 0, 0, 254, 3, 254, 2]);
        assert_eq!(&m[28..32], &[8, 0, 4, 0]);
        assert_eq!(u32::from_ne_bytes(m[32..36].try_into().unwrap()), 1);
    }

    #[test]
    fn only_our_acknowledgement_counts() {
        let ack = |seq: u32, err: i32| {
            let mut a = vec![0u8; 36];
            a[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
            a[8..12].copy_from_slice(&seq.to_ne_bytes());
            a[16..20].copy_from_slice(&err.to_ne_bytes());
            a
        };
        assert!(acked(&ack(3, 0), 3).is_ok());
        assert_eq!(
            acked(&ack(3, -libc::EEXIST), 3).unwrap_err().raw_os_error(),
            Some(libc::EEXIST)
        );
        assert!(acked(&ack(4, 0), 3).is_err());
        assert!(acked(&[0u8; 8], 3).is_err());
    }
}
