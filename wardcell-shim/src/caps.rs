//! Dropping every capability: bounding, ambient, inheritable, effective, permitted.
//!
//! The calls are made directly (sys.rs), not through the `caps` crate, which reads a
//! set before and after each change: the command's path to exec runs this, and it was
//! 170 syscalls where 85 do (and check) the same.

use crate::sys;

/// Drop every capability this process holds or could regain through exec, then check
/// that none is left.
///
/// The bounding set goes first (that needs CAP_SETPCAP, still held), then ambient, then
/// inheritable, effective and permitted in one `capset`. With an empty bounding set even
/// a uid that is 0 inside the namespace gains nothing when it execs.
pub fn drop_all() -> Result<(), String> {
    let known = sys::drop_bounding_set()
        .map_err(|(cap, e)| format!("dropping capability {cap} from the bounding set: {e}"))?;
    sys::clear_ambient().map_err(|e| format!("clearing the ambient capability set: {e}"))?;
    sys::clear_capability_sets()
        .map_err(|e| format!("clearing the effective, permitted and inheritable sets: {e}"))?;
    // Checked: nothing in effective, permitted or inheritable (ambient is always a subset
    // of permitted and inheritable), nothing left in the bounding set.
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
    if let Some(cap) = (0..known).find(|&c| sys::in_bounding_set(c)) {
        return Err(format!(
            "capability {cap} is still in the bounding set after dropping every one"
        ));
    }
    Ok(())
}
