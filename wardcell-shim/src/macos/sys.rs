//! The shim's macOS system calls: the control socket, descriptors, SIGPIPE, and
//! Seatbelt's `sandbox_init_with_parameters`.
//!
//! `sandbox_init_with_parameters` is what `sandbox-exec -D` calls; libSystem exports it
//! and Apple's own tools, Chromium and the Bazel/Xcode build sandboxes use it, though
//! <sandbox.h> only declares `sandbox_init`, which takes no parameters. wardcell needs
//! the parameter (the sandbox's identity) and needs the profile applied by the shim
//! itself, after its own setup, so no second binary (`/usr/bin/sandbox-exec`) sits in
//! the path and the profile never appears in an argv (docs/THREAT_MODEL.md).

use std::ffi::{c_char, c_int, CStr, CString};
use std::io;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;

extern "C" {
    fn sandbox_init_with_parameters(
        profile: *const c_char,
        flags: u64,
        parameters: *const *const c_char,
        errorbuf: *mut *mut c_char,
    ) -> c_int;
    fn sandbox_free_error(errorbuf: *mut c_char);
}

/// fd 3, the control socket the broker passed, or why it is not one.
pub fn control_socket() -> io::Result<UnixStream> {
    let st = nix::sys::stat::fstat(3).map_err(io::Error::from)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::other("fd 3 is not a socket"));
    }
    nix::fcntl::fcntl(3, nix::fcntl::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))
        .map_err(io::Error::from)?;
    // SAFETY: fd 3 is open (fstat succeeded), is a socket, and nothing else in this
    // process owns it: the shim takes it once, here, at start.
    Ok(unsafe { UnixStream::from_raw_fd(3) })
}

/// Mark every open descriptor from `first` up close-on-exec (the ones /dev/fd lists).
pub fn cloexec_from(first: c_int) -> io::Result<()> {
    let fds: Vec<c_int> = std::fs::read_dir("/dev/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd >= first)
        .collect();
    for fd in fds {
        match nix::fcntl::fcntl(fd, nix::fcntl::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC)) {
            // The directory's own descriptor, closed by now.
            Ok(_) | Err(nix::errno::Errno::EBADF) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Make terminal `fd` the controlling terminal of this process's new session.
pub fn set_controlling_tty(fd: c_int) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument and touches no memory of ours; a bad
    // descriptor is an error.
    if unsafe { libc::ioctl(fd, libc::TIOCSCTTY.into(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// SIGPIPE at its default (the Rust runtime ignores it; an ignored signal survives exec).
pub fn sigpipe_default() {
    // SAFETY: SIG_DFL installs no handler, so nothing runs in signal context; this
    // process is single-threaded here.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Apply `profile` to this process (and everything it will start), with the identity
/// parameter. Irreversible.
pub fn apply(profile: &str, identity: &str) -> Result<(), String> {
    let profile = CString::new(profile).map_err(|_| "the profile holds a NUL".to_string())?;
    let key = CString::new(wardcell_seatbelt::IDENTITY_PARAM).expect("no NUL");
    let value = CString::new(identity).map_err(|_| "the identity holds a NUL".to_string())?;
    let params: [*const c_char; 3] = [key.as_ptr(), value.as_ptr(), std::ptr::null()];
    let mut err: *mut c_char = std::ptr::null_mut();
    // SAFETY: every pointer is to a NUL-terminated string that outlives the call; the
    // parameter list is key, value, then NULL, as the function reads it; flags 0 means
    // `profile` is profile text; `err` is written only on failure.
    let rc =
        unsafe { sandbox_init_with_parameters(profile.as_ptr(), 0, params.as_ptr(), &mut err) };
    if rc == 0 {
        return Ok(());
    }
    let message = if err.is_null() {
        "sandbox_init_with_parameters failed".to_string()
    } else {
        // SAFETY: on failure `err` points to a NUL-terminated message the library
        // allocated; it is read once and freed with the library's own function.
        unsafe {
            let m = CStr::from_ptr(err).to_string_lossy().into_owned();
            sandbox_free_error(err);
            m
        }
    };
    Err(format!("Seatbelt refused the profile: {message}"))
}

/// Apply `profile` in a throwaway child and report whether it took.
pub fn probe(profile: &str) -> Result<(), String> {
    // SAFETY: the child only applies the profile and exits with _exit; the shim is
    // single-threaded when doctor runs it with --probe.
    match unsafe { nix::unistd::fork() }.map_err(|e| format!("fork: {e}"))? {
        nix::unistd::ForkResult::Child => {
            let code = match apply(profile, "dev.wardcell.sandbox.probe") {
                Ok(()) => 0,
                Err(_) => 1,
            };
            // SAFETY: _exit ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(code) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            match nix::sys::wait::waitpid(child, None).map_err(|e| e.to_string())? {
                nix::sys::wait::WaitStatus::Exited(_, 0) => Ok(()),
                other => Err(format!("the profile was not applied ({other:?})")),
            }
        }
    }
}
