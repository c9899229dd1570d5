//! Each network-enabled sandbox's proxy: started with the listener the shim created in
//! the sandbox's network namespace, told what its zone allows and which credentials it
//! attaches, and heard from for the audit log. The broker never sees a secret: the proxy
//! resolves them itself from the sources the plan names.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::sync::Arc;

use serde_json::json;

use wardcell_common::plan::{ProfilePlan, ProxySpec};
use wardcell_common::protocol::{self, ProxyEvent, ProxyRequest};

use crate::error::BrokerError;
use crate::sandbox::Run;
use crate::sys;

/// A running proxy; dropping it ends it, after its last events are in the log.
pub struct Proxy {
    child: Child,
    /// Our side of its control socket, to say "the sandbox has ended" (end of file).
    control: UnixStream,
    /// Told when the proxy's event stream has ended (every event is in the log).
    drained: std::sync::mpsc::Receiver<()>,
}

/// How long a proxy may take to finish its connections once its sandbox has ended.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(3);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.control.shutdown(std::net::Shutdown::Write);
        let _ = self.drained.recv_timeout(DRAIN);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start the proxy of one sandbox. Returns it and the per-run CA certificate (PEM) when
/// it intercepts TLS.
pub fn start(
    run: &Arc<Run>,
    zone: &str,
    profile: &ProfilePlan,
    authenticated: bool,
    listener: OwnedFd,
) -> Result<(Proxy, Option<String>), BrokerError> {
    let path = crate::find_helper("wardcell-proxy")?;
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        BrokerError::Sandbox(format!("starting zone '{zone}''s proxy: {what}: {e}"))
    };
    let (mut ours, theirs) = UnixStream::pair().map_err(|e| fail("socketpair", &e))?;
    let child = sys::spawn_with_control(&path, theirs.as_raw_fd()).map_err(|e| fail("exec", &e))?;
    drop(theirs);
    let (done, drained) = std::sync::mpsc::channel();
    let proxy = Proxy {
        child,
        control: ours.try_clone().map_err(|e| fail("control socket", &e))?,
        drained,
    };

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
        credentials,
    };
    protocol::send_hello(&mut ours).map_err(|e| fail("hello", &e))?;
    protocol::expect_hello(&mut ours).map_err(|e| fail("hello", &e))?;
    sys::peer::send_fds(ours.as_raw_fd(), &[listener.as_raw_fd()])
        .map_err(|e| fail("listener", &e))?;
    drop(listener);
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

    // Its events, into the run's log, until it is gone.
    let run = run.clone();
    let zone = zone.to_string();
    std::thread::Builder::new()
        .name(format!("proxy-events-{zone}"))
        .spawn(move || {
            audit_events(&run, &zone, ours);
            let _ = done.send(());
        })
        .map_err(|e| fail("event thread", &e))?;
    Ok((proxy, ca_pem))
}

fn audit_events(run: &Run, zone: &str, mut events: UnixStream) {
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
            Ok(ProxyEvent::Denied { host, port, reason }) => run.record(
                "proxy",
                "proxy.denied",
                json!({"zone": zone, "host": host, "port": port, "reason": reason, "decision": "denied"}),
            ),
            Ok(other) => run.record(
                "proxy",
                "proxy.unexpected",
                json!({"zone": zone, "message": format!("{other:?}")}),
            ),
            Err(_) => return,
        };
        let _ = written;
    }
}
