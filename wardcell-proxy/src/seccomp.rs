//! The proxy's seccomp policy, kept as reviewed data: one line of reason per rule. The
//! filters are built and installed by `wardcell-seccomp`, as the shim's are.
//!
//! Installed after start-up (secrets resolved, CA minted, roots loaded), so it can be
//! strict about what a network daemon never needs: running programs, inspecting other
//! processes, mounts, namespaces, and the kernel interfaces with the largest attack
//! surface. Two stacked filters, because seccompiler gives one action per filter:
//! 1. the x32 guard, then EPERM for the list below and for namespace flags;
//! 2. ENOSYS for clone3, so that glibc falls back to clone(2), which filter 1 checks.

#![forbid(unsafe_code)]

use seccompiler::BpfProgram;
use wardcell_seccomp::{self as filter, Reasoned, ALWAYS_DENIED, NAMESPACE_FLAGS};

/// Refused besides `wardcell_seccomp::ALWAYS_DENIED`, with why.
pub const DENIED: &Reasoned<i64> = &[
    (libc::SYS_execve, "the proxy runs no program after start-up"),
    (
        libc::SYS_execveat,
        "the proxy runs no program after start-up",
    ),
];

/// The filters, in the order they are installed.
pub fn filters() -> Result<Vec<BpfProgram>, String> {
    let mut deny = filter::unconditional(ALWAYS_DENIED);
    deny.extend(filter::unconditional(DENIED));
    deny.insert(libc::SYS_unshare, filter::any_flag(0, NAMESPACE_FLAGS));
    deny.insert(libc::SYS_clone, filter::any_flag(0, NAMESPACE_FLAGS));
    Ok(vec![filter::first_filter(deny)?, filter::clone3_enosys()?])
}

/// Install on the calling thread (threads started later inherit it). The proxy is still
/// single-threaded here, and no_new_privs is already set.
pub fn install() -> Result<(), String> {
    filter::install(&filters()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile_and_every_rule_has_a_reason() {
        let progs = filters().unwrap();
        assert_eq!(progs.len(), 2);
        assert!(progs.iter().all(|p| p.len() < 4096));
        filter::check_table(DENIED).unwrap();
    }
}
