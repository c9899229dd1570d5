//! `wardcell zone ...`: on the host from zones.toml; inside a sandbox through its
//! supervisor's socket.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use wardcell_common::protocol::{self, ZoneEntry, ZoneRequest, ZoneResponse};

use crate::cli::{ConfigArg, Output};
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
    let fail = |e: &dyn std::fmt::Display| {
        Error::Refused(format!(
            "cannot reach this sandbox's supervisor at {}: {e}; the run may be ending",
            socket.display()
        ))
    };
    let mut s = UnixStream::connect(socket).map_err(|e| fail(&e))?;
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

/// Inside a zone: ask the supervisor at `socket` which zones this run may enter.
pub fn inside_list(socket: &Path, format: Output) -> Result<(), Error> {
    let mut s = connect(socket)?;
    ask(&mut s, |s| {
        protocol::write_frame(s, &ZoneRequest::List).map_err(std::io::Error::other)
    })?;
    let (current, zones) = match answer(&mut s)? {
        ZoneResponse::Zones { current, zones } => (current, zones),
        ZoneResponse::Refused { message } => return Err(Error::Refused(message)),
        other => {
            return Err(Error::Refused(format!(
                "the supervisor answered out of turn ({other:?})"
            )))
        }
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
    loop {
        #[cfg(target_os = "linux")]
        if let Some(p) = pty.as_mut() {
            p.sent();
            p.relay_until_answer(&s);
        }
        let response = answer(&mut s)?;
        if response == ZoneResponse::Started {
            continue;
        }
        // What the command wrote last shows before any error about it.
        #[cfg(target_os = "linux")]
        if let Some(p) = pty.as_mut() {
            p.drain();
        }
        return match response {
            ZoneResponse::Started => continue,
            ZoneResponse::Exited { code } => Ok(code.clamp(0, 255) as u8),
            ZoneResponse::Failed { message, code } => {
                wardcell_common::eprintln_line!("error: {}", output::shown(&message));
                Ok(code.clamp(1, 255) as u8)
            }
            ZoneResponse::Refused { message } => Err(Error::Refused(message)),
            ZoneResponse::Zones { .. } => Err(Error::Refused(
                "the supervisor answered out of turn".to_string(),
            )),
        };
    }
}
