//! The shim's few calls that need `unsafe`: each block says why it is sound.

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Turn a -1 return into the thread's errno.
fn cerr(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The signals 1 to 31 this process ignores (bit N-1 for signal N), SIGPIPE left out:
/// the Rust runtime ignores it in every program, whatever was inherited.
pub fn ignored_signals() -> u64 {
    let mut set = 0;
    for sig in (1..32).filter(|&s| s != libc::SIGPIPE) {
        // SAFETY: sigaction is plain old data; a null new action only reads the current
        // one into `old`.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0
            && old.sa_sigaction == libc::SIG_IGN
        {
            set |= 1 << (sig - 1);
        }
    }
    set
}

/// Every signal from 1 to 31 ignored if its bit is in `ignored`, else at its default
/// (SIGKILL and SIGSTOP cannot be changed and are skipped).
pub fn set_dispositions(ignored: u64) {
    change_dispositions(!ignored, ignored)
}

/// From the dispositions `now` (bit N-1 set: signal N ignored, else at its default) to
/// `ignored`, touching only the signals that differ.
pub fn change_dispositions(now: u64, ignored: u64) {
    for sig in (1..32)
        .filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP)
        .filter(|&s| (now ^ ignored) & (1 << (s - 1)) != 0)
    {
        let to = if ignored & (1 << (sig - 1)) != 0 {
            libc::SIG_IGN
        } else {
            libc::SIG_DFL
        };
        // SAFETY: SIG_IGN and SIG_DFL install no handler; no memory is involved.
        unsafe { libc::signal(sig, to) };
    }
}

/// Which side of a fork we are on.
pub enum Forked {
    Parent(libc::pid_t),
    Child,
}

/// fork(2). The shim is single-threaded whenever it forks, so the child may allocate.
pub fn fork() -> io::Result<Forked> {
    // SAFETY: fork has no memory-safety preconditions of its own; the hazard is
    // locks held by other threads, and the shim never starts a thread.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// Mark every descriptor from `first` up close-on-exec, so exec leaves only 0, 1, 2.
pub fn cloexec_from(first: u32) -> io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range only changes descriptor flags; no memory is passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    cerr(r).map(drop)
}

/// Close every descriptor of `fds`, a run of consecutive numbers with one `close_range`
/// (the view's thousand host descriptors in a few calls rather than a thousand).
pub fn close_all(fds: Vec<std::os::fd::OwnedFd>) {
    use std::os::fd::IntoRawFd;
    let mut raw: Vec<libc::c_uint> = fds
        .into_iter()
        .map(|f| f.into_raw_fd() as libc::c_uint)
        .collect();
    raw.sort_unstable();
    let mut i = 0;
    while i < raw.len() {
        let mut j = i;
        while j + 1 < raw.len() && raw[j + 1] == raw[j] + 1 {
            j += 1;
        }
        // SAFETY: every number from raw[i] to raw[j] is a descriptor this process owned
        // (taken out of its OwnedFd above, so nothing else closes it); no memory is passed.
        unsafe { libc::syscall(libc::SYS_close_range, raw[i], raw[j], 0 as libc::c_uint) };
        i = j + 1;
    }
}

/// Make `fd` (a terminal) the calling session leader's controlling terminal.
pub fn set_controlling_tty(fd: RawFd) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument (0: do not steal), no pointer.
    let r = unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) };
    cerr(r as libc::c_long).map(drop)
}

/// prctl(PR_SET_DUMPABLE, 0): no same-uid process may ptrace us or read our /proc files.
pub fn set_undumpable() -> io::Result<()> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    cerr(r as libc::c_long).map(drop)
}

/// Set IFF_UP on the loopback interface of our network namespace.
// The request constants' type differs between glibc (`c_ulong`) and musl (`c_int`).
#[allow(clippy::unnecessary_cast)]
const IOCTL_GET_FLAGS: libc::Ioctl = libc::SIOCGIFFLAGS as libc::Ioctl;
#[allow(clippy::unnecessary_cast)]
const IOCTL_SET_FLAGS: libc::Ioctl = libc::SIOCSIFFLAGS as libc::Ioctl;

pub fn loopback_up() -> io::Result<()> {
    // SAFETY: socket() with constant arguments; the fd is closed below on every path.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name and writes ifru_flags inside `req`, which
    // lives for the whole call.
    let mut r = unsafe { libc::ioctl(sock, IOCTL_GET_FLAGS, &mut req) };
    if r == 0 {
        // SAFETY: the kernel just filled ifru_flags, the union member we read and set.
        unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
        // SAFETY: as above; the kernel reads `req`.
        r = unsafe { libc::ioctl(sock, IOCTL_SET_FLAGS, &req) };
    }
    let err = io::Error::last_os_error();
    // SAFETY: `sock` is ours and closed exactly once.
    unsafe { libc::close(sock) };
    if r == 0 {
        Ok(())
    } else {
        Err(err)
    }
}

/// Take ownership of the control socket the broker placed at fd 3.
pub fn control_socket() -> io::Result<std::os::unix::net::UnixStream> {
    use std::os::fd::FromRawFd;
    const CONTROL_FD: RawFd = 3;
    // SAFETY: fstat writes into `st`, which is plain old data; a bad fd is an error.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(CONTROL_FD, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::other("fd 3 is not the broker's socket"));
    }
    // SAFETY: fd 3 is open (fstat succeeded), is a socket, and nothing else in this
    // process owns it: this function is called once, at start-up.
    let sock = unsafe { std::os::unix::net::UnixStream::from_raw_fd(CONTROL_FD) };
    // SAFETY: F_SETFD with FD_CLOEXEC on a descriptor we own.
    cerr(unsafe { libc::fcntl(CONTROL_FD, libc::F_SETFD, libc::FD_CLOEXEC) } as libc::c_long)?;
    Ok(sock)
}

/// The Landlock ABI version this kernel offers (0 when Landlock is unavailable).
pub fn landlock_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer and size 0 and the VERSION flag, the kernel
    // only returns a number; no memory is read or written.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    r.max(0)
}

/// MOUNT_ATTR_RDONLY.
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// MOUNT_ATTR_NOSUID and MOUNT_ATTR_NODEV.
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

const AT_EMPTY_PATH: libc::c_uint = 0x1000;
const AT_RECURSIVE: libc::c_uint = 0x8000;

fn owned(ret: libc::c_long) -> io::Result<std::os::fd::OwnedFd> {
    let fd = cerr(ret)?;
    // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as RawFd) })
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// openat2(2), `O_PATH`, refusing a symbolic link at any component and magic links;
/// with `beneath`, `path` is taken below `dir` and cannot leave it.
pub fn open_nofollow(
    dir: Option<std::os::fd::BorrowedFd<'_>>,
    path: &Path,
) -> io::Result<std::os::fd::OwnedFd> {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
    const RESOLVE_NO_SYMLINKS: u64 = 0x04;
    const RESOLVE_BENEATH: u64 = 0x08;
    use std::os::fd::AsRawFd;
    let (dirfd, rel, beneath) = match dir {
        Some(d) => {
            let rel = path.strip_prefix("/").unwrap_or(path);
            let rel = if rel.as_os_str().is_empty() {
                Path::new(".")
            } else {
                rel
            };
            (d.as_raw_fd(), rel, RESOLVE_BENEATH)
        }
        None => (libc::AT_FDCWD, path, 0),
    };
    let c = c_path(rel)?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | beneath,
    };
    // SAFETY: a C string and an open_how that outlive the call, with its size.
    owned(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    })
}

/// open_tree(2) with OPEN_TREE_CLONE on the object `fd` names: a detached copy of the
/// mount tree there (every mount below it too), to attach elsewhere.
pub fn clone_tree(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE;
    // SAFETY: an empty C string literal and integer flags.
    owned(unsafe { libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), c"".as_ptr(), flags) })
}

/// Set once open_tree_attr(2) answered ENOSYS: not asked again.
static NO_OPEN_TREE_ATTR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// open_tree_attr(2) (Linux 6.15): [`clone_tree`] with the MOUNT_ATTR_* flags `set`
/// applied to every mount of the copy, one call where two were. `None` where it cannot
/// be used (a kernel without it, remembered; or any refusal, so that the two calls it
/// stands for give their own answer).
pub fn clone_tree_attr(fd: std::os::fd::BorrowedFd<'_>, set: u64) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering::Relaxed;
    // The same number on every architecture (new system calls share one table).
    const SYS_OPEN_TREE_ATTR: libc::c_long = 467;
    if NO_OPEN_TREE_ATTR.load(Relaxed) {
        return None;
    }
    let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE;
    let attr = [set, 0u64, 0u64, 0u64];
    // SAFETY: an empty C string literal, integer flags, and a struct mount_attr (four
    // u64s) that outlives the call, with its size.
    let r = unsafe {
        libc::syscall(
            SYS_OPEN_TREE_ATTR,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            attr.as_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    match owned(r) {
        Ok(f) => Some(f),
        Err(e) => {
            if e.raw_os_error() == Some(libc::ENOSYS) {
                NO_OPEN_TREE_ATTR.store(true, Relaxed);
            }
            None
        }
    }
}

/// move_mount(2) of the detached (or attached) mount `from` onto the object `to` names.
pub fn move_mount(
    from: std::os::fd::BorrowedFd<'_>,
    to: std::os::fd::BorrowedFd<'_>,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
    // SAFETY: empty C string literals and integer flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            c"".as_ptr(),
            to.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    cerr(r).map(drop)
}

/// move_mount(2) of the detached mount `from` onto `name` in the directory `dir`, a
/// final symbolic link not followed (no MOVE_MOUNT_T_SYMLINKS), nor an automount.
pub fn move_mount_to(
    from: std::os::fd::BorrowedFd<'_>,
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    let name = c_path(Path::new(name))?;
    // SAFETY: C strings that outlive the call and integer flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            c"".as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    cerr(r).map(drop)
}

/// mount_setattr(2) on the mount `fd` is the root of (and every mount below it when
/// `recursive`).
pub fn mount_setattr_fd(
    fd: std::os::fd::BorrowedFd<'_>,
    set: u64,
    clear: u64,
    recursive: bool,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let attr = [set, clear, 0u64, 0u64];
    let flags = AT_EMPTY_PATH | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: a struct mount_attr (four u64s) that outlives the call, with its size, and
    // an empty C string literal.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            attr.as_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    cerr(r).map(drop)
}

/// A new, detached filesystem of type `fstype` (fsopen, fsconfig, fsmount) with
/// `options` (`key=value`; an empty value sets a flag) and the MOUNT_ATTR_* flags `attrs`.
pub fn new_fs(
    fstype: &std::ffi::CStr,
    options: &[(&str, &str)],
    attrs: u64,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    const FSCONFIG_SET_FLAG: libc::c_uint = 0;
    const FSCONFIG_SET_STRING: libc::c_uint = 1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    // SAFETY: a C string that outlives the call and an integer flag.
    let fs = owned(unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) })?;
    for (k, v) in options {
        let key = c_path(Path::new(k))?;
        let value = c_path(Path::new(v))?;
        let (cmd, value_ptr) = if v.is_empty() {
            (FSCONFIG_SET_FLAG, std::ptr::null())
        } else {
            (FSCONFIG_SET_STRING, value.as_ptr())
        };
        // SAFETY: C strings that outlive the call (or null for a flag).
        let r = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                cmd,
                key.as_ptr(),
                value_ptr,
                0,
            )
        };
        cerr(r)?;
    }
    // SAFETY: integer arguments and null pointers the command does not read.
    let r = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    cerr(r)?;
    // SAFETY: integer arguments.
    owned(unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) })
}

// `closed_at_start()`: which standard descriptors this process was started without.
wardcell_common::closed_stdio_at_start!();

/// PR_CAPBSET_DROP for every capability this kernel knows (0 up to the first number it
/// refuses with EINVAL). Returns how many it knows; an error names the capability.
pub fn drop_bounding_set() -> Result<u32, (u32, io::Error)> {
    for cap in 0..64u32 {
        // SAFETY: prctl with integer arguments only.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if r != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINVAL) && cap > 0 {
                return Ok(cap);
            }
            return Err((cap, e));
        }
    }
    Ok(64)
}

/// The first capability still in the bounding set, reading every one this kernel knows
/// (up to the first it refuses with EINVAL); any other error counts as held.
pub fn first_in_bounding_set() -> Option<u32> {
    for cap in 0..64u32 {
        // SAFETY: prctl with integer arguments only.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) };
        match r {
            0 => {}
            1 => return Some(cap),
            _ if cap > 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) => {
                return None
            }
            _ => return Some(cap),
        }
    }
    None
}

/// PR_CAP_AMBIENT_CLEAR_ALL.
pub fn clear_ambient() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    cerr(r as libc::c_long).map(drop)
}

/// The kernel's capability header and data (version 3: two 32-bit halves per set).
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
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Effective, permitted and inheritable emptied in one capset(2).
pub fn clear_capability_sets() -> io::Result<()> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: a version-3 header and the two data structs that version reads, both
    // alive for the call.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    cerr(r).map(drop)
}

/// This thread's effective, permitted and inheritable sets, as 64-bit masks.
pub fn capability_sets() -> io::Result<[u64; 3]> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: a version-3 header and room for the two data structs the kernel writes.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    cerr(r)?;
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok([
        join(data[0].effective, data[1].effective),
        join(data[0].permitted, data[1].permitted),
        join(data[0].inheritable, data[1].inheritable),
    ])
}
