//! The egress allow-list: `host:port` entries, `*.domain:port` for subdomains only.
//!
//! Host names are compared in one canonical form (ASCII lower case, no trailing dot,
//! IPv6 without brackets), and a request's host must be a plain DNS name or an IP
//! literal before it is compared with anything or handed to the resolver.

#![forbid(unsafe_code)]

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use crate::error::Error;

/// A host as the proxy compares it: a canonical DNS name or an IP literal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Host {
    /// Parse a host from an allow entry or a request: `name`, `1.2.3.4`, `[::1]`.
    pub fn parse(s: &str) -> Result<Host, String> {
        if let Some(inner) = s.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| format!("`{s}` has an unclosed `[`"))?;
            return inner
                .parse::<Ipv6Addr>()
                .map(|ip| Host::Ip(IpAddr::V6(ip)))
                .map_err(|_| format!("`{inner}` is not an IPv6 address"));
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Host::Ip(ip));
        }
        let name = s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase();
        valid_name(&name)?;
        Ok(Host::Name(name))
    }

    /// `localhost` (which always means loopback here, never what DNS says).
    pub fn is_localhost(&self) -> bool {
        matches!(self, Host::Name(n) if n == "localhost")
    }

    /// The host as it goes into a `Host` header or an authority: IPv6 in brackets.
    pub fn authority(&self, port: u16, default_port: u16) -> String {
        let host = match self {
            Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
            other => other.to_string(),
        };
        if port == default_port {
            host
        } else {
            format!("{host}:{port}")
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// A DNS name: labels of letters, digits, `-` and `_`, 1 to 63 bytes each, 253 in all.
fn valid_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 {
        return Err(format!("`{name}` is not a valid host name"));
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(format!("`{name}` is not a valid host name"));
        }
    }
    Ok(())
}

/// Where a request wants to go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub host: Host,
    pub port: u16,
}

impl Target {
    /// From a URI authority's host (brackets kept for IPv6) and port.
    pub fn new(host: &str, port: u16) -> Result<Target, String> {
        if port == 0 {
            return Err("port 0 is not a destination".into());
        }
        Ok(Target {
            host: Host::parse(host)?,
            port,
        })
    }
}

/// What an entry's host part matches.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pattern {
    /// Exactly this host.
    Exact(Host),
    /// Any name ending in this suffix (which starts with `.`): subdomains only.
    Subdomains(String),
}

/// One allow-list entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The entry as the profile wrote it, for messages.
    pub entry: String,
    pattern: Pattern,
    port: u16,
    /// From `network.internal`: its names may resolve to internal addresses.
    pub internal: bool,
}

impl Rule {
    /// A `network.internal` entry.
    pub fn parse_internal(entry: &str) -> Result<Rule, Error> {
        Ok(Rule {
            internal: true,
            ..Rule::parse(entry)?
        })
    }

    /// A `network.allow` entry.
    pub fn parse(entry: &str) -> Result<Rule, Error> {
        let bad = |why: &str| Error::AllowEntry {
            entry: entry.to_string(),
            why: why.to_string(),
        };
        let (host, port) = entry
            .rsplit_once(':')
            .ok_or_else(|| bad("it has no port"))?;
        if host.contains(':') && !host.starts_with('[') {
            return Err(bad("an IPv6 address must be written in brackets"));
        }
        let port = match port.parse::<u16>() {
            Ok(p) if p != 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
            _ => return Err(bad("the port must be a number from 1 to 65535")),
        };
        let pattern = if let Some(domain) = host.strip_prefix("*.") {
            match Host::parse(domain).map_err(|e| bad(&e))? {
                Host::Name(d) => Pattern::Subdomains(format!(".{d}")),
                Host::Ip(_) => return Err(bad("`*.` goes with a domain name, not an address")),
            }
        } else {
            Pattern::Exact(Host::parse(host).map_err(|e| bad(&e))?)
        };
        Ok(Rule {
            entry: entry.to_string(),
            pattern,
            port,
            internal: false,
        })
    }

    fn matches(&self, t: &Target) -> bool {
        t.port == self.port && self.matches_host(&t.host)
    }

    /// The entry's host part admits `host`, whatever the port.
    pub fn matches_host(&self, host: &Host) -> bool {
        match (&self.pattern, host) {
            // `localhost:P` means 127.0.0.1:P and [::1]:P too, for every kind of
            // connection (a raw one to 127.0.0.1 carries no name).
            (Pattern::Exact(h), Host::Ip(ip)) if h.is_localhost() => {
                *ip == IpAddr::from([127, 0, 0, 1]) || *ip == IpAddr::from(Ipv6Addr::LOCALHOST)
            }
            (Pattern::Exact(h), host) => h == host,
            (Pattern::Subdomains(suffix), Host::Name(n)) => {
                n.len() > suffix.len() && n.ends_with(suffix.as_str())
            }
            (Pattern::Subdomains(_), Host::Ip(_)) => false,
        }
    }

    fn is_exact(&self) -> bool {
        matches!(self.pattern, Pattern::Exact(_))
    }

    /// The entry names this IP address literally.
    pub fn names_ip(&self, ip: IpAddr) -> bool {
        matches!(&self.pattern, Pattern::Exact(Host::Ip(a)) if *a == ip)
    }

    /// The entry is `localhost:port`, which admits loopback addresses.
    pub fn names_localhost(&self) -> bool {
        matches!(&self.pattern, Pattern::Exact(h) if h.is_localhost())
    }
}

/// A zone's allow-list.
#[derive(Clone, Debug, Default)]
pub struct AllowList {
    rules: Vec<Rule>,
}

impl AllowList {
    /// `network.allow` and `network.internal`.
    pub fn parse(allow: &[String], internal: &[String]) -> Result<AllowList, Error> {
        let rules = allow
            .iter()
            .map(|e| Rule::parse(e))
            .chain(internal.iter().map(|e| Rule::parse_internal(e)))
            .collect::<Result<_, _>>()?;
        Ok(AllowList { rules })
    }

    /// The entries whose host part admits `host`, on any port (what the sandbox's DNS
    /// answers by).
    pub fn for_host<'a>(&'a self, host: &'a Host) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules.iter().filter(move |r| r.matches_host(host))
    }

    /// The entry that admits `t`: an exact one before a wildcard, and among those an
    /// internal one (it reaches more) before an allow one.
    pub fn find(&self, t: &Target) -> Option<&Rule> {
        let mut best: Option<&Rule> = None;
        for r in self.rules.iter().filter(|r| r.matches(t)) {
            let key = |r: &Rule| (r.is_exact(), r.internal);
            if best.is_none_or(|b| key(r) > key(b)) {
                best = Some(r);
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowList {
        AllowList::parse(
            &entries.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            &[],
        )
        .unwrap()
    }

    #[test]
    fn an_internal_entry_wins_over_the_same_allow_entry() {
        let l = AllowList::parse(
            &["git.corp:443".into(), "*.corp:443".into()],
            &["*.corp:443".into(), "git.corp:443".into()],
        )
        .unwrap();
        let found = l.find(&Target::new("git.corp", 443).unwrap()).unwrap();
        assert!(found.internal && found.entry == "git.corp:443");
        let found = l.find(&Target::new("a.corp", 443).unwrap()).unwrap();
        assert!(found.internal && found.entry == "*.corp:443");
        let only_allow = list(&["git.corp:443"]);
        assert!(
            !only_allow
                .find(&Target::new("git.corp", 443).unwrap())
                .unwrap()
                .internal
        );
    }

    fn allowed(l: &AllowList, host: &str, port: u16) -> bool {
        l.find(&Target::new(host, port).unwrap()).is_some()
    }

    #[test]
    fn exact_entries_match_host_and_port_only() {
        let l = list(&["crates.io:443"]);
        assert!(allowed(&l, "crates.io", 443));
        assert!(allowed(&l, "CRATES.IO", 443));
        assert!(allowed(&l, "crates.io.", 443));
        assert!(!allowed(&l, "crates.io", 80));
        assert!(!allowed(&l, "static.crates.io", 443));
        assert!(!allowed(&l, "crates.io.evil.com", 443));
        assert!(!allowed(&l, "evilcrates.io", 443));
    }

    #[test]
    fn wildcard_matches_subdomains_only() {
        let l = list(&["*.crates.io:443"]);
        assert!(allowed(&l, "static.crates.io", 443));
        assert!(allowed(&l, "a.b.crates.io", 443));
        assert!(!allowed(&l, "crates.io", 443));
        assert!(!allowed(&l, "evilcrates.io", 443));
        assert!(!allowed(&l, "static.crates.io", 80));
        assert!(!allowed(&l, "127.0.0.1", 443));
    }

    #[test]
    fn names_are_admitted_on_any_listed_port_for_dns() {
        let l = list(&["github.com:22", "*.crates.io:443", "127.0.0.1:80"]);
        let n = |h: &str| l.for_host(&Host::parse(h).unwrap()).count();
        assert_eq!(n("github.com"), 1);
        assert_eq!(n("static.crates.io"), 1);
        assert_eq!(n("crates.io"), 0);
        assert_eq!(n("gitlab.com"), 0);
        assert_eq!(n("127.0.0.1"), 1);
    }

    #[test]
    fn ip_entries_match_the_literal() {
        let l = list(&["127.0.0.1:8080", "[::1]:8080"]);
        assert!(allowed(&l, "127.0.0.1", 8080));
        assert!(allowed(&l, "[::1]", 8080));
        assert!(!allowed(&l, "localhost", 8080));
        assert!(!allowed(&l, "127.0.0.2", 8080));
        let t = Target::new("127.0.0.1", 8080).unwrap();
        assert!(l.find(&t).unwrap().names_ip("127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn exact_entry_wins_over_wildcard() {
        let l = list(&["*.localhost:80", "a.localhost:80"]);
        let t = Target::new("a.localhost", 80).unwrap();
        assert_eq!(l.find(&t).unwrap().entry, "a.localhost:80");
        assert!(list(&["localhost:1"])
            .find(&Target::new("localhost", 1).unwrap())
            .unwrap()
            .names_localhost());
    }

    #[test]
    fn localhost_means_both_loopback_addresses() {
        let l = list(&["localhost:8080"]);
        assert!(allowed(&l, "127.0.0.1", 8080));
        assert!(allowed(&l, "[::1]", 8080));
        assert!(allowed(&l, "localhost", 8080));
        assert!(!allowed(&l, "127.0.0.2", 8080));
        assert!(!allowed(&l, "127.0.0.1", 8081));
        assert!(!allowed(&l, "[::ffff:127.0.0.1]", 8080));
    }

    #[test]
    fn bad_entries_are_refused_with_the_entry_named() {
        for bad in [
            "crates.io",
            "crates.io:",
            "crates.io:0",
            "crates.io:65536",
            "crates.io:+443",
            "*:443",
            "*.:443",
            "a.*.io:443",
            "::1:443",
            "*.1.2.3.4:443",
            "exa mple.com:443",
            ":443",
        ] {
            let e = Rule::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
    }

    #[test]
    fn request_hosts_are_validated() {
        for bad in [
            "",
            "a..b",
            "a b",
            "a/b",
            "a@b",
            "[::1",
            "[1.2.3.4]",
            "ex%61mple.com",
        ] {
            assert!(Host::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Host::parse("Example.COM.").unwrap(),
            Host::Name("example.com".into())
        );
        assert!(Target::new("example.com", 0).is_err());
    }

    #[test]
    fn authority_brackets_ipv6_and_omits_default_port() {
        assert_eq!(Host::parse("[::1]").unwrap().authority(443, 443), "[::1]");
        assert_eq!(
            Host::parse("::1").unwrap().authority(8443, 443),
            "[::1]:8443"
        );
        assert_eq!(Host::parse("a.io").unwrap().authority(80, 80), "a.io");
    }
}
