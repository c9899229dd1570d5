//! A CONNECT to an allowed host that no credential names: bytes copied both ways,
//! untouched and unread, counted for the `proxy.connect` event.
//!
//! Between two TCP sockets the bytes move with splice(2) through a pipe, so they never
//! enter the proxy's memory (and loopback transfers keep near line rate); a plain
//! read/write copy is the fallback.

#![forbid(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use nix::sys::socket::Shutdown;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use wardcell_common::protocol::ProxyEvent;

use crate::allow::Target;
use crate::control::Events;

/// Bytes per read, per direction: large enough for loopback line rate, small enough that
/// an idle proxy holds none (the buffers live only while a tunnel does).
const CHUNK: usize = 64 * 1024;
/// Pipe capacity asked for per direction (pages are only used while data is in flight).
const PIPE: usize = 1024 * 1024;

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

/// Between two sockets: `early` upstream first, then splice both ways (a plain copy
/// where pipes cannot be had). Returns the bytes (up, down).
async fn sockets(mut client: TcpStream, mut upstream: TcpStream, early: &[u8]) -> (u64, u64) {
    let (mut up, mut down) = (0u64, 0u64);
    if !early.is_empty() && upstream.write_all(early).await.is_err() {
        return (up, down);
    }
    up += early.len() as u64;
    match (pipe(), pipe()) {
        (Ok(p1), Ok(p2)) => {
            let _ = tokio::try_join!(
                splice_pump(&client, &upstream, &p1, &mut up),
                splice_pump(&upstream, &client, &p2, &mut down)
            );
        }
        _ => {
            let (cr, cw) = client.split();
            let (ur, uw) = upstream.split();
            let _ = tokio::try_join!(pump(cr, uw, &mut up), pump(ur, cw, &mut down));
        }
    }
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

/// A non-blocking pipe, enlarged where the system allows: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    // Best effort: the default 64 KiB pipe works, only with more system calls.
    let _ = fcntl(w.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(PIPE as libc::c_int));
    Ok((r, w))
}

/// Move bytes from `src` to `dst` through `pipe` until end of file, then half-close `dst`.
/// Reading and writing overlap: whichever side is ready is served, so neither socket
/// waits for the other's turn.
async fn splice_pump(
    src: &TcpStream,
    dst: &TcpStream,
    pipe: &(OwnedFd, OwnedFd),
    count: &mut u64,
) -> io::Result<()> {
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    let (pr, pw) = pipe;
    // Bytes in the pipe. A pipe counts pages, not bytes, so it can be full with fewer
    // than its capacity in it: a refused read with bytes held is taken as a full pipe
    // (readiness of `src` kept), and reading waits until some bytes have gone out. With
    // the pipe empty, a refused read can only mean `src` has nothing.
    let mut held = 0usize;
    let mut pipe_full = false;
    let mut eof = false;
    loop {
        if eof && held == 0 {
            return nix::sys::socket::shutdown(dst.as_raw_fd(), Shutdown::Write)
                .map_err(io::Error::from);
        }
        tokio::select! {
            r = src.readable(), if !eof && !pipe_full => {
                r?;
                let got = src.try_io(Interest::READABLE, || {
                    match splice(src, None, pw, None, PIPE, flags) {
                        Err(nix::errno::Errno::EAGAIN) if held > 0 => Ok(None),
                        other => other.map(Some).map_err(io::Error::from),
                    }
                });
                match got {
                    Ok(Some(0)) => eof = true,
                    Ok(Some(n)) => held += n,
                    Ok(None) => pipe_full = true,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            w = dst.writable(), if held > 0 => {
                w?;
                match dst.try_io(Interest::WRITABLE, || {
                    splice(pr, None, dst, None, held, flags).map_err(io::Error::from)
                }) {
                    Ok(k) => {
                        held -= k;
                        pipe_full = false;
                        *count += k as u64;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
        }
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
    });
}
