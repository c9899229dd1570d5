//! The proxy confines itself once it holds everything it will ever read: secrets
//! resolved, CA minted, system roots loaded.
//!
//! - no_new_privs (needed for seccomp; the proxy was already made undumpable first thing);
//! - Landlock: read-only access to what name resolution reads (the resolver's files in
//!   /etc and the NSS and resolver libraries glibc may load), nothing writable anywhere,
//!   no TCP bind (it only accepts on the listener it was handed, and dials out to any
//!   port), no signals or abstract sockets beyond itself. The filesystem part is a hard
//!   requirement (ABI 3, Linux 6.2, as for sandboxes); the rest is best effort;
//! - seccomp (seccomp.rs).

#![forbid(unsafe_code)]

use std::fs;
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

use crate::error::Error;
use crate::seccomp;
use crate::sys;

/// The newest ABI whose features are used, pinned so a newer crate changes nothing unreviewed.
const PINNED: ABI = ABI::V6;
/// The oldest ABI accepted: the first that also controls truncation.
const REQUIRED: ABI = ABI::V3;

/// Files glibc reads to resolve a name.
const RESOLVER_FILES: &[&str] = &[
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/ld.so.cache",
];

/// Directories that hold the NSS modules and libresolv, and their multiarch subdirectories.
const LIBRARY_DIRS: &[&str] = &["/usr/lib", "/usr/lib64", "/lib", "/lib64"];

pub fn confine() -> Result<(), Error> {
    sys::set_no_new_privs().map_err(|e| Error::Confine(format!("no_new_privs: {e}")))?;
    landlock(&readable_paths()).map_err(Error::Confine)?;
    seccomp::install().map_err(Error::Confine)
}

/// Every file name resolution may open, as it exists on this machine.
fn readable_paths() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for f in RESOLVER_FILES {
        let p = Path::new(f);
        if p.exists() {
            out.push(p.to_path_buf());
        }
    }
    // resolv.conf is often a link into a directory a daemon rewrites by rename: allow the
    // directory, or a rewrite would cut the proxy off from DNS.
    if let Ok(target) = fs::canonicalize("/etc/resolv.conf") {
        if target != Path::new("/etc/resolv.conf") {
            if let Some(dir) = target.parent() {
                out.push(dir.to_path_buf());
            }
        }
    }
    let mut dirs: Vec<PathBuf> = LIBRARY_DIRS.iter().map(PathBuf::from).collect();
    for d in LIBRARY_DIRS {
        if let Ok(entries) = fs::read_dir(d) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().contains("-linux-") && e.path().is_dir() {
                    dirs.push(e.path());
                }
            }
        }
    }
    for d in dirs {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("libnss_") || name.starts_with("libresolv.so") {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn landlock(read: &[PathBuf]) -> Result<(), String> {
    let err = |e: landlock::RulesetError| format!("Landlock: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(REQUIRED))
        .map_err(|e| {
            format!("this kernel cannot confine the proxy (Landlock ABI 3, Linux 6.2, is required): {e}")
        })?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(PINNED))
        .map_err(err)?
        .handle_access(AccessNet::BindTcp)
        .map_err(err)?
        .scope(Scope::from_all(PINNED))
        .map_err(err)?
        .create()
        .map_err(err)?;
    for p in read {
        // A file may get file rights only; a directory also gets listing.
        let access: BitFlags<AccessFs> = if p.is_dir() {
            AccessFs::ReadFile | AccessFs::ReadDir
        } else {
            AccessFs::ReadFile.into()
        };
        let Ok(fd) = PathFd::new(p) else { continue };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(err)?;
    }
    let status = ruleset.restrict_self().map_err(err)?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("Landlock is not enforced on this kernel; refusing to run unconfined".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_paths_are_resolver_files_and_libraries_only() {
        let paths = readable_paths();
        assert!(paths.iter().any(|p| p == Path::new("/etc/hosts")));
        for p in &paths {
            let s = p.to_string_lossy();
            let name = p.file_name().unwrap().to_string_lossy();
            assert!(
                RESOLVER_FILES.contains(&s.as_ref())
                    || name.starts_with("libnss_")
                    || name.starts_with("libresolv.so")
                    || p.is_dir(),
                "{s}"
            );
        }
    }
}
