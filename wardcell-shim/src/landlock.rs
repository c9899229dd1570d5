//! Landlock: the profile's filesystem rules as a hard requirement, the rest best effort.
//!
//! ABI 3 (Linux 6.2) is required: it is the first that controls truncation, without which
//! a file the profile only lets you read could still be emptied. Above it, TCP rules
//! (ABI 4), device ioctls (ABI 5) and signal/abstract-socket scoping (ABI 6) are added
//! where the kernel has them, and what is missing is reported.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::mounts::View;

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, NetPort, PathBeneath,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
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

/// ABI 9 (Linux 7.1) controls `connect()` to pathname Unix sockets; where the kernel has
/// it, only sockets in the view's writable trees and those the spec names are reachable.
/// Below it, the view alone keeps host sockets out: they do not exist inside.
pub const UNIX_SOCKET_RULES: ABI = ABI::V9;

/// The rights for a rule on `fd`: a file gets only what applies to files.
fn beneath(
    fd: &OwnedFd,
    access: landlock::BitFlags<AccessFs>,
) -> Result<PathBeneath<BorrowedFd<'_>>, String> {
    use std::os::fd::AsRawFd;
    // fstat on the descriptor itself (a File would need a duplicate of it, three calls).
    let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| e.to_string())?;
    let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let access = if is_dir {
        access
    } else {
        access & (AccessFs::from_file(PINNED) | AccessFs::ResolveUnix)
    };
    Ok(PathBeneath::new(fd.as_fd(), access))
}

/// Restrict the calling thread (and what it execs) to the view's trees, by the very
/// descriptors the view was built from, and TCP connections to `tcp_connect` ports.
/// Refuses when the filesystem rules cannot be enforced.
pub fn enforce(view: &View, tcp_connect: &[u16]) -> Result<Enforced, String> {
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
        .handle_access(AccessFs::ResolveUnix)
        .map_err(err)?
        .handle_access(AccessNet::from_all(PINNED))
        .map_err(err)?
        .scope(Scope::from_all(PINNED))
        .map_err(err)?
        .create()
        .map_err(|e| format!("creating the Landlock ruleset: {e}"))?;

    for fd in &view.read {
        created = created
            .add_rule(beneath(fd, AccessFs::from_read(PINNED))?)
            .map_err(err)?;
    }
    for fd in &view.write {
        created = created
            .add_rule(beneath(
                fd,
                AccessFs::from_all(PINNED) | AccessFs::ResolveUnix,
            )?)
            .map_err(err)?;
    }
    for fd in &view.sockets {
        created = created
            .add_rule(beneath(fd, AccessFs::ResolveUnix.into())?)
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
