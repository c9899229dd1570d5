//! The proxy's seccomp policy, kept as reviewed data: one line of reason per rule.
//!
//! Installed after start-up (secrets resolved, CA minted, roots loaded), so it can be
//! strict about what a network daemon never needs: running programs, inspecting other
//! processes, mounts, namespaces, and the kernel interfaces with the largest attack
//! surface. Three stacked filters, because seccompiler gives one action per filter:
//! 1. kill any x32-ABI syscall (bit 30 set: would slip past rules keyed on x86_64
//!    numbers), then EPERM for the list below;
//! 2. ENOSYS for clone3, whose flags sit behind a pointer no filter can read, so glibc
//!    falls back to clone(2), whose flags filter 1 does check.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

/// Refused outright, with why.
pub const DENIED: &[(i64, &str)] = &[
    (libc::SYS_execve, "the proxy runs no program after start-up"),
    (
        libc::SYS_execveat,
        "the proxy runs no program after start-up",
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
    (libc::SYS_mount, "changing the mount table"),
    (libc::SYS_umount2, "changing the mount table"),
    (libc::SYS_pivot_root, "changing the root"),
    (libc::SYS_chroot, "changing the root"),
    (libc::SYS_open_tree, "new mount API"),
    (libc::SYS_move_mount, "new mount API"),
    (libc::SYS_fsopen, "new mount API"),
    (libc::SYS_fsconfig, "new mount API"),
    (libc::SYS_fsmount, "new mount API"),
    (libc::SYS_fspick, "new mount API"),
    (libc::SYS_mount_setattr, "changing mount flags"),
    (
        libc::SYS_setns,
        "joining another namespace (a sandbox's, say)",
    ),
    (libc::SYS_bpf, "loading kernel programs"),
    (libc::SYS_perf_event_open, "kernel profiling; side channels"),
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
    (libc::SYS_keyctl, "the kernel keyring outlives the proxy"),
    (libc::SYS_add_key, "the kernel keyring outlives the proxy"),
    (
        libc::SYS_request_key,
        "the kernel keyring outlives the proxy",
    ),
    (
        libc::SYS_userfaultfd,
        "a tool for widening kernel race windows",
    ),
    (
        libc::SYS_open_by_handle_at,
        "opening files by handle bypasses path rules",
    ),
    (libc::SYS_kexec_load, "replacing the kernel"),
    (libc::SYS_kexec_file_load, "replacing the kernel"),
    (libc::SYS_init_module, "loading kernel modules"),
    (libc::SYS_finit_module, "loading kernel modules"),
    (libc::SYS_delete_module, "unloading kernel modules"),
];

/// Namespace flags refused in clone(2) and unshare(2).
pub const NAMESPACE_FLAGS: &[(u64, &str)] = &[
    (libc::CLONE_NEWUSER as u64, "new user namespace"),
    (libc::CLONE_NEWNS as u64, "new mount namespace"),
    (libc::CLONE_NEWPID as u64, "new PID namespace"),
    (libc::CLONE_NEWNET as u64, "new network namespace"),
    (libc::CLONE_NEWUTS as u64, "new UTS namespace"),
    (libc::CLONE_NEWIPC as u64, "new IPC namespace"),
    (libc::CLONE_NEWCGROUP as u64, "new cgroup namespace"),
    (0x80, "new time namespace (CLONE_NEWTIME)"),
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

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, String> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch(),
    )
    .map_err(|e| e.to_string())?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// One rule per flag: refused when `arg0 & flag == flag`.
fn namespace_rules() -> Result<Vec<SeccompRule>, String> {
    NAMESPACE_FLAGS
        .iter()
        .map(|&(flag, _)| {
            let c = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )
            .map_err(|e| e.to_string())?;
            SeccompRule::new(vec![c]).map_err(|e| e.to_string())
        })
        .collect()
}

/// The filters, in the order they are installed.
pub fn filters() -> Result<Vec<BpfProgram>, String> {
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&(nr, _)| (nr, vec![])).collect();
    deny.insert(libc::SYS_unshare, namespace_rules()?);
    deny.insert(libc::SYS_clone, namespace_rules()?);
    let mut first = x32_guard();
    first.extend(compile(deny, libc::EPERM)?);

    let clone3 = BTreeMap::from([(libc::SYS_clone3, vec![])]);
    let second = compile(clone3, libc::ENOSYS)?;
    Ok(vec![first, second])
}

/// `if (nr & X32_SYSCALL_BIT) kill_process;`, put before seccompiler's program (which
/// loads what it needs itself, so its jumps are unaffected).
fn x32_guard() -> BpfProgram {
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
    const BPF_RET_K: u16 = 0x06;
    const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
    vec![
        sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        }, // seccomp_data.nr
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

/// Install on the calling thread (threads started later inherit it). The proxy is still
/// single-threaded here, and no_new_privs is already set.
pub fn install() -> Result<(), String> {
    for prog in filters()? {
        seccompiler::apply_filter(&prog)
            .map_err(|e| format!("installing the seccomp filter: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile_and_every_rule_has_a_reason() {
        let progs = filters().unwrap();
        assert_eq!(progs.len(), 2);
        assert!(progs.iter().all(|p| p.len() < 4096));
        let mut seen = std::collections::BTreeSet::new();
        for &(nr, why) in DENIED {
            assert!(!why.is_empty());
            assert!(seen.insert(nr), "syscall {nr} listed twice");
        }
        assert!(NAMESPACE_FLAGS.iter().all(|(_, why)| !why.is_empty()));
    }
}
