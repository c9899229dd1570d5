//! Starting a sandbox: clone3 into new user, mount, network, PID and IPC namespaces, then exec
//! the shim with just the capabilities it needs to build the sandbox.
//!
//! Between clone3 and execve the child runs in a copy of the broker that may hold other
//! threads' locks, so it makes only raw system calls on buffers prepared beforehand:
//! no allocation, no locks, no Rust I/O. A failing step exits with
//! [`CHILD_EXIT_BASE`] + the step number, which the broker turns into a message.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use wardcell_host::exe::Exe;

/// Exit status of a child that failed before exec: this plus the failed [`Step`].
pub const CHILD_EXIT_BASE: i32 = 200;

/// The steps between clone3 and exec, numbered for the exit status (named in words by
/// wardcell_host::messages::shim_step).
#[derive(Clone, Copy, Debug)]
#[repr(i32)]
pub enum Step {
    Setgroups = 1,
    UidMap = 2,
    GidMap = 3,
    DeathSignal = 4,
    Capabilities = 5,
    AmbientCapabilities = 6,
    Descriptors = 7,
    Exec = 8,
}

/// Capabilities the shim needs inside its namespace, and drops before the command runs:
/// mounting (CAP_SYS_ADMIN), raising loopback (CAP_NET_ADMIN), emptying the bounding
/// set (CAP_SETPCAP).
const SHIM_CAPS: [u32; 3] = [
    21, /* SYS_ADMIN */
    12, /* NET_ADMIN */
    8,  /* SETPCAP */
];

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

/// Start the shim `exe` holds open (execveat: never its path) as PID 1 of new namespaces with `stdio` as its 0, 1, 2 and `control` as
/// its fd 3, ignoring the signals in `ignored` (bit N-1 for signal N) and every other at
/// its default. The user namespace maps the caller's uid and gid to themselves.
pub fn spawn_sandbox(
    shim: &Exe,
    stdio: [RawFd; 3],
    control: RawFd,
    ignored: u64,
) -> io::Result<crate::sys::Child> {
    // Everything the child needs, prepared while allocation is still allowed.
    // SAFETY: getuid/getgid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let uid_map = format!("{uid} {uid} 1\n");
    let gid_map = format!("{gid} {gid} 1\n");
    let maps = (uid_map.as_bytes(), gid_map.as_bytes());

    let mut pidfd: libc::c_int = -1;
    // SAFETY: clone_args is plain old data; zero is every field's "none".
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = (libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_PIDFD) as u64;
    args.pidfd = &mut pidfd as *mut libc::c_int as u64;
    args.exit_signal = libc::SIGCHLD as u64;
    let size = std::mem::size_of::<libc::clone_args>();
    // SAFETY: clone3 without CLONE_VM and without a stack is fork(2) with namespace
    // flags: the child gets a copy of our memory, so `args` and every buffer above stay
    // valid in both. The child only runs `child_setup`, which never returns.
    let ret = unsafe { libc::syscall(libc::SYS_clone3, &mut args as *mut libc::clone_args, size) };
    match ret {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            // SAFETY: we are the child of a fork-like clone; child_setup upholds the
            // async-signal-safety rule (raw syscalls only) and ends in execve or _exit.
            unsafe { child_setup(shim.as_fd().as_raw_fd(), maps, stdio, control, ignored) }
        }
        pid => {
            // SAFETY: CLONE_PIDFD stored a new descriptor we now own.
            let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
            Ok(crate::sys::Child::new(
                pid as libc::pid_t,
                super::Process(pidfd),
            ))
        }
    }
}

/// Write `data` to the file at `path` in one write. Raw syscalls only.
///
/// # Safety
/// `path` must be NUL-terminated (it is a `&CStr`); safe to call after fork.
unsafe fn write_file(path: &CStr, data: &[u8]) -> bool {
    // SAFETY: `path` is a valid C string.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `data` is valid for `data.len()` bytes.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    // SAFETY: `fd` is ours.
    unsafe { libc::close(fd) };
    n == data.len() as isize
}

/// The child between clone3 and exec.
///
/// # Safety
/// Must only be called in the child of `spawn_sandbox`'s clone3. Uses raw syscalls only.
unsafe fn child_setup(
    shim: RawFd,
    (uid_map, gid_map): (&[u8], &[u8]),
    stdio: [RawFd; 3],
    control: RawFd,
    ignored: u64,
) -> ! {
    let fail = |step: Step| -> ! {
        // SAFETY: _exit is async-signal-safe and never returns.
        unsafe { libc::_exit(CHILD_EXIT_BASE + step as i32) }
    };

    // 1-3. Map our uid and gid to themselves (setgroups must be denied first for an
    //      unprivileged writer; a privileged one may deny it too).
    let maps = [
        (c"/proc/self/setgroups", &b"deny"[..], Step::Setgroups),
        (c"/proc/self/uid_map", uid_map, Step::UidMap),
        (c"/proc/self/gid_map", gid_map, Step::GidMap),
    ];
    for (path, data, step) in maps {
        // SAFETY: C string literals and byte slices that live in our copy of memory.
        if !unsafe { write_file(path, data) } {
            fail(step);
        }
    }

    // 4. Die with the broker: as PID 1 of the namespace, our death ends every process in it.
    // SAFETY: integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        fail(Step::DeathSignal);
    }

    // 5-6. Keep the shim's three capabilities across exec: inheritable, then ambient.
    let mut hdr = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let hdr = &mut hdr as *mut CapHeader;
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes two CapData for version 3 into `data`.
    if unsafe { libc::syscall(libc::SYS_capget, hdr, data.as_mut_ptr()) } != 0 {
        fail(Step::Capabilities);
    }
    data[0].inheritable |= SHIM_CAPS.iter().fold(0, |set, cap| set | 1 << cap);
    // SAFETY: capset reads the header and two CapData.
    if unsafe { libc::syscall(libc::SYS_capset, hdr, data.as_ptr()) } != 0 {
        fail(Step::Capabilities);
    }
    let raise = (libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE);
    for cap in SHIM_CAPS {
        // SAFETY: integer arguments only.
        if unsafe { libc::prctl(raise.0, raise.1, cap as libc::c_ulong, 0, 0) } != 0 {
            fail(Step::AmbientCapabilities);
        }
    }

    // 7. Descriptors: stdio to 0-2 (closed where it is -1), control to 3, everything
    //    else closed on exec (the shim's is 10 or above: wardcell_host::exe).
    //    Signal dispositions: what the command's caller ignored (never SIGPIPE, which the
    //    broker ignores because Rust does) stays ignored, everything else is default.
    // SAFETY: this is the child between clone3 and exec.
    if !unsafe { crate::sys::fds::place_for_exec(stdio, control) } {
        fail(Step::Descriptors);
    }
    // SAFETY: close_range only changes descriptor flags.
    if unsafe { libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 1u32 << 2) } != 0 {
        fail(Step::Descriptors);
    }
    // SAFETY: as above.
    unsafe { crate::sys::fds::dispositions_for_exec(ignored) };

    // 8. Exec the shim, from its descriptor, with an empty environment.
    let argv = [c"wardcell-shim".as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    let (nr, flags) = (libc::SYS_execveat, libc::AT_EMPTY_PATH);
    // SAFETY: argv and envp are NULL-terminated arrays of valid C strings; the path is "".
    unsafe { libc::syscall(nr, shim, c"".as_ptr(), argv.as_ptr(), envp.as_ptr(), flags) };
    fail(Step::Exec)
}

/// What the shim's exit status `code` says failed before it ran, if it died there.
pub fn failed_step(code: i32) -> Option<&'static str> {
    wardcell_host::messages::shim_step(code - CHILD_EXIT_BASE)
}

/// Why creating the namespaces failed, in words (wardcell_host::messages::spawn_failed).
pub fn explain_spawn_error(e: &io::Error) -> String {
    wardcell_host::messages::spawn_failed(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every step the child can fail at has its words, and nothing else does.
    #[test]
    fn each_failed_step_is_named() {
        use Step::*;
        let steps = [
            Setgroups,
            UidMap,
            GidMap,
            DeathSignal,
            Capabilities,
            AmbientCapabilities,
            Descriptors,
            Exec,
        ];
        let named: Vec<_> = steps
            .iter()
            .map(|s| failed_step(CHILD_EXIT_BASE + *s as i32).expect("named"))
            .collect();
        let mut unique = named.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), steps.len(), "{named:?}");
        assert_eq!(
            failed_step(Exec as i32 + CHILD_EXIT_BASE),
            Some("executing wardcell-shim")
        );
        for code in [0, 1, CHILD_EXIT_BASE, CHILD_EXIT_BASE + 9, 127] {
            assert_eq!(failed_step(code), None, "{code}");
        }
    }
}
