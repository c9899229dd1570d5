//! A sandbox's proxy as a process: started with its control socket as fd 3, the
//! listeners passed, its spec sent, its first answer read; its events handed to the
//! broker until the stream ends; ended when dropped. What the spec says (which hosts,
//! which credentials) and what is audited of its events are the broker's (proxy.rs).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::wait::WaitStatus;

use wardcell_common::plan::ProxySpec;
use wardcell_common::protocol::{self, ProxyEvent, ProxyRequest};

use crate::process::{Child, Watched};

/// A running proxy; dropping it ends it, after its last events are handed over.
///
/// Its event thread owns the process: when the event stream ends, the thread reaps it at
/// once and, unless the proxy was being retired, reports its death.
pub struct Proxy<W: Watched> {
    /// To kill it without racing the reap (a pidfd cannot name a reused pid).
    process: W,
    /// Our side of its control socket, to say "the sandbox has ended" (end of file).
    control: UnixStream,
    /// Set before the end of file, so that its exit is not taken for a death.
    retiring: Arc<AtomicBool>,
    /// Told when the proxy's event stream has ended and it is reaped.
    reaped: Receiver<()>,
}

/// How long a proxy may take to finish its connections once its sandbox has ended.
const DRAIN: Duration = Duration::from_secs(3);

impl<W: Watched> Drop for Proxy<W> {
    fn drop(&mut self) {
        self.retiring.store(true, Ordering::SeqCst);
        let _ = self.control.shutdown(std::net::Shutdown::Write);
        if self.reaped.recv_timeout(DRAIN).is_err() {
            let _ = self.process.signal(libc::SIGKILL);
            let _ = self.reaped.recv_timeout(DRAIN);
        }
    }
}

/// Why a proxy did not start: a step failed (what, and the error), or the proxy said
/// why it cannot (`ProxyEvent::Failed`).
pub enum StartError {
    Step(&'static str, String),
    Failed(String),
}

impl StartError {
    /// The error `wardcell run` ends with, for the proxy of `zone`.
    pub fn for_zone(self, zone: &str) -> crate::error::BrokerError {
        use crate::error::BrokerError;
        // `-`: a run without zones (`run --profile`).
        let whose = match zone {
            "-" => "the sandbox's proxy".to_string(),
            z => format!("zone '{z}''s proxy"),
        };
        match self {
            StartError::Failed(message) => {
                BrokerError::Refused(format!("{whose} cannot start: {message}"))
            }
            StartError::Step(what, e) => {
                BrokerError::Sandbox(format!("starting {whose}: {what}: {e}"))
            }
        }
    }
}

/// What the broker does with a proxy's events and its end.
pub struct Hooks<E, D> {
    /// Reads the event stream until it ends (`true`), or until an event must end the
    /// proxy (`false`: it is killed).
    pub events: E,
    /// The proxy ended while not being retired: its exit code or the signal that ended it
    /// (neither when it could not be reaped).
    pub died: D,
}

/// Start a proxy: `spawn` starts it with the given descriptor as its fd 3, watched
/// (dying with the broker); the hello is exchanged, the listeners passed by `send_fds`,
/// `spec` sent, then the programs of its credentials' commands when there are any (each
/// credential's in the spec's order), and its answer read. Returns it, and its CA
/// certificate (PEM) when it intercepts TLS.
pub fn start<W, E, D>(
    spawn: impl FnOnce(RawFd) -> std::io::Result<Child<W>>,
    send_fds: fn(RawFd, u8, &[RawFd]) -> std::io::Result<()>,
    (listeners, programs): (Vec<OwnedFd>, Vec<RawFd>),
    spec: ProxySpec,
    hooks: Hooks<E, D>,
) -> Result<(Proxy<W>, Option<String>), StartError>
where
    W: Watched + Send + 'static,
    E: FnOnce(UnixStream) -> bool + Send + 'static,
    D: FnOnce(Option<i32>, Option<i32>) + Send + 'static,
{
    let fail = |what: &'static str| move |e: std::io::Error| StartError::Step(what, e.to_string());
    let frame =
        |what: &'static str| move |e: protocol::FrameError| StartError::Step(what, e.to_string());
    let (mut ours, theirs) = UnixStream::pair().map_err(fail("socketpair"))?;
    // Killed and reaped on any failure, and by the event thread at the end.
    let mut child = spawn(theirs.as_raw_fd()).map_err(fail("exec"))?;
    drop(theirs);
    let process = child.watch().try_clone().map_err(fail("pidfd"))?;
    let control = ours.try_clone().map_err(fail("control socket"))?;
    protocol::send_hello(&mut ours).map_err(frame("hello"))?;
    protocol::expect_hello(&mut ours).map_err(frame("hello"))?;
    let raw: Vec<_> = listeners.iter().map(|l| l.as_raw_fd()).collect();
    send_fds(ours.as_raw_fd(), b'F', &raw).map_err(fail("listeners"))?;
    drop(listeners);
    let zone = spec.zone.clone();
    protocol::write_frame(&mut ours, &ProxyRequest::Start(Box::new(spec)))
        .map_err(frame("spec"))?;
    for some in programs.chunks(8) {
        send_fds(ours.as_raw_fd(), b'F', some).map_err(fail("credential commands"))?;
    }
    let ca_pem = match protocol::read_frame::<ProxyEvent>(&mut ours) {
        Ok(ProxyEvent::Ready { ca_pem }) => ca_pem,
        Ok(ProxyEvent::Failed { message }) => return Err(StartError::Failed(message)),
        Ok(other) => return Err(StartError::Step("answer out of turn", format!("{other:?}"))),
        Err(e) => return Err(StartError::Step("no answer", e.to_string())),
    };

    let (done, reaped) = channel();
    let retiring = Arc::new(AtomicBool::new(false));
    let proxy = Proxy {
        process,
        control,
        retiring: retiring.clone(),
        reaped,
    };
    tracing::debug!(
        zone,
        pid = child.pid(),
        intercepts = ca_pem.is_some(),
        "proxy ready"
    );
    std::thread::Builder::new()
        .name(format!("proxy-events-{zone}"))
        .spawn(move || {
            if !(hooks.events)(ours) {
                let _ = child.signal(libc::SIGKILL);
            }
            let status = child.wait();
            if !retiring.load(Ordering::SeqCst) {
                let (code, signal) = match status {
                    Some(WaitStatus::Exited(_, c)) => (Some(c), None),
                    Some(WaitStatus::Signaled(_, s, _)) => (None, Some(s as i32)),
                    _ => (None, None),
                };
                (hooks.died)(code, signal);
            }
            let _ = done.send(());
        })
        .map_err(fail("event thread"))?;
    Ok((proxy, ca_pem))
}
