//! Each network-enabled sandbox's proxy: started with the sockets the shim created in
//! the sandbox's network namespace (the proxy's listener, the DNS socket, one listener
//! per egress port, in that order, passed on as they came), told what its zone allows and which credentials it
//! attaches, and heard from for the audit log. The broker never sees a secret: the proxy
//! resolves them itself from the sources the plan names.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::json;

use wardcell_common::plan::{CredentialPlan, ProxySpec, SandboxSpec, ZoneEgress};
use wardcell_common::protocol::{self, ProxyEvent, ShimReport};

use crate::chain::enterable;
use crate::run::Run;
use crate::sys;
use crate::sys::fds::recv_fds;
use wardcell_common::prepared::Asked;
use wardcell_host::error::BrokerError;
use wardcell_host::proxy::Hooks;

/// A running proxy (wardcell_host::proxy): dropping it ends it, after its last events
/// are in the log. Unless it was being retired, its death is audited and said on stderr;
/// the sandbox's listener died with it, so its connections are refused.
pub type Proxy = wardcell_host::proxy::Proxy<sys::Process>;

/// With network: the shim's listener, from inside the sandbox's network namespace, goes
/// to the zone's proxy (started here); the command starts once the proxy serves. Returns
/// the proxy and its CA certificate (PEM) when it intercepts TLS.
pub fn hand_over(
    run: &Arc<Run>,
    control: &mut UnixStream,
    spec: &SandboxSpec,
    asked: &Asked<'_>,
) -> Result<(Proxy, Option<String>), BrokerError> {
    let (profile, authenticated) = (asked.profile, asked.authenticated);
    match protocol::read_frame::<ShimReport>(control)? {
        ShimReport::Listener => {}
        ShimReport::SetupFailed { step, message } => {
            let message = wardcell_host::messages::setup_failed(&step, &message);
            return Err(BrokerError::Refused(message));
        }
        other => {
            let message = format!("the shim answered out of turn: {other:?}");
            return Err(BrokerError::Sandbox(message));
        }
    }
    // The proxy's listener, the DNS socket, one listener per egress port.
    let listeners = recv_fds(control.as_raw_fd(), 2 + spec.egress_ports.len())
        .map_err(|e| BrokerError::Sandbox(format!("the proxy listeners: {e}")))?;
    let zone = asked.zone.unwrap_or("-");
    let exe = run.programs.proxy()?;
    // Only an authenticated zone's proxy gets credentials, and only its profile's, with
    // their commands' programs (held open since the run started), and the roots to trust.
    let credentials = run.plan.credentials.iter();
    let ours = |c: &&CredentialPlan| authenticated && profile.credentials.contains(&c.name);
    let credentials: Vec<_> = credentials.filter(ours).cloned().collect();
    let commands = run.programs.command_fds(&credentials);
    let spec = ProxySpec {
        run_id: run.id.clone(),
        zone: zone.to_string(),
        allow: profile.network.allow.clone(),
        internal: profile.network.internal.clone(),
        credentials,
        roots: run.plan.upstream_roots.clone(),
        trace: wardcell_common::trace::spec(&run.id),
        elsewhere: Vec::from_iter(
            enterable(&run.plan.zones, asked.chain)
                .into_iter()
                .map(ZoneEgress::of),
        ),
    };
    // Its events, into the run's log, until it is gone; then it is reaped.
    let (r, z) = (run.clone(), zone.to_string());
    let (r2, z2) = (run.clone(), zone.to_string());
    let hooks = Hooks {
        events: move |events| audit_events(&r, &z, events),
        died: move |code, signal| died(&r2, &z2, code, signal),
    };
    let spawn = |fd| sys::spawn_with_control(exe, fd).and_then(sys::watch);
    let spawn = |fd| spawn(fd).map(|(_, child)| child);
    let fds = (listeners, commands);
    let started = wardcell_host::proxy::start(spawn, sys::fds::send_fds, fds, spec, hooks);
    started.map_err(|e| e.for_zone(zone))
}

/// The proxy ended while its sandbox runs: audited, and one line on stderr.
fn died(run: &Run, zone: &str, code: Option<i32>, signal: Option<i32>) {
    // Unwritable, it ends the run as every other event does (PROTOCOL 8).
    let fields = json!({"zone": zone, "exit_status": code, "signal": signal});
    let _ = run.record("proxy", "proxy.died", fields);
    let line = wardcell_host::messages::proxy_died(zone, code, signal);
    wardcell_common::eprintln_line!("{line}");
}

/// Write what the proxy reports to the run's log until its stream ends (`true`), or until
/// it sends something out of turn (`false`).
fn audit_events(run: &Run, zone: &str, mut events: UnixStream) -> bool {
    loop {
        let _: io::Result<()> = match protocol::read_frame::<ProxyEvent>(&mut events) {
            Ok(ProxyEvent::Connect {
                host,
                port,
                credential,
                bytes_up,
                bytes_down,
                connections,
            }) => run.record(
                "proxy",
                "proxy.connect",
                json!({
                    "zone": zone, "host": host, "port": port, "credential": credential,
                    "bytes_up": bytes_up, "bytes_down": bytes_down, "decision": "allowed",
                    "connections": connections,
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
                let fields = json!({"zone": zone, "message": format!("{other:?}")});
                let _ = run.record("proxy", "proxy.unexpected", fields);
                return false;
            }
            Err(_) => return true,
        };
    }
}
