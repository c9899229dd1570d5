//! The broker's macOS system calls: who is on the other end of a supervisor's socket,
//! by the kernel's audit token and Seatbelt's answer for it.
//!
//! 1. `LOCAL_PEERTOKEN`: the audit token of the process that connected (taken by the
//!    kernel at connect time; a pid is not, a token is not reused);
//! 2. its effective uid must be ours;
//! 3. `sandbox_check_by_audit_token`: may that process look up the sandbox's identity
//!    name (only this sandbox's profile allows it), and is it denied a name every
//!    wardcell profile denies (an unsandboxed process is allowed everything)?
//! 4. its working directory (`proc_pidinfo`), where a `zone enter` command will run.
//!
//! What these answers add up to is decided in `peer::judge` (judge_macos.rs, unit-tested everywhere).
//! Compiled for macOS and checked in CI; untested on a Mac (docs/MACOS.md).

use std::ffi::{c_char, c_int, CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;

use wardcell_seatbelt as seatbelt;

/// `audit_token_t`: eight 32-bit words, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AuditToken {
    val: [u32; 8],
}

/// `SANDBOX_FILTER_GLOBAL_NAME` of libsandbox's `enum sandbox_filter_type`.
const SANDBOX_FILTER_GLOBAL_NAME: c_int = 2;

extern "C" {
    fn sandbox_check_by_audit_token(
        token: AuditToken,
        operation: *const c_char,
        filter: c_int,
        ...
    ) -> c_int;
    /// Or'd into the filter type: ask without logging a violation.
    static SANDBOX_CHECK_NO_REPORT: c_int;
}

#[link(name = "bsm")]
extern "C" {
    fn audit_token_to_euid(token: AuditToken) -> libc::uid_t;
    fn audit_token_to_pid(token: AuditToken) -> libc::pid_t;
}

/// The audit token of the process at the other end of a connected Unix socket.
pub fn peer_token(fd: BorrowedFd<'_>) -> io::Result<AuditToken> {
    let mut token = AuditToken::default();
    let mut len = std::mem::size_of::<AuditToken>() as libc::socklen_t;
    // SAFETY: `token` is a writable buffer of `len` bytes that outlives the call; the
    // kernel writes at most `len` bytes and stores the length it wrote.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_LOCAL,
            libc::LOCAL_PEERTOKEN,
            (&mut token as *mut AuditToken).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != std::mem::size_of::<AuditToken>() {
        return Err(io::Error::other("short audit token"));
    }
    Ok(token)
}

/// The token's effective uid and pid.
pub fn token_ids(token: AuditToken) -> (libc::uid_t, libc::pid_t) {
    // SAFETY: both read fields of the token passed by value; no pointers.
    unsafe { (audit_token_to_euid(token), audit_token_to_pid(token)) }
}

/// Whether Seatbelt lets the token's process look up the Mach global name `name`.
pub fn may_look_up(token: AuditToken, name: &str) -> io::Result<bool> {
    let op = CString::new("mach-lookup").expect("no NUL");
    let name = CString::new(name).map_err(|_| io::Error::other("a NUL in the name"))?;
    // SAFETY: the strings are NUL-terminated and outlive the call; the variadic
    // argument is the one `char *` a GLOBAL_NAME filter takes; the flag is a constant
    // the library exports.
    let rc = unsafe {
        sandbox_check_by_audit_token(
            token,
            op.as_ptr(),
            SANDBOX_FILTER_GLOBAL_NAME | SANDBOX_CHECK_NO_REPORT,
            name.as_ptr(),
        )
    };
    match rc {
        0 => Ok(true),
        1 => Ok(false),
        _ => Err(io::Error::last_os_error()),
    }
}

/// What the kernel and Seatbelt say about the process at the other end of `conn`, for
/// the sandbox whose identity is `identity`: its effective uid and pid, whether it may
/// look up `identity`, and whether it may look up the name no profile allows (what
/// `peer::Answers` holds; `peer::judge` decides).
pub fn answers(
    conn: &UnixStream,
    identity: &str,
) -> Result<(libc::uid_t, libc::pid_t, bool, bool), String> {
    use std::os::fd::AsFd;
    let token = peer_token(conn.as_fd()).map_err(|e| format!("LOCAL_PEERTOKEN: {e}"))?;
    let (euid, pid) = token_ids(token);
    let own = may_look_up(token, identity).map_err(|e| format!("sandbox_check: {e}"))?;
    let never =
        may_look_up(token, seatbelt::NEVER_ALLOWED).map_err(|e| format!("sandbox_check: {e}"))?;
    Ok((euid, pid, own, never))
}

/// The working directory of process `pid`.
pub fn cwd_of(pid: libc::pid_t) -> io::Result<String> {
    // SAFETY: proc_vnodepathinfo is plain old data.
    let mut info: libc::proc_vnodepathinfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::proc_vnodepathinfo>() as c_int;
    // SAFETY: proc_pidinfo writes at most `size` bytes into `info`, which outlives the
    // call, and returns how many it wrote.
    let n = unsafe {
        libc::proc_pidinfo(
            pid,
            libc::PROC_PIDVNODEPATHINFO,
            0,
            (&mut info as *mut libc::proc_vnodepathinfo).cast(),
            size,
        )
    };
    if n != size {
        return Err(io::Error::last_os_error());
    }
    // The path is a NUL-terminated array of MAXPATHLEN bytes (libc splits it in rows).
    // SAFETY: `vip_path` is 32 * 32 contiguous c_chars inside `info`.
    let bytes: &[u8] = unsafe {
        std::slice::from_raw_parts(
            info.pvi_cdir.vip_path.as_ptr().cast::<u8>(),
            std::mem::size_of_val(&info.pvi_cdir.vip_path),
        )
    };
    let path = CStr::from_bytes_until_nul(bytes)
        .map_err(|_| io::Error::other("the working directory's path is not terminated"))?;
    path.to_str()
        .map(str::to_string)
        .map_err(|_| io::Error::other("the working directory is not UTF-8"))
}
