//! Where wardcell's helpers are, and a run's audit log. Where its directories are for a
//! user, and how profile paths expand, are the client's (`wardcell_support::paths`): the
//! broker takes them from the plan.

use std::path::{Path, PathBuf};

use crate::plan::Dirs;

/// Where packaged helper binaries live.
pub const LIBEXEC_DIR: &str = "/usr/libexec/wardcell";

/// Where the package installs the client.
pub const PACKAGED_CLIENT: &str = "/usr/bin/wardcell";

/// A helper binary of this build (the broker, the shim, the proxy): where
/// [`helper_dir`] says, when it is a file there.
pub fn helper(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(helper_dir(&exe).join(name)).filter(|p| p.is_file())
}

/// Where the helpers of the build `exe` belongs to are: beside it (a cargo build, and
/// the package's broker in [`LIBEXEC_DIR`]), or, for the packaged client
/// ([`PACKAGED_CLIENT`]), in [`LIBEXEC_DIR`]. Only there: a build never falls back to
/// another installation's helpers (a client in a build tree never starts the
/// package's), and never looks through `PATH` or an environment variable.
pub fn helper_dir(exe: &Path) -> PathBuf {
    match exe == Path::new(PACKAGED_CLIENT) {
        true => PathBuf::from(LIBEXEC_DIR),
        false => exe.parent().unwrap_or(Path::new("/")).to_path_buf(),
    }
}

/// The directory that holds one run's audit log.
pub fn runs_dir(dirs: &Dirs) -> PathBuf {
    dirs.state.join("runs")
}

/// The audit log of run `run_id`.
pub fn run_log(dirs: &Dirs, run_id: &str) -> PathBuf {
    runs_dir(dirs).join(format!("{run_id}.jsonl"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_come_from_their_own_build_only() {
        let dir = |exe: &str| helper_dir(Path::new(exe));
        assert_eq!(dir("/usr/bin/wardcell"), Path::new(LIBEXEC_DIR));
        assert_eq!(
            dir("/usr/libexec/wardcell/wardcell-broker"),
            Path::new(LIBEXEC_DIR)
        );
        // A build tree's client or broker: its own directory, never the package's.
        assert_eq!(
            dir("/home/u/src/wardcell/target/release/wardcell"),
            Path::new("/home/u/src/wardcell/target/release")
        );
        assert_eq!(dir("/usr/local/bin/wardcell"), Path::new("/usr/local/bin"));
    }
}
