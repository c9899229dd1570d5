//! Landlock: the profile's filesystem rules as a hard requirement, the rest best effort.
//!
//! ABI 3 (Linux 6.2) is required: it is the first that controls truncation, without which
//! a file the profile only lets you read could still be emptied. Above it, TCP rules
//! (ABI 4), device ioctls (ABI 5) and signal/abstract-socket scoping (ABI 6) are added
//! where the kernel has them, and what is missing is reported.

use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

/// The newest ABI whose features wardcell uses. Pinned so that a newer crate or kernel
/// never changes what a profile means without a review here.
pub const PINNED: ABI = ABI::V6;
/// The oldest ABI wardcell runs on.
pub const REQUIRED: ABI = ABI::V3;

/// What was enforced.
pub struct Enforced {
    pub abi: i32,
    /// Features this kernel could not add, for the user.
    pub missing: Vec<String>,
}

fn access_for(
    path: &Path,
    dir_access: landlock::BitFlags<AccessFs>,
) -> landlock::BitFlags<AccessFs> {
    if path.is_dir() {
        dir_access
    } else {
        dir_access & AccessFs::from_file(PINNED)
    }
}

fn beneath(
    path: &Path,
    access: landlock::BitFlags<AccessFs>,
) -> Result<PathBeneath<PathFd>, String> {
    let fd = PathFd::new(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(PathBeneath::new(fd, access_for(path, access)))
}

/// Restrict the calling thread (and what it execs) to `read`/`write` trees and TCP
/// connections to `tcp_connect` ports. Refuses when the filesystem rules cannot be enforced.
pub fn enforce(
    read: &[PathBuf],
    write: &[PathBuf],
    tcp_connect: &[u16],
) -> Result<Enforced, String> {
    let err = |e: landlock::RulesetError| format!("{e}");
    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(REQUIRED))
        .map_err(|e| {
            format!("this kernel cannot enforce the profile's filesystem rules (Landlock ABI 3, Linux 6.2, is required): {e}")
        })?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(PINNED))
        .map_err(err)?
        .handle_access(AccessNet::from_all(PINNED))
        .map_err(err)?
        .scope(Scope::from_all(PINNED))
        .map_err(err)?
        .create()
        .map_err(|e| format!("creating the Landlock ruleset: {e}"))?;

    for p in read {
        created = created
            .add_rule(beneath(p, AccessFs::from_read(PINNED))?)
            .map_err(err)?;
    }
    for p in write {
        created = created
            .add_rule(beneath(p, AccessFs::from_all(PINNED))?)
            .map_err(err)?;
    }
    for &port in tcp_connect {
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(err)?;
    }
    let status = created
        .restrict_self()
        .map_err(|e| format!("enforcing the Landlock ruleset: {e}"))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("Landlock is not enforced on this kernel; refusing to run unconfined".into());
    }
    let abi = match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => effective_abi as i32,
        _ => 0,
    };
    let mut missing = Vec::new();
    if abi < 4 {
        missing.push("TCP connect/bind rules (Landlock ABI 4, Linux 6.7)".to_string());
    }
    if abi < 5 {
        missing.push("device ioctl rules (Landlock ABI 5, Linux 6.10)".to_string());
    }
    if abi < 6 {
        missing.push("signal and abstract-socket scoping (Landlock ABI 6, Linux 6.12)".to_string());
    }
    Ok(Enforced { abi, missing })
}
