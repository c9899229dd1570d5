//! `wardcell-shim --git-config`: one git configuration file a sandbox may have written,
//! parsed where a bug in the parser cannot change what the broker does. The broker
//! starts this mode from the shim it holds open, with the file's bytes on stdin (at most
//! `gitconfig::MAX_FILE`), and reads one `gitconfig::Parsed` frame from stdout; which
//! entries are harmless is the broker's to decide.
//!
//! The whole input is read first; then, on Linux, the process confines itself before it
//! looks at a byte: no new privileges, at most [`MEMORY`] of address space, and a seccomp
//! filter that allows only what reading, writing the answer, memory and exiting need
//! (an allow list: any other call kills the process, x32 and other architectures
//! included). On macOS, a Seatbelt profile that denies everything. The broker reads the
//! answer with a deadline and treats anything else (a crash, a kill, garbage) as a file
//! it could not check.

use std::io::{Read, Write};

use wardcell_common::gitconfig::{Parsed, MAX_FILE};

/// The address space the parser may use: the input, the entries, their frame.
#[cfg(target_os = "linux")]
const MEMORY: u64 = 512 << 20;

pub fn main() -> ! {
    let mut bytes = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(MAX_FILE as u64 + 1)
        .read_to_end(&mut bytes);
    if read.is_err() {
        std::process::exit(2);
    }
    if let Err(e) = confine() {
        wardcell_common::eprintln_line!("error: wardcell-shim --git-config: {e}");
        std::process::exit(3);
    }
    let frame = Parsed::frame_of(&bytes);
    let mut out = std::io::stdout().lock();
    let code = if out.write_all(&frame).and_then(|()| out.flush()).is_ok() {
        0
    } else {
        2
    };
    std::process::exit(code)
}

/// What the parser may still do: memory, its stdio, and exiting.
#[cfg(target_os = "linux")]
const ALLOWED: &[(i64, &str)] = &[
    (
        libc::SYS_read,
        "stdin (read already; a read after is harmless)",
    ),
    (
        libc::SYS_write,
        "the answer on stdout, a panic's line on stderr",
    ),
    (libc::SYS_brk, "memory"),
    (libc::SYS_mmap, "memory"),
    (libc::SYS_munmap, "memory"),
    (libc::SYS_mremap, "memory"),
    (libc::SYS_madvise, "memory"),
    (libc::SYS_rt_sigreturn, "returning from a signal"),
    (libc::SYS_rt_sigprocmask, "a panic's abort"),
    (libc::SYS_sigaltstack, "the runtime's stack overflow guard"),
    (libc::SYS_futex, "the standard library's locks"),
    (libc::SYS_close, "exiting"),
    (libc::SYS_exit, "exiting"),
    (libc::SYS_exit_group, "exiting"),
];

#[cfg(target_os = "linux")]
fn confine() -> Result<(), String> {
    use seccompiler::{SeccompAction, SeccompFilter, TargetArch};
    let limit = nix::sys::resource::Resource::RLIMIT_AS;
    nix::sys::resource::setrlimit(limit, MEMORY, MEMORY).map_err(|e| format!("RLIMIT_AS: {e}"))?;
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let rules = ALLOWED.iter().map(|&(nr, _)| (nr, Vec::new())).collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::KillProcess,
        SeccompAction::Allow,
        arch,
    )
    .map_err(|e| e.to_string())?;
    let program: seccompiler::BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    seccompiler::apply_filter(&program).map_err(|e| format!("seccomp: {e}"))
}

#[cfg(target_os = "macos")]
fn confine() -> Result<(), String> {
    crate::macos::deny_everything()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn the_allow_list_names_each_call_once() {
        let mut nrs: Vec<i64> = super::ALLOWED.iter().map(|&(nr, _)| nr).collect();
        nrs.sort();
        nrs.dedup();
        assert_eq!(nrs.len(), super::ALLOWED.len());
    }
}
