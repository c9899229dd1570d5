//! One line to the system log: facility authpriv, severity notice, RFC 3164, through
//! `/dev/log`. The broker's audit copy (`[audit] syslog = true`) and the approval plugin
//! use it. Written here rather than with the `syslog` crate, whose nine crates (a
//! calendar among them) were a quarter of the broker's dependency graph for one
//! datagram a line (issue 22).

use std::io::Write;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::Path;

/// Where syslog listens on Linux. Fixed: nothing a sandbox, a request or the environment
/// says moves it.
const SOCKET: &str = "/dev/log";

/// Facility authpriv (10 << 3), severity notice (5).
const PRIORITY: u8 = 85;

/// Send `line` as `tag`: one datagram, never waited for; nothing happens where there is
/// no syslog.
pub fn send(tag: &str, line: &str) {
    send_to(Path::new(SOCKET), tag, line);
}

/// [`send`] to the socket at `socket` (tests give their own). Control characters are
/// escaped, so that a sandbox's text cannot forge a line of its own. No timestamp or
/// host name: the local daemon stamps what it receives, in its own time zone (RFC 3164,
/// 4.3.1), as rsyslog and journald do for glibc's `syslog(3)` lines without a host.
fn send_to(socket: &Path, tag: &str, line: &str) {
    let message = format!(
        "<{PRIORITY}>{tag}[{}]: {}",
        std::process::id(),
        wardcell_common::text::shown(line)
    );
    let datagram = UnixDatagram::unbound().and_then(|s| {
        s.set_nonblocking(true)?;
        s.send_to(message.as_bytes(), socket)
    });
    // A daemon listening on a stream socket instead: one line, newline-ended.
    if datagram.is_err() {
        if let Ok(mut s) = UnixStream::connect(socket) {
            let _ = s.set_nonblocking(true);
            let _ = s.write_all(format!("{message}\n").as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_with_the_facility_and_none_where_there_is_no_syslog() {
        let d = std::env::temp_dir().join(format!("wardcell-syslog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let sock = d.join("log");
        let server = std::os::unix::net::UnixDatagram::bind(&sock).unwrap();
        send_to(
            &sock,
            "wardcell",
            "request 0a1b2c3d: git push\nforged: line",
        );
        let mut buf = [0u8; 512];
        let n = server.recv(&mut buf).unwrap();
        let got = String::from_utf8_lossy(&buf[..n]).into_owned();
        // <85>: facility authpriv (10 << 3), severity notice (5); then the tag.
        assert!(
            got.starts_with(&format!("<85>wardcell[{}]: ", std::process::id())),
            "{got}"
        );
        assert!(
            got.ends_with("]: request 0a1b2c3d: git push\\nforged: line"),
            "{got}"
        );
        // A stream socket: the same line, newline-ended.
        let stream = d.join("stream");
        let listener = std::os::unix::net::UnixListener::bind(&stream).unwrap();
        send_to(&stream, "wardcell", "one");
        let mut got = String::new();
        std::io::Read::read_to_string(&mut listener.accept().unwrap().0, &mut got).unwrap();
        assert_eq!(got, format!("<85>wardcell[{}]: one\n", std::process::id()));
        // No socket: nothing happens, nothing waits.
        send_to(&d.join("absent"), "wardcell", "x");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
