//! One line to the system log: facility authpriv, severity notice, RFC 3164, through
//! `/dev/log` with the `syslog` crate. The broker's audit copy (`[audit] syslog = true`)
//! and the approval plugin use it.

use std::path::Path;

/// Where syslog listens on Linux. Fixed: nothing a sandbox, a request or the environment
/// says moves it.
const SOCKET: &str = "/dev/log";

/// Send `line` as `tag`: one datagram, never waited for; nothing happens where there is
/// no syslog.
pub fn send(tag: &str, line: &str) {
    send_to(Path::new(SOCKET), tag, line);
}

/// [`send`] to the socket at `socket` (tests give their own). Control characters are
/// escaped, so that a sandbox's text cannot forge a line of its own.
fn send_to(socket: &Path, tag: &str, line: &str) {
    let formatter = syslog::Formatter3164 {
        facility: syslog::Facility::LOG_AUTHPRIV,
        hostname: None,
        process: tag.to_string(),
        pid: std::process::id(),
    };
    let Ok(mut logger) = syslog::unix_custom(formatter, socket) else {
        return;
    };
    if let syslog::LoggerBackend::Unix(s) = &logger.backend {
        let _ = s.set_nonblocking(true);
    }
    let _ = logger.notice(crate::text::shown(line));
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
        // <85>: facility authpriv (10 << 3), severity notice (5); then the RFC 3164
        // timestamp and the tag.
        assert!(got.starts_with("<85>"), "{got}");
        assert!(
            got.contains(&format!(" wardcell[{}]: ", std::process::id())),
            "{got}"
        );
        assert!(
            got.ends_with("]: request 0a1b2c3d: git push\\nforged: line"),
            "{got}"
        );
        // No socket: nothing happens, nothing waits.
        send_to(&d.join("absent"), "wardcell", "x");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
