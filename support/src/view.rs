//! What a sandbox's view holds against the host: the masks it holds by construction
//! (the shim builds them, `Op::Skeleton`) and those the run watches (the plan writer
//! prepares them, `wardcell_common::prepared::Prepared::held`). Neither is the broker's.

use std::path::{Path, PathBuf};

use wardcell_common::plan::{Plan, ProfilePlan, SecretPlan, ViewEntry, ViewKind};

/// The masks of `view` that the view holds by construction, and the read-only tree each
/// is held in: a mask (with no socket kept reachable inside it, not inside another
/// mask, not itself a tree) every tree above which is read-only. The shim builds that tree, and every directory from it down to
/// the mask's parent, as a directory of its own holding a read-only bind of each entry
/// the host's has, except the masked names (mounts.rs, `Op::Skeleton`): what the host
/// does to a masked name afterwards (replaces it, removes and recreates it, creates it
/// where it was missing) never reaches the view, so it needs no watch. The tree is the
/// outermost read-only one (nested read-only trees are bound with it), and never `/`.
pub fn skeleton_masks(view: &[ViewEntry]) -> Vec<(PathBuf, PathBuf)> {
    use std::collections::{HashMap, HashSet};
    let mut trees: HashMap<&Path, bool> = HashMap::new();
    for e in view {
        let writable = match e.what {
            ViewKind::Read => false,
            ViewKind::Write => true,
            _ => continue,
        };
        *trees.entry(e.path.as_path()).or_insert(writable) |= writable;
    }
    let masks: HashSet<&Path> = view
        .iter()
        .filter(|e| e.what == ViewKind::Mask)
        .map(|e| e.path.as_path())
        .collect();
    let sockets: Vec<&Path> = view
        .iter()
        .filter(|e| e.what == ViewKind::Socket)
        .map(|e| e.path.as_path())
        .collect();
    let mut out = Vec::new();
    for m in &masks {
        let masked = m.ancestors().skip(1).any(|a| masks.contains(a));
        if masked || trees.contains_key(m) || sockets.iter().any(|s| s.starts_with(m)) {
            continue;
        }
        // Every tree above it read-only, and the outermost not `/`: that tree is then
        // bound on a directory of the view's own, where a directory of ours can take
        // its place.
        let above = m
            .ancestors()
            .skip(1)
            .filter_map(|a| Some((a, *trees.get(a)?)));
        let above: Vec<(&Path, bool)> = above.collect();
        match above.last() {
            Some((t, _)) if above.iter().all(|(_, w)| !w) && *t != Path::new("/") => {
                out.push((m.to_path_buf(), t.to_path_buf()));
            }
            _ => {}
        }
    }
    out.sort();
    out
}

/// The paths a view holds against the host, each with the innermost tree of the view it
/// lies in: every mask inside one of its trees, present or not (a name created there
/// later would not be hidden), and every read-only path inside a writable tree (the git
/// paths, what the run trusts). A mount protects a directory entry only until the host
/// replaces it; these are the entries the run watches (THREAT_MODEL 3.16).
pub fn held(view: &[ViewEntry], masks: &[PathBuf]) -> Vec<(PathBuf, PathBuf)> {
    use std::collections::HashMap;
    let trees: HashMap<&Path, bool> = view
        .iter()
        .filter_map(|e| match e.what {
            ViewKind::Read => Some((e.path.as_path(), false)),
            ViewKind::Write => Some((e.path.as_path(), true)),
            _ => None,
        })
        .collect();
    // The nearest tree above `p` (not `p` itself), by ancestors: long lists stay cheap.
    let tree_of = |p: &Path| {
        let found = p
            .ancestors()
            .skip(1)
            .find_map(|a| Some((a, *trees.get(a)?)));
        found.map(|(t, w)| (t.to_path_buf(), w))
    };
    // Those the view holds by construction need no watch.
    let built: std::collections::HashSet<PathBuf> =
        skeleton_masks(view).into_iter().map(|(m, _)| m).collect();
    let masked = masks
        .iter()
        .filter(|m| !built.contains(*m))
        .filter_map(|m| Some((m.clone(), tree_of(m)?.0)));
    let read_only = trees
        .iter()
        .filter(|(_, w)| !**w)
        .filter_map(|(p, _)| match tree_of(p) {
            Some((t, true)) => Some((p.to_path_buf(), t)),
            _ => None,
        });
    let mut out: Vec<_> = masked.chain(read_only).collect();
    out.sort();
    out.dedup();
    out
}

/// Files some credential of `plan` reads: masked in every sandbox.
pub fn credential_files(plan: &Plan) -> Vec<PathBuf> {
    let files = plan.credentials.iter().filter_map(|c| match &c.secret {
        SecretPlan::File(p) => Some(p.clone()),
        _ => None,
    });
    files.collect()
}

/// Every path `profile` names, for recording identities.
pub fn profile_paths(profile: &ProfilePlan) -> impl Iterator<Item = &PathBuf> {
    let named = profile.read.iter().chain(&profile.write);
    named.chain(&profile.deny).chain(&profile.unix_sockets)
}

/// Where host services keep their sockets. Masked unless a profile names a path in them.
pub const HOST_SOCKET_DIRS: &[&str] = &["/run", "/var/run"];

/// Host socket locations from the caller's environment: the runtime directory and the
/// directory of the ssh-agent socket.
pub fn host_socket_dirs(env: &[(String, String)]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = HOST_SOCKET_DIRS.iter().map(PathBuf::from).collect();
    for (k, v) in env {
        let p = Path::new(v);
        if !p.is_absolute() {
            continue;
        }
        match k.as_str() {
            "XDG_RUNTIME_DIR" => out.push(p.to_path_buf()),
            "SSH_AUTH_SOCK" => {
                if let Some(dir) = p.parent().filter(|d| *d != Path::new("/")) {
                    out.push(dir.to_path_buf());
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_holds_its_masks_and_its_read_only_paths_in_writable_trees() {
        let e = |p: &str, what| ViewEntry::new(p.into(), what, None);
        let view = [
            e("/usr", ViewKind::Read),
            e("/home/u", ViewKind::Read),
            e("/home/u/proj", ViewKind::Write),
            e("/home/u/proj/.git/config", ViewKind::Read),
            e("/home/u/proj/target/release/wardcell", ViewKind::Read),
            e("/home/u/.ssh", ViewKind::Mask),
        ];
        let masks = [
            "/home/u/.ssh",
            "/home/u/.aws",
            "/home/u/proj/.env",
            "/etc/wardcell",
        ];
        let masks: Vec<PathBuf> = masks.iter().map(PathBuf::from).collect();
        let pair = |p: &str, t: &str| (PathBuf::from(p), PathBuf::from(t));
        // ~/.ssh, a mask in a read-only tree, is held by the view itself; ~/.aws too
        // once the view names it (below). The rest is watched.
        assert_eq!(
            held(&view, &masks),
            [
                pair("/home/u/.aws", "/home/u"),
                pair("/home/u/proj/.env", "/home/u/proj"),
                pair("/home/u/proj/.git/config", "/home/u/proj"),
                pair("/home/u/proj/target/release/wardcell", "/home/u/proj"),
            ]
        );
        let mut view = view.to_vec();
        view.push(e("/home/u/.aws", ViewKind::Mask));
        view.push(e("/home/u/proj/.env", ViewKind::Mask));
        assert_eq!(held(&view, &masks).len(), 3);
    }

    #[test]
    fn masks_in_read_only_trees_are_held_by_the_view() {
        let e = |p: &str, what| ViewEntry::new(p.into(), what, None);
        let mut view = vec![
            e("/home/u", ViewKind::Read),
            e("/home/u/.config", ViewKind::Read),
            e("/home/u/proj", ViewKind::Write),
            e("/home/u/proj/docs", ViewKind::Read),
            e("/srv", ViewKind::Read),
            e("/home/u/.ssh", ViewKind::Mask),
            e("/home/u/.config/gh", ViewKind::Mask),
            e("/home/u/.config/gh/hosts.yml", ViewKind::Mask),
            e("/home/u/proj/.env", ViewKind::Mask),
            e("/home/u/proj/docs/secret", ViewKind::Mask),
            e("/run/user/1", ViewKind::Mask),
            e("/run/user/1/keep.sock", ViewKind::Socket),
            e("/srv", ViewKind::Mask),
        ];
        let pair = |p: &str, t: &str| (PathBuf::from(p), PathBuf::from(t));
        // Held in the outermost read-only tree; not: one inside another mask, one under
        // a writable tree (even in a read-only tree there), one with a socket kept
        // inside, one that is a tree.
        assert_eq!(
            skeleton_masks(&view),
            [
                pair("/home/u/.config/gh", "/home/u"),
                pair("/home/u/.ssh", "/home/u"),
            ]
        );
        // Under a view that reads `/` itself, none: the root is the host's.
        view.push(e("/", ViewKind::Read));
        assert_eq!(skeleton_masks(&view), []);
    }
}
