//! What a host command needs to know about this machine: home, current directory,
//! wardcell's directories, and which configuration to read.

use std::path::{Path, PathBuf};

use wardcell_config::config::{self, Config, Source};
use wardcell_config::resolve::Context;
use wardcell_support::paths;

use crate::error::Error;

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

/// The home directory: `$HOME` when absolute, else the password database's entry.
fn home() -> Result<PathBuf, Error> {
    if let Some(h) = env("HOME").filter(|h| h.starts_with('/')) {
        return Ok(PathBuf::from(h));
    }
    match nix::unistd::User::from_uid(nix::unistd::getuid()) {
        Ok(Some(u)) if u.dir.is_absolute() => Ok(u.dir),
        _ => Err(Error::NoHome),
    }
}

/// The configuration and resolution context for this invocation.
pub struct Host {
    pub config: Config,
    pub context: Context,
}

/// Find and load the configuration (`--config FILE` first) and describe this machine.
pub fn load(explicit: Option<&Path>) -> Result<Host, Error> {
    load_naming(explicit, None)
}

/// [`load`] for a command line naming the profile `named` (`--profile`), which may be
/// one of the built-in profiles read only when named (`config::parse_naming`).
pub fn load_naming(explicit: Option<&Path>, named: Option<&str>) -> Result<Host, Error> {
    let home = home()?;
    let cwd = std::env::current_dir().map_err(Error::Cwd)?;
    let explicit = explicit.map(|p| cwd.join(p));
    let source = config::locate(explicit.as_deref(), &env, &home);
    let config = config::load_naming(&source, named)?;
    let dirs = paths::dirs(
        &env,
        &home,
        nix::unistd::getuid().as_raw(),
        match &source {
            Source::File(p) if explicit.is_some() => Some(p.as_path()),
            _ => None,
        },
    );
    Ok(Host {
        config,
        context: Context {
            home,
            cwd,
            dirs,
            getenv: env,
            // The client as the kernel knows it: what every zone sandbox gets at the
            // same path.
            // /proc/self/exe: already the path the kernel resolved.
            client: std::env::current_exe().ok(),
        },
    })
}

/// wardcell's directories for this user, without reading any configuration.
pub fn load_dirs() -> Result<wardcell_common::plan::Dirs, Error> {
    let home = home()?;
    Ok(paths::dirs(
        &env,
        &home,
        nix::unistd::getuid().as_raw(),
        None,
    ))
}
