//! Which names the proxy's DNS answered each address for, per sandbox (one proxy serves
//! one sandbox). A transparent connection to an address is judged by the name it came
//! from when the bytes name nothing (a raw protocol), and a TLS SNI or HTTP Host that
//! names something else is refused.
//!
//! Bounded: at most [`MAX_ADDRS`] addresses with [`MAX_NAMES`] names each; an entry lives
//! [`REMEMBER`] after its last answer. When full, expired entries go first, then the
//! oldest.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const MAX_ADDRS: usize = 4096;
pub const MAX_NAMES: usize = 4;
/// Longer than the TTL the sandbox is given (nameserver.rs), so that a client caching an
/// answer a little past its TTL still connects by name.
pub const REMEMBER: Duration = Duration::from_secs(600);

#[derive(Default)]
pub struct Names {
    map: Mutex<HashMap<IpAddr, Vec<(String, Instant)>>>,
}

/// An IPv4 address as an IPv6 socket reports it (`::ffff:a.b.c.d`) is the IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl Names {
    /// `name` was answered with `ip`, at `now`.
    pub fn record(&self, ip: IpAddr, name: &str, now: Instant) {
        let ip = canonical(ip);
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if !map.contains_key(&ip) && map.len() >= MAX_ADDRS {
            map.retain(|_, v| {
                v.retain(|(_, t)| now.saturating_duration_since(*t) < REMEMBER);
                !v.is_empty()
            });
            if map.len() >= MAX_ADDRS {
                let oldest = map
                    .iter()
                    .min_by_key(|(_, v)| v.iter().map(|(_, t)| *t).max())
                    .map(|(k, _)| *k);
                if let Some(k) = oldest {
                    map.remove(&k);
                }
            }
        }
        let names = map.entry(ip).or_default();
        names.retain(|(n, _)| n != name);
        if names.len() >= MAX_NAMES {
            names.remove(0); // the least recently answered
        }
        names.push((name.to_string(), now));
    }

    /// The names `ip` was answered for and still remembered at `now`, most recent last.
    pub fn of(&self, ip: IpAddr, now: Instant) -> Vec<String> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&canonical(ip))
            .map(|v| {
                v.iter()
                    .filter(|(_, t)| now.saturating_duration_since(*t) < REMEMBER)
                    .map(|(n, _)| n.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn remembers_names_per_address_and_forgets_them() {
        let n = Names::default();
        let t0 = Instant::now();
        n.record(ip("::ffff:192.0.2.1"), "a.example", t0);
        n.record(ip("192.0.2.1"), "b.example", t0);
        assert_eq!(n.of(ip("192.0.2.1"), t0), ["a.example", "b.example"]);
        assert!(n.of(ip("192.0.2.2"), t0).is_empty());
        assert!(n.of(ip("192.0.2.1"), t0 + REMEMBER).is_empty());
        // Answering again refreshes, without a duplicate.
        n.record(ip("192.0.2.1"), "a.example", t0 + REMEMBER);
        assert_eq!(n.of(ip("192.0.2.1"), t0 + REMEMBER), ["a.example"]);
    }

    #[test]
    fn bounded_in_names_and_addresses() {
        let n = Names::default();
        let t0 = Instant::now();
        for i in 0..10 {
            n.record(ip("192.0.2.1"), &format!("n{i}.example"), t0);
        }
        assert_eq!(n.of(ip("192.0.2.1"), t0).len(), MAX_NAMES);
        assert!(n
            .of(ip("192.0.2.1"), t0)
            .contains(&"n9.example".to_string()));
        for i in 0..(MAX_ADDRS as u32 + 10) {
            let a = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            n.record(a, "x.example", t0 + Duration::from_millis(i as u64));
        }
        assert_eq!(n.len(), MAX_ADDRS);
        // The newest is kept.
        let last = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + MAX_ADDRS as u32 + 9));
        assert_eq!(n.of(last, t0 + Duration::from_secs(1)), ["x.example"]);
    }
}
