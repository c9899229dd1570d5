//! Who is calling a supervisor, by the kernel's record. Nothing a request says about its
//! origin is believed.
//!
//! Every process of a sandbox carries a [`Mark`] the supervisor checks: on Linux the
//! sandbox's network namespace (linux.rs), on macOS its Seatbelt identity (macos.rs).
//! What a check concludes from what the kernel said is decided here, by pure functions.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::{mark, stamp, verify, Mark, MARK};
#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "macos")]
pub use macos::{mark, stamp, verify, Mark, MARK};

/// A verified caller. Made only by verification (`verify`, in this module's platform
/// file): its fields cannot be set anywhere else.
pub struct Peer {
    pid: libc::pid_t,
    cwd: String,
    /// The signals it ignores (bit N-1 for signal N), SIGPIPE left out (the client is a
    /// Rust program: it always ignores it).
    ignored: u64,
}

impl Peer {
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }
    /// Its working directory, read from the kernel at verification.
    pub fn cwd(&self) -> &str {
        &self.cwd
    }
    pub fn ignored(&self) -> u64 {
        self.ignored
    }
}

/// The peer's uid must be ours.
pub fn same_user(theirs: libc::uid_t, ours: libc::uid_t) -> Result<(), String> {
    if theirs != ours {
        return Err(format!("peer uid {theirs} is not {ours}"));
    }
    Ok(())
}

pub use crate::sys::Answers;

/// The macOS supervisor's decision: the caller's pid if it is a process of this sandbox,
/// run by this user; else why not, for the audit log.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
pub fn judge(a: Answers, ours: libc::uid_t) -> Result<libc::pid_t, String> {
    same_user(a.euid, ours)?;
    wardcell_common::seatbelt::peer_verdict(a.own, a.never)
        .map_err(|e| format!("peer {} {e}", a.pid))?;
    Ok(a.pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(euid: u32, own: bool, never: bool) -> Answers {
        Answers {
            euid,
            pid: 4242,
            own,
            never,
        }
    }

    #[test]
    fn only_a_process_of_this_sandbox_run_by_this_user_passes() {
        // This sandbox's process: allowed its identity, denied the name no profile allows.
        assert_eq!(judge(answers(501, true, false), 501), Ok(4242));
        // Another user's process, whatever Seatbelt says.
        assert_eq!(
            judge(answers(0, true, false), 501),
            Err("peer uid 0 is not 501".into())
        );
        // A process outside any sandbox is allowed every lookup.
        assert_eq!(
            judge(answers(501, true, true), 501),
            Err("peer 4242 is not in a wardcell sandbox".into())
        );
        // Another sandbox's process (this run's or another's) is denied this identity.
        assert_eq!(
            judge(answers(501, false, false), 501),
            Err("peer 4242 is not in this sandbox".into())
        );
        // Denied its identity and allowed the other: refused too, never guessed at.
        assert!(judge(answers(501, false, true), 501).is_err());
    }

    /// The identity the macOS broker gives a sandbox (`macos::mark`: the run id, the
    /// sandbox's number, 16 random bytes) is one the shim accepts, for any run and any
    /// number, and differs by each of the three.
    #[test]
    fn every_identity_the_broker_makes_is_one_the_shim_accepts() {
        use wardcell_common::seatbelt::{identity_name, is_identity};
        let run = wardcell_host::runid::new_run_id([0xff; 4]);
        let a = identity_name(&run, u32::MAX, &[0xff; 16]);
        assert!(is_identity(&a), "{a}");
        assert!(is_identity(&identity_name(&run, 1, &[0; 16])));
        let other_run = wardcell_host::runid::new_run_id([0; 4]);
        assert_ne!(a, identity_name(&other_run, u32::MAX, &[0xff; 16]));
        assert_ne!(a, identity_name(&run, 1, &[0xff; 16]));
        assert_ne!(a, identity_name(&run, u32::MAX, &[0xfe; 16]));
    }
}
