//! `wardcell zone ...`: on the host from zones.toml; inside a sandbox through its
//! supervisor's socket.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use wardcell_common::protocol::{self, ZoneEntry, ZoneRequest, ZoneResponse};

use std::process::ExitCode;

use crate::why::{Rules, Target};

use crate::cli::{ConfigArg, Output, WhyArgs};
use crate::context;
use crate::error::Error;
use crate::output;

/// On the host: every zone of the configuration, sorted by name.
pub fn host_list(config: &ConfigArg, format: Output) -> Result<(), Error> {
    let host = context::load(config.file.as_deref())?;
    match format {
        Output::Text => output::print(&output::zone_table(&host.config)),
        Output::Json => output::print(&output::zone_json(&host.config)?),
    }
}

/// Inside a zone: the name alone, so `$(wardcell zone current)` needs no parsing.
pub fn current(zone: &str) -> Result<(), Error> {
    output::print(&output::shown(zone))
}

/// Connect to this sandbox's supervisor and exchange Hellos.
fn connect(socket: &Path) -> Result<UnixStream, Error> {
    connect_within(socket, None)
}

/// [`connect`], every read and write of the connection bounded by `limit`.
fn connect_within(socket: &Path, limit: Option<Duration>) -> Result<UnixStream, Error> {
    let fail = |e: &dyn std::fmt::Display| {
        Error::Refused(format!(
            "cannot reach this sandbox's supervisor at {}: {e}; the run may be ending",
            socket.display()
        ))
    };
    let mut s = UnixStream::connect(socket).map_err(|e| fail(&e))?;
    s.set_read_timeout(limit)
        .and_then(|()| s.set_write_timeout(limit))
        .map_err(|e| fail(&e))?;
    // The supervisor sends its Hello at once; one that refuses the connection follows it
    // with why and closes, maybe before ours is written.
    let sent = protocol::send_hello(&mut s);
    protocol::expect_hello(&mut s).map_err(|e| fail(&e))?;
    ask(&mut s, |_| sent.map_err(std::io::Error::other))?;
    Ok(s)
}

/// Send a request. A supervisor that refuses the connection (it already serves as many
/// as it may) answers and closes without reading it: then its answer says why, not the
/// failed write.
fn ask(
    s: &mut UnixStream,
    send: impl FnOnce(&mut UnixStream) -> std::io::Result<()>,
) -> Result<(), Error> {
    let Err(e) = send(s) else { return Ok(()) };
    match protocol::read_frame(s) {
        Ok(ZoneResponse::Refused { message }) => Err(Error::Refused(message)),
        _ => Err(Error::Refused(format!("asking the supervisor: {e}"))),
    }
}

fn answer(s: &mut UnixStream) -> Result<ZoneResponse, Error> {
    protocol::read_frame(s).map_err(|e| {
        Error::Refused(format!(
            "the supervisor did not answer ({e}); the run may be ending"
        ))
    })
}

/// A request answered in one frame (`List`, `Why`): its answer, a refusal as the error.
fn exchange(socket: &Path, request: &ZoneRequest) -> Result<ZoneResponse, Error> {
    exchange_within(socket, request, None)
}

fn exchange_within(
    socket: &Path,
    request: &ZoneRequest,
    limit: Option<Duration>,
) -> Result<ZoneResponse, Error> {
    let mut s = connect_within(socket, limit)?;
    ask(&mut s, |s| {
        protocol::write_frame(s, request).map_err(std::io::Error::other)
    })?;
    match answer(&mut s)? {
        ZoneResponse::Refused { message } => Err(Error::Refused(message)),
        other => Ok(other),
    }
}

/// The error for an answer that is not the one the request calls for.
fn out_of_turn(answer: &ZoneResponse) -> Error {
    Error::Refused(format!("the supervisor answered out of turn ({answer:?})"))
}

/// Inside a zone, for completion: the names of the zones this run may enter, or none
/// when the supervisor does not answer within a second.
pub fn enterable(socket: &Path) -> Vec<String> {
    match exchange_within(socket, &ZoneRequest::List, Some(Duration::from_secs(1))) {
        Ok(ZoneResponse::Zones { zones, .. }) => zones.into_iter().map(|z| z.name).collect(),
        _ => Vec::new(),
    }
}

/// Inside a zone: ask the supervisor at `socket` which zones this run may enter.
pub fn inside_list(socket: &Path, format: Output) -> Result<(), Error> {
    let (current, zones) = match exchange(socket, &ZoneRequest::List)? {
        ZoneResponse::Zones { current, zones } => (current, zones),
        other => return Err(out_of_turn(&other)),
    };
    match format {
        Output::Json => {
            // Fields in the spec's order: current, then zones with name, description.
            #[derive(serde::Serialize)]
            struct Listed<'a> {
                current: &'a str,
                zones: &'a [ZoneEntry],
            }
            let text = serde_json::to_string(&Listed {
                current: &current,
                zones: &zones,
            })
            .map_err(|e| Error::Json(e.to_string()))?;
            output::print(&text)
        }
        Output::Text => output::print(&output::inside_zone_table(&current, &zones)),
    }
}

/// Inside a zone: ask the supervisor at `socket` to run `command` in `zone`, and return
/// the command's exit status. stdin, stdout and stderr go with the request, except that
/// one the caller has closed stays closed, and (Linux) a terminal is replaced by a pty
/// of the command's own that the client relays with it (enter_tty.rs); only the exit
/// status comes back.
pub fn inside_enter(socket: &Path, zone: &str, command: Vec<String>) -> Result<u8, Error> {
    tracing::debug!(zone, "asking the supervisor to enter");
    let closed = crate::sys::closed_at_start() & 0b111;
    #[cfg(target_os = "linux")]
    let mut pty = crate::enter_tty::EnterPty::open(closed)?;
    let mut s = connect(socket)?;
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let request = ZoneRequest::Enter {
        zone: zone.to_string(),
        argv: command,
        env,
        closed,
    };
    let open = (0..3).filter(|fd| closed & (1 << fd) == 0);
    #[cfg(target_os = "linux")]
    let fds: Vec<i32> = open
        .map(|fd| pty.as_ref().map_or(fd, |p| p.stand_in(fd)))
        .collect();
    #[cfg(not(target_os = "linux"))]
    let fds: Vec<i32> = open.collect();
    let send = |s: &mut UnixStream| -> std::io::Result<()> {
        protocol::write_frame(s, &request).map_err(std::io::Error::other)?;
        let iov = [std::io::IoSlice::new(b"F")];
        let rights = [ControlMessage::ScmRights(&fds)];
        let cmsg: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
        sendmsg::<()>(s.as_raw_fd(), &iov, cmsg, MsgFlags::empty(), None)?;
        Ok(())
    };
    ask(&mut s, send)?;
    let mut waited = false;
    loop {
        #[cfg(target_os = "linux")]
        if let Some(p) = pty.as_mut() {
            p.sent();
            p.relay_until_answer(&s);
        }
        let response = answer(&mut s)?;
        if let ZoneResponse::Waiting {
            timeout_secs,
            plugin,
        } = &response
        {
            let line = output::waiting_for_approval(zone, *timeout_secs, plugin);
            wardcell_common::eprintln_line!("{line}");
            waited = true;
            continue;
        }
        if response == ZoneResponse::Started {
            if std::mem::take(&mut waited) {
                wardcell_common::eprintln_line!(
                    "wardcell: entering zone '{zone}' was approved; the command starts"
                );
            }
            continue;
        }
        // What the command wrote last shows before any error about it.
        #[cfg(target_os = "linux")]
        if let Some(p) = pty.as_mut() {
            p.drain();
        }
        return match response {
            ZoneResponse::Started | ZoneResponse::Waiting { .. } => continue,
            ZoneResponse::Exited { code } => Ok(code.clamp(0, 255) as u8),
            ZoneResponse::Failed { message, code } => {
                wardcell_common::eprintln_line!("error: {}", output::shown(&message));
                Ok(code.clamp(1, 255) as u8)
            }
            ZoneResponse::Refused { message } => Err(Error::Refused(message)),
            ZoneResponse::Zones { .. } | ZoneResponse::Rules { .. } => Err(Error::Refused(
                "the supervisor answered out of turn".to_string(),
            )),
        };
    }
}

/// Inside a zone: ask the supervisor for this zone's rules and those of the zones this
/// run may enter, and answer `why` from them. Exit status 0 when allowed, 1 when denied.
pub fn inside_why(socket: &Path, why: &WhyArgs) -> Result<ExitCode, Error> {
    let cwd = std::env::current_dir().map_err(Error::Cwd)?;
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    let target = Target::parse(&why.target, why.write, &cwd, &home).map_err(Error::Usage)?;
    let (current, enterable) = match exchange(socket, &ZoneRequest::Why)? {
        ZoneResponse::Rules { current, enterable } => (current, enterable),
        other => return Err(out_of_turn(&other)),
    };
    let mut answer = crate::why::answer(&current, &enterable, &target);
    // The rules name hosts; the proxy also looks at where a name leads (a private
    // address, say). What it would refuse is never called allowed.
    // A host of other characters than a name's or an address's matches no rule, and is
    // not sent to the proxy.
    let plain = |h: &str| {
        h.chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_:*".contains(c))
    };
    if let (true, Target::Net { host, port }) = (answer.allowed, &target) {
        if plain(host) {
            let shown = if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            };
            let zone = current.zone.as_deref().unwrap_or("-");
            let v = ask_proxy(zone, &format!("/check?{shown}"))?;
            if v["allowed"] == false {
                let reason = v["reason"].as_str().unwrap_or("refused");
                answer.allowed = false;
                answer.rule = format!("this sandbox's proxy refuses it: {reason}");
                // The proxies of other zones would look at the same address: only those
                // that list the host under network.internal may reach it.
                let internal_only = |r: &Rules| Rules {
                    allow: r.allow.as_ref().map(|_| Vec::new()),
                    ..r.clone()
                };
                answer.allowed_in = enterable
                    .iter()
                    .filter(|r| r.zone != current.zone)
                    .filter(|r| crate::why::decide(&internal_only(r), &target).allowed)
                    .filter_map(|r| r.zone.clone())
                    .collect();
            }
        }
    }
    output::why(&answer, true, why.output)
}

/// The most of the proxy's answer `zone denials` reads (64 refusals of a host and a
/// reason each take far less).
const DENIALS_MAX: u64 = 1 << 20;

/// Inside a zone: ask this sandbox's own proxy, on the sandbox's loopback, what it
/// refused lately (`http://wardcell.invalid/denials`, answered by the proxy itself).
pub fn inside_denials(zone: &str, format: Output) -> Result<(), Error> {
    let v = ask_proxy(zone, "/denials")?;
    match format {
        Output::Json => {
            let out = serde_json::json!({
                "zone": zone,
                "total": v["total"],
                "recent": v["recent"],
            });
            output::print(&out.to_string())
        }
        Output::Text => output::print(&output::denials_text(zone, &v)),
    }
}

/// `GET http://wardcell.invalid/PATH` of this sandbox's own proxy, on the sandbox's
/// loopback (answered by the proxy itself, front.rs): its JSON answer.
fn ask_proxy(zone: &str, path: &str) -> Result<serde_json::Value, Error> {
    use std::io::{Read, Write};
    let port = wardcell_support::sandbox_env::SANDBOX_PROXY_PORT;
    let mut s = match std::net::TcpStream::connect(("127.0.0.1", port)) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::PermissionDenied
            ) =>
        {
            return Err(Error::Refused(format!(
                "zone '{zone}' has no network, so no proxy refused anything here: every connection fails at once; `wardcell zone why HOST:PORT` says which zones this run may enter reach a host"
            )))
        }
        Err(e) => {
            return Err(Error::Refused(format!(
                "cannot reach this sandbox's proxy at 127.0.0.1:{port}: {e}"
            )))
        }
    };
    let timeout = Some(std::time::Duration::from_secs(5));
    let _ = s.set_read_timeout(timeout);
    let _ = s.set_write_timeout(timeout);
    let fail = |why: String| Error::Refused(format!("asking this sandbox's proxy: {why}"));
    let request = format!(
        "GET http://wardcell.invalid{path} HTTP/1.1\r\nHost: wardcell.invalid\r\nConnection: close\r\n\r\n"
    );
    s.write_all(request.as_bytes())
        .map_err(|e| fail(e.to_string()))?;
    let mut raw = Vec::new();
    s.take(DENIALS_MAX)
        .read_to_end(&mut raw)
        .map_err(|e| fail(e.to_string()))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| fail("no complete answer".into()))?;
    if !head.starts_with("HTTP/1.1 200") {
        let status = head.lines().next().unwrap_or("");
        return Err(fail(format!("it answered {}", output::shown(status))));
    }
    serde_json::from_str(body.trim()).map_err(|e| fail(format!("not JSON: {e}")))
}
