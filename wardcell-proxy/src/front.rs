//! The listener the sandbox talks to: every connection is HTTP/1.1 to a proxy, and every
//! request on it is one of three things:
//!
//! - `CONNECT host:port`: checked, resolved, dialed; then either a byte tunnel
//!   (tunnel.rs) or, when a credential names the host, TLS interception (intercept.rs);
//! - `METHOD http://host[:port]/...` (absolute form): checked and forwarded (forward.rs);
//! - anything else: refused. Origin-form requests get 400, other schemes 403.

#![forbid(unsafe_code)]

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::allow::Target;
use crate::answer::{text, Body};
use crate::ctx::{Ctx, Refusal, BUSY, HEADER_TIMEOUT};
use crate::forward;
use crate::intercept;
use crate::tunnel;
use wardcell_common::protocol::ProxyEvent;

/// Connections refused for being over the limit that are still being answered; past
/// this many, a refused connection is closed without an answer.
const REFUSING: usize = 32;
/// How long a refused connection is read from (and its bytes dropped) after its answer,
/// so that closing it does not reset the answer away.
const LINGER: Duration = Duration::from_secs(1);

/// The next connection on `listener`, without Nagle. Out of descriptors, or a
/// connection reset before accept: wait a moment and try again.
pub async fn accept(listener: &TcpListener) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((s, _)) => {
                let _ = s.set_nodelay(true);
                return s;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Accept connections until the process ends.
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>) {
    let refusing = Arc::new(Semaphore::new(REFUSING));
    loop {
        let stream = accept(&listener).await;
        let Some(slot) = ctx.slot() else {
            ctx.refuse_busy("-", stream.local_addr().map_or(0, |a| a.port()));
            let answer = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\nwardcell: {BUSY}\n",
                BUSY.len() + 11
            );
            close_busy(stream, answer.into_bytes(), &refusing);
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let svc = {
                let ctx = ctx.clone();
                service_fn(move |req| {
                    let ctx = ctx.clone();
                    async move { Ok::<_, Infallible>(dispatch(req, ctx).await) }
                })
            };
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades()
                .await;
        });
    }
}

/// Answer a connection refused for being over the limit with `answer` (nothing for a
/// raw one), end it, and read what the client sent for [`LINGER`] so that the close is
/// clean (a close with unread bytes would reset the connection, answer and all). Past
/// [`REFUSING`] such connections at once, closed at once.
pub fn close_busy(mut stream: TcpStream, answer: Vec<u8>, refusing: &Arc<Semaphore>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(permit) = refusing.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        let _ = stream.write_all(&answer).await;
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 4096];
        let until = tokio::time::Instant::now() + LINGER;
        while let Ok(Ok(n)) = tokio::time::timeout_at(until, stream.read(&mut sink)).await {
            if n == 0 {
                break;
            }
        }
    });
}

/// What a request head asks for, decided from its method and target alone, before any
/// I/O. Pure: unit tests and the fuzzer (fuzz/) call it directly.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// `CONNECT host:port`.
    Connect(Target),
    /// An absolute `http://` URL.
    Plain(Target),
    /// Another scheme, to a host that parses: refused with 403 and a `proxy.denied` event.
    OtherScheme(Target),
    /// Refused at once, with this status and message, without an event.
    Bad(StatusCode, String),
    /// `GET http://wardcell.invalid/denials`: this proxy's recent refusals, answered by
    /// the proxy itself (denials.rs).
    Denials,
    /// `GET http://wardcell.invalid/check?HOST:PORT`: whether this proxy would admit a
    /// connection there (`zone why` asks, so that it never calls allowed what the proxy
    /// refuses), answered without dialing and without an event.
    Check(Target),
}

pub fn route(method: &Method, uri: &Uri) -> Route {
    let bad = |status, msg: &str| Route::Bad(status, msg.to_string());
    let target = |host: &str, port: u16| {
        Target::new(host, port)
            .map_err(|e| Route::Bad(StatusCode::BAD_REQUEST, format!("wardcell: {e}\n")))
    };
    if method == Method::CONNECT {
        let authority = uri.authority().filter(|_| uri.scheme().is_none());
        let Some((host, port)) = authority.and_then(|a| Some((a.host(), a.port_u16()?))) else {
            return bad(
                StatusCode::BAD_REQUEST,
                "wardcell: CONNECT needs host:port\n",
            );
        };
        return target(host, port).map_or_else(|r| r, Route::Connect);
    }
    let ours = uri.authority().is_some_and(|a| {
        a.host().eq_ignore_ascii_case(crate::denials::HOST) && a.port_u16().unwrap_or(80) == 80
    });
    if ours && uri.scheme_str() == Some("http") && method == Method::GET {
        match (uri.path(), uri.query()) {
            ("/denials", None) => return Route::Denials,
            ("/check", Some(q)) => {
                let parsed = q
                    .rsplit_once(':')
                    .and_then(|(h, p)| Some((h, p.parse().ok()?)));
                let Some((host, port)) = parsed else {
                    return bad(StatusCode::BAD_REQUEST, "wardcell: check HOST:PORT\n");
                };
                return target(host, port).map_or_else(|r| r, Route::Check);
            }
            _ => {}
        }
    }
    match uri.scheme_str() {
        Some("http") => match uri.authority() {
            Some(a) => {
                target(a.host(), a.port_u16().unwrap_or(80)).map_or_else(|r| r, Route::Plain)
            }
            None => bad(StatusCode::BAD_REQUEST, "wardcell: the URL has no host\n"),
        },
        None => bad(
            StatusCode::BAD_REQUEST,
            "wardcell: this is a proxy: send absolute http:// URLs, or CONNECT for https\n",
        ),
        Some(_) => match uri
            .authority()
            .and_then(|a| Target::new(a.host(), a.port_u16().unwrap_or(443)).ok())
        {
            Some(t) => Route::OtherScheme(t),
            None => bad(
                StatusCode::FORBIDDEN,
                "wardcell: only http:// URLs and CONNECT are proxied\n",
            ),
        },
    }
}

async fn dispatch(req: Request<Incoming>, ctx: Arc<Ctx>) -> Response<Body> {
    match route(req.method(), req.uri()) {
        Route::Connect(target) => connect(req, target, ctx).await,
        Route::Plain(target) => forward::plain(req, target, ctx).await,
        Route::OtherScheme(t) => {
            let why = "only http:// URLs and CONNECT are proxied".into();
            ctx.deny(&t, Refusal::Other, why)
        }
        Route::Bad(status, message) => text(status, message),
        Route::Denials => text(StatusCode::OK, ctx.events.denials.json() + "\n"),
        Route::Check(t) => {
            let verdict = match ctx.check(&t).await {
                Ok(()) => serde_json::json!({"allowed": true}),
                Err(reason) => {
                    // Audited as a refusal is: the answer may have needed a lookup.
                    ctx.events.send(ProxyEvent::Denied {
                        host: t.host.to_string(),
                        port: t.port,
                        reason: format!("asked by `zone why`: {reason}"),
                    });
                    serde_json::json!({"allowed": false, "reason": reason})
                }
            };
            text(StatusCode::OK, verdict.to_string() + "\n")
        }
    }
}

async fn connect(mut req: Request<Incoming>, target: Target, ctx: Arc<Ctx>) -> Response<Body> {
    // The tunnel holds a slot of its own, besides the client connection's.
    let Some(slot) = ctx.slot() else {
        ctx.refuse_busy(&target.host.to_string(), target.port);
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("wardcell: {BUSY}\n"),
        );
    };
    let (upstream, addr) = match ctx.admit(&target).await {
        Ok(x) => x,
        Err(refusal) => return refusal,
    };
    let intercepting = ctx.intercept.is_some() && ctx.creds.names(&target);
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let _slot = slot;
        let Ok(client) = upgrade.await else {
            return; // the client went away before the tunnel opened
        };
        if intercepting {
            intercept::serve(TokioIo::new(client), upstream, addr, target, ctx).await;
        } else {
            tunnel::run(client, upstream, target, &ctx.events).await;
        }
    });
    Response::new(Body::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(method: &str, uri: &str) -> Route {
        route(&method.parse().unwrap(), &uri.parse().unwrap())
    }

    #[test]
    fn routes_by_method_and_target() {
        let t = |h: &str, p| Target::new(h, p).unwrap();
        assert_eq!(
            r("CONNECT", "git.example.com:443"),
            Route::Connect(t("git.example.com", 443))
        );
        assert_eq!(
            r("GET", "http://Example.com./a"),
            Route::Plain(t("example.com", 80))
        );
        assert_eq!(
            r("GET", "http://[::1]:8080/"),
            Route::Plain(t("[::1]", 8080))
        );
        assert_eq!(
            r("GET", "ftp://example.com/"),
            Route::OtherScheme(t("example.com", 443))
        );
        // The proxy's own page: exactly this method, scheme, host, port and path.
        assert_eq!(r("GET", "http://wardcell.invalid/denials"), Route::Denials);
        assert_eq!(
            r("GET", "http://wardcell.invalid/check?pypi.org:443"),
            Route::Check(t("pypi.org", 443))
        );
        assert_eq!(
            r("GET", "http://wardcell.invalid/check?[::1]:22"),
            Route::Check(t("[::1]", 22))
        );
        for bad in [
            "/check?pypi.org",
            "/check?:443",
            "/check?a%20b:1",
            "/denials?x",
        ] {
            let got = r("GET", &format!("http://wardcell.invalid{bad}"));
            assert!(
                matches!(got, Route::Bad(..) | Route::Plain(_)),
                "{bad}: {got:?}"
            );
        }
        assert_eq!(
            r("GET", "http://WARDCELL.invalid:80/denials"),
            Route::Denials
        );
        for other in [
            ("POST", "http://wardcell.invalid/denials"),
            ("GET", "http://wardcell.invalid/denials/x"),
            ("GET", "http://wardcell.invalid:8080/denials"),
            ("GET", "http://sub.wardcell.invalid/denials"),
        ] {
            assert!(matches!(r(other.0, other.1), Route::Plain(_)), "{other:?}");
        }
        assert!(matches!(
            r("CONNECT", "wardcell.invalid:80"),
            Route::Connect(_)
        ));
        for (m, u, status) in [
            ("CONNECT", "git.example.com", 400),
            ("CONNECT", "http://git.example.com:443", 400),
            ("CONNECT", "bad_host!:443", 400),
            ("CONNECT", "example.com:0", 400),
            ("GET", "/relative", 400),
            ("GET", "http://ex ample.com/", 400),
            ("GET", "ftp://bad_host!/", 403),
        ] {
            let Ok(uri) = u.parse::<Uri>() else { continue };
            match route(&m.parse().unwrap(), &uri) {
                Route::Bad(s, msg) => {
                    assert_eq!(s.as_u16(), status, "{m} {u}");
                    assert!(
                        msg.starts_with("wardcell: ") && msg.ends_with('\n'),
                        "{msg}"
                    );
                }
                other => panic!("{m} {u}: {other:?}"),
            }
        }
    }
}
