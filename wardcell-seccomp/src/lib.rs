//! The mechanism behind wardcell's seccomp filters, shared by the shim (for sandboxed
//! commands) and the proxy (for itself). What each refuses stays in its own crate, as a
//! reviewed table with a one-line reason per entry; this crate only turns tables into
//! BPF and installs it.
//!
//! seccompiler gives one action per filter, so a policy is a stack of filters, one per
//! errno. The first filter of every stack starts with [`X32_GUARD`]: x32-ABI syscalls
//! share AUDIT_ARCH_X86_64 with numbers that have bit 30 set, and would otherwise slip
//! past rules keyed on x86_64 numbers.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

/// A table of values, each with the reason it is listed.
pub type Reasoned<T> = [(T, &'static str)];

/// Rules keyed by syscall number: a syscall with no rules matches whatever its arguments.
pub type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// Syscalls no wardcell process but the broker ever needs (a sandboxed command, the
/// proxy): refused outright, each with why.
pub const ALWAYS_DENIED: &Reasoned<i64> = &[
    (libc::SYS_setns, "joining another namespace"),
    (
        libc::SYS_mount,
        "changing the mount table could unmask hidden paths",
    ),
    (
        libc::SYS_umount2,
        "unmounting a mask would reveal what it hides",
    ),
    (libc::SYS_pivot_root, "changing the root"),
    (libc::SYS_chroot, "changing the root"),
    (libc::SYS_open_tree, "new mount API: cloning mounts"),
    (libc::SYS_move_mount, "new mount API: attaching mounts"),
    (libc::SYS_fsopen, "new mount API: creating filesystems"),
    (libc::SYS_fsconfig, "new mount API"),
    (libc::SYS_fsmount, "new mount API"),
    (libc::SYS_fspick, "new mount API: reconfiguring mounts"),
    (
        libc::SYS_mount_setattr,
        "changing mount flags such as read-only",
    ),
    (libc::SYS_ptrace, "inspecting or steering other processes"),
    (
        libc::SYS_process_vm_readv,
        "reading another process's memory",
    ),
    (
        libc::SYS_process_vm_writev,
        "writing another process's memory",
    ),
    (
        libc::SYS_io_uring_setup,
        "io_uring bypasses syscall filtering",
    ),
    (
        libc::SYS_io_uring_enter,
        "io_uring bypasses syscall filtering",
    ),
    (
        libc::SYS_io_uring_register,
        "io_uring bypasses syscall filtering",
    ),
    (
        libc::SYS_bpf,
        "loading kernel programs; a large attack surface",
    ),
    (
        libc::SYS_perf_event_open,
        "kernel profiling; a large attack surface and side channels",
    ),
    (
        libc::SYS_keyctl,
        "the kernel keyring is shared beyond the sandbox",
    ),
    (
        libc::SYS_add_key,
        "the kernel keyring is shared beyond the sandbox",
    ),
    (
        libc::SYS_request_key,
        "the kernel keyring is shared beyond the sandbox",
    ),
    (
        libc::SYS_userfaultfd,
        "a tool for widening kernel race windows",
    ),
    (libc::SYS_kexec_load, "replacing the kernel"),
    (libc::SYS_kexec_file_load, "replacing the kernel"),
    (libc::SYS_init_module, "loading kernel modules"),
    (libc::SYS_finit_module, "loading kernel modules"),
    (libc::SYS_delete_module, "unloading kernel modules"),
    (
        libc::SYS_open_by_handle_at,
        "opening files by handle bypasses path checks",
    ),
    (
        libc::SYS_acct,
        "process accounting writes outside the sandbox",
    ),
    (libc::SYS_swapon, "system administration"),
    (libc::SYS_swapoff, "system administration"),
    (libc::SYS_reboot, "system administration"),
    (libc::SYS_syslog, "reading the kernel log"),
];

/// Namespace flags that neither clone(2) nor unshare(2) may carry.
pub const NAMESPACE_FLAGS: &Reasoned<u64> = &[
    (
        libc::CLONE_NEWUSER as u64,
        "new user namespace: regains capabilities",
    ),
    (libc::CLONE_NEWNS as u64, "new mount namespace"),
    (libc::CLONE_NEWPID as u64, "new PID namespace"),
    (libc::CLONE_NEWNET as u64, "new network namespace"),
    (libc::CLONE_NEWUTS as u64, "new UTS namespace"),
    (libc::CLONE_NEWIPC as u64, "new IPC namespace"),
    (libc::CLONE_NEWCGROUP as u64, "new cgroup namespace"),
    (0x80, "new time namespace (CLONE_NEWTIME)"),
];

const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `if (nr & X32_SYSCALL_BIT) kill_process;`. Placed before seccompiler's program, whose
/// own first instruction reloads what it needs, so its relative jumps are unchanged.
pub const X32_GUARD: [sock_filter; 3] = [
    // BPF_LD | BPF_W | BPF_ABS: seccomp_data.nr
    sock_filter {
        code: 0x20,
        jt: 0,
        jf: 0,
        k: 0,
    },
    // BPF_JMP | BPF_JSET | BPF_K
    sock_filter {
        code: 0x45,
        jt: 0,
        jf: 1,
        k: X32_SYSCALL_BIT,
    },
    // BPF_RET | BPF_K: SECCOMP_RET_KILL_PROCESS
    sock_filter {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: 0x8000_0000,
    },
];

fn arch() -> TargetArch {
    #[cfg(target_arch = "x86_64")]
    {
        TargetArch::x86_64
    }
    #[cfg(target_arch = "aarch64")]
    {
        TargetArch::aarch64
    }
    #[cfg(target_arch = "riscv64")]
    {
        TargetArch::riscv64
    }
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> SeccompCondition {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).expect("a valid condition")
}

fn rule(conditions: Vec<SeccompCondition>) -> SeccompRule {
    SeccompRule::new(conditions).expect("a rule with conditions")
}

/// Every syscall of `table`, whatever its arguments.
pub fn unconditional(table: &Reasoned<i64>) -> Rules {
    table.iter().map(|&(nr, _)| (nr, vec![])).collect()
}

/// Matches when argument `arg` has any of `flags` set (one rule per flag, compared on the
/// low 32 bits, where every namespace flag lives).
pub fn any_flag(arg: u8, flags: &Reasoned<u64>) -> Vec<SeccompRule> {
    flags
        .iter()
        .map(|&(f, _)| rule(vec![cond(arg, SeccompCmpOp::MaskedEq(f), f)]))
        .collect()
}

/// Matches when argument `arg` equals one of `values` (low 32 bits).
pub fn equals_any(arg: u8, values: &Reasoned<u64>) -> Vec<SeccompRule> {
    values
        .iter()
        .map(|&(v, _)| rule(vec![cond(arg, SeccompCmpOp::Eq, v)]))
        .collect()
}

/// Matches when argument `arg` equals none of `values`.
pub fn none_of(arg: u8, values: &Reasoned<u64>) -> Vec<SeccompRule> {
    vec![rule(
        values
            .iter()
            .map(|&(v, _)| cond(arg, SeccompCmpOp::Ne, v))
            .collect(),
    )]
}

/// One filter: what `rules` match gets `errno`, everything else is allowed.
pub fn compile(rules: Rules, errno: i32) -> Result<BpfProgram, String> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch(),
    )
    .map_err(|e| format!("building a seccomp filter: {e}"))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("building a seccomp filter: {e}"))
}

/// The first filter of a stack: the x32 guard, then `rules` refused with EPERM.
pub fn first_filter(rules: Rules) -> Result<BpfProgram, String> {
    let mut prog = X32_GUARD.to_vec();
    prog.extend(compile(rules, libc::EPERM)?);
    Ok(prog)
}

/// clone3 keeps its flags behind a pointer no filter can read: ENOSYS makes libc fall
/// back to clone(2), whose flags a filter does check.
pub fn clone3_enosys() -> Result<BpfProgram, String> {
    compile(BTreeMap::from([(libc::SYS_clone3, vec![])]), libc::ENOSYS)
}

/// Install `filters` on the calling thread, in order (threads it starts inherit them).
/// no_new_privs must already be set.
pub fn install(filters: &[BpfProgram]) -> Result<(), String> {
    for prog in filters {
        seccompiler::apply_filter(prog)
            .map_err(|e| format!("installing the seccomp filter: {e}"))?;
    }
    Ok(())
}

/// Every entry has a reason and none is listed twice.
pub fn check_table<T: Ord + Copy + std::fmt::Debug>(table: &Reasoned<T>) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for &(v, why) in table {
        if why.is_empty() {
            return Err(format!("{v:?} has no reason"));
        }
        if !seen.insert(v) {
            return Err(format!("{v:?} is listed twice"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn building_blocks_compile() {
        let mut rules = unconditional(&[(libc::SYS_bpf, "x")]);
        rules.insert(libc::SYS_unshare, any_flag(0, NAMESPACE_FLAGS));
        rules.insert(libc::SYS_ioctl, equals_any(1, &[(0x5412, "TIOCSTI")]));
        rules.insert(libc::SYS_socket, none_of(0, &[(1, "unix"), (2, "inet")]));
        let first = first_filter(rules).unwrap();
        assert_eq!(first[1].k, X32_SYSCALL_BIT);
        assert!(first.len() < 4096);
        clone3_enosys().unwrap();
        check_table(NAMESPACE_FLAGS).unwrap();
        check_table(ALWAYS_DENIED).unwrap();
        assert!(check_table(&[(1i64, "a"), (1, "b")]).is_err());
        assert!(check_table(&[(1i64, "")]).is_err());
    }
}
