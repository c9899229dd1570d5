//! macOS: what a supervisor concludes from what the kernel and Seatbelt said about a
//! peer (sys/macos/peer.rs asks them). Pure, so that it is unit-tested on every
//! platform; compiled into the broker on macOS only.

/// What macOS says about a peer: the audit token's effective uid and pid, and Seatbelt's
/// answers for that process: may it look up this sandbox's identity name (`own`), and
/// the name no wardcell profile allows (`never`).
#[derive(Debug, Clone, Copy)]
pub struct Answers {
    pub euid: libc::uid_t,
    pub pid: libc::pid_t,
    pub own: bool,
    pub never: bool,
}

/// The macOS supervisor's decision: the caller's pid if it is a process of this sandbox,
/// run by this user; else why not, for the audit log.
pub fn judge(a: Answers, ours: libc::uid_t) -> Result<libc::pid_t, String> {
    super::same_user(a.euid, ours)?;
    wardcell_seatbelt::peer_verdict(a.own, a.never).map_err(|e| format!("peer {} {e}", a.pid))?;
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
}
