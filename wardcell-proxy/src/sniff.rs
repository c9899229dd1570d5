//! What the first bytes of a transparent connection say about where it goes: a TLS
//! ClientHello's server name (SNI), an HTTP/1 request's `Host`, or nothing (a protocol
//! the proxy does not read). Pure; the fuzzer (fuzz/) calls [`sniff`] with any bytes.

#![forbid(unsafe_code)]

use hyper::http::uri::Authority;

/// The most bytes read before deciding: one TLS record, or a request head.
pub const MAX_SNIFF: usize = 16 * 1024 + 5;

#[derive(Debug, PartialEq, Eq)]
pub enum Sniffed {
    /// Not enough bytes yet to say.
    NeedMore,
    /// A TLS ClientHello, with its server name if it sends one.
    Tls(Option<String>),
    /// An HTTP/1 request head, with its `Host` (host, and port if given).
    Http(Option<(String, Option<u16>)>),
    /// Neither: judged by the destination address alone.
    Other,
    /// Looks like TLS or HTTP but breaks its rules: refused.
    Bad(&'static str),
}

pub fn sniff(buf: &[u8]) -> Sniffed {
    match buf.first() {
        None => Sniffed::NeedMore,
        Some(0x16) => tls(buf),
        Some(b) if b.is_ascii_uppercase() => http(buf),
        Some(_) => Sniffed::Other,
    }
}

/// A cursor over bytes that says `None` past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| b[0] as usize)
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(n)
    }
}

fn tls(buf: &[u8]) -> Sniffed {
    if buf.len() < 5 {
        return Sniffed::NeedMore;
    }
    if buf[1] != 3 {
        return Sniffed::Other; // not a TLS record version
    }
    let len = u16::from_be_bytes([buf[3], buf[4]]) as usize;
    if len > 16 * 1024 {
        return Sniffed::Bad("a TLS record longer than the protocol allows");
    }
    let Some(record) = buf.get(5..5 + len) else {
        return Sniffed::NeedMore;
    };
    let mut r = Reader(record);
    let hello = (|| {
        if r.u8()? != 1 {
            return None; // not a ClientHello
        }
        let n = r.take(3)?;
        let n = (n[0] as usize) << 16 | (n[1] as usize) << 8 | n[2] as usize;
        // A ClientHello split over records names no server we can read.
        let mut h = Reader(r.take(n)?);
        h.take(2 + 32)?; // version, random
        h.vec8()?; // session id
        h.vec16()?; // cipher suites
        h.vec8()?; // compression methods
        if h.0.is_empty() {
            return Some(None); // no extensions
        }
        let mut ext = Reader(h.vec16()?);
        while !ext.0.is_empty() {
            let kind = ext.u16()?;
            let body = ext.vec16()?;
            if kind != 0 {
                continue;
            }
            let mut list = Reader(Reader(body).vec16()?);
            while !list.0.is_empty() {
                let name_type = list.u8()?;
                let name = list.vec16()?;
                if name_type == 0 {
                    return Some(Some(std::str::from_utf8(name).ok()?.to_string()));
                }
            }
            return Some(None);
        }
        Some(None)
    })();
    match hello {
        Some(sni) => Sniffed::Tls(sni),
        None => Sniffed::Bad("a TLS handshake that is not a ClientHello the proxy can read"),
    }
}

fn http(buf: &[u8]) -> Sniffed {
    // A method: upper-case letters, then a space. Anything else is another protocol.
    let method = buf.iter().take_while(|b| b.is_ascii_uppercase()).count();
    match buf.get(method) {
        None if method <= 16 => return Sniffed::NeedMore,
        Some(b' ') if method <= 16 => {}
        _ => return Sniffed::Other,
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => Sniffed::NeedMore,
        Err(_) => Sniffed::Bad("a malformed HTTP request head"),
        Ok(httparse::Status::Complete(_)) => {
            let mut hosts = req
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("host"));
            let host = hosts.next();
            if hosts.next().is_some() {
                return Sniffed::Bad("an HTTP request with two Host headers");
            }
            let host = match host.map(|h| authority(h.value)) {
                None => None,
                Some(Some(a)) => Some(a),
                Some(None) => return Sniffed::Bad("an HTTP Host header that is not host[:port]"),
            };
            // An absolute-form (`http://h/p`) or authority-form (`h:443`) target names a
            // host too, and a server takes it over Host: it must name the same host.
            let target = match req.path {
                None | Some("*") => None,
                Some(p) if p.starts_with('/') => None,
                Some(p) => match p
                    .parse::<hyper::Uri>()
                    .ok()
                    .and_then(|u| u.authority().and_then(|a| authority(a.as_str().as_bytes())))
                {
                    Some(a) => Some(a),
                    None => return Sniffed::Bad("an HTTP request target that names no host"),
                },
            };
            match (host, target) {
                (Some((h, hp)), Some((t, tp))) => {
                    let same = |a: &str, b: &str| {
                        a.trim_end_matches('.')
                            .eq_ignore_ascii_case(b.trim_end_matches('.'))
                    };
                    if !same(&h, &t) || (hp.is_some() && tp.is_some() && hp != tp) {
                        return Sniffed::Bad(
                            "an HTTP request whose target names another host than its Host",
                        );
                    }
                    Sniffed::Http(Some((h, hp.or(tp))))
                }
                (h, t) => Sniffed::Http(h.or(t)),
            }
        }
    }
}

/// `host[:port]` from a Host header or a request target's authority; `None` when it is
/// not one (userinfo included).
fn authority(value: &[u8]) -> Option<(String, Option<u16>)> {
    let a = std::str::from_utf8(value)
        .ok()?
        .trim()
        .parse::<Authority>()
        .ok()?;
    if a.as_str().contains('@') {
        return None;
    }
    Some((a.host().to_string(), a.port_u16()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ClientHello with `sni` and a decoy extension before it.
    pub fn client_hello(sni: Option<&str>) -> Vec<u8> {
        let mut ext = vec![0x00, 0x0b, 0x00, 0x02, 0x01, 0x00]; // ec_point_formats
        if let Some(name) = sni {
            let n = name.len();
            let mut e = vec![0x00, 0x00];
            e.extend_from_slice(&((n + 5) as u16).to_be_bytes());
            e.extend_from_slice(&((n + 3) as u16).to_be_bytes());
            e.push(0);
            e.extend_from_slice(&(n as u16).to_be_bytes());
            e.extend_from_slice(name.as_bytes());
            ext.extend(e);
        }
        let mut body = vec![0x03, 0x03];
        body.extend([7u8; 32]);
        body.push(0); // session id
        body.extend([0x00, 0x02, 0x13, 0x01]); // one suite
        body.extend([0x01, 0x00]); // null compression
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend(ext);
        let mut hs = vec![0x01, 0, (body.len() >> 8) as u8, body.len() as u8];
        hs.extend(body);
        let mut rec = vec![0x16, 0x03, 0x01];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend(hs);
        rec
    }

    #[test]
    fn reads_the_server_name() {
        let h = client_hello(Some("github.com"));
        assert_eq!(sniff(&h), Sniffed::Tls(Some("github.com".into())));
        assert_eq!(sniff(&client_hello(None)), Sniffed::Tls(None));
        for cut in [1, 4, 5, h.len() - 1] {
            assert_eq!(sniff(&h[..cut]), Sniffed::NeedMore, "{cut}");
        }
        let mut broken = h.clone();
        broken[7] = 0xff; // a handshake longer than its record
        assert!(matches!(sniff(&broken), Sniffed::Bad(_)));
    }

    #[test]
    fn reads_the_host_header() {
        assert_eq!(
            sniff(b"GET / HTTP/1.1\r\nHost: Example.com:8080\r\n\r\n"),
            Sniffed::Http(Some(("Example.com".into(), Some(8080))))
        );
        assert_eq!(sniff(b"GET / HTTP/1.0\r\n\r\n"), Sniffed::Http(None));
        assert_eq!(sniff(b"GET / HTTP/1.1\r\nHost: a"), Sniffed::NeedMore);
        assert_eq!(sniff(b"GET"), Sniffed::NeedMore);
        assert!(matches!(
            sniff(b"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n"),
            Sniffed::Bad(_)
        ));
        assert!(matches!(
            sniff(b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n"),
            Sniffed::Bad(_)
        ));
    }

    #[test]
    fn a_request_target_naming_a_host_must_name_the_same_host_as_host() {
        let h = |s: &[u8]| sniff(s);
        assert_eq!(
            h(b"GET http://A.example./x HTTP/1.1\r\nHost: a.example:8080\r\n\r\n"),
            Sniffed::Http(Some(("a.example".into(), Some(8080))))
        );
        assert_eq!(
            h(b"GET http://a.example:81/x HTTP/1.0\r\n\r\n"),
            Sniffed::Http(Some(("a.example".into(), Some(81))))
        );
        assert_eq!(
            h(b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n"),
            Sniffed::Http(Some(("a.example".into(), Some(443))))
        );
        assert_eq!(
            h(b"OPTIONS * HTTP/1.1\r\nHost: a.example\r\n\r\n"),
            Sniffed::Http(Some(("a.example".into(), None)))
        );
        for bad in [
            &b"GET http://evil.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n"[..],
            b"CONNECT evil.example:443 HTTP/1.1\r\nHost: a.example\r\n\r\n",
            b"GET http://a.example:81/ HTTP/1.1\r\nHost: a.example:80\r\n\r\n",
            b"GET http://u@a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
            b"GET mailto:x HTTP/1.1\r\nHost: a.example\r\n\r\n",
        ] {
            assert!(
                matches!(h(bad), Sniffed::Bad(_)),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn anything_else_is_other() {
        assert_eq!(sniff(b"SSH-2.0-OpenSSH_9.6\r\n"), Sniffed::Other);
        assert_eq!(sniff(b"hello"), Sniffed::Other);
        assert_eq!(sniff(&[0x16, 0x00, 0, 0, 0]), Sniffed::Other);
        assert_eq!(sniff(b""), Sniffed::NeedMore);
    }
}
