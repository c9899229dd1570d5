//! The client's one error type. Every variant prints as one line after `error: ` and
//! says what to do next; [`Error::exit_code`] maps it to the documented exit codes.

use std::fmt;
use std::io;

use wardcell_config::config::ConfigError;
use wardcell_config::resolve::ResolveError;

#[derive(Debug)]
pub enum Error {
    /// A command that does not work where wardcell runs (the message says why).
    Refused(String),
    /// A usage error clap cannot see (exit code 2).
    Usage(String),
    Config(ConfigError),
    Resolve(ResolveError),
    /// An argument of the command to run is not valid UTF-8.
    NotUtf8 {
        index: usize,
    },
    /// No usable home directory.
    NoHome,
    /// The home directory named is not an existing directory.
    HomeMissing(std::path::PathBuf),
    /// The current directory cannot be determined.
    Cwd(io::Error),
    /// The plan cannot be written as JSON (a path that is not UTF-8).
    Json(String),
    /// Standard output could not be written.
    Stdout(io::Error),
    /// The broker could not be started.
    Launch(String),
    /// `wardcell approvals`: the queue or a request (the message says what to do).
    Approvals(String),
    /// `policy check`: a zone that requires approval, and no plugin to ask.
    NoPlugin(String),
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Refused(msg) | Error::Usage(msg) => f.write_str(msg),
            Error::Config(e @ ConfigError::Read { .. }) => {
                write!(f, "{e}; check the path, or remove --config to use the standard places")
            }
            Error::Config(e) => write!(f, "{e}"),
            Error::Resolve(e) => write!(f, "{e}"),
            Error::NotUtf8 { index } => write!(
                f,
                "argument {index} of the command is not valid UTF-8; wardcell passes commands as UTF-8 text, so rename or re-encode it"
            ),
            Error::NoHome => f.write_str(
                "cannot find your home directory: set HOME to its absolute path",
            ),
            Error::HomeMissing(h) => write!(
                f,
                "your home directory {} does not exist, and wardcell does not create it: create it, or set HOME to one that exists",
                wardcell_common::text::shown(&h.display().to_string())
            ),
            Error::Cwd(e) => write!(
                f,
                "cannot determine the current directory ({e}); cd to a directory that exists"
            ),
            Error::Json(e) => write!(f, "cannot write the plan as JSON: {e}"),
            Error::Stdout(e) => write!(f, "cannot write to standard output: {e}"),
            Error::Launch(m) => write!(f, "could not start the broker: {m}"),
            Error::Approvals(m) => f.write_str(m),
            Error::NoPlugin(zone) => write!(
                f,
                "zone '{zone}' requires approval, but no approval plugin is configured, so every entry into it would be refused: add [approval] plugin = [\"/usr/libexec/wardcell/wardcell-approve\"] (or another plugin), or remove requires_approval"
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Error::Config(e)
    }
}

impl From<ResolveError> for Error {
    fn from(e: ResolveError) -> Self {
        Error::Resolve(e)
    }
}
