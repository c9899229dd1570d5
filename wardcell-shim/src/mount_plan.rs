//! The plan of the sandbox's view: which mount goes where, in which order, decided from
//! the spec's view alone. Pure (no system call), so every decision is unit-tested
//! without a namespace; mounts.rs carries the plan out, with CAP_SYS_ADMIN, step by step.

use std::path::{Path, PathBuf};

use wardcell_common::plan::{ViewEntry, ViewKind};

/// Files of the sandbox's own `/proc` that show the host user's keyrings: masked in
/// every sandbox.
pub const PROC_MASKS: &[&str] = &["/proc/key-users", "/proc/keys"];

/// One step of building the view, in path order (parents first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A private tmpfs (`/tmp`), a minimal `/dev`, a fresh `/proc`.
    Tmp,
    Dev,
    Proc,
    /// A tree bound from the host, writable or not.
    Tree {
        writable: bool,
    },
    /// Make an existing directory of a writable tree a mount point of its own.
    Pin,
    /// A directory of the view's own, in the place of the host's directory there (a
    /// read-only tree, or a directory in one, on the way to masks the view holds by
    /// construction: wardcell_support::view::skeleton_masks), holding a read-only bind of
    /// each of its entries but `skip` (those masks, the next directories on the way, and
    /// what another step puts there).
    Skeleton {
        skip: Vec<std::ffi::OsString>,
    },
    /// Hide what is there, keeping the listed sockets reachable.
    Mask {
        sockets: Vec<PathBuf>,
    },
    Socket,
    Link(PathBuf),
}

/// The steps for `view`, in order, with the decisions: a tree inside a tree of the same
/// kind is already there; anything inside a mask is hidden (sockets are put inside their
/// mask); ancestors of protected paths inside writable trees are pinned.
pub fn plan(view: &[ViewEntry]) -> Vec<(PathBuf, Op)> {
    use std::collections::{HashMap, HashSet};
    // Each tree once; named both ways, a tree is writable. Keyed by bytes and hashed: the
    // paths are canonical, and comparing them component by component, or by bytes down
    // a tree of a thousand, costs more.
    let mut trees: HashMap<&[u8], bool> = HashMap::with_capacity(view.len());
    for e in view {
        let writable = match e.what {
            ViewKind::Read => false,
            ViewKind::Write => true,
            _ => continue,
        };
        *trees.entry(key(&e.path)).or_insert(writable) |= writable;
    }
    let masks: HashSet<&[u8]> = view
        .iter()
        .filter(|e| e.what == ViewKind::Mask)
        .map(|e| key(&e.path))
        .collect();
    // Looked up by ancestors, so that long lists stay cheap.
    let masked = |p: &Path| p.ancestors().skip(1).any(|a| masks.contains(key(a)));
    // Whether the nearest tree that contains `p` (not `p` itself) is writable.
    let enclosing = |p: &Path| {
        p.ancestors()
            .skip(1)
            .find_map(|a| trees.get(key(a)).copied())
    };
    let mut done: HashSet<&[u8]> = HashSet::with_capacity(view.len());

    let mut ops: Vec<(PathBuf, Op)> = vec![
        ("/dev".into(), Op::Dev),
        ("/proc".into(), Op::Proc),
        ("/tmp".into(), Op::Tmp),
    ];
    // The kernel shows every key of the caller's user there (serials, descriptions).
    for p in PROC_MASKS {
        ops.push((p.into(), Op::Mask { sockets: vec![] }));
    }
    let mut protected: Vec<&Path> = Vec::new();
    for e in view {
        let p = e.path.as_path();
        match &e.what {
            ViewKind::Read | ViewKind::Write => {
                let writable = trees[key(p)];
                if masked(p) || !done.insert(key(p)) {
                    continue;
                }
                match enclosing(p) {
                    Some(w) if w == writable => continue,
                    Some(true) => protected.push(p),
                    _ => {}
                }
                ops.push((p.to_path_buf(), Op::Tree { writable }));
            }
            ViewKind::Mask => {
                if masked(p) {
                    continue;
                }
                let sockets: Vec<PathBuf> = view
                    .iter()
                    .filter(|s| s.what == ViewKind::Socket && s.path.starts_with(p))
                    .map(|s| s.path.clone())
                    .collect();
                if enclosing(p) == Some(true) {
                    protected.push(p);
                }
                ops.push((p.to_path_buf(), Op::Mask { sockets }));
            }
            ViewKind::Socket => {
                if masks.contains(key(p)) || masked(p) {
                    continue; // placed by its mask
                }
                if enclosing(p) == Some(true) {
                    protected.push(p);
                }
                ops.push((p.to_path_buf(), Op::Socket));
            }
            ViewKind::Link(target) => {
                if !masked(p) {
                    ops.push((p.to_path_buf(), Op::Link(target.clone())));
                }
            }
        }
    }
    // Ancestors of protected paths, strictly between their writable tree and them, each
    // once (a set, not a search of the steps: a thousand read paths inside a writable
    // tree made that quadratic).
    let mut pinned: HashSet<&Path> = HashSet::new();
    for p in protected {
        let Some(w) = p
            .ancestors()
            .skip(1)
            .find(|a| trees.get(key(a)) == Some(&true))
        else {
            continue;
        };
        for a in p.ancestors().skip(1) {
            if a == w || !a.starts_with(w) {
                break;
            }
            if pinned.insert(a) {
                ops.push((a.to_path_buf(), Op::Pin));
            }
        }
    }
    skeletons(view, &mut ops);
    // Parents first; at one path a tree before what hides or pins it.
    let rank = |op: &Op| match op {
        Op::Tmp | Op::Dev | Op::Proc | Op::Tree { .. } | Op::Skeleton { .. } => 0,
        Op::Pin => 1,
        Op::Mask { .. } => 2,
        Op::Socket | Op::Link(_) => 3,
    };
    // A parent's bytes are a prefix of its children's, so byte order puts parents first.
    ops.sort_by(|(a, x), (b, y)| key(a).cmp(key(b)).then(rank(x).cmp(&rank(y))));
    // A mask with the same path as a tree hides the tree: keep the mask alone. What shares
    // a path is adjacent after the sort.
    let mut out: Vec<(PathBuf, Op)> = Vec::with_capacity(ops.len());
    for (p, op) in ops {
        if matches!(op, Op::Mask { .. }) {
            let mut i = out.len();
            while i > 0 && key(&out[i - 1].0) == key(&p) {
                i -= 1;
                if matches!(out[i].1, Op::Tree { .. }) {
                    out.remove(i);
                }
            }
        }
        out.push((p, op));
    }
    out
}

/// The masks the view holds by construction (wardcell_support::view::skeleton_masks) lose
/// their own step; every directory from their tree down to their parents becomes an
/// [`Op::Skeleton`] (a read-only tree's step turns into one), skipping the names that
/// anything else in `ops` puts there.
fn skeletons(view: &[ViewEntry], ops: &mut Vec<(PathBuf, Op)>) {
    use std::collections::{BTreeSet, HashMap, HashSet};
    let held = wardcell_support::view::skeleton_masks(view);
    if held.is_empty() {
        return;
    }
    let masks: HashSet<&Path> = held.iter().map(|(m, _)| m.as_path()).collect();
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
    for (m, tree) in &held {
        for a in m.ancestors().skip(1) {
            dirs.insert(a.to_path_buf());
            if a == tree {
                break;
            }
        }
    }
    ops.retain(|(p, op)| !(matches!(op, Op::Mask { .. }) && masks.contains(p.as_path())));
    ops.retain(|(p, op)| !(matches!(op, Op::Tree { writable: false }) && dirs.contains(p)));
    // What each skeleton leaves to other steps, by name.
    let mut skip: HashMap<&Path, Vec<std::ffi::OsString>> = HashMap::new();
    let placed = ops
        .iter()
        .map(|(p, _)| p)
        .chain(dirs.iter())
        .map(PathBuf::as_path);
    for p in placed.chain(masks.iter().copied()) {
        if let (Some(parent), Some(name)) = (p.parent(), p.file_name()) {
            if dirs.contains(parent) {
                skip.entry(parent).or_default().push(name.to_os_string());
            }
        }
    }
    let made: Vec<(PathBuf, Op)> = dirs
        .iter()
        .map(|d| {
            let mut skip = skip.remove(d.as_path()).unwrap_or_default();
            skip.sort();
            skip.dedup();
            (d.clone(), Op::Skeleton { skip })
        })
        .collect();
    ops.extend(made);
}

/// A canonical path's bytes.
pub fn key(p: &Path) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    p.as_os_str().as_bytes()
}

/// Whether the canonical path `p` is `dir` or lies below it, by bytes (as
/// `Path::starts_with`, without splitting both into components).
pub fn within(p: &Path, dir: &Path) -> bool {
    let (p, dir) = (key(p), key(dir));
    p.starts_with(dir) && (p.len() == dir.len() || dir.ends_with(b"/") || p[dir.len()] == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(path: &str, what: ViewKind) -> ViewEntry {
        ViewEntry {
            path: path.into(),
            what,
            id: None,
        }
    }

    fn paths(ops: &[(PathBuf, Op)]) -> Vec<String> {
        ops.iter()
            .map(|(p, op)| format!("{} {op:?}", p.display()))
            .collect()
    }

    #[test]
    fn nested_trees_of_one_kind_are_bound_once() {
        let ops = plan(&[
            e("/usr", ViewKind::Read),
            e("/usr/bin", ViewKind::Read),
            e("/h", ViewKind::Read),
            e("/h/p", ViewKind::Write),
            e("/h/p/sub", ViewKind::Write),
        ]);
        let got = paths(&ops);
        assert!(
            got.contains(&"/usr Tree { writable: false }".to_string()),
            "{got:?}"
        );
        assert!(!got.iter().any(|s| s.starts_with("/usr/bin ")), "{got:?}");
        assert!(
            got.contains(&"/h/p Tree { writable: true }".to_string()),
            "{got:?}"
        );
        assert!(!got.iter().any(|s| s.starts_with("/h/p/sub ")), "{got:?}");
    }

    #[test]
    fn read_only_inside_writable_is_bound_with_its_ancestors_pinned() {
        let ops = plan(&[
            e("/p", ViewKind::Write),
            e("/p/.git/hooks", ViewKind::Read),
            e("/p/.git/config", ViewKind::Read),
        ]);
        let got = paths(&ops);
        assert_eq!(
            got,
            [
                "/dev Dev",
                "/p Tree { writable: true }",
                "/p/.git Pin",
                "/p/.git/config Tree { writable: false }",
                "/p/.git/hooks Tree { writable: false }",
                "/proc Proc",
                "/proc/key-users Mask { sockets: [] }",
                "/proc/keys Mask { sockets: [] }",
                "/tmp Tmp",
            ]
        );
    }

    #[test]
    fn masks_hide_what_is_inside_them_but_keep_their_sockets() {
        let ops = plan(&[
            e("/h", ViewKind::Write),
            e("/h/.ssh", ViewKind::Mask),
            e("/h/.ssh/known_hosts", ViewKind::Read),
            e("/h/.ssh/inner", ViewKind::Mask),
            e("/run/user/1/wardcell", ViewKind::Mask),
            e("/run/user/1/wardcell/r/s1.sock", ViewKind::Socket),
            e("/h/agent.sock", ViewKind::Socket),
        ]);
        let got = paths(&ops);
        assert!(!got.iter().any(|s| s.contains("known_hosts")), "{got:?}");
        assert!(!got.iter().any(|s| s.contains("inner")), "{got:?}");
        assert!(
            got.contains(
                &"/run/user/1/wardcell Mask { sockets: [\"/run/user/1/wardcell/r/s1.sock\"] }"
                    .to_string()
            ),
            "{got:?}"
        );
        assert!(
            !got.iter().any(|s| s.ends_with("s1.sock Socket")),
            "{got:?}"
        );
        assert!(got.contains(&"/h/agent.sock Socket".to_string()), "{got:?}");
    }

    #[test]
    fn masks_in_a_read_only_tree_are_held_by_directories_of_the_views_own() {
        let ops = plan(&[
            e("/h", ViewKind::Read),
            e("/h/proj", ViewKind::Write),
            e("/h/.ssh", ViewKind::Mask),
            e("/h/.config/gh", ViewKind::Mask),
            e("/h/proj/.env", ViewKind::Mask),
            e("/h/bin/tool", ViewKind::Link("/usr/bin/tool".into())),
        ]);
        let got = paths(&ops);
        // The tree and the directory on the way are skeletons, each leaving to other
        // steps (or out) what they place; the held masks have no step of their own; a
        // mask under the writable tree keeps its own.
        assert_eq!(
            got,
            [
                "/dev Dev",
                "/h Skeleton { skip: [\".config\", \".ssh\", \"proj\"] }",
                "/h/.config Skeleton { skip: [\"gh\"] }",
                "/h/bin/tool Link(\"/usr/bin/tool\")",
                "/h/proj Tree { writable: true }",
                "/h/proj/.env Mask { sockets: [] }",
                "/proc Proc",
                "/proc/key-users Mask { sockets: [] }",
                "/proc/keys Mask { sockets: [] }",
                "/tmp Tmp",
            ],
            "{got:?}"
        );
    }

    #[test]
    fn a_mask_on_a_tree_hides_the_tree() {
        let ops = plan(&[e("/x", ViewKind::Read), e("/x", ViewKind::Mask)]);
        let got = paths(&ops);
        assert!(!got.iter().any(|s| s.starts_with("/x Tree")), "{got:?}");
        assert!(got.iter().any(|s| s.starts_with("/x Mask")), "{got:?}");
    }

    #[test]
    fn trees_under_tmp_go_on_the_private_tmp() {
        let ops = plan(&[e("/tmp/proj", ViewKind::Write), e("/usr", ViewKind::Read)]);
        let at = |p: &str| ops.iter().position(|(q, _)| q == Path::new(p)).unwrap();
        assert!(at("/tmp") < at("/tmp/proj"));
    }

    // Whatever the view, every step comes after the step that makes its parent's place
    // (the executor mounts in this order), each path has one step, the keyrings of the
    // sandbox's `/proc` are masked, and a link is made where the view says.
    #[test]
    fn steps_come_parents_first_once_each() {
        let view = [
            e("/usr", ViewKind::Read),
            e("/home/u", ViewKind::Read),
            e("/home/u/proj", ViewKind::Write),
            e("/home/u/proj/.git/hooks", ViewKind::Read),
            e("/home/u/proj/.git/config", ViewKind::Read),
            e("/home/u/.ssh", ViewKind::Mask),
            e("/home/u/.config/gh", ViewKind::Mask),
            e("/run/user/0/agent.sock", ViewKind::Socket),
            e("/bin", ViewKind::Link("usr/bin".into())),
            e("/tmp/cache", ViewKind::Write),
        ];
        let ops = plan(&view);
        let mut seen = std::collections::HashSet::new();
        for (i, (p, _)) in ops.iter().enumerate() {
            assert!(
                seen.insert(p.clone()),
                "{} twice: {:?}",
                p.display(),
                paths(&ops)
            );
            for (q, _) in &ops[i + 1..] {
                assert!(
                    !p.starts_with(q) || p == q,
                    "{} before its parent {}",
                    p.display(),
                    q.display()
                );
            }
        }
        let step = |p: &str| {
            ops.iter()
                .find(|(q, _)| q == Path::new(p))
                .map(|(_, op)| op.clone())
        };
        for keys in PROC_MASKS {
            assert!(
                matches!(step(keys), Some(Op::Mask { .. })),
                "{keys}: {:?}",
                paths(&ops)
            );
        }
        assert_eq!(step("/bin"), Some(Op::Link("usr/bin".into())));
        assert_eq!(step("/run/user/0/agent.sock"), Some(Op::Socket));
        assert_eq!(step("/home/u/proj"), Some(Op::Tree { writable: true }));
        assert_eq!(
            step("/home/u/proj/.git"),
            Some(Op::Pin),
            "{:?}",
            paths(&ops)
        );
    }
}
