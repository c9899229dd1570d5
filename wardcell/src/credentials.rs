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
