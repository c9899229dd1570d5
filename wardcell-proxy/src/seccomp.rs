//! The proxy's seccomp policy, kept as reviewed data: one line of reason per rule. The
//! filters are built and installed by `wardcell-seccomp`, as the shim's are.
//!
//! Installed after start-up (secrets resolved, CA minted, roots loaded), so it can be
//! strict about what a network daemon never needs: running programs, inspecting other
//! processes, mounts, namespaces, and the kernel interfaces with the largest attack
//! surface. One filter (see `wardcell_seccomp::compile`): the x32 guard; EPERM for the
//! list below and for namespace flags; ENOSYS for clone3, so that libc falls back to
//! clone(2), whose flags the filter checks.

#![forbid(unsafe_code)]

use seccompiler::BpfProgram;
use wardcell_seccomp::{self as filter, Part, Reasoned, ALWAYS_DENIED, NAMESPACE_FLAGS};

/// Refused besides `wardcell_seccomp::ALWAYS_DENIED`, with why.
pub const DENIED: &Reasoned<i64> = &[
    (libc::SYS_execve, "the proxy runs no program after start-up"),
    (
        libc::SYS_execveat,
        "the proxy runs no program after start-up",
    ),
    (
        libc::SYS_splice,
        "tunnelled bytes are copied (tunnel.rs), never spliced; pipes' page sharing is where Dirty Pipe was",
    ),
    (libc::SYS_tee, "the proxy moves no bytes between pipes"),
    (
        libc::SYS_vmsplice,
        "the proxy maps no user memory into pipes",
    ),
];

/// The proxy's policy, as one filter: EPERM for the list below and for namespace flags;
/// ENOSYS for clone3.
pub fn policy() -> Result<BpfProgram, String> {
    let mut deny = filter::unconditional(ALWAYS_DENIED);
    deny.extend(filter::unconditional(DENIED));
    deny.insert(libc::SYS_unshare, filter::any_flag(0, NAMESPACE_FLAGS));
    deny.insert(libc::SYS_clone, filter::any_flag(0, NAMESPACE_FLAGS));
    let parts = [
        Part {
            rules: deny,
            errno: libc::EPERM,
        },
        filter::clone3_enosys(),
    ];
    filter::compile(&parts)
}

/// Install on the calling thread (threads started later inherit it). The proxy is still
/// single-threaded here, and no_new_privs is already set.
pub fn install() -> Result<(), String> {
    filter::install(&policy()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile_and_every_rule_has_a_reason() {
        assert!(policy().unwrap().len() < 4096);
        filter::check_table(DENIED).unwrap();
    }

    /// Numbers above the reviewed table are refused (ENOSYS) by this filter too: the
    /// check right after the syscall number is loaded.
    #[test]
    fn newer_syscalls_are_refused() {
        let prog = policy().unwrap();
        let at = prog
            .iter()
            .position(|i| i.code == 0x25 && i.k == wardcell_seccomp::NEWEST_REVIEWED)
            .expect("the check on the newest reviewed number");
        let ret = &prog[at + 1 + prog[at].jt as usize];
        assert_eq!((ret.code, ret.k), (0x06, 0x0005_0000 | libc::ENOSYS as u32));
    }
}
