//! The control channel to the broker (fd 3), in the order the broker drives it:
//!
//! 1. broker -> proxy: Hello; proxy -> broker: Hello;
//! 2. broker -> proxy: one byte `F` sent with SCM_RIGHTS carrying the TCP listener;
//! 3. broker -> proxy: `ProxyRequest::Start(spec)`;
//! 4. proxy -> broker: `Ready` or `Failed`; then `Connect` / `Denied` events, written by
//!    one task in the order they happen.
//!
//! The broker sends nothing after `Start`: end of file means the sandbox has ended (or
//! the broker is gone); the proxy then finishes the connections in flight, writes their
//! events, and exits. Any byte is out of turn and ends the proxy at once.

#![forbid(unsafe_code)]

use std::io::IoSliceMut;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::errno::Errno;
use nix::sys::socket::{
    getsockname, getsockopt, recvmsg, sockopt, AddressFamily, ControlMessageOwned, MsgFlags,
    SockType, SockaddrLike, SockaddrStorage,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use wardcell_common::plan::ProxySpec;
use wardcell_common::protocol::{self, FrameError, ProxyEvent, ProxyRequest};

use crate::error::Error;
use crate::sys;

/// The byte the listener travels beside.
const LISTENER_TAG: u8 = b'F';

/// Steps 1 to 3: the Hello exchange, the listener, the spec.
pub fn handshake(fd: OwnedFd) -> Result<(UnixStream, TcpListener, ProxySpec), Error> {
    let mut control = UnixStream::from(fd);
    let theirs = protocol::expect_hello(&mut control);
    // Answer even a mismatched Hello, so the broker can name both versions.
    protocol::send_hello(&mut control).map_err(|err| Error::Control {
        step: "sending Hello",
        err,
    })?;
    theirs.map_err(|err| Error::Control {
        step: "reading the broker's Hello",
        err,
    })?;
    let listener = receive_listener(&control)?;
    let spec = match protocol::read_frame::<ProxyRequest>(&mut control) {
        Ok(ProxyRequest::Start(spec)) => *spec,
        Err(err) => {
            return Err(Error::Control {
                step: "reading the proxy spec",
                err,
            })
        }
    };
    Ok((control, listener, spec))
}

fn receive_listener(control: &UnixStream) -> Result<TcpListener, Error> {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let (bytes, fds, truncated) = loop {
        match recvmsg::<()>(
            control.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => {
                let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
                let mut fds = Vec::new();
                if let Ok(cmsgs) = msg.cmsgs() {
                    for c in cmsgs {
                        if let ControlMessageOwned::ScmRights(v) = c {
                            fds.extend(v);
                        }
                    }
                }
                break (msg.bytes, fds, truncated);
            }
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(Error::Listener(format!("recvmsg: {e}"))),
        }
    };
    // Own whatever arrived first, so that anything refused below is closed.
    let mut fds: Vec<OwnedFd> = fds.into_iter().map(sys::own_received_fd).collect();
    if bytes == 0 {
        return Err(Error::Listener("the broker closed the channel".into()));
    }
    if byte[0] != LISTENER_TAG {
        return Err(Error::Listener(format!(
            "expected the byte {LISTENER_TAG:#04x} beside the listener, got {:#04x}",
            byte[0]
        )));
    }
    if truncated || fds.len() != 1 {
        return Err(Error::Listener(format!(
            "expected exactly one descriptor, got {}{}",
            fds.len(),
            if truncated {
                " and more that were cut off"
            } else {
                ""
            }
        )));
    }
    let fd = fds.pop().expect("one descriptor");
    check_listener(&fd)?;
    let listener = TcpListener::from(fd);
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::Listener(format!("O_NONBLOCK: {e}")))?;
    Ok(listener)
}

/// A TCP stream socket, IPv4 or IPv6, already listening.
fn check_listener(fd: &OwnedFd) -> Result<(), Error> {
    let bad = |why: String| Error::Listener(why);
    match getsockopt(fd, sockopt::SockType) {
        Ok(SockType::Stream) => {}
        Ok(t) => return Err(bad(format!("a {t:?} socket, not a TCP listener"))),
        Err(e) => return Err(bad(format!("not a socket: {e}"))),
    }
    let addr: SockaddrStorage =
        getsockname(fd.as_raw_fd()).map_err(|e| bad(format!("getsockname: {e}")))?;
    if !matches!(
        addr.family(),
        Some(AddressFamily::Inet) | Some(AddressFamily::Inet6)
    ) {
        return Err(bad("not an IP socket".into()));
    }
    match getsockopt(fd, sockopt::AcceptConn) {
        Ok(true) => Ok(()),
        Ok(false) => Err(bad("the socket is not listening".into())),
        Err(e) => Err(bad(format!("SO_ACCEPTCONN: {e}"))),
    }
}

/// Step 4 before serving: one blocking write of `Ready` or `Failed`.
pub fn report(control: &mut UnixStream, event: &ProxyEvent) -> Result<(), FrameError> {
    protocol::write_frame(control, event)
}

/// Where connection handlers post their events. Unbounded so that a handler never waits
/// on the broker; events are small and the broker reads them as they come.
#[derive(Clone)]
pub struct Events(mpsc::UnboundedSender<ProxyEvent>);

impl Events {
    pub fn channel() -> (Events, mpsc::UnboundedReceiver<ProxyEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Events(tx), rx)
    }

    pub fn send(&self, event: ProxyEvent) {
        // Hosts, ports, credential names and counts: never a credential's value.
        tracing::debug!(event = ?event, "connection");
        // Fails only once the writer is gone, i.e. the process is ending.
        let _ = self.0.send(event);
    }
}

/// Why the control channel ended.
pub enum Ended {
    /// The broker closed it: a normal end of the run.
    BrokerGone,
    /// The broker sent a byte after `Start`, or the channel failed.
    Broken(String),
}

/// Write events in order and watch for the broker going away; returns when either ends.
/// How long, after the broker's end of file, in-flight connections may take to finish
/// and their events to be written.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Step 4: write events until the broker closes its side. Then stop accepting (`front`),
/// let the connections in flight finish (their sandbox is gone, so they end), write every
/// event they leave, and return: the broker reads to the end before it reaps us.
pub async fn run(
    control: UnixStream,
    mut events: mpsc::UnboundedReceiver<ProxyEvent>,
    front: tokio::task::AbortHandle,
) -> Ended {
    let stream = match control
        .set_nonblocking(true)
        .and_then(|()| tokio::net::UnixStream::from_std(control))
    {
        Ok(s) => s,
        Err(e) => return Ended::Broken(format!("adopting the control socket: {e}")),
    };
    let (mut rd, mut wr) = stream.into_split();
    let writer = async move {
        // Ends when every sender is gone: the accept loop and each connection hold one.
        while let Some(ev) = events.recv().await {
            let frame = match protocol::encode_frame(&ev) {
                Ok(f) => f,
                // A host name cannot make an event reach 64 KiB; drop it rather than die.
                Err(_) => continue,
            };
            if let Err(e) = wr.write_all(&frame).await {
                return Ended::Broken(format!("writing an event: {e}"));
            }
        }
        Ended::BrokerGone
    };
    tokio::pin!(writer);
    let mut b = [0u8; 1];
    tokio::select! {
        e = &mut writer => e,
        r = rd.read(&mut b) => match r {
            Ok(0) => {
                front.abort();
                match tokio::time::timeout(DRAIN, &mut writer).await {
                    Ok(e) => e,
                    Err(_) => Ended::BrokerGone,
                }
            }
            Ok(_) => Ended::Broken("the broker sent a message out of turn".into()),
            Err(e) => Ended::Broken(format!("reading the control socket: {e}")),
        },
    }
}
