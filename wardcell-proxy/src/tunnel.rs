//! A CONNECT to an allowed host that no credential names: bytes copied both ways,
//! untouched and unread, counted for the `proxy.connect` event.
//!
//! Between two TCP sockets the bytes are copied through one buffer per direction, read
//! and written on the sockets themselves. Not spliced: splice(2) through a pipe moves page
//! references, so a sender on this host cannot reuse its pages until the far reader has
//! taken them, and copying into fresh pages made its sends four times as costly. A 1 GiB
//! HTTPS download from a local server measured 1.42x curl direct's time spliced, 1.14 to
//! 1.21x copied through 256 KiB (1.23x through 64 KiB; no better through 1 MiB):
//! `egress-bench`, docs/BENCHMARKS.md.

#![forbid(unsafe_code)]

use std::io;

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use wardcell_common::protocol::ProxyEvent;

use crate::allow::Target;
use crate::control::Events;

/// Bytes per read, per direction, chosen by measurement (above). The buffers live only
/// while a tunnel does, and only the pages a read has filled are ever touched: a tunnel
/// that carries little holds little. At most 512 KiB a tunnel, so 128 MiB for the
/// proxy's `MAX_CONNECTIONS` (256) all carrying bulk at once: less than the kernel's
/// socket buffers for the same connections. Measured: 200 tunnels whose client never
/// reads while their server pushes took the proxy from 5 to 60 MiB resident (280 KiB a
/// tunnel, the buffer a stalled read filled).
const CHUNK: usize = 256 * 1024;

pub async fn run(client: Upgraded, mut upstream: TcpStream, target: Target, events: &Events) {
    let (mut up, mut down) = (0u64, 0u64);
    // The client's side is a plain TCP stream under hyper's wrapper: take it back so the
    // copy runs on the sockets themselves.
    match client.downcast::<TokioIo<TcpStream>>() {
        Ok(parts) => {
            let client = parts.io.into_inner();
            (up, down) = sockets(client, upstream, &parts.read_buf).await;
        }
        Err(client) => {
            let (cr, cw) = tokio::io::split(TokioIo::new(client));
            let (ur, uw) = upstream.split();
            let _ = tokio::try_join!(pump(cr, uw, &mut up), pump(ur, cw, &mut down));
        }
    }
    tunnelled(events, &target, up, down);
}

/// A transparent connection (transparent.rs): `early`, the bytes already read from the
/// client, then both ways until each side is done; the `proxy.connect` event follows.
pub async fn run_tcp(
    client: TcpStream,
    upstream: TcpStream,
    early: &[u8],
    target: Target,
    events: &Events,
) {
    let (up, down) = sockets(client, upstream, early).await;
    tunnelled(events, &target, up, down);
}

/// Between two sockets: `early` upstream first, then both ways until each side is done.
/// Returns the bytes (up, down).
async fn sockets(mut client: TcpStream, mut upstream: TcpStream, early: &[u8]) -> (u64, u64) {
    let (mut up, mut down) = (0u64, 0u64);
    if !early.is_empty() && upstream.write_all(early).await.is_err() {
        return (up, down);
    }
    up += early.len() as u64;
    let (cr, cw) = client.split();
    let (ur, uw) = upstream.split();
    let _ = tokio::try_join!(pump(cr, uw, &mut up), pump(ur, cw, &mut down));
    (up, down)
}

/// Copy until end of file, then pass the half-close on. Counts as it goes, so a tunnel
/// that breaks still reports what crossed it.
async fn pump<R, W>(mut r: R, mut w: W, count: &mut u64) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return w.shutdown().await;
        }
        w.write_all(&buf[..n]).await?;
        *count += n as u64;
    }
}

/// The `proxy.connect` event of a tunnel: no credential, the bytes each way.
fn tunnelled(events: &Events, target: &Target, up: u64, down: u64) {
    events.send(ProxyEvent::Connect {
        host: target.host.to_string(),
        port: target.port,
        credential: None,
        bytes_up: up,
        bytes_down: down,
        connections: 1,
    });
}
