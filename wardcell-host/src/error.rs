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

impl BrokerError {
    /// Where a helper binary of this build is (`wardcell_common::paths::helper`), or why not.
    pub fn helper(name: &str) -> Result<PathBuf, BrokerError> {
        wardcell_common::paths::helper(name).ok_or_else(|| {
            let dir = std::env::current_exe().map(|e| wardcell_common::paths::helper_dir(&e));
            let dir = dir.unwrap_or_default();
            BrokerError::Sandbox(format!(
                "{name} is not in {}, where this build of wardcell keeps its helpers; reinstall wardcell",
                dir.display()
            ))
        })
    }
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

/// Why a sandbox with network cannot start on macOS: its proxy does not run there yet
/// (docs/MACOS.md). `zone` is None for `run --profile`.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
pub fn network_refusal(zone: Option<&str>, profile: &str) -> String {
    let what = match zone {
        Some(z) => format!("zone '{z}' cannot start on macOS: its profile '{profile}' has"),
        None => format!("profile '{profile}' cannot start on macOS: it has"),
    };
    format!("{what} network (network.allow), and wardcell's proxy does not run on macOS yet; use one without network there")
}

#[cfg(test)]
mod tests {
    use super::network_refusal;

    #[test]
    fn a_sandbox_with_network_is_refused_on_macos_in_one_line_naming_it() {
        assert_eq!(
            network_refusal(Some("push"), "git-push"),
            "zone 'push' cannot start on macOS: its profile 'git-push' has network (network.allow), and wardcell's proxy does not run on macOS yet; use one without network there"
        );
        let m = network_refusal(None, "web");
        assert!(m.starts_with("profile 'web' cannot start on macOS"), "{m}");
        assert!(!m.contains('\n'));
    }
}
