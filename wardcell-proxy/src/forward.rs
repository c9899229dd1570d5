//! Forwarding one HTTP request: header hygiene, byte counting, and the plain-HTTP path.
//!
//! Used by plain `http://` requests and, inside an intercepted TLS connection, by every
//! request there. A request leaves with its hop-by-hop and `Proxy-*` headers removed,
//! its target in origin form and its `Host` set to the host that was checked; the
//! response comes back with its own hop-by-hop headers removed. Bodies stream both ways
//! frame by frame, never buffered whole.

#![forbid(unsafe_code)]

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::request;
use hyper::{Request, Response, Uri};
use hyper_util::rt::TokioIo;

use wardcell_common::protocol::ProxyEvent;

use crate::allow::Target;
use crate::answer::{bad_gateway, gateway_timeout, Body, RESPONSE_TIMEOUT};
use crate::control::Events;
use crate::ctx::Ctx;

/// Hop-by-hop headers (RFC 9110 7.6.1) plus the obsolete ones clients still send.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
];

/// Remove hop-by-hop headers, the ones `Connection` names, and every `Proxy-*` header.
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in HOP_BY_HOP {
        h.remove(*n);
    }
    let proxy: Vec<HeaderName> = h
        .keys()
        .filter(|k| k.as_str().starts_with("proxy-"))
        .cloned()
        .collect();
    for n in proxy {
        h.remove(n);
    }
}

/// A WebSocket opening handshake (RFC 6455 4.1): `GET`, HTTP/1.1, `Upgrade: websocket`
/// and `Connection` naming `upgrade`. No other upgrade passes the proxy.
pub fn is_websocket<B>(req: &Request<B>) -> bool {
    let tokens = |name: header::HeaderName| {
        let h = req.headers().get_all(name);
        let v: Vec<String> = h
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase)
            .collect();
        v.join(",")
            .split(',')
            .map(|t| t.trim().to_string())
            .collect::<Vec<_>>()
    };
    req.method() == hyper::Method::GET
        && req.version() == hyper::Version::HTTP_11
        && tokens(header::UPGRADE) == ["websocket"]
        && tokens(header::CONNECTION).iter().any(|t| t == "upgrade")
}

/// Put back the two hop-by-hop headers a WebSocket handshake and its 101 answer carry
/// on each hop, once the rest were removed.
pub fn keep_websocket(h: &mut HeaderMap) {
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
}

/// Make a request fit to leave: clean headers, origin-form target, `Host` = the checked
/// host. `Expect` goes too: the proxy already answered it towards the client.
pub fn prepare_request(parts: &mut request::Parts, target: &Target, default_port: u16) {
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::EXPECT);
    let host = target.host.authority(target.port, default_port);
    if let Ok(v) = HeaderValue::from_str(&host) {
        parts.headers.insert(header::HOST, v);
    }
    let origin = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .filter(|pq| pq.starts_with('/'))
        .unwrap_or("/");
    parts.uri = origin
        .parse::<Uri>()
        .unwrap_or_else(|_| Uri::from_static("/"));
    parts.version = hyper::Version::HTTP_11;
}

/// The bytes of one allowed request (or tunnel) so far; reports `proxy.connect` when the
/// last body holding it is dropped, whether the exchange finished or broke.
pub struct Tally {
    events: Events,
    target: Target,
    credential: Option<String>,
    up: AtomicU64,
    down: AtomicU64,
}

impl Tally {
    pub fn new(events: Events, target: Target, credential: Option<String>) -> Arc<Tally> {
        Arc::new(Tally {
            events,
            target,
            credential,
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
        })
    }
}

impl Tally {
    /// Bytes moved outside a body (a joined WebSocket connection).
    pub fn add(&self, dir: Direction, n: u64) {
        match dir {
            Direction::Up => self.up.fetch_add(n, Ordering::Relaxed),
            Direction::Down => self.down.fetch_add(n, Ordering::Relaxed),
        };
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        self.events.send(ProxyEvent::Connect {
            host: self.target.host.to_string(),
            port: self.target.port,
            credential: self.credential.take(),
            bytes_up: *self.up.get_mut(),
            bytes_down: *self.down.get_mut(),
            connections: 1,
        });
    }
}

#[derive(Clone, Copy)]
pub enum Direction {
    Up,
    Down,
}

/// A body that counts its data bytes into a [`Tally`].
pub struct Counted<B> {
    inner: B,
    tally: Arc<Tally>,
    dir: Direction,
}

impl<B> Counted<B> {
    pub fn new(inner: B, tally: Arc<Tally>, dir: Direction) -> Self {
        Counted { inner, tally, dir }
    }
}

impl<B: HttpBody<Data = Bytes> + Unpin> HttpBody for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                let n = data.len() as u64;
                match self.dir {
                    Direction::Up => self.tally.up.fetch_add(n, Ordering::Relaxed),
                    Direction::Down => self.tally.down.fetch_add(n, Ordering::Relaxed),
                };
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The response from upstream, cleaned and counted, for the client.
pub fn relay_response(resp: Response<Incoming>, tally: Arc<Tally>) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Response::from_parts(
        parts,
        Counted::new(body, tally, Direction::Down).boxed_unsync(),
    )
}

/// A plain `http://` request in absolute form. Never gets a credential: those travel
/// only inside TLS.
pub async fn plain(req: Request<Incoming>, target: Target, ctx: Arc<Ctx>) -> Response<Body> {
    let (stream, _addr) = match ctx.admit(&target).await {
        Ok(s) => s,
        Err(refusal) => return refusal,
    };
    let (mut parts, body) = req.into_parts();
    prepare_request(&mut parts, &target, 80);
    let tally = Tally::new(ctx.events.clone(), target.clone(), None);
    let req = Request::from_parts(parts, Counted::new(body, tally.clone(), Direction::Up));

    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    {
        Ok(x) => x,
        Err(e) => return bad_gateway(&target, &e),
    };
    tokio::spawn(async move {
        let _ = conn.await;
    });
    match tokio::time::timeout(RESPONSE_TIMEOUT, sender.send_request(req)).await {
        Ok(Ok(resp)) => relay_response(resp, tally),
        Ok(Err(e)) => bad_gateway(&target, &e),
        Err(_) => gateway_timeout(&target),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_websocket_handshake_is_an_upgrade() {
        let req = |method: &str, version, headers: &[(&str, &str)]| {
            let mut b = Request::builder()
                .method(method)
                .uri("/v1/x")
                .version(version);
            for (k, v) in headers {
                b = b.header(*k, *v);
            }
            b.body(()).unwrap()
        };
        let v11 = hyper::Version::HTTP_11;
        let ws = [
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "WebSocket"),
        ];
        assert!(is_websocket(&req("GET", v11, &ws)));
        assert!(!is_websocket(&req("POST", v11, &ws)));
        assert!(!is_websocket(&req("GET", hyper::Version::HTTP_10, &ws)));
        let h2c = [("connection", "Upgrade"), ("upgrade", "h2c")];
        assert!(!is_websocket(&req("GET", v11, &h2c)));
        let two = [("connection", "Upgrade"), ("upgrade", "websocket, h2c")];
        assert!(!is_websocket(&req("GET", v11, &two)));
        let unnamed = [("upgrade", "websocket")];
        assert!(!is_websocket(&req("GET", v11, &unnamed)));
        let mut h = HeaderMap::new();
        keep_websocket(&mut h);
        assert_eq!(h["connection"], "Upgrade");
        assert_eq!(h["upgrade"], "websocket");
    }

    #[test]
    fn strips_hop_by_hop_named_and_proxy_headers() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, X-Secret-Hop"),
            ("keep-alive", "timeout=5"),
            ("x-secret-hop", "1"),
            ("te", "trailers"),
            ("trailer", "x"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic Zm9vOmJhcg=="),
            ("proxy-connection", "keep-alive"),
            ("proxy-anything", "x"),
            ("authorization", "Bearer kept"),
            ("x-end-to-end", "kept"),
        ] {
            h.append(k, HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<_> = h.keys().map(|k| k.as_str().to_string()).collect();
        left.sort();
        assert_eq!(left, ["authorization", "x-end-to-end"]);
    }

    #[test]
    fn prepared_request_is_origin_form_with_checked_host() {
        let req = Request::builder()
            .uri("http://good.example:8080/a/b?c=d")
            .header("host", "evil.example")
            .header("expect", "100-continue")
            .body(())
            .unwrap();
        let (mut parts, ()) = req.into_parts();
        let t = Target::new("good.example", 8080).unwrap();
        prepare_request(&mut parts, &t, 80);
        assert_eq!(parts.uri, "/a/b?c=d");
        assert_eq!(parts.headers["host"], "good.example:8080");
        assert!(!parts.headers.contains_key("expect"));
    }
}
