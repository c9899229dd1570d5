//! The broker's one error type. Every variant says what it is about; Display is one line.

use std::fmt;
use std::path::PathBuf;

use wardcell_common::protocol::FrameError;

#[derive(Debug)]
pub enum BrokerError {
    /// The launch descriptor or the plan on it was wrong.
    Launch(String),
    /// A directory or file of wardcell's own could not be prepared.
    Dir { path: PathBuf, what: String },
    /// The sandbox could not be started or built.
    Sandbox(String),
    /// The plan asks for something this profile cannot do here.
    Refused(String),
    /// A protocol error with the shim.
    Shim(FrameError),
    /// The run's audit log could not take an event: the run was ended.
    Audit(String),
}

impl fmt::Display for BrokerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BrokerError::Launch(m) => write!(
                f,
                "wardcell-broker is started by `wardcell run`, not by hand: {m}"
            ),
            BrokerError::Dir { path, what } => write!(f, "{}: {what}", path.display()),
            BrokerError::Sandbox(m) => write!(f, "could not start the sandbox: {m}"),
            BrokerError::Refused(m) => write!(f, "{m}"),
            BrokerError::Shim(e) => write!(f, "lost contact with the sandbox: {e}"),
            BrokerError::Audit(why) => {
                write!(f, "{why}; the run was ended rather than go on unaudited")
            }
        }
    }
}

impl From<FrameError> for BrokerError {
    fn from(e: FrameError) -> Self {
        BrokerError::Shim(e)
    }
}
