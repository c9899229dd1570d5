//! Run directories: wardcell's own directories made private, and a run's directory locked
//! for as long as its broker lives (the directories of runs whose brokers are gone are
//! swept by `wardcell run`, `wardcell/src/machine.rs`). What the sandboxes see of these
//! directories is decided by the broker's spec.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use wardcell_common::paths;
use wardcell_common::plan::Plan;

use crate::audit::AuditLog;
use crate::error::BrokerError;
use crate::process::Watched;

/// Create `dir` (and missing parents) as 0700; an existing one must be ours and private.
pub fn make_private_dir(dir: &Path) -> Result<(), BrokerError> {
    let fail = |what: String| BrokerError::Dir {
        path: dir.to_path_buf(),
        what,
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| fail(format!("cannot create it: {e}")))?;
    let meta = fs::symlink_metadata(dir).map_err(|e| fail(e.to_string()))?;
    if !meta.is_dir() || meta.uid() != nix::unistd::getuid().as_raw() {
        return Err(fail(
            "exists but is not a directory you own; remove it and try again".into(),
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| fail(format!("cannot make it private: {e}")))?;
    }
    Ok(())
}

/// wardcell's directories must exist so that every sandbox can mask them.
pub fn prepare_own_dirs(plan: &Plan) -> Result<(), BrokerError> {
    make_private_dir(&plan.dirs.runtime)?;
    make_private_dir(&plan.dirs.state.join("runs"))?;
    if let Some(user_config) = plan.dirs.config.first() {
        if !user_config.exists() {
            make_private_dir(user_config)?;
        }
    }
    Ok(())
}

/// Lock `dir` for as long as this process lives: a run directory whose lock can be taken
/// belongs to a broker that is gone (killed, so it could not clean up).
pub fn hold_run_lock(dir: &Path) -> Result<(), BrokerError> {
    let f = fs::File::open(dir).map_err(|e| BrokerError::Dir {
        path: dir.to_path_buf(),
        what: e.to_string(),
    })?;
    let lock =
        Flock::lock(f, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| BrokerError::Dir {
            path: dir.to_path_buf(),
            what: format!("cannot lock it: {e}"),
        })?;
    // Held until the process exits; the kernel releases it however we end.
    std::mem::forget(lock);
    Ok(())
}

/// Make the run's directory `runtime/run_id` (0700), locked before it appears under its
/// name: made under a name the sweep ignores, locked, then moved into place, so that
/// another broker's sweep never sees it unlocked.
pub fn make_run_dir(runtime: &Path, run_id: &str) -> Result<std::path::PathBuf, BrokerError> {
    let run_dir = runtime.join(run_id);
    let making = runtime.join(format!(".{run_id}"));
    make_private_dir(&making)?;
    hold_run_lock(&making)?;
    fs::rename(&making, &run_dir).map_err(|e| BrokerError::Dir {
        path: run_dir.clone(),
        what: format!("cannot create it: {e}"),
    })?;
    Ok(run_dir)
}

/// The run's audit log, created by its writer; when it cannot be, the run's directory is
/// removed: no run without its log (test
/// `a_full_state_disk_refuses_the_run_and_leaves_nothing`).
pub fn open_log<W: Watched>(
    log: &AuditLog<W>,
    plan: &Plan,
    run_id: &str,
    run_dir: &Path,
) -> Result<(), BrokerError> {
    let path = paths::run_log(&plan.dirs, run_id);
    let (syslog, max) = (plan.audit.syslog, plan.audit.max_log_kib);
    log.open(path.clone(), run_id, syslog, max).map_err(|why| {
        let _ = fs::remove_dir_all(run_dir);
        BrokerError::Dir {
            path,
            what: format!("cannot create the run's audit log: {why}"),
        }
    })
}
