//! The seccomp policy, kept as reviewed data: every rule carries a one-line reason.
//!
//! Three filters are stacked, because seccompiler gives one action per filter:
//! 1. EPERM for syscalls (or argument patterns) a sandbox must never use, behind a guard
//!    that kills any x32-ABI syscall (same AUDIT_ARCH as x86_64, numbers with bit 30 set,
//!    which would otherwise slip past a filter keyed on x86_64 numbers);
//! 2. ENOSYS for clone3, whose flags live behind a pointer a filter cannot read, so libc
//!    falls back to clone(2), whose flags the first filter does check;
//! 3. EAFNOSUPPORT for socket families other than Unix, IPv4 and IPv6.
//!
//! Everything not named here is allowed: Landlock, namespaces and the dropped
//! capabilities are the other barriers.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Syscalls refused outright, and why.
pub const DENIED: &[(i64, &str)] = &[
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
pub const NAMESPACE_FLAGS: &[(u64, &str)] = &[
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

/// ioctl requests refused on any descriptor, compared on the low 32 bits of the request.
pub const DENIED_IOCTLS: &[(u64, &str)] = &[
    (
        libc::TIOCSTI,
        "pushing input into a terminal another process reads",
    ),
    (libc::TIOCLINUX, "console selection can also push input"),
];

/// Socket families a sandbox may create.
pub const ALLOWED_FAMILIES: &[(u64, &str)] = &[
    (libc::AF_UNIX as u64, "local IPC"),
    (libc::AF_INET as u64, "IPv4 (to the proxy on loopback)"),
    (libc::AF_INET6 as u64, "IPv6 (to the proxy on loopback)"),
];

const X32_SYSCALL_BIT: u32 = 0x4000_0000;

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
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).expect("valid condition")
}

/// One rule per flag: `arg & flag == flag`.
fn any_flag_rules(arg: u8, flags: &[(u64, &str)]) -> Vec<SeccompRule> {
    flags
        .iter()
        .map(|&(f, _)| SeccompRule::new(vec![cond(arg, SeccompCmpOp::MaskedEq(f), f)]).unwrap())
        .collect()
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: i32,
) -> Result<BpfProgram, seccompiler::BackendError> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch(),
    )?;
    filter.try_into()
}

/// The filters, in the order they are installed.
pub fn filters() -> Result<Vec<BpfProgram>, seccompiler::BackendError> {
    // 1. EPERM.
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &(nr, _) in DENIED {
        deny.insert(nr, vec![]);
    }
    deny.insert(libc::SYS_unshare, any_flag_rules(0, NAMESPACE_FLAGS));
    deny.insert(libc::SYS_clone, any_flag_rules(0, NAMESPACE_FLAGS));
    deny.insert(
        libc::SYS_ioctl,
        DENIED_IOCTLS
            .iter()
            .map(|&(req, _)| SeccompRule::new(vec![cond(1, SeccompCmpOp::Eq, req)]).unwrap())
            .collect(),
    );
    let mut first = x32_guard();
    first.extend(compile(deny, libc::EPERM)?);

    // 2. ENOSYS for clone3.
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, vec![]);
    let second = compile(clone3, libc::ENOSYS)?;

    // 3. EAFNOSUPPORT for other socket families: one rule, all "not equal" conditions.
    let mut socket = BTreeMap::new();
    let not_allowed = ALLOWED_FAMILIES
        .iter()
        .map(|&(fam, _)| cond(0, SeccompCmpOp::Ne, fam))
        .collect();
    socket.insert(
        libc::SYS_socket,
        vec![SeccompRule::new(not_allowed).unwrap()],
    );
    let third = compile(socket, libc::EAFNOSUPPORT)?;

    Ok(vec![first, second, third])
}

/// `if (nr & X32_SYSCALL_BIT) kill_process;` placed before seccompiler's program, whose
/// own first instruction reloads what it needs, so its relative jumps are unchanged.
fn x32_guard() -> BpfProgram {
    use seccompiler::sock_filter;
    // BPF_LD | BPF_W | BPF_ABS
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
    const BPF_RET_K: u16 = 0x06;
    const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
    vec![
        sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0, // seccomp_data.nr
        },
        sock_filter {
            code: BPF_JMP_JSET_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_KILL_PROCESS,
        },
    ]
}

/// Install every filter on the calling thread. no_new_privs must already be set.
pub fn install() -> Result<(), String> {
    let progs = filters().map_err(|e| format!("building the seccomp filter: {e}"))?;
    for prog in &progs {
        seccompiler::apply_filter(prog)
            .map_err(|e| format!("installing the seccomp filter: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile_and_fit() {
        let progs = filters().unwrap();
        assert_eq!(progs.len(), 3);
        for p in &progs {
            assert!(p.len() < 4096);
        }
        assert_eq!(progs[0][1].k, X32_SYSCALL_BIT);
    }

    #[test]
    fn every_rule_has_a_reason_and_no_duplicates() {
        let mut seen = std::collections::BTreeSet::new();
        for &(nr, why) in DENIED {
            assert!(!why.is_empty());
            assert!(seen.insert(nr), "syscall {nr} listed twice");
        }
        for (_, why) in NAMESPACE_FLAGS
            .iter()
            .chain(DENIED_IOCTLS)
            .chain(ALLOWED_FAMILIES)
        {
            assert!(!why.is_empty());
        }
    }
}
