//! Credential sources, checked before anything runs: a secret file that others can read
//! (or write, or that someone else owns) refuses the run. The secret itself is never
//! read here; only the proxy reads it.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use wardcell_common::plan::{Plan, SecretPlan};

use crate::error::Error;

pub fn check_sources(plan: &Plan) -> Result<(), Error> {
    let uid = nix::unistd::getuid().as_raw();
    for c in &plan.credentials {
        let SecretPlan::File(path) = &c.secret else {
            continue;
        };
        let shown = path.display();
        let meta = std::fs::metadata(path).map_err(|e| {
            Error::Refused(format!(
                "credential '{}' reads {shown}, which cannot be read: {e}; create it (mode 600) or fix [credentials.{}]",
                c.name, c.name
            ))
        })?;
        if !meta.is_file() {
            return Err(Error::Refused(format!(
                "credential '{}' reads {shown}, which is not a regular file",
                c.name
            )));
        }
        if meta.uid() != uid {
            return Err(Error::Refused(format!(
                "credential '{}' reads {shown}, which belongs to uid {}, not you; make it yours and `chmod 600 {shown}`",
                c.name,
                meta.uid()
            )));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(Error::Refused(format!(
                "credential '{}' reads {shown}, which others can access (mode {mode:03o}); run `chmod 600 {shown}`",
                c.name
            )));
        }
    }
    Ok(())
}

/// The credentials the first sandbox attaches, read from the environment: one whose
/// variable is not set refuses the run in one line naming it, before anything starts
/// (the agent would otherwise start with a placeholder and no key behind it).
pub fn check_start_keys(plan: &Plan) -> Result<(), Error> {
    let Some((zone, profile)) = plan.start_profile() else {
        return Ok(());
    };
    if !plan.start_authenticated() {
        return Ok(());
    }
    for c in &plan.credentials {
        let SecretPlan::Env(var) = &c.secret else {
            continue;
        };
        let set = std::env::var_os(var).is_some_and(|v| !v.is_empty());
        if !profile.credentials.contains(&c.name) || set {
            continue;
        }
        let whose = match zone {
            Some(z) => format!("zone '{z}' (profile '{}')", profile.name),
            None => format!("profile '{}'", profile.name),
        };
        let hosts = c.hosts.join(", ");
        return Err(Error::Refused(format!(
            "{whose} attaches credential '{}' to {hosts} with the key in the environment variable {var}, which is not set here (or is empty); set it where you start wardcell (`export {var}=...`: sandboxes see only a placeholder), or write [credentials.{}] with another secret in your zones.toml",
            c.name, c.name
        )));
    }
    Ok(())
}
