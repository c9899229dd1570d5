//! Each network-enabled sandbox's proxy: started with the sockets the shim created in
//! the sandbox's network namespace (the proxy's listener, the DNS socket, one listener
//! per egress port, in that order, passed on as they came), told what its zone allows and which credentials it
//! attaches, and heard from for the audit log. The broker never sees a secret: the proxy
//! resolves them itself from the sources the plan names.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::sys::wait::WaitStatus;
use serde_json::json;

use wardcell_common::plan::{ProfilePlan, ProxySpec, SandboxSpec};
use wardcell_common::protocol::{self, ProxyEvent, ProxyRequest, ShimReport};

use crate::run::Run;
use crate::sys;
use crate::sys::fds::recv_fds;
use wardcell_host::error::BrokerError;

/// A running proxy; dropping it ends it, after its last events are in the log.
///
/// Its event thread owns the process: when the event stream ends, the thread reaps it at
/// once, and unless the proxy was being retired, writes `proxy.died` and says so on
/// stderr. The sandbox's listener died with the proxy, so its connections are refused.
pub struct Proxy {
    /// To kill it without racing the reap (a pidfd cannot name a reused pid).
    process: sys::Process,
    /// Our side of its control socket, to say "the sandbox has ended" (end of file).
    control: UnixStream,
    /// Set before the end of file, so that its exit is not taken for a death.
    retiring: Arc<AtomicBool>,
    /// Told when the proxy's event stream has ended and it is reaped.
    reaped: std::sync::mpsc::Receiver<()>,
}

/// How long a proxy may take to finish its connections once its sandbox has ended.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(3);

impl Drop for Proxy {
    fn drop(&mut self) {
        self.retiring.store(true, Ordering::SeqCst);
        let _ = self.control.shutdown(std::net::Shutdown::Write);
        if self.reaped.recv_timeout(DRAIN).is_err() {
            let _ = self.process.signal(libc::SIGKILL);
            let _ = self.reaped.recv_timeout(DRAIN);
        }
    }
}

/// With network: the shim's listener, from inside the sandbox's network namespace, goes
/// to the zone's proxy (started here); the command starts once the proxy serves. Returns
/// the proxy and its CA certificate (PEM) when it intercepts TLS.
pub fn hand_over(
    run: &Arc<Run>,
    control: &mut UnixStream,
    spec: &SandboxSpec,
    zone: Option<&str>,
    profile: &ProfilePlan,
    authenticated: bool,
) -> Result<(Proxy, Option<String>), BrokerError> {
    match protocol::read_frame::<ShimReport>(control)? {
        ShimReport::Listener => {}
        ShimReport::SetupFailed { step, message } => {
            return Err(BrokerError::Refused(wardcell_host::messages::setup_failed(
                &step, &message,
            )))
        }
        other => {
            return Err(BrokerError::Sandbox(format!(
                "the shim answered out of turn: {other:?}"
            )))
        }
    }
    // The proxy's listener, the DNS socket, one listener per egress port.
    let fds = recv_fds(control.as_raw_fd(), 2 + spec.egress_ports.len())
        .map_err(|e| BrokerError::Sandbox(format!("the proxy listeners: {e}")))?;
    start(run, zone.unwrap_or("-"), profile, authenticated, fds)
}

/// Start the proxy of one sandbox. Returns it and the per-run CA certificate (PEM) when
/// it intercepts TLS.
fn start(
    run: &Arc<Run>,
    zone: &str,
    profile: &ProfilePlan,
    authenticated: bool,
    listeners: Vec<OwnedFd>,
) -> Result<(Proxy, Option<String>), BrokerError> {
    let path = BrokerError::helper("wardcell-proxy")?;
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        BrokerError::Sandbox(format!("starting zone '{zone}''s proxy: {what}: {e}"))
    };
    let (mut ours, theirs) = UnixStream::pair().map_err(|e| fail("socketpair", &e))?;
    let child = sys::spawn_with_control(&path, theirs.as_raw_fd()).map_err(|e| fail("exec", &e))?;
    // Killed and reaped on any failure, and by the event thread at the end.
    let (_, mut child) = sys::watch(child).map_err(|e| fail("pidfd", &e))?;
    drop(theirs);
    let (done, reaped) = std::sync::mpsc::channel();
    let pid = child.pid();
    let process = child.watch().try_clone().map_err(|e| fail("pidfd", &e))?;
    let control = ours.try_clone().map_err(|e| fail("control socket", &e))?;
    let retiring = Arc::new(AtomicBool::new(false));

    // Only an authenticated zone's proxy gets credentials, and only its profile's.
    let credentials = if authenticated {
        run.plan
            .credentials
            .iter()
            .filter(|c| profile.credentials.contains(&c.name))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let spec = ProxySpec {
        run_id: run.id.clone(),
        zone: zone.to_string(),
        allow: profile.network.allow.clone(),
        internal: profile.network.internal.clone(),
        credentials,
        trace: wardcell_common::trace::spec(&run.id),
    };
    protocol::send_hello(&mut ours).map_err(|e| fail("hello", &e))?;
    protocol::expect_hello(&mut ours).map_err(|e| fail("hello", &e))?;
    let raw: Vec<_> = listeners.iter().map(|l| l.as_raw_fd()).collect();
    sys::fds::send_fds(ours.as_raw_fd(), &raw).map_err(|e| fail("listeners", &e))?;
    drop(listeners);
    protocol::write_frame(&mut ours, &ProxyRequest::Start(Box::new(spec)))
        .map_err(|e| fail("spec", &e))?;
    let ca_pem = match protocol::read_frame::<ProxyEvent>(&mut ours) {
        Ok(ProxyEvent::Ready { ca_pem }) => ca_pem,
        Ok(ProxyEvent::Failed { message }) => {
            return Err(BrokerError::Refused(format!(
                "zone '{zone}''s proxy cannot start: {message}"
            )))
        }
        Ok(other) => return Err(fail("answer out of turn", &format!("{other:?}"))),
        Err(e) => return Err(fail("no answer", &e)),
    };

    // Its events, into the run's log, until it is gone; then it is reaped.
    let run = run.clone();
    let zone = zone.to_string();
    let proxy = Proxy {
        process,
        control,
        retiring: retiring.clone(),
        reaped,
    };
    tracing::debug!(zone, pid, intercepts = ca_pem.is_some(), "proxy ready");
    std::thread::Builder::new()
        .name(format!("proxy-events-{zone}"))
        .spawn(move || {
            if !audit_events(&run, &zone, ours) {
                let _ = child.signal(libc::SIGKILL);
            }
            let status = child.wait();
            if !retiring.load(Ordering::SeqCst) {
                died(&run, &zone, status);
            }
            let _ = done.send(());
        })
        .map_err(|e| fail("event thread", &e))?;
    Ok((proxy, ca_pem))
}

/// The proxy ended while its sandbox runs: audited, and one line on stderr.
fn died(run: &Run, zone: &str, status: Option<WaitStatus>) {
    let (code, signal) = match status {
        Some(WaitStatus::Exited(_, c)) => (Some(c), None),
        Some(WaitStatus::Signaled(_, s, _)) => (None, Some(s as i32)),
        _ => (None, None),
    };
    // Unwritable, it ends the run as every other event does (PROTOCOL 8).
    let _ = run.record(
        "proxy",
        "proxy.died",
        json!({"zone": zone, "exit_status": code, "signal": signal}),
    );
    wardcell_common::eprintln_line!(
        "{}",
        wardcell_host::messages::proxy_died(zone, code, signal)
    );
}

/// Write what the proxy reports to the run's log until its stream ends (`true`), or until
/// it sends something out of turn (`false`).
fn audit_events(run: &Run, zone: &str, mut events: UnixStream) -> bool {
    loop {
        let written: io::Result<()> = match protocol::read_frame::<ProxyEvent>(&mut events) {
            Ok(ProxyEvent::Connect {
                host,
                port,
                credential,
                bytes_up,
                bytes_down,
            }) => run.record(
                "proxy",
                "proxy.connect",
                json!({
                    "zone": zone, "host": host, "port": port, "credential": credential,
                    "bytes_up": bytes_up, "bytes_down": bytes_down, "decision": "allowed",
                }),
            ),
            Ok(ProxyEvent::Denied { host, port, reason }) => {
                // A count of refusals held back by the proxy's rate comes as host "-",
                // port 0, its reason starting with the number.
                let held = (host == "-" && port == 0)
                    .then(|| reason.split(' ').next().and_then(|n| n.parse().ok()))
                    .flatten();
                run.refused.fetch_add(held.unwrap_or(1), Ordering::Relaxed);
                run.record(
                    "proxy",
                    "proxy.denied",
                    json!({"zone": zone, "host": host, "port": port, "reason": reason, "decision": "denied"}),
                )
            }
            // Out of turn (a second Ready, a Failed once serving): the proxy is not
            // speaking the protocol, and nothing it says after can be believed. Audited,
            // and the proxy is ended (its death is then written as any other).
            Ok(other) => {
                let _ = run.record(
                    "proxy",
                    "proxy.unexpected",
                    json!({"zone": zone, "message": format!("{other:?}")}),
                );
                return false;
            }
            Err(_) => return true,
        };
        let _ = written;
    }
}
