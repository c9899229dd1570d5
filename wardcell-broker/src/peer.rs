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

// The macOS decision on a peer, tested everywhere.
#[cfg(any(test, target_os = "macos"))]
mod judge_macos;
#[cfg(target_os = "macos")]
pub use judge_macos::{judge, Answers};

#[cfg(test)]
mod tests {
    /// The identity the macOS broker gives a sandbox (`macos::mark`: the run id, the
    /// sandbox's number, 16 random bytes) is one the shim accepts, for any run and any
    /// number, and differs by each of the three.
    #[test]
    fn every_identity_the_broker_makes_is_one_the_shim_accepts() {
        use wardcell_seatbelt::{identity_name, is_identity};
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
