//! The sandbox's DNS: a UDP socket on port 53 of every address inside the sandbox's
//! network namespace, so whatever nameserver its resolv.conf names (or glibc's default,
//! 127.0.0.1) is this.
//!
//! A query for a name the allow list admits (on any port) gets the proxy's own answer,
//! with only the addresses the classifier lets that entry reach (dns.rs); every address
//! answered is remembered with its name (names.rs). Any other name gets NXDOMAIN and a
//! `proxy.denied` event. Only standard queries with one question in class IN are
//! answered; A and AAAA get addresses (AAAA only where the sandbox's namespace routes
//! IPv6), other types an empty answer. Anything malformed
//! gets FORMERR, or nothing when not even the header is there. TCP is not served: answers
//! are kept under 512 bytes.

#![forbid(unsafe_code)]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use tokio::net::UdpSocket;
use tokio::sync::Semaphore;

use wardcell_common::protocol::ProxyEvent;

use crate::allow::Host;
use crate::ctx::Ctx;
use crate::dns;
use crate::names::Names;

/// The TTL given with every answer, in seconds.
pub const TTL: u32 = 60;
/// Addresses per answer: 8 AAAA records and the longest question stay under 512 bytes.
const MAX_ANSWERS: usize = 8;
/// Queries looked up at once; more are dropped (the client retries).
const IN_FLIGHT: usize = 16;

pub const TYPE_A: u16 = 1;
pub const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;

const FORMERR: u8 = 1;
const SERVFAIL: u8 = 2;
const NXDOMAIN: u8 = 3;
const NOTIMP: u8 = 4;

/// A query, as far as the answer needs it.
#[derive(Debug, PartialEq, Eq)]
pub struct Query<'a> {
    pub id: u16,
    /// The recursion-desired bit, echoed.
    pub rd: bool,
    /// The name, lower case, without the trailing dot; empty for the root.
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
    /// The question section as sent, echoed in the answer.
    pub question: &'a [u8],
}

/// Why a packet is not a query we answer: `Some(id, rcode)` to answer with that code, or
/// `None` when there is not even a header (or it is a response): drop it.
pub type Bad = Option<(u16, u8)>;

/// Parse a DNS query. Pure; the fuzzer (fuzz/) calls it with any bytes.
pub fn parse(packet: &[u8]) -> Result<Query<'_>, Bad> {
    if packet.len() < 12 {
        return Err(None);
    }
    let id = u16::from_be_bytes([packet[0], packet[1]]);
    let flags = u16::from_be_bytes([packet[2], packet[3]]);
    if flags & 0x8000 != 0 {
        return Err(None); // a response: never answer one
    }
    if (flags >> 11) & 0xf != 0 {
        return Err(Some((id, NOTIMP))); // not a standard query
    }
    let qdcount = u16::from_be_bytes([packet[4], packet[5]]);
    if qdcount != 1 {
        return Err(Some((id, FORMERR)));
    }
    let formerr = Some((id, FORMERR));
    let mut at = 12;
    let mut name = String::new();
    loop {
        let len = *packet.get(at).ok_or(formerr)? as usize;
        at += 1;
        if len == 0 {
            break;
        }
        // No compression in a question, no extended label types.
        if len > 63 {
            return Err(formerr);
        }
        let label = packet.get(at..at + len).ok_or(formerr)?;
        at += len;
        if !name.is_empty() {
            name.push('.');
        }
        // Labels are bytes; anything but a host name's characters is refused below.
        for &b in label {
            if !(b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                return Err(Some((id, NXDOMAIN)));
            }
            name.push(b.to_ascii_lowercase() as char);
        }
        if name.len() > 253 {
            return Err(formerr);
        }
    }
    let tail = packet.get(at..at + 4).ok_or(formerr)?;
    let qtype = u16::from_be_bytes([tail[0], tail[1]]);
    let qclass = u16::from_be_bytes([tail[2], tail[3]]);
    Ok(Query {
        id,
        rd: flags & 0x0100 != 0,
        name,
        qtype,
        qclass,
        question: &packet[12..at + 4],
    })
}

/// The answer to `q`: `rcode`, and for A and AAAA the addresses of that family (at most
/// [`MAX_ANSWERS`]). Pure.
pub fn answer(q: &Query<'_>, rcode: u8, addrs: &[IpAddr]) -> Vec<u8> {
    let records: Vec<Vec<u8>> = addrs
        .iter()
        .filter_map(|ip| match (q.qtype, ip) {
            (TYPE_A, IpAddr::V4(v4)) => Some(v4.octets().to_vec()),
            (TYPE_AAAA, IpAddr::V6(v6)) => Some(v6.octets().to_vec()),
            _ => None,
        })
        .take(MAX_ANSWERS)
        .collect();
    let mut out = header(q.id, q.rd, rcode, 1, records.len() as u16);
    out.extend_from_slice(q.question);
    for rdata in records {
        out.extend_from_slice(&[0xc0, 12]); // the name: a pointer to the question's
        out.extend_from_slice(&q.qtype.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&TTL.to_be_bytes());
        out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        out.extend_from_slice(&rdata);
    }
    out
}

/// A bare header: response, recursion available, `rd` echoed.
fn header(id: u16, rd: bool, rcode: u8, qd: u16, an: u16) -> Vec<u8> {
    let flags: u16 = 0x8000 | if rd { 0x0100 } else { 0 } | 0x0080 | u16::from(rcode & 0xf);
    let mut h = Vec::with_capacity(512);
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&flags.to_be_bytes());
    for n in [qd, an, 0, 0] {
        h.extend_from_slice(&n.to_be_bytes());
    }
    h
}

/// Answer queries until the process ends.
pub async fn serve(socket: std::net::UdpSocket, ctx: Arc<Ctx>, names: Arc<Names>) {
    let Ok(socket) = UdpSocket::from_std(socket) else {
        return;
    };
    // The shim binds the DNS socket dual-stack exactly when the namespace routes IPv6:
    // without it, AAAA answers would only send clients to addresses they cannot reach.
    let v6 = socket.local_addr().is_ok_and(|a| a.is_ipv6());
    let socket = Arc::new(socket);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut buf = vec![0u8; 1500];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue; // busy: the client asks again
        };
        let packet = buf[..n].to_vec();
        let (socket, ctx, names) = (socket.clone(), ctx.clone(), names.clone());
        tokio::spawn(async move {
            let _slot = slot;
            if let Some(reply) = respond(&packet, &ctx, &names, v6).await {
                let _ = socket.send_to(&reply, from).await;
            }
        });
    }
}

/// The reply to one packet, if it gets one.
async fn respond(packet: &[u8], ctx: &Ctx, names: &Names, v6: bool) -> Option<Vec<u8>> {
    let q = match parse(packet) {
        Ok(q) => q,
        Err(None) => return None,
        Err(Some((id, rcode))) => return Some(header(id, false, rcode, 0, 0)),
    };
    if q.qclass != CLASS_IN {
        return Some(header(q.id, q.rd, NOTIMP, 0, 0));
    }
    let deny = |reason: &str| {
        ctx.events.send(ProxyEvent::Denied {
            host: q.name.clone(),
            port: 53,
            reason: reason.to_string(),
        });
        Some(answer(&q, NXDOMAIN, &[]))
    };
    let Ok(host) = Host::parse(&q.name) else {
        return Some(answer(&q, NXDOMAIN, &[]));
    };
    // A name only: an address literal is not looked up.
    if matches!(host, Host::Ip(_)) {
        return Some(answer(&q, NXDOMAIN, &[]));
    }
    let rules: Vec<_> = ctx.allow.for_host(&host).collect();
    if rules.is_empty() {
        return deny("DNS query for a name not in the allow list");
    }
    if (q.qtype != TYPE_A && q.qtype != TYPE_AAAA) || (q.qtype == TYPE_AAAA && !v6) {
        return Some(answer(&q, 0, &[]));
    }
    let found = match dns::lookup(&host).await {
        Ok(a) => a,
        Err(_) => return Some(answer(&q, SERVFAIL, &[])),
    };
    let mut ok: Vec<IpAddr> = Vec::new();
    for ip in found.into_iter().map(crate::names::canonical) {
        if !ok.contains(&ip) && rules.iter().any(|r| dns::permitted(ip, r).is_ok()) {
            ok.push(ip);
        }
    }
    let now = Instant::now();
    let reply = answer(&q, 0, &ok);
    for ip in ok.iter().filter(|ip| match q.qtype {
        TYPE_A => ip.is_ipv4(),
        _ => ip.is_ipv6(),
    }) {
        names.record(*ip, &q.name, now);
    }
    Some(reply)
}

/// The address a socket reports, IPv4 addresses as themselves.
pub fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(crate::names::canonical(a.ip()), a.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
        let mut p = header(id, true, 0, 1, 0);
        p[2] = 0x01; // a query, RD
        p[3] = 0;
        for label in name.split('.').filter(|l| !l.is_empty()) {
            p.push(label.len() as u8);
            p.extend_from_slice(label.as_bytes());
        }
        p.push(0);
        p.extend_from_slice(&qtype.to_be_bytes());
        p.extend_from_slice(&CLASS_IN.to_be_bytes());
        p
    }

    #[test]
    fn parses_a_query_and_answers_it() {
        let p = query(0x1234, "GitHub.com", TYPE_A);
        let q = parse(&p).unwrap();
        assert_eq!((q.id, q.rd, q.name.as_str()), (0x1234, true, "github.com"));
        assert_eq!((q.qtype, q.qclass), (TYPE_A, CLASS_IN));
        let a = answer(
            &q,
            0,
            &["192.0.2.7".parse().unwrap(), "2001:db8::1".parse().unwrap()],
        );
        assert_eq!(&a[0..2], &[0x12, 0x34]);
        assert_eq!(a[2] & 0x80, 0x80, "a response");
        assert_eq!(a[3] & 0x0f, 0, "NOERROR");
        assert_eq!(u16::from_be_bytes([a[6], a[7]]), 1, "only the A record");
        assert_eq!(&a[a.len() - 4..], &[192, 0, 2, 7]);
        assert_eq!(&a[12..12 + q.question.len()], q.question);
    }

    #[test]
    fn answers_stay_under_512_bytes() {
        let long = [
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61),
        ]
        .join(".");
        let p = query(1, &long, TYPE_AAAA);
        let q = parse(&p).unwrap();
        let many: Vec<IpAddr> = (0..40)
            .map(|i| format!("2001:db8::{i:x}").parse().unwrap())
            .collect();
        let a = answer(&q, 0, &many);
        assert!(a.len() <= 512, "{}", a.len());
        assert_eq!(u16::from_be_bytes([a[6], a[7]]), MAX_ANSWERS as u16);
    }

    #[test]
    fn refuses_what_is_not_a_plain_query() {
        assert_eq!(parse(&[0; 5]), Err(None));
        let mut resp = query(7, "a.io", TYPE_A);
        resp[2] |= 0x80;
        assert_eq!(parse(&resp), Err(None));
        let mut two = query(7, "a.io", TYPE_A);
        two[5] = 2;
        assert_eq!(parse(&two), Err(Some((7, FORMERR))));
        let mut update = query(7, "a.io", TYPE_A);
        update[2] = 5 << 3;
        assert_eq!(parse(&update), Err(Some((7, NOTIMP))));
        let mut pointer = query(7, "a.io", TYPE_A);
        pointer[12] = 0xc0;
        assert_eq!(parse(&pointer), Err(Some((7, FORMERR))));
        let cut = query(7, "a.io", TYPE_A);
        assert_eq!(parse(&cut[..cut.len() - 1]), Err(Some((7, FORMERR))));
        let odd = query(7, "a\u{1}b.io", TYPE_A);
        assert_eq!(parse(&odd), Err(Some((7, NXDOMAIN))));
        let huge = vec!["a".repeat(60); 5].join(".");
        assert_eq!(parse(&query(7, &huge, TYPE_A)), Err(Some((7, FORMERR))));
    }
}
