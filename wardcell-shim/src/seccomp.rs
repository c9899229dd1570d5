//! The seccomp policy of a sandboxed command, kept as reviewed data: every rule carries a
//! one-line reason. The filters are built and installed by `wardcell-seccomp`.
//!
//! Three filters are stacked, because seccompiler gives one action per filter:
//! 1. EPERM for syscalls (or argument patterns) a sandbox must never use, behind the guard
//!    that kills any x32-ABI syscall;
//! 2. ENOSYS for clone3, whose flags live behind a pointer a filter cannot read, so libc
//!    falls back to clone(2), whose flags the first filter does check;
//! 3. EAFNOSUPPORT for socket families other than Unix, IPv4 and IPv6.
//!
//! Everything not named here is allowed: Landlock, namespaces, read-only mounts and the
//! dropped capabilities are the other barriers.

use seccompiler::BpfProgram;
use wardcell_seccomp::{self as filter, Reasoned, NAMESPACE_FLAGS};

/// Syscalls refused outright, and why.
pub const DENIED: &Reasoned<i64> = &[
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

/// ioctl requests refused on any descriptor, compared on the low 32 bits of the request.
pub const DENIED_IOCTLS: &Reasoned<u64> = &[
    (
        libc::TIOCSTI,
        "pushing input into a terminal another process reads",
    ),
    (libc::TIOCLINUX, "console selection can also push input"),
];

/// Socket families a sandbox may create.
pub const ALLOWED_FAMILIES: &Reasoned<u64> = &[
    (libc::AF_UNIX as u64, "local IPC"),
    (libc::AF_INET as u64, "IPv4 (to the proxy on loopback)"),
    (libc::AF_INET6 as u64, "IPv6 (to the proxy on loopback)"),
];

/// The filters, in the order they are installed.
pub fn filters() -> Result<Vec<BpfProgram>, String> {
    // 1. EPERM.
    let mut deny = filter::unconditional(DENIED);
    deny.insert(libc::SYS_unshare, filter::any_flag(0, NAMESPACE_FLAGS));
    deny.insert(libc::SYS_clone, filter::any_flag(0, NAMESPACE_FLAGS));
    deny.insert(libc::SYS_ioctl, filter::equals_any(1, DENIED_IOCTLS));
    let first = filter::first_filter(deny)?;
    // 2. ENOSYS for clone3.
    let second = filter::clone3_enosys()?;
    // 3. EAFNOSUPPORT for other socket families.
    let socket = [(libc::SYS_socket, filter::none_of(0, ALLOWED_FAMILIES))].into();
    let third = filter::compile(socket, libc::EAFNOSUPPORT)?;
    Ok(vec![first, second, third])
}

/// Install every filter on the calling thread. no_new_privs must already be set.
pub fn install() -> Result<(), String> {
    filter::install(&filters()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile_and_fit() {
        let progs = filters().unwrap();
        assert_eq!(progs.len(), 3);
        assert!(progs.iter().all(|p| p.len() < 4096));
        assert_eq!(progs[0][..3], wardcell_seccomp::X32_GUARD);
    }

    #[test]
    fn every_rule_has_a_reason_and_no_duplicates() {
        filter::check_table(DENIED).unwrap();
        filter::check_table(DENIED_IOCTLS).unwrap();
        filter::check_table(ALLOWED_FAMILIES).unwrap();
    }
}
