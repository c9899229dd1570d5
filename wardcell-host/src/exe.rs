//! The programs a run starts outside every sandbox (the shim, the proxy, the approval
//! plugin, credential commands): each opened once when the run starts, before any sandbox
//! runs a command, and started from that descriptor (the broker's `sys`: execveat on
//! Linux), never looked up by path again. Replacing the file later, or a directory above
//! it, changes nothing the run starts; writing it in place is refused in every view,
//! which binds it read-only where a tree is writable (`Plan::pinned`, found by the
//! plan writer; `pinned_in` checks it holds every program opened here).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use wardcell_common::helper;
use wardcell_common::plan::{CredentialPlan, Plan, SecretPlan};

use crate::error::BrokerError;

/// A program held open: what runs when it is started, whatever its path names by then.
#[derive(Debug)]
pub struct Exe {
    /// Where it was when the run started (canonical): argv[0], messages, the views' pins.
    pub path: PathBuf,
    fd: OwnedFd,
}

impl Exe {
    /// Open the program at `path` (helper::open_program), recorded at its canonical path,
    /// which must still name the file opened; its descriptor is numbered 10 or above.
    pub fn open(path: &Path) -> Result<Exe, String> {
        let shown = |e: io::Error| format!("{}: {e}", path.display());
        let file = helper::open_program(path)?;
        let real = std::fs::canonicalize(path).map_err(shown)?;
        let (now, held) = (std::fs::symlink_metadata(&real), file.metadata());
        let id = |m: std::fs::Metadata| (m.dev(), m.ino());
        if !matches!((now.map(id), held.map(id)), (Ok(a), Ok(b)) if a == b) {
            return Err(format!(
                "{} changed while it was being opened",
                path.display()
            ));
        }
        let fd = above_stdio(file.into()).map_err(shown)?;
        Ok(Exe { path: real, fd })
    }

    pub fn try_clone(&self) -> io::Result<Exe> {
        let fd = self.fd.try_clone()?;
        Ok(Exe {
            path: self.path.clone(),
            fd,
        })
    }
}

/// `fd`, numbered 10 or above: a helper's child places descriptors at 0 to 3 before it
/// starts the program from this one (the broker may have started without its standard
/// descriptors, and its fd 3 is free once the plan is taken). Copies are made until one
/// is, the lower ones closed.
fn above_stdio(mut fd: OwnedFd) -> io::Result<OwnedFd> {
    let mut lower = Vec::new();
    while fd.as_raw_fd() < 10 {
        let copy = fd.try_clone()?;
        lower.push(std::mem::replace(&mut fd, copy));
    }
    Ok(fd)
}

impl AsFd for Exe {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Every program a run may start, opened when it starts.
#[derive(Debug)]
pub struct Programs {
    pub shim: Exe,
    /// When a profile of the run has network.
    pub proxy: Option<Exe>,
    /// When a zone requires approval and a plugin is configured.
    pub plugin: Option<Exe>,
    /// The program of each credential whose secret is a command, by credential name.
    pub commands: Vec<(String, Exe)>,
}

impl Programs {
    /// Open what `plan` may start besides `shim` (found beside it: this build's own
    /// helpers only), or say in one line which program cannot be used and why (the
    /// shim's own error, when it could not be opened).
    pub fn open(plan: &Plan, shim: Result<Exe, String>) -> Result<Programs, BrokerError> {
        let shim = shim.map_err(BrokerError::Refused)?;
        let refused =
            |what: &str, why: String| BrokerError::Refused(format!("{what} cannot be used: {why}"));
        let helper = |name: &str| {
            let path = shim.path.with_file_name(name);
            Exe::open(&path)
                .map_err(|e| BrokerError::Sandbox(format!("{name}: {e}; reinstall wardcell")))
        };
        let network = plan.profiles().any(|p| p.network.enabled());
        let proxy = network.then(|| helper("wardcell-proxy")).transpose()?;
        let program = |what: &str, prog: &str| {
            let path = helper::program_path(prog, &|p| p.is_file()).ok_or_else(|| {
                refused(
                    what,
                    format!(
                        "{prog} was not found (a helper's PATH is {})",
                        helper::HELPER_PATH
                    ),
                )
            })?;
            Exe::open(&path).map_err(|e| refused(what, e))
        };
        let approves = plan.zones.iter().any(|z| z.requires_approval);
        let argv0 = plan
            .approval
            .as_ref()
            .and_then(|a| a.first())
            .filter(|_| approves);
        let plugin = argv0
            .map(|p| program("the approval plugin", p))
            .transpose()?;
        // The commands of the credentials an authenticated zone's proxy may attach: no
        // other proxy ever runs one.
        let attached = |name: &String| {
            let mut zones = plan.zones.iter().filter(|z| z.authenticated);
            zones.any(|z| z.profile.credentials.contains(name))
        };
        let mut commands = Vec::new();
        for c in plan.credentials.iter().filter(|c| attached(&c.name)) {
            if let SecretPlan::Command(argv) = &c.secret {
                let what = format!("credential '{}''s command", c.name);
                let prog = argv
                    .first()
                    .ok_or_else(|| refused(&what, "it is empty".into()))?;
                commands.push((c.name.clone(), program(&what, prog)?));
            }
        }
        Ok(Programs {
            shim,
            proxy,
            plugin,
            commands,
        })
    }

    /// Every program's path: what each view binds read-only where a tree is writable.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        let opt = [&self.proxy, &self.plugin].into_iter().flatten();
        let commands = self.commands.iter().map(|(_, e)| e);
        [&self.shim]
            .into_iter()
            .chain(opt)
            .chain(commands)
            .map(|e| e.path.as_path())
    }

    /// Whether every view pins what this run starts (`Plan::pinned`, found by the plan
    /// writer as the run started): these programs and this broker, where they really
    /// are. One it did not find would be started from a tree a sandbox could write.
    pub fn pinned_in(&self, pinned: &[PathBuf]) -> Result<(), String> {
        let broker = std::env::current_exe().and_then(std::fs::canonicalize);
        let ours = self.paths().map(Path::to_path_buf).chain(broker.ok());
        match ours.into_iter().find(|p| !pinned.contains(p)) {
            None => Ok(()),
            Some(p) => Err(format!("{} is not where `wardcell run` found the run's programs as it started; nothing was started", p.display())),
        }
    }

    /// The proxy, or why there is none to start.
    pub fn proxy(&self) -> Result<&Exe, BrokerError> {
        let none = || BrokerError::Sandbox("wardcell-proxy was not opened".into());
        self.proxy.as_ref().ok_or_else(none)
    }

    /// The approval plugin, or why there is none to start.
    pub fn plugin(&self) -> io::Result<&Exe> {
        self.plugin.as_ref().ok_or(io::ErrorKind::NotFound.into())
    }

    /// The descriptors of the `command` programs of `credentials`, in their order: what a
    /// proxy that attaches them is handed after its spec.
    pub fn command_fds(&self, credentials: &[CredentialPlan]) -> Vec<RawFd> {
        let exe = |c: &CredentialPlan| self.commands.iter().find(|(n, _)| *n == c.name);
        let fds = credentials.iter().filter_map(exe);
        fds.map(|(_, e)| e.fd.as_raw_fd()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_the_views_do_not_pin_is_never_started() {
        let shim = Exe::open(Path::new("/bin/sh")).unwrap();
        let programs = Programs {
            shim,
            proxy: None,
            plugin: None,
            commands: Vec::new(),
        };
        let broker = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        let pinned = vec![programs.shim.path.clone(), broker.clone()];
        assert_eq!(programs.pinned_in(&pinned), Ok(()));
        // The shim the plan writer did not find, or this very broker: refused, naming it.
        let e = programs.pinned_in(&pinned[1..]).unwrap_err();
        let shown = programs.shim.path.display().to_string();
        assert!(e.starts_with(&format!("{shown} is not where")), "{e}");
        let e = programs.pinned_in(&pinned[..1]).unwrap_err();
        assert!(e.starts_with(&broker.display().to_string()), "{e}");
        assert!(!e.contains('\n'));
    }
}
