//! Transparent egress: a connection the sandbox made to any address on a port the allow
//! list names arrives here (every address is local inside, and these listeners hold
//! those ports: see the shim's net.rs). The destination is the accepted socket's own
//! address.
//!
//! For each connection, in order:
//!
//! 1. read the first bytes (at most [`MAX_SNIFF`], within [`HEAD_TIMEOUT`] in all); a
//!    client silent for [`FIRST_WAIT`] speaks a server-first protocol and is judged by
//!    its destination alone;
//! 2. take the name it claims: a TLS ClientHello's SNI, an HTTP/1 `Host`; a claim that
//!    differs from every name the proxy's DNS answered the destination address for is
//!    refused; without a claim, the name the address was answered for, or else the
//!    address itself;
//! 3. check `name:port` against the allow list;
//! 4. check the destination: it must be one of the name's addresses by a fresh
//!    resolution, or one the proxy's DNS answered for that name (still remembered), and
//!    of a class the entry admits, never one of this machine's own addresses unless the
//!    entry names it literally (dns.rs). The proxy dials the address the sandbox
//!    asked for and nothing else: the client's choice among a name's addresses is kept,
//!    and no name can be used to reach an address that is not its own;
//! 5. dial it, send the bytes already read, and copy both ways untouched (tunnel.rs); or,
//!    for TLS to a host a credential names, intercept exactly as after a CONNECT
//!    (intercept.rs), the ClientHello replayed to the proxy's TLS server side.
//!
//! A refusal is a `proxy.denied` event and a closed connection (an HTTP client gets a
//! 403 first).

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use wardcell_common::protocol::ProxyEvent;

use crate::allow::{AllowList, Host, Target};
use crate::ctx::{Ctx, Refusal};
use crate::dns;
use crate::names::Names;
use crate::nameserver::canonical;
use crate::sniff::{sniff, Sniffed, MAX_SNIFF};

/// How long a client may stay silent before it is taken to wait for the server.
pub const FIRST_WAIT: Duration = Duration::from_millis(500);
/// How long, from the connection, a client has to send its whole ClientHello or request
/// head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Accept connections until the process ends.
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>, names: Arc<Names>) {
    let refusing = Arc::new(tokio::sync::Semaphore::new(8));
    loop {
        let stream = crate::front::accept(&listener).await;
        let Some(slot) = ctx.slot() else {
            let port = stream.local_addr().map_or(0, |a| a.port());
            ctx.refuse_busy("-", port);
            crate::front::close_busy(stream, Vec::new(), &refusing);
            continue;
        };
        let (ctx, names) = (ctx.clone(), names.clone());
        tokio::spawn(async move {
            let _slot = slot;
            handle(stream, ctx, names).await;
        });
    }
}

/// Step 2, pure: the target a connection to `dst` asks for, given what its first bytes
/// say and the names `dst` was answered for (most recent last).
pub fn decide(
    dst: SocketAddr,
    seen: &Sniffed,
    answered: &[String],
    allow: &AllowList,
) -> Result<Target, String> {
    let (what, claim) = match seen {
        Sniffed::Bad(why) => return Err((*why).to_string()),
        Sniffed::NeedMore => return Err("the connection ended before it said where it goes".into()),
        Sniffed::Tls(sni) => ("TLS server name", sni.as_ref().map(|n| (n.as_str(), None))),
        Sniffed::Http(host) => ("HTTP Host", host.as_ref().map(|(h, p)| (h.as_str(), *p))),
        Sniffed::Other => ("", None),
    };
    let Some((claimed, port)) = claim else {
        // No claim: the name the address came from, preferring one the list admits.
        let by_name = answered
            .iter()
            .rev()
            .filter_map(|n| Target::new(n, dst.port()).ok())
            .find(|t| allow.find(t).is_some());
        return Ok(by_name.unwrap_or(Target {
            host: Host::Ip(dst.ip()),
            port: dst.port(),
        }));
    };
    if port.is_some_and(|p| p != dst.port()) {
        return Err(format!(
            "the {what} names port {} but the connection is to port {}",
            port.unwrap_or(0),
            dst.port()
        ));
    }
    let host = Host::parse(claimed).map_err(|e| format!("the {what}: {e}"))?;
    match &host {
        Host::Ip(ip) if crate::names::canonical(*ip) != dst.ip() => {
            return Err(format!(
                "the {what} names {ip} but the connection is to {}",
                dst.ip()
            ))
        }
        // With as many names as an address keeps (a CDN's address, answered for many
        // names), the claimed one may be among those forgotten: then it is judged like
        // an address no answer is remembered for, by the destination check (the address
        // must be one of the claimed name's own).
        Host::Name(n)
            if !answered.is_empty()
                && answered.len() < crate::names::MAX_NAMES
                && !answered.contains(n) =>
        {
            return Err(format!(
                "the {what} names {n} but {} was answered for {}",
                dst.ip(),
                answered.join(", ")
            ))
        }
        _ => {}
    }
    Ok(Target {
        host,
        port: dst.port(),
    })
}

/// Steps 1 to 5 for one connection.
async fn handle(mut client: TcpStream, ctx: Arc<Ctx>, names: Arc<Names>) {
    let Ok(dst) = client.local_addr().map(canonical) else {
        return;
    };
    // 1.
    let mut buf = vec![0u8; MAX_SNIFF];
    let mut n = 0;
    // One deadline for the whole head, not one per read: a byte now and then would
    // otherwise hold the connection's slot for as long as the client likes.
    let start = tokio::time::Instant::now();
    let seen = loop {
        let wait = if n == 0 { FIRST_WAIT } else { HEAD_TIMEOUT };
        let read = client.read(&mut buf[n..]);
        match tokio::time::timeout_at(start + wait, read).await {
            Err(_) if n == 0 => break Sniffed::Other,
            Err(_) | Ok(Ok(0)) => break sniff(&buf[..n]),
            Ok(Ok(k)) => {
                n += k;
                match sniff(&buf[..n]) {
                    Sniffed::NeedMore if n < MAX_SNIFF => continue,
                    Sniffed::NeedMore => break Sniffed::Bad("a head longer than the proxy reads"),
                    s => break s,
                }
            }
            Ok(Err(_)) => return,
        }
    };
    let is_http = matches!(seen, Sniffed::Http(_));
    let now = Instant::now();
    let answered = names.of(dst.ip(), now);
    // 2 and 3.
    let refuse = |host: String, reason: String| {
        ctx.events.send(ProxyEvent::Denied {
            host,
            port: dst.port(),
            reason,
        });
    };
    let target = match decide(dst, &seen, &answered, &ctx.allow) {
        Ok(t) => t,
        Err(reason) => {
            refuse(dst.ip().to_string(), reason.clone());
            let t = Target {
                host: Host::Ip(dst.ip()),
                port: dst.port(),
            };
            return forbid(client, is_http, (&ctx, &t, Refusal::Other), &reason).await;
        }
    };
    let Some(rule) = ctx.allow.find(&target) else {
        let reason = "not in the allow list".to_string();
        refuse(target.host.to_string(), reason.clone());
        return forbid(
            client,
            is_http,
            (&ctx, &target, Refusal::NotListed),
            &reason,
        )
        .await;
    };
    // 4. The address must be the name's: one the proxy itself answered for this name
    //    needs no second lookup; any other must be among the name's addresses now. And
    //    it must be of a kind this entry reaches (never this machine's own unless named
    //    literally).
    let remembered = matches!(&target.host, Host::Name(n) if answered.contains(n));
    let admitted = remembered
        || dns::lookup(&target.host).await.is_ok_and(|fresh| {
            fresh
                .into_iter()
                .any(|ip| crate::names::canonical(ip) == dst.ip())
        });
    if !admitted {
        let reason = format!("{} is not an address of {}", dst.ip(), target.host);
        refuse(target.host.to_string(), reason.clone());
        return forbid(client, is_http, (&ctx, &target, Refusal::Other), &reason).await;
    }
    if let Err(barred) = dns::permitted(dst.ip(), rule) {
        let reason = barred.explain(&target.host, dst.ip(), rule);
        refuse(target.host.to_string(), reason.clone());
        return forbid(client, is_http, (&ctx, &target, Refusal::Address), &reason).await;
    }
    // 5.
    let upstream = match dns::dial(&[dst]).await {
        Ok((s, _)) => s,
        Err(u) => {
            refuse(target.host.to_string(), u.to_string());
            return forbid(
                client,
                is_http,
                (&ctx, &target, Refusal::Other),
                &u.to_string(),
            )
            .await;
        }
    };
    // A TLS connection to a host a credential names is intercepted, as through CONNECT:
    // the ClientHello already read is replayed to the TLS server side.
    let tls = matches!(seen, Sniffed::Tls(_));
    if tls && ctx.intercept.is_some() && ctx.creds.names(&target) {
        buf.truncate(n);
        let client = Replayed {
            early: buf,
            at: 0,
            inner: client,
        };
        return crate::intercept::serve(client, upstream, dst, target, ctx).await;
    }
    crate::tunnel::run_tcp(client, upstream, &buf[..n], target, &ctx.events).await;
}

/// A client stream whose first bytes were already read: they are read again first.
struct Replayed {
    early: Vec<u8>,
    at: usize,
    inner: TcpStream,
}

impl AsyncRead for Replayed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.at < self.early.len() {
            let n = out.remaining().min(self.early.len() - self.at);
            let at = self.at;
            out.put_slice(&self.early[at..at + n]);
            self.at += n;
            if self.at == self.early.len() {
                self.early = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, out)
    }
}

impl AsyncWrite for Replayed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, b)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Close a refused connection; an HTTP client is told why first, in the words of
/// [`Ctx::refusal`].
async fn forbid(
    mut client: TcpStream,
    http: bool,
    (ctx, target, kind): (&Ctx, &Target, Refusal),
    reason: &str,
) {
    if http {
        let (phrase, body) = ctx.refusal(target, kind, reason);
        let head = format!(
            "HTTP/1.1 403 {phrase}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        let _ = client.write_all(head.as_bytes()).await;
        let _ = client.write_all(body.as_bytes()).await;
    }
    let _ = client.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(e: &[&str]) -> AllowList {
        AllowList::parse(&e.iter().map(|s| s.to_string()).collect::<Vec<_>>(), &[]).unwrap()
    }

    fn dst(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_claim_decides_and_must_match_the_answered_name() {
        let l = allow(&["github.com:443", "evil.example:443"]);
        let tls = |n: &str| Sniffed::Tls(Some(n.to_string()));
        let d = dst("192.0.2.1:443");
        let t = decide(d, &tls("GitHub.com"), &[], &l).unwrap();
        assert_eq!(t, Target::new("github.com", 443).unwrap());
        let answered = ["github.com".to_string()];
        assert!(decide(d, &tls("github.com"), &answered, &l).is_ok());
        let e = decide(d, &tls("evil.example"), &answered, &l).unwrap_err();
        assert!(e.contains("was answered for github.com"), "{e}");
        let http = Sniffed::Http(Some(("evil.example".into(), None)));
        assert!(decide(d, &http, &answered, &l).is_err());
        let port = Sniffed::Http(Some(("github.com".into(), Some(80))));
        assert!(decide(d, &port, &answered, &l)
            .unwrap_err()
            .contains("port 80"));
        // An address that has as many names as are kept may have had the claimed one
        // too: the destination check in `handle` decides.
        let full: Vec<String> = (0..crate::names::MAX_NAMES)
            .map(|i| format!("n{i}.example.com"))
            .collect();
        assert_eq!(
            decide(d, &tls("github.com"), &full, &l).unwrap(),
            Target::new("github.com", 443).unwrap()
        );
        let ip = Sniffed::Http(Some(("192.0.2.9".into(), None)));
        assert!(decide(d, &ip, &[], &l).is_err());
        assert!(decide(d, &Sniffed::Bad("x"), &[], &l).is_err());
    }

    #[test]
    fn without_a_claim_the_answered_name_or_the_address() {
        let l = allow(&["github.com:22"]);
        let d = dst("192.0.2.1:22");
        let answered = ["other.example".to_string(), "github.com".to_string()];
        assert_eq!(
            decide(d, &Sniffed::Other, &answered, &l).unwrap(),
            Target::new("github.com", 22).unwrap()
        );
        assert_eq!(
            decide(d, &Sniffed::Tls(None), &[], &l).unwrap(),
            Target::new("192.0.2.1", 22).unwrap()
        );
    }
}
