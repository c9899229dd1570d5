//! Entry points for the fuzz targets in fuzz/ (see docs/DEVELOPING.md, "Fuzzing"); not an interface.
//! Each runs the proxy's own code on hostile input and panics when an invariant breaks.

#![forbid(unsafe_code)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use http_body_util::Empty;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{header, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::allow::Target;
use crate::credentials::{normalise_path, path_admits};
use crate::forward::prepare_request;
use crate::front::{route, Route};

/// Serve `data` as the bytes a sandbox sends on one connection to the proxy. hyper parses
/// the request heads, as in front.rs; each head then goes through every decision the
/// proxy makes before it dials: [`route`], the request a forward would send upstream
/// ([`prepare_request`]), and, as inside an intercepted tunnel, whether a credential's
/// path patterns admit its path.
pub fn request_head(data: &[u8]) {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let rt = RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    });
    rt.block_on(async {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        // As front.rs serves, except that the end of the input (a half close) does not
        // drop the heads still buffered behind the first: all of them are decided.
        let serve = http1::Builder::new()
            .half_close(true)
            .serve_connection(TokioIo::new(server), service_fn(decide))
            .with_upgrades();
        let feed = async move {
            let _ = client.write_all(data).await;
            let _ = client.shutdown().await;
            let mut answers = Vec::new();
            let _ = client.read_to_end(&mut answers).await;
        };
        let _ = tokio::join!(serve, feed);
    });
}

/// Request heads that reached [`decide`] (so a test can tell hyper let them through).
static DECIDED: AtomicUsize = AtomicUsize::new(0);

async fn decide(req: Request<Incoming>) -> Result<Response<Empty<Bytes>>, Infallible> {
    DECIDED.fetch_add(1, Ordering::Relaxed);
    let (mut parts, _body) = req.into_parts();
    let tunnel = Target::new("git.example.com", 443).expect("a valid host");
    let patterns = ["/company/*".to_string(), "*/info/refs".to_string()];
    let admitted = path_admits(&patterns, parts.uri.path());
    if admitted {
        let path = parts.uri.path();
        assert!(!path.split('/').any(|s| s == ".." || s == "."), "{path}");
    }
    let (target, default_port) = match route(&parts.method, &parts.uri) {
        Route::Plain(t) => (t, 80),
        Route::Connect(_)
        | Route::OtherScheme(_)
        | Route::Bad(..)
        | Route::Denials
        | Route::Check(_) => (tunnel, 443),
    };
    prepare_request(&mut parts, &target, default_port);
    // What leaves: origin form, the checked host, no hop-by-hop or proxy header.
    assert!(parts.uri.scheme().is_none() && parts.uri.authority().is_none());
    assert!(parts.uri.to_string().starts_with('/'), "{}", parts.uri);
    let host = parts
        .headers
        .get(header::HOST)
        .map(|h| h.as_bytes().to_vec());
    assert_eq!(
        host,
        Some(
            target
                .host
                .authority(target.port, default_port)
                .into_bytes()
        )
    );
    for name in parts.headers.keys() {
        let n = name.as_str();
        assert!(
            !n.starts_with("proxy-") && n != "connection" && n != "transfer-encoding",
            "{n}"
        );
    }
    Ok(Response::new(Empty::new()))
}

/// Whether a credential with the one path pattern `pattern` attaches to `path`, checked
/// against a plain recursive matcher on the normalised path (`*` matches any run of
/// bytes, `/` included), and the normaliser's invariants: what it admits has no dot
/// segment, no `;`, no backslash, no repeated slash, no escape of `/ . % \ ;`, only
/// well-formed escapes in capitals, and normalising it again changes nothing.
pub fn credential_path(pattern: &str, path: &str) -> bool {
    let got = path_admits(&[pattern.to_string()], path);
    let normal = normalise_path(path);
    if let Ok(n) = &normal {
        assert!(n.starts_with('/'), "{n:?}");
        assert!(!n.split('/').any(|s| s == "." || s == ".."), "{n:?}");
        assert!(
            !n.contains(';') && !n.contains('\\') && !n.contains("//"),
            "{n:?}"
        );
        let upper = n.to_ascii_uppercase();
        assert!(
            !["%2E", "%2F", "%25", "%5C", "%3B"]
                .iter()
                .any(|s| upper.contains(s)),
            "{n:?}"
        );
        assert_eq!(
            normalise_path(n).as_deref(),
            Ok(n.as_str()),
            "not idempotent"
        );
        assert!(n.len() <= path.len(), "{n:?} from {path:?}");
    }
    if pattern.len() <= 64 && path.len() <= 256 {
        let want = normal.is_ok_and(|n| reference_glob(pattern.as_bytes(), n.as_bytes()));
        assert_eq!(got, want, "pattern {pattern:?}, path {path:?}");
    }
    got
}

/// `*` matches any run of bytes: the textbook table, `m[i][j]` = `p[..i]` matches `s[..j]`.
fn reference_glob(p: &[u8], s: &[u8]) -> bool {
    let mut m = vec![vec![false; s.len() + 1]; p.len() + 1];
    m[0][0] = true;
    for i in 1..=p.len() {
        for j in 0..=s.len() {
            m[i][j] = if p[i - 1] == b'*' {
                m[i - 1][j] || (j > 0 && m[i][j - 1])
            } else {
                j > 0 && m[i - 1][j - 1] && p[i - 1] == s[j - 1]
            };
        }
    }
    m[p.len()][s.len()]
}

/// A packet the sandbox sends its DNS (nameserver.rs): parsed, and when it is a query,
/// answered with addresses of both families; the answer must be a response to the same
/// id, echo the question, fit 512 bytes, and parse as a query again once its QR bit is
/// cleared and its counts are the question's alone.
pub fn dns_query(data: &[u8]) {
    use crate::nameserver::{answer, parse};
    let Ok(q) = parse(data) else { return };
    assert!(q.name.len() <= 253, "{}", q.name);
    let addrs = [
        "192.0.2.1".parse().expect("an address"),
        "2001:db8::1".parse().expect("an address"),
    ];
    let a = answer(&q, 0, &addrs);
    assert!(a.len() <= 512, "{}", a.len());
    assert_eq!(&a[..2], &data[..2]);
    assert_eq!(a[2] & 0x80, 0x80);
    assert_eq!(&a[12..12 + q.question.len()], q.question);
    let mut again = a[..12 + q.question.len()].to_vec();
    again[2] &= 0x7f;
    again[6..12].fill(0);
    let q2 = parse(&again).expect("the echoed question parses");
    assert_eq!((q2.name, q2.qtype), (q.name, q.qtype));
}

/// The first bytes of a transparent connection (sniff.rs), then the decision made from
/// them (transparent.rs): whatever the bytes, a target is on the destination's port, and
/// a claimed name differing from the name the address was answered for is refused.
pub fn first_bytes(data: &[u8]) {
    use crate::allow::{AllowList, Host};
    use crate::sniff::{sniff, Sniffed};
    use crate::transparent::decide;
    let seen = sniff(data);
    let dst: std::net::SocketAddr = "192.0.2.1:443".parse().expect("an address");
    let allow = AllowList::parse(&["a.example:443".to_string()], &[]).expect("a valid list");
    let answered = ["a.example".to_string()];
    if let Ok(t) = decide(dst, &seen, &answered, &allow) {
        assert_eq!(t.port, 443);
        match &t.host {
            Host::Name(n) => assert_eq!(n, "a.example"),
            Host::Ip(ip) => assert_eq!(*ip, dst.ip()),
        }
    }
    if let Sniffed::Tls(Some(n)) | Sniffed::Http(Some((n, _))) = &seen {
        assert!(n.len() <= data.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_points_run() {
        let before = DECIDED.load(Ordering::Relaxed);
        request_head(b"GET http://example.com/a HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-A\r\nX-A: 1\r\nProxy-Authorization: no\r\n\r\nCONNECT git.example.com:443 HTTP/1.1\r\n\r\n");
        assert_eq!(DECIDED.load(Ordering::Relaxed), before + 2);
        request_head(b"GET /company/../x HTTP/1.1\r\n\r\n");
        request_head(b"\x00\xff garbage");
        assert!(credential_path("/company/*", "/company/a/b"));
        assert!(!credential_path("/company/*", "/company/../b"));
        assert!(!credential_path("*", ""));
        assert!(credential_path("/a/*", "/%61/b%20c"));
        assert!(!credential_path("/a/*", "/a/b;c"));
        assert!(!credential_path("/a*b", "/ac"));
        dns_query(
            b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x01a\x07example\x00\x00\x01\x00\x01",
        );
        dns_query(b"\x12");
        first_bytes(b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n");
        first_bytes(b"GET / HTTP/1.1\r\nHost: b.example\r\n\r\n");
        first_bytes(b"\x16\x03\x01\x00\x01\x01");
    }
}
