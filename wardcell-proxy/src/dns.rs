//! Name resolution, the address classifier, and dialing the exact address checked.
//!
//! The proxy resolves every name itself (the sandbox has no DNS), throws away every
//! address the matching allow entry does not admit, and connects to one of the addresses
//! that remain: the address that was checked is the address that is dialed, so a name
//! that changes its answer between check and use (DNS rebinding) gains nothing.

#![forbid(unsafe_code)]

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::allow::{Host, Rule, Target};

/// How long a lookup or a connect may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What kind of address an IP is, for the egress decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Routable on the internet: always admitted once the name is allowed.
    Global,
    Loopback,
    /// 169.254.0.0/16 and fe80::/10; cloud metadata services live here.
    LinkLocal,
    /// RFC 1918, fc00::/7 and the deprecated fec0::/10.
    Private,
    /// 100.64.0.0/10, carrier-grade NAT.
    Shared,
    Unspecified,
    Multicast,
    /// Broadcast, 240/4, documentation, benchmarking and protocol-assignment ranges.
    Reserved,
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Class::Global => "global",
            Class::Loopback => "loopback",
            Class::LinkLocal => "link-local",
            Class::Private => "private",
            Class::Shared => "shared (CGNAT)",
            Class::Unspecified => "unspecified",
            Class::Multicast => "multicast",
            Class::Reserved => "reserved",
        })
    }
}

pub fn classify(ip: IpAddr) -> Class {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn classify_v4(ip: Ipv4Addr) -> Class {
    const TABLE: &[([u8; 4], u32, Class)] = &[
        ([0, 0, 0, 0], 8, Class::Unspecified), // "this network"
        ([127, 0, 0, 0], 8, Class::Loopback),
        ([10, 0, 0, 0], 8, Class::Private),
        ([172, 16, 0, 0], 12, Class::Private),
        ([192, 168, 0, 0], 16, Class::Private),
        ([169, 254, 0, 0], 16, Class::LinkLocal),
        ([100, 64, 0, 0], 10, Class::Shared),
        ([224, 0, 0, 0], 4, Class::Multicast),
        ([240, 0, 0, 0], 4, Class::Reserved), // includes 255.255.255.255
        ([192, 0, 0, 0], 24, Class::Reserved),
        ([192, 0, 2, 0], 24, Class::Reserved),
        ([198, 51, 100, 0], 24, Class::Reserved),
        ([203, 0, 113, 0], 24, Class::Reserved),
        ([198, 18, 0, 0], 15, Class::Reserved),
    ];
    TABLE
        .iter()
        .find(|(net, bits, _)| in_v4(ip, *net, *bits))
        .map_or(Class::Global, |&(_, _, c)| c)
}

fn classify_v6(ip: Ipv6Addr) -> Class {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4); // ::ffff:a.b.c.d reaches a.b.c.d
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        // NAT64 (64:ff9b::/96) reaches the embedded IPv4 address.
        let [a, b] = s[6].to_be_bytes();
        let [c, d] = s[7].to_be_bytes();
        return classify_v4(Ipv4Addr::new(a, b, c, d));
    }
    if ip.is_unspecified() {
        Class::Unspecified
    } else if ip.is_loopback() {
        Class::Loopback
    } else if s[..6] == [0; 6] {
        Class::Reserved // deprecated IPv4-compatible ::a.b.c.d
    } else if s[0] & 0xffc0 == 0xfe80 {
        Class::LinkLocal
    } else if s[0] & 0xfe00 == 0xfc00 || s[0] & 0xffc0 == 0xfec0 {
        Class::Private
    } else if s[0] & 0xff00 == 0xff00 {
        Class::Multicast
    } else if (s[0] == 0x2001 && s[1] == 0x0db8) || s[..4] == [0x100, 0, 0, 0] {
        Class::Reserved // documentation, discard-only
    } else {
        Class::Global
    }
}

/// Why an address is not dialed for an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Barred {
    /// Of a class the entry does not admit.
    Class(Class),
    /// One of this machine's own addresses (a service listening on all interfaces).
    Own,
    /// This machine's addresses could not be read, so no address but a literal one is
    /// dialed.
    OwnUnknown(String),
}

impl Barred {
    /// The refusal, in words: `host` resolves to `ip`, and what would allow it under
    /// `rule`, the entry that admitted the name.
    pub fn explain(&self, host: &Host, ip: IpAddr, rule: &Rule) -> String {
        let literal = format!("which the proxy dials only for an entry naming {ip} literally");
        match self {
            Barred::Own => format!("{host} resolves to {ip}, an address of this machine, {literal}"),
            Barred::OwnUnknown(why) => format!(
                "{host} resolves to {ip}, and this machine's own addresses cannot be read ({why}), so only an entry naming {ip} literally reaches it"
            ),
            Barred::Class(class @ (Class::Private | Class::Shared | Class::Reserved | Class::Loopback))
                if !rule.internal =>
            {
                format!(
                    "{host} resolves to {ip}, a {class} address, which names under network.allow never reach: add \"{}\" under network.internal to allow it",
                    rule.entry
                )
            }
            Barred::Class(class) => format!("{host} resolves to {ip}, a {class} address, {literal}"),
        }
    }
}

/// How long this machine's addresses, once read, are used before they are read again.
const OWN_FRESH: Duration = Duration::from_secs(1);

/// This machine's addresses as last read, and when.
static OWN: Mutex<Option<(Instant, Arc<[IpAddr]>)>> = Mutex::new(None);

/// The addresses of this machine's interfaces, loopback ones aside (those are judged by
/// their class): the proxy runs in the host's network namespace, so a connection to any
/// of them reaches a service on the host itself. Read at most once a second.
pub fn own_addresses() -> Result<Arc<[IpAddr]>, String> {
    let now = Instant::now();
    let mut cached = OWN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((at, addrs)) = cached.as_ref() {
        if now.saturating_duration_since(*at) < OWN_FRESH {
            return Ok(addrs.clone());
        }
    }
    let mut addrs: Vec<IpAddr> = Vec::new();
    for a in nix::ifaddrs::getifaddrs().map_err(|e| format!("getifaddrs: {e}"))? {
        let Some(sa) = a.address else { continue };
        let ip = if let Some(v4) = sa.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = sa.as_sockaddr_in6() {
            crate::names::canonical(IpAddr::V6(v6.ip()))
        } else {
            continue;
        };
        if classify(ip) != Class::Loopback && !addrs.contains(&ip) {
            addrs.push(ip);
        }
    }
    let addrs: Arc<[IpAddr]> = addrs.into();
    *cached = Some((now, addrs.clone()));
    Ok(addrs)
}

/// May a connection admitted by `rule` go to `ip`? Anything the entry names literally;
/// never one of this machine's own addresses otherwise; global addresses; loopback when
/// the entry is `localhost`; private, shared, reserved and loopback addresses when the
/// entry is under `network.internal`. Link-local, unspecified and multicast addresses
/// only literally.
pub fn permitted(ip: IpAddr, rule: &Rule) -> Result<(), Barred> {
    if rule.names_ip(ip) {
        return Ok(());
    }
    admits(ip, rule, own_addresses().as_deref().map_err(|e| e.clone()))
}

/// [`permitted`], pure: `own` is this machine's addresses, or why they cannot be read.
pub fn admits(ip: IpAddr, rule: &Rule, own: Result<&[IpAddr], String>) -> Result<(), Barred> {
    let ip = crate::names::canonical(ip);
    if rule.names_ip(ip) {
        return Ok(());
    }
    match own {
        Ok(own) if own.contains(&ip) => return Err(Barred::Own),
        Ok(_) => {}
        Err(why) => return Err(Barred::OwnUnknown(why)),
    }
    match classify(ip) {
        Class::Global => Ok(()),
        Class::Loopback if rule.names_localhost() => Ok(()),
        Class::Private | Class::Shared | Class::Reserved | Class::Loopback if rule.internal => {
            Ok(())
        }
        class => Err(Barred::Class(class)),
    }
}

/// Why a target cannot be reached. The text goes into the Denied event and the 403 body.
#[derive(Debug)]
pub enum Unreachable {
    /// Policy: every address the name has is of a class the entry does not admit.
    Refused(String),
    /// The lookup failed or timed out.
    Lookup(String),
    /// No address accepted a connection.
    Connect(String),
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unreachable::Refused(why) => f.write_str(why),
            Unreachable::Lookup(why) => write!(f, "name lookup failed: {why}"),
            Unreachable::Connect(why) => write!(f, "cannot connect: {why}"),
        }
    }
}

/// Every address `host` has, before any policy: the proxy's own resolution.
pub async fn lookup(host: &Host) -> Result<Vec<IpAddr>, Unreachable> {
    Ok(match host {
        Host::Ip(ip) => vec![*ip],
        // RFC 6761: localhost is loopback, whatever a hosts file or DNS says.
        h if h.is_localhost() => vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()],
        Host::Name(name) => {
            let lookup = tokio::net::lookup_host((name.as_str(), 0));
            match tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await {
                Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
                Ok(Err(e)) => return Err(Unreachable::Lookup(e.to_string())),
                Err(_) => return Err(Unreachable::Lookup("timed out".into())),
            }
        }
    })
}

/// The addresses `t` may be dialed at, given the entry that admitted it.
pub async fn resolve(t: &Target, rule: &Rule) -> Result<Vec<SocketAddr>, Unreachable> {
    let candidates = lookup(&t.host).await?;
    let mut ok = Vec::new();
    let mut first_refusal = None;
    for ip in candidates {
        match permitted(ip, rule) {
            Ok(()) => {
                let a = SocketAddr::new(ip, t.port);
                if !ok.contains(&a) {
                    ok.push(a);
                }
            }
            Err(barred) => {
                first_refusal.get_or_insert((ip, barred));
            }
        }
    }
    if !ok.is_empty() {
        return Ok(ok);
    }
    Err(match first_refusal {
        Some((ip, barred)) => Unreachable::Refused(barred.explain(&t.host, ip, rule)),
        None => Unreachable::Lookup("no addresses".into()),
    })
}

/// Connect to the first of `addrs` that answers.
pub async fn dial(addrs: &[SocketAddr]) -> Result<(TcpStream, SocketAddr), Unreachable> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for &a in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok((s, a));
            }
            Ok(Err(e)) => last = e,
            Err(_) => last = io::Error::new(io::ErrorKind::TimedOut, "timed out"),
        }
    }
    Err(Unreachable::Connect(last.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Class {
        classify(s.parse().unwrap())
    }

    #[test]
    fn classifies_ipv4() {
        for (ip, class) in [
            ("8.8.8.8", Class::Global),
            ("1.1.1.1", Class::Global),
            ("100.63.255.255", Class::Global),
            ("100.128.0.0", Class::Global),
            ("172.15.255.255", Class::Global),
            ("172.32.0.0", Class::Global),
            ("127.0.0.1", Class::Loopback),
            ("127.255.255.254", Class::Loopback),
            ("10.1.2.3", Class::Private),
            ("172.16.0.1", Class::Private),
            ("172.31.255.255", Class::Private),
            ("192.168.1.1", Class::Private),
            ("169.254.169.254", Class::LinkLocal),
            ("100.64.0.1", Class::Shared),
            ("100.127.255.255", Class::Shared),
            ("0.0.0.0", Class::Unspecified),
            ("0.1.2.3", Class::Unspecified),
            ("224.0.0.1", Class::Multicast),
            ("239.255.255.255", Class::Multicast),
            ("255.255.255.255", Class::Reserved),
            ("240.0.0.1", Class::Reserved),
            ("192.0.2.1", Class::Reserved),
            ("198.18.0.1", Class::Reserved),
        ] {
            assert_eq!(c(ip), class, "{ip}");
        }
    }

    #[test]
    fn classifies_ipv6_including_embedded_ipv4() {
        for (ip, class) in [
            ("2606:4700::1111", Class::Global),
            ("::1", Class::Loopback),
            ("::", Class::Unspecified),
            ("fe80::1", Class::LinkLocal),
            ("febf::1", Class::LinkLocal),
            ("fc00::1", Class::Private),
            ("fd12:3456::1", Class::Private),
            ("fec0::1", Class::Private),
            ("ff02::1", Class::Multicast),
            ("::ffff:127.0.0.1", Class::Loopback),
            ("::ffff:169.254.169.254", Class::LinkLocal),
            ("::ffff:8.8.8.8", Class::Global),
            ("64:ff9b::10.0.0.1", Class::Private),
            ("64:ff9b::8.8.8.8", Class::Global),
            ("::127.0.0.1", Class::Reserved),
            ("2001:db8::1", Class::Reserved),
            ("100::1", Class::Reserved),
        ] {
            assert_eq!(c(ip), class, "{ip}");
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_a_literal_entry_or_localhost_admits_special_addresses() {
        let (lo, meta) = (ip("127.0.0.1"), ip("169.254.169.254"));
        let none: Result<&[IpAddr], String> = Ok(&[]);
        let class = |c| Err(Barred::Class(c));
        let name = Rule::parse("internal.example:80").unwrap();
        assert_eq!(admits(lo, &name, none.clone()), class(Class::Loopback));
        assert_eq!(admits(meta, &name, none.clone()), class(Class::LinkLocal));
        assert_eq!(admits(ip("8.8.8.8"), &name, none.clone()), Ok(()));

        let literal = Rule::parse("169.254.169.254:80").unwrap();
        assert_eq!(admits(meta, &literal, none.clone()), Ok(()));
        assert_eq!(admits(lo, &literal, none.clone()), class(Class::Loopback));

        let localhost = Rule::parse("localhost:80").unwrap();
        assert_eq!(admits(lo, &localhost, none.clone()), Ok(()));
        assert_eq!(admits(ip("::1"), &localhost, none.clone()), Ok(()));
        assert_eq!(
            admits(ip("10.0.0.1"), &localhost, none.clone()),
            class(Class::Private)
        );
        assert_eq!(admits(meta, &localhost, none), class(Class::LinkLocal));
    }

    #[test]
    fn internal_entries_reach_internal_classes_only() {
        let none: Result<&[IpAddr], String> = Ok(&[]);
        let internal = Rule::parse_internal("git.corp:443").unwrap();
        for a in [
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "fd00::1",
            "192.0.2.9",
            "127.0.0.1",
            "::1",
            "8.8.8.8",
        ] {
            assert_eq!(admits(ip(a), &internal, none.clone()), Ok(()), "{a}");
        }
        for (a, c) in [
            ("169.254.169.254", Class::LinkLocal),
            ("fe80::1", Class::LinkLocal),
            ("0.0.0.0", Class::Unspecified),
            ("224.0.0.1", Class::Multicast),
        ] {
            assert_eq!(
                admits(ip(a), &internal, none.clone()),
                Err(Barred::Class(c)),
                "{a}"
            );
        }
        // This machine's own addresses stay out, internal or not.
        assert_eq!(
            admits(ip("10.1.2.3"), &internal, Ok(&[ip("10.1.2.3")])),
            Err(Barred::Own)
        );
        // The same name under allow: public only, and the refusal says where it goes.
        let allow = Rule::parse("git.corp:443").unwrap();
        let barred = admits(ip("10.1.2.3"), &allow, none.clone()).unwrap_err();
        let why = barred.explain(&Host::parse("git.corp").unwrap(), ip("10.1.2.3"), &allow);
        assert!(
            why.contains("add \"git.corp:443\" under network.internal"),
            "{why}"
        );
        let barred = admits(ip("169.254.169.254"), &internal, none).unwrap_err();
        let why = barred.explain(
            &Host::parse("git.corp").unwrap(),
            ip("169.254.169.254"),
            &internal,
        );
        assert!(why.contains("naming 169.254.169.254 literally"), "{why}");
    }

    #[test]
    fn the_hosts_own_addresses_only_by_a_literal_entry() {
        let own = [ip("8.8.4.4"), ip("2606:4700::1")];
        let name = Rule::parse("svc.example:80").unwrap();
        // A global address of this machine, however it is spelled.
        for a in ["8.8.4.4", "::ffff:8.8.4.4", "2606:4700::1"] {
            assert_eq!(admits(ip(a), &name, Ok(&own)), Err(Barred::Own), "{a}");
        }
        assert_eq!(admits(ip("8.8.8.8"), &name, Ok(&own)), Ok(()));
        let literal = Rule::parse("8.8.4.4:80").unwrap();
        assert_eq!(admits(ip("8.8.4.4"), &literal, Ok(&own)), Ok(()));
        // Unreadable: nothing but a literal entry.
        let unknown = || Err("no netlink".to_string());
        assert!(matches!(
            admits(ip("8.8.8.8"), &name, unknown()),
            Err(Barred::OwnUnknown(_))
        ));
        assert_eq!(admits(ip("8.8.4.4"), &literal, unknown()), Ok(()));
        let why = Barred::Own.explain(&Host::parse("svc.example").unwrap(), ip("8.8.4.4"), &name);
        assert!(why.contains("an address of this machine"), "{why}");
        assert!(why.contains("naming 8.8.4.4 literally"), "{why}");
        // This machine's own addresses are read, loopback aside.
        let mine = own_addresses().unwrap();
        assert!(mine.iter().all(|a| classify(*a) != Class::Loopback));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_numeric_name_resolving_to_loopback_is_refused() {
        // "127.1" is not an IP literal to the proxy but getaddrinfo reads it as 127.0.0.1.
        let rule = Rule::parse("127.1:80").unwrap();
        let t = Target::new("127.1", 80).unwrap();
        match resolve(&t, &rule).await {
            Err(Unreachable::Refused(why)) => {
                assert!(why.contains("loopback"), "{why}");
                assert!(
                    why.contains("add \"127.1:80\" under network.internal"),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
        let rule = Rule::parse("localhost:80").unwrap();
        let t = Target::new("localhost", 80).unwrap();
        assert_eq!(resolve(&t, &rule).await.unwrap().len(), 2);
    }
}
