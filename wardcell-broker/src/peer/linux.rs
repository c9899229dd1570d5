//! Linux: who is calling a supervisor, by the kernel's record.
//!
//! 1. SO_PEERCRED: the uid must be ours.
//! 2. SO_PEERPIDFD: a handle on the very process that connected.
//! 3. Its pid, read from that pidfd; its network namespace, read from /proc: it must be
//!    the sandbox's. A process on the host, or in another run's sandbox, or in another
//!    sandbox of this run, lives in another network namespace.
//! 4. Its working directory and the signals it ignores, from /proc (where a `zone enter`
//!    command will run, and what it starts ignoring, as after an exec).
//! 5. The pidfd is confirmed alive afterwards, so the pid read in 3 and 4 cannot have
//!    been reused by another process in between.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use wardcell_common::plan::SandboxSpec;

use super::Peer;
use crate::sys::peer::{netns_of, peer_cred, peer_pidfd, pid_of_pidfd, NetNs};

/// What every process of a sandbox carries: its network namespace.
pub type Mark = NetNs;
/// What a [`Mark`] is, in words.
pub const MARK: &str = "network namespace";

/// The mark of the sandbox whose shim is `shim`: the network namespace it made.
pub fn mark(shim: libc::pid_t, _run_id: &str, _number: u32) -> std::io::Result<Mark> {
    netns_of(shim)
}

/// Nothing to write into the spec: the shim made the namespace the mark is.
pub fn stamp(_spec: &mut SandboxSpec, _mark: &Mark) {}

pub fn verify(conn: &UnixStream, sandbox: &Mark) -> Result<Peer, String> {
    let cred = peer_cred(conn.as_fd()).map_err(|e| format!("SO_PEERCRED: {e}"))?;
    super::same_user(cred.uid, nix::unistd::getuid().as_raw())?;
    let pidfd = peer_pidfd(conn.as_fd()).map_err(|e| format!("SO_PEERPIDFD: {e}"))?;
    let pid = pid_of_pidfd(pidfd.as_fd()).map_err(|e| format!("peer pid: {e}"))?;
    let ns = netns_of(pid).map_err(|e| format!("peer {pid}'s network namespace: {e}"))?;
    if ns != *sandbox {
        return Err(format!(
            "peer {pid} is not in this sandbox's network namespace"
        ));
    }
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
        .map_err(|e| format!("peer {pid}'s working directory: {e}"))?
        .into_os_string()
        .into_string()
        .map_err(|_| format!("peer {pid}'s working directory is not UTF-8"))?;
    let ignored = wardcell_host::signals::ignored_by(pid);
    if crate::sys::pidfd_send_signal(pidfd.as_fd(), 0).is_err() {
        return Err(format!("peer {pid} exited while it was being checked"));
    }
    Ok(Peer { pid, cwd, ignored })
}
