//! wardcell-proxy: one zone's egress, started by the broker, one per zone of a run.
//!
//! It is started with the environment `wardcell run` was started in and the control
//! socket at fd 3, and then:
//!
//! 1. makes itself undumpable, before any secret is in memory;
//! 2. takes fd 3 (a Unix stream socket, made close-on-exec);
//! 3. exchanges Hellos, receives its sockets (SCM_RIGHTS beside the byte `F`: the
//!    explicit proxy's listener, the DNS socket, the transparent egress listeners), the
//!    `Start` spec, and its credential commands' programs (descriptors the broker opened
//!    when the run started);
//! 4. parses the allow-list;
//! 5. resolves every credential's secret (environment, owner-only file, or command,
//!    started from its descriptor);
//! 6. when it has credentials: mints the per-run CA and takes the roots it trusts
//!    upstream from the spec (read by `wardcell run` when the run started);
//! 7. confines itself: no_new_privs, Landlock, seccomp;
//! 8. reports `Ready` (with the CA certificate when it intercepts), or `Failed` and exits 1
//!    if any step from 4 on failed;
//! 9. serves the explicit proxy (front.rs), the sandbox's DNS (nameserver.rs) and
//!    transparent egress (transparent.rs) on a runtime of one or two workers, sending
//!    `Connect` and `Denied` events, until the broker closes the control socket.

// The modules are in the library (src/lib.rs), so that the fuzz targets reach them.
#![forbid(unsafe_code)]

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::Arc;

use wardcell_common::plan::ProxySpec;
use wardcell_common::protocol::ProxyEvent;

use wardcell_proxy::allow::AllowList;
use wardcell_proxy::ca::{self, Ca, Interceptor};
use wardcell_proxy::control::{self, Ended, Events, Sockets};
use wardcell_proxy::credentials::Credentials;
use wardcell_proxy::ctx::Ctx;
use wardcell_proxy::error::Error;
use wardcell_proxy::front;
use wardcell_proxy::names::Names;
use wardcell_proxy::{confine, nameserver, sys, transparent};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    match (args.next().as_deref(), args.next()) {
        (None, _) => {}
        (Some("--version"), None) => {
            println!("wardcell-proxy {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        _ => {
            wardcell_common::eprintln_line!(
                "error: wardcell-proxy takes no arguments; it is started by wardcell-broker"
            );
            return ExitCode::from(2);
        }
    }

    // 1. Undumpable first: nothing of ours is readable through ptrace or /proc from here on.
    sys::single_malloc_arena();
    if let Err(e) = sys::set_undumpable() {
        wardcell_common::eprintln_line!("error: wardcell-proxy: PR_SET_DUMPABLE: {e}");
        return ExitCode::FAILURE;
    }

    // 2. The control socket.
    let fd = match sys::take_control_fd() {
        Ok(fd) => fd,
        Err(why) => return fail_quietly(&Error::ControlFd(why)),
    };

    // 3. Hello, listener, spec.
    let (mut control, sockets, spec, programs) = match control::handshake(fd) {
        Ok(x) => x,
        Err(e) => return fail_quietly(&e),
    };
    wardcell_support::trace::install_from("wardcell-proxy", spec.trace.as_ref());
    tracing::debug!(
        zone = %spec.zone,
        allow = ?spec.allow,
        internal = ?spec.internal,
        credentials = ?spec.credentials.iter().map(|c| &c.name).collect::<Vec<_>>(),
        "spec received"
    );

    // 4 to 7.
    let (ctx_parts, ca_pem) = match prepare(&spec, programs) {
        Ok(x) => x,
        Err(e) => return fail(&mut control, &e),
    };

    // 8. Ready.
    if let Err(e) = control::report(&mut control, &ProxyEvent::Ready { ca_pem }) {
        return fail_quietly(&Error::Control {
            step: "sending Ready",
            err: e,
        });
    }

    tracing::debug!(intercepts = !spec.credentials.is_empty(), "serving");

    // 9. Serve until the broker goes away.
    match serve(control, sockets, spec, ctx_parts) {
        Ok(Ended::BrokerGone) => ExitCode::SUCCESS,
        Ok(Ended::Broken(why)) => {
            wardcell_common::eprintln_line!("error: wardcell-proxy: control channel: {why}");
            ExitCode::FAILURE
        }
        Err(e) => fail_quietly(&e),
    }
}

/// What steps 4 to 6 produce for the server.
struct Prepared {
    allow: AllowList,
    /// What the zones this sandbox may enter allow, for refusals to name them.
    elsewhere: Vec<(String, (AllowList, AllowList))>,
    creds: Credentials,
    intercept: Option<Interceptor>,
    /// The runtime's worker threads (see [`workers`]).
    workers: usize,
}

/// One worker thread on a machine of two CPUs or fewer, two otherwise. An intercepted
/// connection's two sides (TLS to the client, TLS to the server) then run on one thread,
/// not handing each body frame across to the other: on two CPUs, which the client and
/// the server are also using, the hand-offs cost more than the second thread gains
/// (measured: 1.34 s of the proxy's CPU per GiB intercepted with one worker, 1.85 s with
/// two, and less wall time too). Asked before confinement: the answer may need /sys.
fn workers() -> usize {
    match std::thread::available_parallelism() {
        Ok(n) if n.get() <= 2 => 1,
        _ => 2,
    }
}

/// Steps 4 to 7; returns the CA certificate to announce, if intercepting.
fn prepare(spec: &ProxySpec, programs: Vec<OwnedFd>) -> Result<(Prepared, Option<String>), Error> {
    // 4.
    let allow = AllowList::parse(&spec.allow, &spec.internal)?;
    // Advice only: a list that does not parse names no zone.
    let elsewhere = spec.elsewhere.iter().filter_map(|z| {
        let all = AllowList::parse(&z.allow, &z.internal).ok()?;
        let internal = AllowList::parse(&[], &z.internal).ok()?;
        Some((z.zone.clone(), (all, internal)))
    });
    let elsewhere = elsewhere.collect();
    // 5.
    let creds = Credentials::resolve(&spec.credentials, programs)?;
    // 6.
    let intercept = if creds.is_empty() {
        None
    } else {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let hosts = creds.hosts();
        let ca = Ca::mint(&spec.run_id, &spec.zone, &hosts, provider.clone())?;
        let upstream = ca::upstream_config(provider, &spec.roots)?;
        Some(Interceptor { ca, upstream })
    };
    let ca_pem = intercept.as_ref().map(|i| i.ca.pem().to_string());
    let workers = workers();
    // 7.
    confine::confine()?;
    Ok((
        Prepared {
            allow,
            elsewhere,
            creds,
            intercept,
            workers,
        },
        ca_pem,
    ))
}

fn serve(
    control: UnixStream,
    sockets: Sockets,
    spec: ProxySpec,
    p: Prepared,
) -> Result<Ended, Error> {
    // With two workers an intercepted connection decrypts on one side while it encrypts on
    // the other. Threads start after confinement, so they inherit Landlock and seccomp.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(p.workers)
        .enable_io()
        .enable_time()
        // Only name lookups block; a few threads are plenty.
        .max_blocking_threads(4)
        .build()
        .map_err(Error::Runtime)?;
    let ended = rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(sockets.proxy).map_err(Error::Runtime)?;
        let egress = sockets
            .egress
            .into_iter()
            .map(tokio::net::TcpListener::from_std)
            .collect::<Result<Vec<_>, _>>()
            .map_err(Error::Runtime)?;
        let (events, rx) = Events::channel();
        let ctx = Ctx::new(spec.zone, p.allow, p.creds, p.intercept, events);
        let ctx = Arc::new(ctx.with_elsewhere(p.elsewhere));
        let names = Arc::new(Names::default());
        // Every server in one task, so that the broker's end of file stops them all.
        let mut servers = tokio::task::JoinSet::new();
        servers.spawn(front::serve(listener, ctx.clone()));
        servers.spawn(nameserver::serve(sockets.dns, ctx.clone(), names.clone()));
        for l in egress {
            servers.spawn(transparent::serve(l, ctx.clone(), names.clone()));
        }
        drop(ctx);
        let all = tokio::spawn(async move { while servers.join_next().await.is_some() {} });
        Ok(control::run(control, rx, all.abort_handle()).await)
    });
    // Do not wait for a name lookup still blocking on a resolver thread.
    rt.shutdown_background();
    ended
}

/// Tell the broker why, then exit 1.
fn fail(control: &mut UnixStream, e: &Error) -> ExitCode {
    let failed = ProxyEvent::Failed {
        message: e.to_string(),
    };
    if control::report(control, &failed).is_err() {
        wardcell_common::eprintln_line!("error: {e}");
    }
    ExitCode::FAILURE
}

/// The broker cannot be told: say it on stderr, then exit 1.
fn fail_quietly(e: &Error) -> ExitCode {
    wardcell_common::eprintln_line!("error: {e}");
    ExitCode::FAILURE
}
