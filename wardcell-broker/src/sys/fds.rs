//! Descriptors passed beside frames (SCM_RIGHTS), and which may be a command's stdio.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::cerr;

/// Receive the descriptors sent with a 1-byte message ('F') by SCM_RIGHTS. Exactly
/// `want` descriptors must arrive; anything else is an error saying what came, and every
/// descriptor that did arrive is closed, a truncated control message's included (the
/// kernel installs what fits before it truncates).
pub fn recv_fds(sock: RawFd, want: usize) -> io::Result<Vec<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for 12 descriptors, more than any caller wants, so a surplus is counted.
    let mut space = [0u64; 8];
    // SAFETY: msghdr is plain old data; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&space) as _;
    // SAFETY: recvmsg writes at most iov_len bytes into `byte` and msg_controllen bytes
    // into `space`, and updates `msg`.
    let n = unsafe { libc::recvmsg(sock, &mut msg, super::MSG_CMSG_CLOEXEC) };
    cerr(n as libc::c_long)?;
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control with well-formed headers up to
    // msg_controllen; CMSG_FIRSTHDR/NXTHDR never walk past it.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !c.is_null() {
        // SAFETY: `c` points at a header inside `space`.
        let hdr = unsafe { &*c };
        if hdr.cmsg_level == libc::SOL_SOCKET && hdr.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN(0) is arithmetic.
            let data_len = hdr.cmsg_len as usize - unsafe { libc::CMSG_LEN(0) } as usize;
            // SAFETY: CMSG_DATA points inside `space`, followed by data_len bytes.
            let data = unsafe { libc::CMSG_DATA(c) };
            for i in 0..data_len / std::mem::size_of::<RawFd>() {
                // SAFETY: the data is an unaligned array of descriptors SCM_RIGHTS just
                // installed in our table for us; each is owned (and closed) exactly once.
                let fd = unsafe { (data as *const RawFd).add(i).read_unaligned() };
                // SAFETY: as above.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                // Where recvmsg cannot make them close-on-exec itself (macOS), at once.
                if super::MSG_CMSG_CLOEXEC == 0 {
                    let _ = super::set_cloexec(fd.as_raw_fd());
                }
                fds.push(fd);
            }
        }
        // SAFETY: as for CMSG_FIRSTHDR.
        c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
    }
    let why = if n == 0 {
        "the connection closed before its descriptors arrived".to_string()
    } else if byte[0] != b'F' {
        let got = byte[0];
        format!("expected the descriptor message ('F'), got the byte {got:#04x}")
    } else if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        format!("more than the {want} descriptors expected were sent (the control message was truncated)")
    } else if fds.len() != want {
        format!("expected {want} descriptors, {} arrived", fds.len())
    } else {
        return Ok(fds);
    };
    Err(io::Error::other(why))
}

/// What a descriptor handed to `zone enter` as stdio is, when it is not one a command
/// may be given: only pipes, sockets, character devices and regular files are; an
/// `O_PATH` descriptor or a directory would let the target walk the caller's mount
/// namespace through `/proc/self/fd/N/...`.
pub fn unfit_stdio(fd: BorrowedFd<'_>) -> Option<&'static str> {
    match super::is_path_only(fd) {
        Ok(true) => return Some("an O_PATH descriptor"),
        Ok(false) => {}
        Err(_) => return Some("a descriptor that cannot be inspected"),
    }
    let Ok(st) = nix::sys::stat::fstat(fd.as_raw_fd()) else {
        return Some("a descriptor that cannot be inspected");
    };
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG if kernel_object(fd) => Some("a kernel object, not a file"),
        libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR | libc::S_IFREG => None,
        libc::S_IFDIR => Some("a directory"),
        libc::S_IFBLK => Some("a block device"),
        _ => Some("neither a pipe, a socket, a character device nor a regular file"),
    }
}

/// Whether a "regular file" is one of the kernel's own: a namespace (nsfs), a process
/// (pidfs), an anonymous inode, a file of /proc or /sys, a BPF object. None is a command's
/// stdio; an unreadable file system counts as one.
#[cfg(target_os = "linux")]
fn kernel_object(fd: BorrowedFd<'_>) -> bool {
    const KERNEL: [i64; 6] = [
        0x6e73_6673,
        0x5049_4446,
        0x0904_1934,
        0x9fa0,
        0x6265_6572,
        0xcafe_4a11,
    ];
    let fs = nix::sys::statfs::fstatfs(fd).map(|s| s.filesystem_type().0 as i64);
    fs.map_or(true, |t| KERNEL.contains(&t))
}

#[cfg(not(target_os = "linux"))]
fn kernel_object(_fd: BorrowedFd<'_>) -> bool {
    false
}

/// Send `fds` with the 1-byte message `byte` by SCM_RIGHTS (to a proxy: Linux). At most
/// 12 descriptors, as [`recv_fds`] takes.
#[cfg(any(target_os = "linux", test))]
pub fn send_fds(sock: RawFd, byte: u8, fds: &[RawFd]) -> io::Result<()> {
    let len = std::mem::size_of_val(fds);
    let mut space = [0u64; 8];
    // SAFETY: CMSG_SPACE is arithmetic.
    if fds.is_empty() || unsafe { libc::CMSG_SPACE(len as u32) } as usize > 64 {
        return Err(io::Error::other(
            "between 1 and 12 descriptors are sent at once",
        ));
    }
    let mut byte = [byte];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: msghdr is plain old data; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is arithmetic; checked above to fit in `space`.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(len as u32) } as _;
    // SAFETY: msg_control points at `space`, large enough for one header and `fds`
    // (checked above): CMSG_FIRSTHDR is inside it and CMSG_DATA has room for `len` bytes.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(len as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), len);
    }
    // SAFETY: sendmsg reads the buffers `msg` points at, all alive and initialised.
    cerr(unsafe { libc::sendmsg(sock, &msg, 0) } as libc::c_long).map(drop)
}

/// `stdio` as this process's descriptors 0, 1 and 2 (closed where -1) and `control` as
/// its descriptor 3, each inheritable; async-signal-safe, allocates nothing. False when
/// one could not be placed.
///
/// # Safety
/// Only in a child between fork (or clone3) and exec: it replaces descriptors 0 to 3,
/// which anything else in the process may own.
pub unsafe fn place_for_exec(stdio: [RawFd; 3], control: RawFd) -> bool {
    // SAFETY: as `place`'s, which this function's caller promises.
    let placed = |(target, &src): (usize, &RawFd)| unsafe { place(src, target as RawFd) };
    stdio.iter().enumerate().all(placed) && placed((3, &control))
}

/// `src` as this process's descriptor `target`, inheritable (`target` closed when `src`
/// is -1); async-signal-safe, allocates nothing. False when it could not be placed.
///
/// # Safety
/// As [`place_for_exec`]'s: it replaces `target`, which anything else may own.
pub unsafe fn place(src: RawFd, target: RawFd) -> bool {
    // SAFETY: integer arguments; dup2 onto itself is a no-op, so clear CLOEXEC instead.
    unsafe {
        if src < 0 {
            libc::close(target);
            true
        } else if src == target {
            libc::fcntl(target, libc::F_SETFD, 0) == 0
        } else {
            libc::dup2(src, target) == target
        }
    }
}

/// Every signal from 1 to 31 ignored if its bit is in `ignored` (bit N-1 for signal N),
/// else at its default (SIGKILL and SIGSTOP skipped); async-signal-safe.
///
/// # Safety
/// Only in a child between fork (or clone3) and exec: it drops every handler the
/// process installed.
pub unsafe fn dispositions_for_exec(ignored: u64) {
    for sig in (1..32).filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP) {
        let ignore = ignored & (1 << (sig - 1)) != 0;
        let to = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
        // SAFETY: setting a disposition to SIG_IGN or SIG_DFL is async-signal-safe and
        // installs no handler.
        unsafe { libc::signal(sig, to) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn kernel_objects_are_no_stdio() {
        use std::os::fd::AsFd;
        for k in ["/proc/self/ns/net", "/proc/self/status"] {
            let f = std::fs::File::open(k).unwrap();
            assert_eq!(
                unfit_stdio(f.as_fd()),
                Some("a kernel object, not a file"),
                "{k}"
            );
        }
        let f = std::fs::File::open("/etc/hostname").unwrap();
        assert_eq!(unfit_stdio(f.as_fd()), None);
    }
    use std::os::unix::net::UnixStream;

    #[test]
    fn descriptors_sent_arrive_and_a_wrong_count_is_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let (p, q) = UnixStream::pair().unwrap();
        send_fds(a.as_raw_fd(), b'F', &[p.as_raw_fd(), q.as_raw_fd()]).unwrap();
        let got = recv_fds(b.as_raw_fd(), 2).unwrap();
        assert_eq!(got.len(), 2);
        // What arrived is the same socket: a byte written to it reaches `q`.
        let mut sent = UnixStream::from(got.into_iter().next().unwrap());
        io::Write::write_all(&mut sent, b"x").unwrap();
        let mut byte = [0u8; 1];
        io::Read::read_exact(&mut &q, &mut byte).unwrap();
        assert_eq!(&byte, b"x");
        send_fds(a.as_raw_fd(), b'F', &[p.as_raw_fd()]).unwrap();
        let e = recv_fds(b.as_raw_fd(), 2).unwrap_err();
        assert!(
            e.to_string().contains("expected 2 descriptors, 1 arrived"),
            "{e}"
        );
        assert!(send_fds(a.as_raw_fd(), b'F', &[p.as_raw_fd(); 13]).is_err());
    }
}
