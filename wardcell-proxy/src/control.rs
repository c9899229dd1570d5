//! The control channel to the broker (fd 3), in the order the broker drives it:
//!
//! 1. broker -> proxy: Hello; proxy -> broker: Hello;
//! 2. broker -> proxy: one byte `F` sent with SCM_RIGHTS carrying, in this order, the
//!    explicit proxy's TCP listener, the DNS socket (UDP) and one TCP listener per egress
//!    port (at most `MAX_EGRESS_PORTS`);
//! 3. broker -> proxy: `ProxyRequest::Start(spec)`; then, when a credential of the spec
//!    has a command, its program (opened by the broker when the run started) as a
//!    descriptor, one per such credential in the spec's order, at most 8 beside each
//!    byte `F`;
//! 4. proxy -> broker: `Ready` or `Failed`; then `Connect` / `Denied` events, written by
//!    one task in the order they happen.
//!
//! The broker sends nothing after `Start`: end of file means the sandbox has ended (or
//! the broker is gone); the proxy then finishes the connections in flight, writes their
//! events, and exits. Any byte is out of turn and ends the proxy at once.

#![forbid(unsafe_code)]

use crate::denials::Denials;
use std::io::IoSliceMut;
use std::net::{TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::sys::socket::{
    getsockname, getsockopt, recvmsg, sockopt, AddressFamily, ControlMessageOwned, MsgFlags,
    SockType, SockaddrLike, SockaddrStorage,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use wardcell_common::plan::{ProxySpec, SecretPlan};
use wardcell_common::protocol::{self, FrameError, ProxyEvent, ProxyRequest};
use wardcell_common::throttle::Throttle;
use wardcell_support::sandbox_env::MAX_EGRESS_PORTS;

use crate::error::Error;
use crate::sys;

/// The byte the listener travels beside.
const LISTENER_TAG: u8 = b'F';

/// The sockets a proxy serves, all created in its sandbox's network namespace.
pub struct Sockets {
    /// The explicit proxy (HTTP_PROXY), on the sandbox's 127.0.0.1.
    pub proxy: TcpListener,
    /// The sandbox's DNS, on port 53 of every address.
    pub dns: UdpSocket,
    /// Transparent egress: one per port the allow list names, on every address.
    pub egress: Vec<TcpListener>,
}

/// Steps 1 to 3: the Hello exchange, the sockets, the spec, its commands' programs.
pub fn handshake(fd: OwnedFd) -> Result<(UnixStream, Sockets, ProxySpec, Vec<OwnedFd>), Error> {
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
    let listener = receive_sockets(&control)?;
    let spec = match protocol::read_frame::<ProxyRequest>(&mut control) {
        Ok(ProxyRequest::Start(spec)) => *spec,
        Err(err) => {
            return Err(Error::Control {
                step: "reading the proxy spec",
                err,
            })
        }
    };
    let commands = spec.credentials.iter();
    let mut wanted = commands
        .filter(|c| matches!(c.secret, SecretPlan::Command(_)))
        .count();
    let mut programs = Vec::with_capacity(wanted);
    while wanted > 0 {
        let some = receive(&control, wanted.min(8))?;
        wanted -= some.len();
        programs.extend(some);
    }
    Ok((control, listener, spec, programs))
}

fn receive_sockets(control: &UnixStream) -> Result<Sockets, Error> {
    let fds = receive(control, 2 + MAX_EGRESS_PORTS)?;
    if fds.len() < 2 {
        return Err(Error::Listener(format!(
            "expected from 2 to {} descriptors, got {}",
            2 + MAX_EGRESS_PORTS,
            fds.len()
        )));
    }
    let listener = |fd: OwnedFd| -> Result<TcpListener, Error> {
        check_socket(&fd, SockType::Stream)?;
        let l = TcpListener::from(fd);
        l.set_nonblocking(true)
            .map_err(|e| Error::Listener(format!("O_NONBLOCK: {e}")))?;
        Ok(l)
    };
    let mut fds = fds.into_iter();
    let proxy = listener(fds.next().expect("two or more"))?;
    let dns = fds.next().expect("two or more");
    check_socket(&dns, SockType::Datagram)?;
    let dns = UdpSocket::from(dns);
    dns.set_nonblocking(true)
        .map_err(|e| Error::Listener(format!("O_NONBLOCK: {e}")))?;
    let egress = fds.map(listener).collect::<Result<_, _>>()?;
    Ok(Sockets { proxy, dns, egress })
}

/// One message of descriptors beside the byte `F`: from 1 to `most` of them.
fn receive(control: &UnixStream, most: usize) -> Result<Vec<OwnedFd>, Error> {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 2 + MAX_EGRESS_PORTS]);
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
    let fds: Vec<OwnedFd> = fds.into_iter().map(sys::own_received_fd).collect();
    if bytes == 0 {
        return Err(Error::Listener("the broker closed the channel".into()));
    }
    if byte[0] != LISTENER_TAG {
        return Err(Error::Listener(format!(
            "expected the byte {LISTENER_TAG:#04x} beside the listener, got {:#04x}",
            byte[0]
        )));
    }
    if truncated || fds.is_empty() || fds.len() > most {
        return Err(Error::Listener(format!(
            "expected from 1 to {most} descriptors, got {}{}",
            fds.len(),
            if truncated {
                " and more that were cut off"
            } else {
                ""
            }
        )));
    }
    Ok(fds)
}

/// An IP socket of `kind`: a TCP one already listening, or a bound UDP one.
fn check_socket(fd: &OwnedFd, kind: SockType) -> Result<(), Error> {
    let bad = |why: String| Error::Listener(why);
    match getsockopt(fd, sockopt::SockType) {
        Ok(t) if t == kind => {}
        Ok(t) => return Err(bad(format!("a {t:?} socket, not {kind:?}"))),
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
    if kind == SockType::Datagram {
        return Ok(());
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

/// Refusals reported one by one: a burst of [`DENIED_BURST`], then [`DENIED_PER_SECOND`].
/// The sandbox can be refused as fast as it can ask (one DNS packet each), and every
/// event is a line in the run's audit log; past this rate refusals are counted, and the
/// count goes to the broker as one `Denied` event (host `-`, port 0) before the next
/// refusal reported, after a second without events, or when the proxy ends.
pub const DENIED_BURST: u32 = 100;
pub const DENIED_PER_SECOND: u32 = 20;

/// Allowed connections reported one by one: a burst of [`CONNECT_BURST`], then
/// [`CONNECT_PER_SECOND`]. Past that they are summed up per host, port and credential
/// (how many, and their bytes), and each sum goes as one `Connect` event before the next
/// one reported, after a second without events, or when the proxy ends: a long, busy,
/// legitimate run (a package manager fetching thousands of files) writes a bounded
/// number of audit lines, and never reaches `[audit] max_log_kib` for it.
pub const CONNECT_BURST: u32 = 100;
pub const CONNECT_PER_SECOND: u32 = 1;

/// Allowed connections held back, summed up per host, port and credential.
#[derive(Default)]
struct Sums {
    by: Vec<ProxyEvent>,
}

impl Sums {
    fn add(&mut self, e: ProxyEvent) {
        let ProxyEvent::Connect {
            host,
            port,
            credential,
            bytes_up,
            bytes_down,
            connections,
        } = e
        else {
            return;
        };
        let same = |o: &&mut ProxyEvent| matches!(o, ProxyEvent::Connect { host: h, port: p, credential: c, .. } if *h == host && *p == port && *c == credential);
        match self.by.iter_mut().find(same) {
            Some(ProxyEvent::Connect {
                bytes_up: u,
                bytes_down: d,
                connections: n,
                ..
            }) => {
                *u = u.saturating_add(bytes_up);
                *d = d.saturating_add(bytes_down);
                *n = n.saturating_add(connections);
            }
            _ => self.by.push(ProxyEvent::Connect {
                host,
                port,
                credential,
                bytes_up,
                bytes_down,
                connections,
            }),
        }
    }

    fn take(&mut self) -> Vec<ProxyEvent> {
        std::mem::take(&mut self.by)
    }
}

/// The refusals held back since the last call, as one event, if there were any.
fn summary(t: &mut Throttle) -> Option<ProxyEvent> {
    let n = t.take_held();
    (n > 0).then(|| ProxyEvent::Denied {
        host: "-".into(),
        port: 0,
        reason: format!(
            "{n} more refusals, over the {DENIED_PER_SECOND} a second recorded one by one"
        ),
    })
}

fn throttle(now: std::time::Instant) -> Throttle {
    Throttle::new(now, DENIED_BURST, DENIED_PER_SECOND)
}

/// Where connection handlers post their events. Unbounded so that a handler never waits
/// on the broker; events are small, refusals are throttled ([`Throttle`]), and an allowed
/// connection's event needs a connection through the proxy.
#[derive(Clone)]
pub struct Events {
    tx: mpsc::UnboundedSender<ProxyEvent>,
    throttle: Arc<Mutex<Throttle>>,
    /// The rate of allowed connections reported one by one, and the sums of the rest.
    allowed: Arc<Mutex<(Throttle, Sums)>>,
    /// Every refusal, for the sandbox to read (`wardcell zone denials`), the throttled
    /// ones included.
    pub denials: Denials,
}

/// The writer's end: events in order, a count of held-back refusals before the next one
/// reported, after a quiet second, and at the end.
pub struct Queue {
    rx: mpsc::UnboundedReceiver<ProxyEvent>,
    throttle: Arc<Mutex<Throttle>>,
    allowed: Arc<Mutex<(Throttle, Sums)>>,
    /// Summaries taken and not yet written.
    pending: Vec<ProxyEvent>,
    done: bool,
}

impl Events {
    pub fn channel() -> (Events, Queue) {
        let (tx, rx) = mpsc::unbounded_channel();
        let now = std::time::Instant::now();
        let throttle = Arc::new(Mutex::new(throttle(now)));
        let rate = Throttle::new(now, CONNECT_BURST, CONNECT_PER_SECOND);
        let allowed = Arc::new(Mutex::new((rate, Sums::default())));
        let queue = Queue {
            rx,
            throttle: throttle.clone(),
            allowed: allowed.clone(),
            pending: Vec::new(),
            done: false,
        };
        let denials = Denials::default();
        (
            Events {
                tx,
                throttle,
                allowed,
                denials,
            },
            queue,
        )
    }

    pub fn send(&self, event: ProxyEvent) {
        // Hosts, ports, credential names and counts: never a credential's value.
        tracing::debug!(event = ?event, "connection");
        let mut first = None;
        if let ProxyEvent::Denied { host, port, reason } = &event {
            self.denials.record(host, *port, reason);
        }
        let mut sums = Vec::new();
        if matches!(event, ProxyEvent::Denied { .. }) {
            let mut t = self.throttle.lock().unwrap_or_else(|p| p.into_inner());
            if !t.admit(std::time::Instant::now()) {
                return;
            }
            first = summary(&mut t);
        }
        if matches!(event, ProxyEvent::Connect { .. }) {
            let mut a = self.allowed.lock().unwrap_or_else(|p| p.into_inner());
            if !a.0.admit(std::time::Instant::now()) {
                a.1.add(event);
                return;
            }
            sums = a.1.take();
        }
        // Fails only once the writer is gone, i.e. the process is ending.
        for e in first.into_iter().chain(sums).chain(Some(event)) {
            let _ = self.tx.send(e);
        }
    }
}

impl Queue {
    /// The next event; a count of refusals held back once the channel has been quiet
    /// for a second, and after the last event.
    pub async fn recv(&mut self) -> Option<ProxyEvent> {
        loop {
            if let Some(e) = self.pending.pop() {
                return Some(e);
            }
            if self.done {
                return None;
            }
            let quiet = std::time::Duration::from_secs(1);
            match tokio::time::timeout(quiet, self.rx.recv()).await {
                Ok(Some(e)) => return Some(e),
                Ok(None) => self.done = true,
                Err(_) => {}
            }
            let held = summary(&mut self.throttle.lock().unwrap_or_else(|p| p.into_inner()));
            self.pending.extend(held);
            let sums = self
                .allowed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .1
                .take();
            self.pending.extend(sums.into_iter().rev());
        }
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
pub async fn run(control: UnixStream, mut events: Queue, front: tokio::task::AbortHandle) -> Ended {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn refusals_past_the_rate_are_counted_not_dropped() {
        let t0 = Instant::now();
        let mut t = throttle(t0);
        let admitted = (0..1000).filter(|_| t.admit(t0)).count();
        assert_eq!(admitted, DENIED_BURST as usize);
        match summary(&mut t) {
            Some(ProxyEvent::Denied { host, port, reason }) => {
                assert_eq!((host.as_str(), port), ("-", 0));
                assert!(reason.starts_with("900 more refusals"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(summary(&mut t).is_none(), "counted once");
        // A second later, one second's worth again, and no more.
        let t1 = t0 + Duration::from_secs(1);
        let again = (0..1000).filter(|_| t.admit(t1)).count();
        assert_eq!(again, DENIED_PER_SECOND as usize);
        // After a long quiet, a full burst, never more.
        let t2 = t1 + Duration::from_secs(3600);
        assert_eq!(
            (0..1000).filter(|_| t.admit(t2)).count(),
            DENIED_BURST as usize
        );
        // Time going backwards (it cannot, but) admits nothing new.
        assert!(!t.admit(t0));
    }

    /// Past the rate reported one by one, allowed connections are summed up per host,
    /// port and credential, and nothing is lost: every connection and byte is counted
    /// once, in a bounded number of events.
    #[test]
    fn allowed_connections_past_the_rate_are_summed_not_dropped() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let (events, mut queue) = Events::channel();
        let connect = |host: &str| ProxyEvent::Connect {
            host: host.into(),
            port: 443,
            credential: None,
            bytes_up: 1,
            bytes_down: 10,
            connections: 1,
        };
        for i in 0..5000 {
            events.send(connect(if i % 2 == 0 { "a.example" } else { "b.example" }));
        }
        drop(events);
        let got: Vec<ProxyEvent> = rt.block_on(async {
            let mut got = Vec::new();
            while let Some(e) = queue.recv().await {
                got.push(e);
            }
            got
        });
        assert!(
            got.len() <= CONNECT_BURST as usize + 10,
            "{} events",
            got.len()
        );
        let (mut n, mut up, mut down) = (0, 0, 0);
        for e in &got {
            let ProxyEvent::Connect {
                bytes_up,
                bytes_down,
                connections,
                ..
            } = e
            else {
                panic!("{e:?}");
            };
            (n, up, down) = (n + connections, up + bytes_up, down + bytes_down);
        }
        assert_eq!((n, up, down), (5000, 5000, 50_000));
    }
}
