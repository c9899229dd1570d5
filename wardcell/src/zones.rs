//! `wardcell zone ...`: on the host from zones.toml; inside a sandbox through its
//! supervisor's socket.

use std::path::Path;

use crate::cli::{ConfigArg, Output};
use crate::context;
use crate::error::Error;
use crate::output;

/// On the host: every zone of the configuration, sorted by name.
pub fn host_list(config: &ConfigArg, format: Output) -> Result<(), Error> {
    let host = context::load(config.file.as_deref())?;
    match format {
        Output::Text => output::print(&output::zone_table(&host.config)),
        Output::Json => output::print(&output::zone_json(&host.config)?),
    }
}

/// Inside a zone: the name alone, so `$(wardcell zone current)` needs no parsing.
pub fn current(zone: &str) -> Result<(), Error> {
    output::print(zone)
}

/// Inside a zone: ask the supervisor at `socket` which zones this run may enter.
pub fn inside_list(_socket: &Path, _format: Output) -> Result<(), Error> {
    Err(Error::NotImplemented(
        "`wardcell zone list` inside a sandbox",
    ))
}

/// Inside a zone: ask the supervisor at `socket` to run `command` in `zone`, and return
/// the command's exit status.
pub fn inside_enter(_socket: &Path, _zone: &str, _command: Vec<String>) -> Result<u8, Error> {
    Err(Error::NotImplemented("`wardcell zone enter`"))
}
