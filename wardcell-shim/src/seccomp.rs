//! The seccomp policy of a sandboxed command, kept as reviewed data: every rule carries a
//! one-line reason. `wardcell-seccomp` builds it into one filter and installs it.
//!
//! Three parts, each with its own errno, behind the guard that kills any x32-ABI syscall:
//! 1. EPERM for syscalls (or argument patterns) a sandbox must never use;
//! 2. ENOSYS for clone3, whose flags live behind a pointer a filter cannot read, so libc
//!    falls back to clone(2), whose flags part 1 does check;
//! 3. EAFNOSUPPORT for socket families other than Unix, IPv4 and IPv6, and for MPTCP
//!    (Landlock's TCP rules do not cover it).
//!
//! Everything not named here is allowed: Landlock, namespaces, read-only mounts and the
//! dropped capabilities are the other barriers.

use seccompiler::BpfProgram;
use wardcell_seccomp::{self as filter, Part, Reasoned, ALWAYS_DENIED, NAMESPACE_FLAGS};

/// ioctl requests refused on any descriptor, compared on the low 32 bits of the request.
// The constants are `c_ulong` for glibc and `c_int` for musl.
#[allow(clippy::unnecessary_cast)]
// On x86_64 read only by the test that checks `COMPILED` against them.
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
pub const DENIED_IOCTLS: &Reasoned<u64> = &[
    (
        libc::TIOCSTI as u64,
        "pushing input into a terminal another process reads",
    ),
    (
        libc::TIOCLINUX as u64,
        "console selection can also push input",
    ),
];

/// Socket families a sandbox may create.
// On x86_64 read only by the test that checks `COMPILED` against them.
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
pub const ALLOWED_FAMILIES: &Reasoned<u64> = &[
    (libc::AF_UNIX as u64, "local IPC"),
    (libc::AF_INET as u64, "IPv4 (to the proxy on loopback)"),
    (libc::AF_INET6 as u64, "IPv6 (to the proxy on loopback)"),
];

/// Socket protocols refused whatever the family, compared on the third argument.
// On x86_64 read only by the test that checks `COMPILED` against them.
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
pub const DENIED_PROTOCOLS: &Reasoned<u64> = &[(
    262, // IPPROTO_MPTCP
    "MPTCP: Landlock's TCP bind and connect rules do not apply to it",
)];

/// The sandbox's policy, as one filter: EPERM for what is always refused, for namespace
/// flags and for the terminal ioctls; ENOSYS for clone3; EAFNOSUPPORT for other socket
/// families and for MPTCP.
///
/// On x86_64 the program comes compiled ([`COMPILED`], checked against these tables by
/// the test `the_compiled_filter_is_the_tables`): compiling it cost every sandbox's start
/// about 0.15 ms. Elsewhere it is compiled here.
pub fn policy() -> Result<BpfProgram, String> {
    #[cfg(target_arch = "x86_64")]
    {
        Ok(COMPILED
            .iter()
            .map(|&(code, jt, jf, k)| seccompiler::sock_filter { code, jt, jf, k })
            .collect())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        compile()
    }
}

/// [`policy`], compiled from the tables.
// On x86_64 read only by the test that checks `COMPILED` against them.
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
pub fn compile() -> Result<BpfProgram, String> {
    let mut deny = filter::unconditional(ALWAYS_DENIED);
    deny.insert(libc::SYS_unshare, filter::any_flag(0, NAMESPACE_FLAGS));
    deny.insert(libc::SYS_clone, filter::any_flag(0, NAMESPACE_FLAGS));
    deny.insert(libc::SYS_ioctl, filter::equals_any(1, DENIED_IOCTLS));
    let mut socket_rules = filter::none_of(0, ALLOWED_FAMILIES);
    socket_rules.extend(filter::equals_any(2, DENIED_PROTOCOLS));
    let socket = [(libc::SYS_socket, socket_rules)].into();
    let parts = [
        Part {
            rules: deny,
            errno: libc::EPERM,
        },
        filter::clone3_enosys(),
        Part {
            rules: socket,
            errno: libc::EAFNOSUPPORT,
        },
    ];
    filter::compile(&parts)
}

/// Install a filter made earlier (the shim makes it while it waits for its spec)
/// on the calling thread. no_new_privs must already be set.
pub fn install(compiled: &Result<BpfProgram, String>) -> Result<(), String> {
    filter::install(compiled.as_ref().map_err(Clone::clone)?)
}

// `(code, jt, jf, k)` for each instruction of [`compile`]'s program on x86_64.
#[cfg(target_arch = "x86_64")]
include!("seccomp_compiled.rs");

#[cfg(test)]
mod tests {
    use super::*;

    /// The program the shim installs is the one the reviewed tables compile to. After a
    /// change to the tables or to wardcell-seccomp, regenerate it with
    /// `WARDCELL_BLESS=1 cargo test -p wardcell-shim the_compiled_filter_is_the_tables`.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_compiled_filter_is_the_tables() {
        let fresh: Vec<(u16, u8, u8, u32)> = compile()
            .unwrap()
            .iter()
            .map(|i| (i.code, i.jt, i.jf, i.k))
            .collect();
        if std::env::var_os("WARDCELL_BLESS").is_some() {
            let mut text = String::from(
                "// Generated by `WARDCELL_BLESS=1 cargo test -p wardcell-shim the_compiled_filter_is_the_tables`\n\
                 // from the tables in seccomp.rs; that test fails when the two disagree. Do not edit.\n\
                 #[rustfmt::skip]\n\
                 pub const COMPILED: &[(u16, u8, u8, u32)] = &[\n",
            );
            for (code, jt, jf, k) in &fresh {
                text.push_str(&format!("    ({code:#06x}, {jt}, {jf}, {k:#010x}),\n"));
            }
            text.push_str("];\n");
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/seccomp_compiled.rs");
            std::fs::write(path, text).unwrap();
            return;
        }
        assert_eq!(
            COMPILED,
            &fresh[..],
            "src/seccomp_compiled.rs is stale; regenerate it (see this test's comment)"
        );
        assert_eq!(policy().unwrap(), compile().unwrap());
    }

    #[test]
    fn filters_compile_and_fit() {
        let prog = policy().unwrap();
        assert!(prog.len() < 4096);
        assert_eq!(prog[..3], wardcell_seccomp::X32_GUARD);
    }

    #[test]
    fn every_rule_has_a_reason_and_no_duplicates() {
        filter::check_table(DENIED_IOCTLS).unwrap();
        filter::check_table(ALLOWED_FAMILIES).unwrap();
        filter::check_table(DENIED_PROTOCOLS).unwrap();
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
