//! The listener the sandbox talks to: every connection is HTTP/1.1 to a proxy, and every
//! request on it is one of three things:
//!
//! - `CONNECT host:port`: checked, resolved, dialed; then either a byte tunnel
//!   (tunnel.rs) or, when a credential names the host, TLS interception (intercept.rs);
//! - `METHOD http://host[:port]/...` (absolute form): checked and forwarded (forward.rs);
//! - anything else: refused. Origin-form requests get 400, other schemes 403.

#![forbid(unsafe_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use wardcell_common::protocol::ProxyEvent;

use crate::allow::{AllowList, Target};
use crate::control::Events;
use crate::credentials::Credentials;
use crate::dns::{self, Unreachable};
use crate::forward::{self, text, Body};
use crate::intercept::{self, Interceptor};
use crate::tunnel;

/// Connections served at once (client connections and tunnels each hold one slot).
const MAX_CONNECTIONS: usize = 256;
/// A client has this long to send a request head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Everything a connection needs, shared read-only.
pub struct Ctx {
    pub zone: String,
    pub allow: AllowList,
    pub creds: Credentials,
    /// Present exactly when some credential is configured.
    pub intercept: Option<Interceptor>,
    pub events: Events,
    slots: Arc<Semaphore>,
}

impl Ctx {
    pub fn new(
        zone: String,
        allow: AllowList,
        creds: Credentials,
        intercept: Option<Interceptor>,
        events: Events,
    ) -> Ctx {
        Ctx {
            zone,
            allow,
            creds,
            intercept,
            events,
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        }
    }

    /// The allow-list, the address policy and the dial, in that order. The stream
    /// returned is connected to the address that was checked.
    pub async fn admit(&self, t: &Target) -> Result<(TcpStream, SocketAddr), Response<Body>> {
        let Some(rule) = self.allow.find(t) else {
            return Err(self.deny(t, "not in the allow list".into()));
        };
        let addrs = match dns::resolve(t, rule).await {
            Ok(a) => a,
            Err(u @ Unreachable::Refused(_)) => return Err(self.deny(t, u.to_string())),
            Err(u) => return Err(self.unreachable(t, u)),
        };
        dns::dial(&addrs).await.map_err(|u| self.unreachable(t, u))
    }

    /// 403 and a `proxy.denied` event.
    pub fn deny(&self, t: &Target, reason: String) -> Response<Body> {
        let body = format!(
            "wardcell: {}:{} is not allowed in zone {}: {reason}\n",
            t.host, t.port, self.zone
        );
        self.events.send(ProxyEvent::Denied {
            host: t.host.to_string(),
            port: t.port,
            reason,
        });
        text(StatusCode::FORBIDDEN, body)
    }

    /// 502 for an allowed target that cannot be reached; audited as denied, with why.
    fn unreachable(&self, t: &Target, u: Unreachable) -> Response<Body> {
        let reason = u.to_string();
        let resp = forward::bad_gateway(t, &reason);
        self.events.send(ProxyEvent::Denied {
            host: t.host.to_string(),
            port: t.port,
            reason,
        });
        resp
    }
}

/// Accept connections until the process ends.
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>) {
    loop {
        let slot = ctx
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            // Out of descriptors or a connection reset before accept: wait a moment.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
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

async fn dispatch(req: Request<Incoming>, ctx: Arc<Ctx>) -> Response<Body> {
    if req.method() == Method::CONNECT {
        return connect(req, ctx).await;
    }
    match req.uri().scheme_str() {
        Some("http") => forward::plain(req, ctx).await,
        None => text(
            StatusCode::BAD_REQUEST,
            "wardcell: this is a proxy: send absolute http:// URLs, or CONNECT for https\n".into(),
        ),
        Some(_) => match req
            .uri()
            .authority()
            .and_then(|a| Target::new(a.host(), a.port_u16().unwrap_or(443)).ok())
        {
            Some(t) => ctx.deny(&t, "only http:// URLs and CONNECT are proxied".into()),
            None => text(
                StatusCode::FORBIDDEN,
                "wardcell: only http:// URLs and CONNECT are proxied\n".into(),
            ),
        },
    }
}

async fn connect(mut req: Request<Incoming>, ctx: Arc<Ctx>) -> Response<Body> {
    let authority = match req.uri().authority() {
        Some(a) if req.uri().scheme().is_none() => a.clone(),
        _ => {
            return text(
                StatusCode::BAD_REQUEST,
                "wardcell: CONNECT needs host:port\n".into(),
            )
        }
    };
    let Some(port) = authority.port_u16() else {
        return text(
            StatusCode::BAD_REQUEST,
            "wardcell: CONNECT needs host:port\n".into(),
        );
    };
    let target = match Target::new(authority.host(), port) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("wardcell: {e}\n")),
    };
    let (upstream, addr) = match ctx.admit(&target).await {
        Ok(x) => x,
        Err(refusal) => return refusal,
    };
    let intercepting = ctx.intercept.is_some() && ctx.creds.names_host(&target.host);
    let upgrade = hyper::upgrade::on(&mut req);
    let slot = ctx
        .slots
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed");
    tokio::spawn(async move {
        let _slot = slot;
        let Ok(client) = upgrade.await else {
            return; // the client went away before the tunnel opened
        };
        if intercepting {
            intercept::serve(client, upstream, addr, target, ctx).await;
        } else {
            tunnel::run(client, upstream, target, &ctx.events).await;
        }
    });
    Response::new(Body::default())
}
