//! macOS: no proxy yet. wardcell-proxy cannot be built and checked for macOS on the
//! Linux CI (docs/MACOS.md), and without a network namespace its listener and the
//! CA bundle have no private place; so a sandbox whose profile has network is refused,
//! in one line naming its zone, before its command starts.

use std::os::unix::net::UnixStream;
use std::sync::Arc;

use wardcell_common::plan::SandboxSpec;

use crate::run::Run;
use wardcell_common::prepared::Asked;
use wardcell_host::error::network_refusal;
use wardcell_host::error::BrokerError;

/// Never made here.
pub enum Proxy {}

/// Refuse the sandbox: see [`network_refusal`].
pub fn hand_over(
    _run: &Arc<Run>,
    _control: &mut UnixStream,
    _spec: &SandboxSpec,
    asked: &Asked<'_>,
) -> Result<(Proxy, Option<String>), BrokerError> {
    let (zone, profile) = (asked.zone, &asked.profile.name);
    Err(BrokerError::Refused(network_refusal(zone, profile)))
}
