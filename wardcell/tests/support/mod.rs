//! What the client's own tests share.

use std::path::Path;
use std::process::Command;

/// The client `bin`, where this machine's own `/etc/wardcell` cannot be seen: a tmpfs
/// covers it in a mount namespace of the command's own (a user namespace too when not
/// root), so a test never reads, and never depends on, what is installed here.
pub fn hermetic(bin: &str) -> Command {
    if !Path::new("/etc/wardcell").exists() {
        return Command::new(bin);
    }
    let mut c = Command::new("/usr/bin/unshare");
    if !is_root() {
        c.args(["--user", "--map-current-user"]);
    }
    c.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
        .arg(r#"mount -t tmpfs none /etc/wardcell && exec "$0" "$@""#)
        .arg(bin);
    c
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next().map(|u| u == "0"))
        .unwrap_or(false)
}
