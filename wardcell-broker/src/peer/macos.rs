//! macOS: who is calling a supervisor, by the kernel's audit token and Seatbelt's answer
//! for it (sys/macos/peer.rs; docs/THREAT_MODEL.md 9.3).
//!
//! 1. `LOCAL_PEERTOKEN`: the audit token of the process that connected;
//! 2. its effective uid must be ours, and Seatbelt must say that it carries this
//!    sandbox's identity and no other's ([`super::judge`]);
//! 3. its working directory, where a `zone enter` command will run. The signals it
//!    ignores are not read here: an entered command starts with every signal at its
//!    default (SIGPIPE included).

use std::os::unix::net::UnixStream;

use wardcell_common::plan::SandboxSpec;
use wardcell_seatbelt as seatbelt;

use super::Peer;
use crate::sys::peer::{answers, cwd_of};

/// What every process of a sandbox carries: the Seatbelt identity its profile alone
/// allows to be looked up.
pub type Mark = String;
/// What a [`Mark`] is, in words.
pub const MARK: &str = "Seatbelt identity";

/// A new identity for sandbox `number` of run `run_id`, with a nonce only the broker and
/// the shim (until exec) hold.
pub fn mark(_shim: libc::pid_t, run_id: &str, number: u32) -> std::io::Result<Mark> {
    let mut nonce = [0u8; 16];
    crate::sys::random_bytes(&mut nonce)?;
    Ok(seatbelt::identity_name(run_id, number, &nonce))
}

/// The shim applies the profile with this identity.
pub fn stamp(spec: &mut SandboxSpec, mark: &Mark) {
    spec.seatbelt_identity = mark.clone();
}

pub fn verify(conn: &UnixStream, identity: &Mark) -> Result<Peer, String> {
    let (euid, pid, own, never) = answers(conn, identity)?;
    let said = super::Answers {
        euid,
        pid,
        own,
        never,
    };
    let pid = super::judge(said, nix::unistd::getuid().as_raw())?;
    let cwd = cwd_of(pid).map_err(|e| format!("peer {pid}'s working directory: {e}"))?;
    Ok(Peer {
        pid,
        cwd,
        ignored: 0,
    })
}
