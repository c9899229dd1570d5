//! Who is on the other end of a Unix socket, by the kernel's record (Linux).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use crate::sys::cerr;

/// A network namespace, identified as the kernel does: its nsfs device and inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetNs(u64, u64);

/// The network namespace of process `pid` (as numbered in our PID namespace).
pub fn netns_of(pid: libc::pid_t) -> io::Result<NetNs> {
    let m = std::fs::metadata(format!("/proc/{pid}/ns/net"))?;
    Ok(NetNs(m.dev(), m.ino()))
}

/// SO_PEERCRED: the peer's pid, uid and gid when it connected.
pub fn peer_cred(sock: BorrowedFd<'_>) -> io::Result<libc::ucred> {
    // SAFETY: ucred is plain old data.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    // SAFETY: a ucred is what the kernel writes for SO_PEERCRED.
    unsafe { getsockopt(sock, libc::SO_PEERCRED, &mut cred) }?;
    Ok(cred)
}

/// A socket option of `sock` at SOL_SOCKET, written into `value`.
///
/// # Safety
/// `T` must be the type the kernel writes for `option`.
unsafe fn getsockopt<T>(
    sock: BorrowedFd<'_>,
    option: libc::c_int,
    value: &mut T,
) -> io::Result<()> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    let (fd, value) = (sock.as_raw_fd(), (value as *mut T).cast());
    // SAFETY: getsockopt writes at most `len` bytes, the size of `value`.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, option, value, &mut len) };
    cerr(r as libc::c_long).map(drop)
}

/// SO_PEERPIDFD (Linux 6.5): a pidfd for the process that connected.
pub fn peer_pidfd(sock: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    const SO_PEERPIDFD: libc::c_int = 77;
    let mut fd: libc::c_int = -1;
    // SAFETY: the kernel writes one int, a new descriptor, for SO_PEERPIDFD.
    unsafe { getsockopt(sock, SO_PEERPIDFD, &mut fd) }?;
    // SAFETY: the kernel created this descriptor for us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The pid (in our PID namespace) a pidfd refers to, from /proc/self/fdinfo.
pub fn pid_of_pidfd(pidfd: BorrowedFd<'_>) -> io::Result<libc::pid_t> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd()))?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse::<libc::pid_t>().ok())
        .filter(|&p| p > 0)
        .ok_or_else(|| io::Error::other("the process has exited"))
}
