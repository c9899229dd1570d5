//! macOS: nothing to watch. A Seatbelt profile's rules are paths, matched at every
//! access, not mounts on directory entries: the host replacing a masked or read-only file
//! leaves the rule over its path in force (THREAT_MODEL 9.1). Same API as the Linux guard.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Weak;

use crate::error::BrokerError;

/// How often the broker's `tick` runs while the run lasts.
pub const TICK: std::time::Duration = std::time::Duration::from_secs(1);

pub struct Guard;

impl Guard {
    /// Nothing to watch: the helper's fd 3 goes unread.
    pub fn pair() -> (Guard, Option<UnixStream>) {
        (Guard, UnixStream::pair().ok().map(|(_, theirs)| theirs))
    }

    /// `tick` is called every [`TICK`] while `owner` lives, as on Linux.
    pub fn start<T: Send + Sync + 'static>(
        &self,
        owner: Weak<T>,
        _lost: fn(&T, &Path),
        tick: fn(&T),
    ) -> Result<(), BrokerError> {
        let spawned = std::thread::Builder::new().name("guard".into());
        let spawned = spawned.spawn(move || loop {
            std::thread::sleep(TICK);
            match owner.upgrade() {
                Some(o) => tick(&o),
                None => return,
            }
        });
        spawned
            .map(drop)
            .map_err(|e| BrokerError::Sandbox(format!("starting a thread: {e}")))
    }

    pub fn hold(&self, _paths: &[(PathBuf, PathBuf)]) -> Result<(), BrokerError> {
        Ok(())
    }

    pub fn end(&self) {}
}
