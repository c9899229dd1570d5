//! Who is on the other end of a Unix socket, by the kernel's record, and descriptors
//! passed beside frames.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;

use super::cerr;

/// A network namespace, identified as the kernel does: nsfs device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetNs {
    pub dev: u64,
    pub ino: u64,
}

/// The network namespace of process `pid` (as numbered in our PID namespace).
pub fn netns_of(pid: libc::pid_t) -> io::Result<NetNs> {
    let m = std::fs::metadata(format!("/proc/{pid}/ns/net"))?;
    Ok(NetNs {
        dev: m.dev(),
        ino: m.ino(),
    })
}

/// SO_PEERCRED: the peer's pid, uid and gid when it connected.
pub fn peer_cred(sock: BorrowedFd<'_>) -> io::Result<libc::ucred> {
    // SAFETY: ucred is plain old data.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    cerr(r as libc::c_long)?;
    Ok(cred)
}

/// SO_PEERPIDFD (Linux 6.5): a pidfd for the process that connected.
pub fn peer_pidfd(sock: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    const SO_PEERPIDFD: libc::c_int = 77;
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes one int into `fd`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    cerr(r as libc::c_long)?;
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

/// Whether the process behind `pidfd` is still there (a zombie still holds its pid).
pub fn pidfd_alive(pidfd: BorrowedFd<'_>) -> bool {
    super::pidfd_send_signal(pidfd, 0).is_ok()
}

/// Receive the descriptors sent with a 1-byte message ('F') by SCM_RIGHTS. Exactly
/// `want` descriptors must arrive; anything else is an error (and what came is closed).
pub fn recv_fds(sock: RawFd, want: usize) -> io::Result<Vec<OwnedFd>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let msg = recvmsg::<()>(sock, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(io::Error::from)?;
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for fd in raw {
                // SAFETY: SCM_RIGHTS installed these descriptors in our table for us.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
    if msg.bytes != 1 || byte[0] != b'F' || truncated || fds.len() != want {
        return Err(io::Error::other(format!(
            "expected {want} descriptors beside the request, got {}",
            fds.len()
        )));
    }
    Ok(fds)
}

/// Send `fds` with a 1-byte message ('F') by SCM_RIGHTS.
pub fn send_fds(sock: RawFd, fds: &[RawFd]) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let iov = [io::IoSlice::new(b"F")];
    let cmsg = [ControlMessage::ScmRights(fds)];
    sendmsg::<()>(sock, &iov, &cmsg, MsgFlags::empty(), None).map_err(io::Error::from)?;
    Ok(())
}
