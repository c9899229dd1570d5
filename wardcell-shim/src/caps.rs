//! Dropping every capability: bounding, ambient, inheritable, effective, permitted.

use caps::{CapSet, Capability};

/// Drop every capability this process holds or could regain through exec.
///
/// The bounding set goes first (that needs CAP_SETPCAP, still held), then ambient and
/// inheritable, then effective and permitted. With an empty bounding set even a uid that
/// is 0 inside the namespace gains nothing when it execs.
pub fn drop_all() -> Result<(), String> {
    for cap in caps::all() {
        match caps::drop(None, CapSet::Bounding, cap) {
            Ok(()) => {}
            // A capability this kernel does not know cannot be in the bounding set.
            Err(_) if !caps::runtime::thread_all_supported().contains(&cap) => {}
            Err(e) => return Err(format!("dropping {cap} from the bounding set: {e}")),
        }
    }
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|e| format!("clearing the {set:?} capability set: {e}"))?;
    }
    if let Some(cap) = still_held() {
        return Err(format!(
            "{cap} is still held after dropping every capability"
        ));
    }
    Ok(())
}

fn still_held() -> Option<Capability> {
    for set in [
        CapSet::Effective,
        CapSet::Permitted,
        CapSet::Inheritable,
        CapSet::Ambient,
        CapSet::Bounding,
    ] {
        if let Ok(held) = caps::read(None, set) {
            if let Some(c) = held.into_iter().next() {
                return Some(c);
            }
        }
    }
    None
}
