//! TLS interception, only for CONNECTs to a host some credential names.
//!
//! The client gets a leaf for the host from the per-run CA and speaks HTTP/1.1 to hyper;
//! each request goes upstream over rustls to the address that was checked, with the real
//! host as SNI, verified against the system roots of the environment wardcell was started
//! in (SSL_CERT_FILE / SSL_CERT_DIR honoured). A request whose path matches a credential
//! gets it; every request is audited on its own.
//!
//! A WebSocket opening handshake (`GET` with `Connection: Upgrade`, `Upgrade: websocket`)
//! goes upstream on a connection of its own with those two headers kept and the
//! credential attached as to any request; when the server answers 101, both upgraded
//! connections are joined and frames flow both ways until either side closes, counted
//! and audited as one exchange. No other protocol is upgraded to.

#![forbid(unsafe_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use wardcell_common::protocol::ProxyEvent;

use crate::allow::{Host, Target};
use crate::answer::{bad_gateway, gateway_timeout, text, Body, RESPONSE_TIMEOUT};
use crate::ctx::{Ctx, BUSY, HEADER_TIMEOUT};
use crate::dns;
use crate::forward::{self, Counted, Direction, Tally};

/// One intercepted tunnel's way upstream: the checked address, and one connection
/// reused while it stays open (requests on a client connection come one at a time).
struct Upstream {
    target: Target,
    addr: SocketAddr,
    /// The connection dialed when the CONNECT was admitted, used for the first request.
    first: std::sync::Mutex<Option<TcpStream>>,
    sender: Mutex<Option<SendRequest<Counted<Incoming>>>>,
}

/// The upstream TLS stream, with an end that comes without TLS's close_notify read as
/// the end. Many servers close the TCP connection so, and a close-delimited body (no
/// length, not chunked: legal HTTP/1.1, common for event streams) ends there; taken as
/// an error, the client's copy would end cut off. A body with a length or chunks still
/// fails when cut short: hyper checks those itself.
struct CleanEof<S>(S);

impl<S: AsyncRead + Unpin> AsyncRead for CleanEof<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match Pin::new(&mut self.0).poll_read(cx, buf) {
            Poll::Ready(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for CleanEof<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, b)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

pub async fn serve<C>(client: C, first: TcpStream, addr: SocketAddr, target: Target, ctx: Arc<Ctx>)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Some(it) = ctx.intercept.as_ref() else {
        return;
    };
    let cfg = match it.ca.server_config(&target.host) {
        Ok(c) => c,
        Err(reason) => {
            ctx.events.send(ProxyEvent::Denied {
                host: target.host.to_string(),
                port: target.port,
                reason,
            });
            return;
        }
    };
    // A client that does not trust the CA gives up here; nothing was sent anywhere.
    let Ok(tls) = TlsAcceptor::from(cfg).accept(client).await else {
        return;
    };
    let up = Arc::new(Upstream {
        target,
        addr,
        first: std::sync::Mutex::new(Some(first)),
        sender: Mutex::new(None),
    });
    let svc = service_fn(move |req| {
        let (up, ctx) = (up.clone(), ctx.clone());
        async move { Ok::<_, Infallible>(request(req, &up, &ctx).await) }
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(tls), svc)
        .with_upgrades()
        .await;
}

async fn request(mut req: Request<Incoming>, up: &Upstream, ctx: &Ctx) -> Response<Body> {
    // Inside the tunnel a request names no other host than the tunnel's.
    if let Some(a) = req.uri().authority() {
        let same = Target::new(a.host(), a.port_u16().unwrap_or(443)).is_ok_and(|t| t == up.target);
        if !same {
            return text(
                StatusCode::MISDIRECTED_REQUEST,
                format!("wardcell: this tunnel goes to {} only\n", up.target.host),
            );
        }
    }
    let cred = match ctx
        .creds
        .for_request(&up.target, req.method(), req.uri().path())
    {
        Ok(c) => c,
        Err(why) => {
            // Nothing is attached or sent: the upstream might read the path otherwise
            // than the credential's patterns did.
            let reason = format!("ambiguous path for a credential: {why}");
            let resp = text(
                StatusCode::BAD_REQUEST,
                format!(
                    "wardcell: {}:{}: the request path is ambiguous ({why}); no credential is attached to it\n",
                    up.target.host, up.target.port
                ),
            );
            ctx.events.send(ProxyEvent::Denied {
                host: up.target.host.to_string(),
                port: up.target.port,
                reason,
            });
            return resp;
        }
    };
    let websocket = forward::is_websocket(&req).then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    forward::prepare_request(&mut parts, &up.target, 443);
    if websocket.is_some() {
        forward::keep_websocket(&mut parts.headers);
    }
    if let Some(c) = cred {
        let (name, value) = c.header();
        parts.headers.insert(name, value);
    }
    let Some(it) = ctx.intercept.as_ref() else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "wardcell: not intercepting\n".into(),
        );
    };

    let tally = Tally::new(
        ctx.events.clone(),
        up.target.clone(),
        cred.map(|c| c.name.clone()),
    );
    let req = Request::from_parts(parts, Counted::new(body, tally.clone(), Direction::Up));
    if let Some(client) = websocket {
        return upgrade(req, client, up, it.upstream.clone(), ctx, tally).await;
    }
    let mut sender = up.sender.lock().await;
    let reusable = match sender.as_mut() {
        Some(s) => s.ready().await.is_ok(),
        None => false,
    };
    if !reusable {
        *sender = None;
        match connect(up, it.upstream.clone()).await {
            Ok(s) => *sender = Some(s),
            Err(why) => {
                // Nothing was sent: audited as refused, with the reason (e.g. an untrusted
                // certificate), never as a connection that carried the credential.
                let resp = bad_gateway(&up.target, &why);
                ctx.events.send(ProxyEvent::Denied {
                    host: up.target.host.to_string(),
                    port: up.target.port,
                    reason: why,
                });
                return resp;
            }
        }
    }
    let sent = sender.as_mut().expect("set just above").send_request(req);
    drop(sender);
    match tokio::time::timeout(RESPONSE_TIMEOUT, sent).await {
        Ok(Ok(resp)) => forward::relay_response(resp, tally),
        Ok(Err(e)) => bad_gateway(&up.target, &e),
        Err(_) => gateway_timeout(&up.target),
    }
}

/// A WebSocket handshake, sent upstream on a connection of its own (the upgrade takes it
/// over). On 101 the two upgraded connections are joined until either closes; any
/// other answer is relayed as it came.
async fn upgrade(
    req: Request<Counted<Incoming>>,
    client: hyper::upgrade::OnUpgrade,
    up: &Upstream,
    cfg: Arc<ClientConfig>,
    ctx: &Ctx,
    tally: Arc<Tally>,
) -> Response<Body> {
    // The joined connection outlives the tunnel that asked for it (whose slot ends when
    // its HTTP connection is taken over): it holds a slot of its own, so upgrades count
    // towards the proxy's bound as tunnels do.
    let Some(slot) = ctx.slot() else {
        ctx.refuse_busy(&up.target.host.to_string(), up.target.port);
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("wardcell: {BUSY}\n"),
        );
    };
    let mut sender = match connect(up, cfg).await {
        Ok(s) => s,
        Err(why) => {
            let resp = bad_gateway(&up.target, &why);
            ctx.events.send(ProxyEvent::Denied {
                host: up.target.host.to_string(),
                port: up.target.port,
                reason: why,
            });
            return resp;
        }
    };
    let mut resp = match tokio::time::timeout(RESPONSE_TIMEOUT, sender.send_request(req)).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => return bad_gateway(&up.target, &e),
        Err(_) => return gateway_timeout(&up.target),
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return forward::relay_response(resp, tally);
    }
    let server = hyper::upgrade::on(&mut resp);
    let mut answer = forward::relay_response(resp, tally.clone());
    forward::keep_websocket(answer.headers_mut());
    tokio::spawn(async move {
        let _slot = slot;
        let (Ok(client), Ok(server)) = (client.await, server.await) else {
            return;
        };
        // Counted as the bytes pass: a side that ends without TLS's close_notify ends
        // the copy with an error, and what moved before still counts.
        let mut client = CountedIo {
            inner: TokioIo::new(client),
            tally,
        };
        let mut server = TokioIo::new(server);
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
    });
    answer
}

/// The client's side of a joined WebSocket connection: what is read from it went up,
/// what is written to it came down.
struct CountedIo<S> {
    inner: S,
    tally: Arc<Tally>,
}

impl<S: AsyncRead + Unpin> AsyncRead for CountedIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.tally.add(Direction::Up, n as u64);
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for CountedIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, b);
        if let Poll::Ready(Ok(n)) = &r {
            self.tally.add(Direction::Down, *n as u64);
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A new TLS connection to the checked address, verified for the real host name.
async fn connect(
    up: &Upstream,
    cfg: Arc<ClientConfig>,
) -> Result<SendRequest<Counted<Incoming>>, String> {
    let first = up.first.lock().unwrap_or_else(|p| p.into_inner()).take();
    let tcp = match first {
        Some(s) => s,
        None => dns::dial(&[up.addr]).await.map_err(|u| u.to_string())?.0,
    };
    let name = match &up.target.host {
        Host::Name(n) => ServerName::try_from(n.clone()).map_err(|e| e.to_string())?,
        Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
    };
    let tls = TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS to the upstream server: {e}"))?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(CleanEof(tls)))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    Ok(sender)
}
