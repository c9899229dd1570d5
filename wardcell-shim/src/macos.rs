//! The shim on macOS: no namespaces, no view; a Seatbelt profile made from the same
//! spec confines the command.
//!
//! The broker starts this binary as a plain child (no namespaces) with the control socket
//! at fd 3. It then:
//!
//! 1. says Hello on fd 3, then reads the broker's Hello and the sandbox spec;
//! 2. writes the Seatbelt profile for it (`wardcell_common::seatbelt`) and checks the
//!    sandbox's identity name; either failing refuses the sandbox;
//! 3. waits for the broker's `Proceed` (a run whose proxy intercepts TLS is refused:
//!    the CA bundle has no private place to live without a view);
//! 4. starts a session (with a pty, one whose controlling terminal is the pty, so the
//!    command leads its foreground process group), enters the working directory, marks
//!    every fd above 2 close-on-exec, puts SIGPIPE back at its default;
//! 5. applies the profile with `sandbox_init_with_parameters`, the identity as
//!    `WARDCELL_IDENTITY`: from here on this process and everything it starts carry it,
//!    and it cannot be lifted;
//! 6. execs the command. A failed step or exec is reported on fd 3 and nothing runs.
//!
//! There is no init here: the command replaces the shim, and the broker, its parent,
//! waits for it. Untested on a Mac (this repository's CI is Linux); the profile text it
//! applies is tested on every platform (seatbelt/src/lib.rs).

#[allow(unsafe_code)]
mod sys;

use std::io::Write;

use wardcell_common::protocol::{self, ShimReport, ShimRequest};
use wardcell_seatbelt as seatbelt;

use crate::{exec, greet_broker, read_spec, report, setup_failed};

/// A Seatbelt profile that allows reading files and nothing else (`--git-watch`: its
/// stdio, open already, and memory are left besides).
pub fn read_only() -> Result<(), String> {
    sys::apply(
        "(version 1)\n(deny default)\n(allow file-read*)\n",
        "git-watch",
    )
}

pub fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("--version") => {
            println!("wardcell-shim {}", env!("CARGO_PKG_VERSION"));
            return;
        }
        Some("--probe") => probe(),
        _ => {}
    }

    // 1. The spec.
    let mut control = greet_broker(sys::control_socket());
    let spec = match read_spec(&mut control) {
        Ok(s) => s,
        Err(_) => std::process::exit(1),
    };

    // 2. The profile and the identity it carries.
    let profile = match seatbelt::profile(&spec) {
        Ok(p) => p,
        Err(e) => setup_failed(&mut control, "seatbelt", e),
    };
    if !seatbelt::is_identity(&spec.seatbelt_identity) {
        setup_failed(
            &mut control,
            "seatbelt",
            format!(
                "the broker gave no valid sandbox identity ({:?})",
                spec.seatbelt_identity
            ),
        );
    }

    // 3. The broker's go.
    match protocol::read_frame::<ShimRequest>(&mut control) {
        Ok(ShimRequest::Proceed { ca_pem: None }) => {}
        Ok(ShimRequest::Proceed { ca_pem: Some(_) }) => setup_failed(
            &mut control,
            "start",
            "TLS interception is not available on macOS yet: a zone whose proxy attaches credentials cannot run here".into(),
        ),
        Ok(ShimRequest::Start(_)) => setup_failed(&mut control, "start", "a second Start".into()),
        Err(_) => std::process::exit(1),
    }

    // 4. Session, directory, descriptors, SIGPIPE.
    if let Err(e) = nix::unistd::setsid() {
        setup_failed(&mut control, "setsid", e.to_string());
    }
    if spec.controlling_tty {
        if let Err(e) = sys::set_controlling_tty(wardcell_support::tty::first_std_tty()) {
            setup_failed(&mut control, "terminal", format!("TIOCSCTTY: {e}"));
        }
    }
    if let Err(e) = std::env::set_current_dir(&spec.cwd) {
        setup_failed(
            &mut control,
            "cwd",
            format!(
                "cannot enter the working directory {}: {e}",
                spec.cwd.display()
            ),
        );
    }
    if let Err(e) = sys::cloexec_from(3) {
        setup_failed(&mut control, "descriptors", e.to_string());
    }
    sys::sigpipe_default();

    // 5. Seatbelt, last before exec.
    if let Err(e) = sys::apply(&profile, &spec.seatbelt_identity) {
        setup_failed(&mut control, "seatbelt", e);
    }
    let _ = control.flush();

    // 6. The command.
    let errno = exec(&spec);
    report(&mut control, &ShimReport::ExecFailed { errno });
    std::process::exit(if errno == libc::ENOENT { 127 } else { 126 })
}

/// `--probe`, for `wardcell doctor`: whether this Mac applies a wardcell profile (in a
/// throwaway child), as `key=value` lines.
fn probe() -> ! {
    let spec = wardcell_common::plan::SandboxSpec {
        cwd: "/".into(),
        ..Default::default()
    };
    let result = seatbelt::profile(&spec).and_then(|p| sys::probe(&p));
    match result {
        Ok(()) => println!("seatbelt=ok"),
        Err(e) => println!("seatbelt=failed ({e})"),
    }
    std::process::exit(0)
}
