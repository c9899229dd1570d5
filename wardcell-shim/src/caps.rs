//! Dropping every capability: bounding, ambient, inheritable, effective, permitted.
//!
//! The calls are made directly (sys.rs), not through the `caps` crate, which reads a
//! set before and after each change: the command's path to exec runs this, and it was
//! 170 syscalls where 85 do (and check) the same.
//!
//! The bounding set is emptied once, by the shim, while it waits for its spec
//! ([`drop_bounding_set`]): each drop is a credential change of its own (41 of them), and
//! init and the command both inherit the empty set across the fork. [`drop_all`] then
//! checks it is empty, and empties it if it is not.

use crate::sys;

/// Empty the bounding set (needs CAP_SETPCAP, which the shim holds until [`drop_all`]).
/// With an empty bounding set even a uid that is 0 inside the namespace gains nothing
/// when it execs. The effective and permitted sets are untouched: the shim still builds
/// the sandbox with them.
pub fn drop_bounding_set() -> Result<(), String> {
    sys::drop_bounding_set()
        .map(|_| ())
        .map_err(|(cap, e)| format!("dropping capability {cap} from the bounding set: {e}"))
}

/// Drop every capability this process holds or could regain through exec, then check
/// that none is left.
///
/// The bounding set first, when anything is left in it (that needs CAP_SETPCAP, still
/// held), then ambient, then inheritable, effective and permitted in one `capset`.
pub fn drop_all() -> Result<(), String> {
    // Read once: found empty, it stays so (nothing adds to a bounding set); emptied here,
    // it is read again.
    if sys::first_in_bounding_set().is_some() {
        drop_bounding_set()?;
        if let Some(cap) = sys::first_in_bounding_set() {
            return Err(format!(
                "capability {cap} is still in the bounding set after dropping every one"
            ));
        }
    }
    drop_held()
}

/// Drop every capability this process holds (ambient, inheritable, effective,
/// permitted), then check that none is left; the bounding set as it is (`--git-watch`:
/// a process that can never exec, whatever its uid, and without CAP_SETPCAP when it is
/// not root).
pub fn drop_held() -> Result<(), String> {
    sys::clear_ambient().map_err(|e| format!("clearing the ambient capability set: {e}"))?;
    sys::clear_capability_sets()
        .map_err(|e| format!("clearing the effective, permitted and inheritable sets: {e}"))?;
    // Checked: nothing in effective, permitted or inheritable (ambient is always a subset
    // of permitted and inheritable).
    match sys::capability_sets() {
        Ok([0, 0, 0]) => {}
        Ok(sets) => {
            return Err(format!(
                "capabilities are still held after dropping every one (effective {:#x}, permitted {:#x}, inheritable {:#x})",
                sets[0], sets[1], sets[2]
            ))
        }
        Err(e) => return Err(format!("reading the capability sets: {e}")),
    }
    Ok(())
}
