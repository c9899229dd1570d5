//! macOS: nothing to watch. A Seatbelt profile's rules are paths, matched at every
//! access, not mounts on directory entries: the host replacing a masked or read-only file
//! leaves the rule over its path in force (THREAT_MODEL 9.1). Same API as the Linux guard.

use std::path::{Path, PathBuf};

use crate::error::BrokerError;

#[derive(Default)]
pub struct Guard;

impl Guard {
    pub fn new() -> Guard {
        Guard
    }

    pub fn start(&self, _lost: impl Fn(&Path) + Send + 'static) -> Result<(), BrokerError> {
        Ok(())
    }

    pub fn hold(&self, _paths: &[(PathBuf, PathBuf)]) -> Result<(), BrokerError> {
        Ok(())
    }

    pub fn end(&self) {}
}
