//! The proxy's one error type: everything that stops it from serving.
//!
//! Each variant carries what it is about (the file, the credential, the allow entry).
//! No variant can hold a secret: credential errors carry the credential's *name* and
//! where the secret comes from, never what was read. `Display` is one line without the
//! `error: ` prefix, because the broker prints it as the run's error.

use std::fmt;
use std::io;
use std::path::PathBuf;

use wardcell_common::protocol::FrameError;

#[derive(Debug)]
pub enum Error {
    /// fd 3 is missing or is not a Unix stream socket.
    ControlFd(String),
    /// The control channel broke or the broker sent something out of turn.
    Control { step: &'static str, err: FrameError },
    /// The listener did not arrive as one fd beside the byte `F`, or is not a TCP listener.
    Listener(String),
    /// An allow-list entry the proxy cannot enforce.
    AllowEntry { entry: String, why: String },
    /// A credential is incomplete or its secret cannot be resolved. `why` never holds the
    /// secret or anything a secret command printed.
    Credential { name: String, why: String },
    /// A credential file that others may read or write, or that is not ours.
    CredentialFile {
        name: String,
        path: PathBuf,
        why: String,
    },
    /// Minting the per-run CA or a leaf certificate.
    Ca(String),
    /// No usable root certificate for verifying upstream servers.
    Roots(String),
    /// Landlock, seccomp or a prctl.
    Confine(String),
    /// Building the async runtime or adopting a descriptor into it.
    Runtime(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ControlFd(why) => write!(
                f,
                "wardcell-proxy: fd 3 is not the broker's control socket ({why}); it is started by wardcell-broker, not by hand"
            ),
            Error::Control { step, err } => {
                write!(f, "wardcell-proxy: control channel, {step}: {err}")
            }
            Error::Listener(why) => write!(f, "wardcell-proxy: the proxy listener: {why}"),
            Error::AllowEntry { entry, why } => write!(
                f,
                "network entry `{entry}`: {why}; write `host:port` or `*.domain:port`"
            ),
            Error::Credential { name, why } => write!(f, "credential {name}: {why}"),
            Error::CredentialFile { name, path, why } => write!(
                f,
                "credential {name}: {} {why}; run `chmod 600 {}` (and make sure you own it)",
                path.display(),
                path.display()
            ),
            Error::Ca(why) => write!(f, "wardcell-proxy: minting the per-run CA: {why}"),
            Error::Roots(why) => write!(
                f,
                "wardcell-proxy: no trusted root certificates to verify upstream servers ({why}); check SSL_CERT_FILE and SSL_CERT_DIR"
            ),
            Error::Confine(why) => write!(f, "wardcell-proxy: confining the proxy: {why}"),
            Error::Runtime(e) => write!(f, "wardcell-proxy: starting the event loop: {e}"),
        }
    }
}

impl std::error::Error for Error {}
