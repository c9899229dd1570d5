//! The rules of a zone as `wardcell zone why` is answered (the supervisor hands them to a
//! sandbox for the zones this run may enter), and whether a zone's sandbox may read or
//! write a path, which the broker also asks of an entered command's executable (who may
//! write it). Reaching `HOST:PORT` and the answer's words are the client's
//! (`wardcell/src/why.rs`).
//!
//! The answer describes the rules as the view applies them: the most specific tree
//! decides (a `deny` mask, a `read` tree inside a `write` tree), wardcell's own
//! directories, credential files and host socket directories are masked in every
//! sandbox, and `/tmp`, `/dev` and `/proc` are the sandbox's own. Paths are compared as
//! written, after `.` and `..` are taken lexically: a symbolic link inside the view is
//! not followed (the kernel will).

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::plan::Plan;
pub use crate::plan::Rules;

impl Rules {
    /// How the answer names these rules: `zone 'agent'` or `profile 'p'`.
    pub fn named(&self) -> String {
        match &self.zone {
            Some(z) => format!("zone '{z}'"),
            None => format!("profile '{}'", self.profile),
        }
    }
}

/// The answer for one set of rules.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// The rule that decides, in words.
    pub rule: String,
}

fn yes(rule: String) -> Verdict {
    Verdict {
        allowed: true,
        rule,
    }
}

fn no(rule: String) -> Verdict {
    Verdict {
        allowed: false,
        rule,
    }
}

/// The sandbox's own trees: (path, kind, what it is).
const OWN: [(&str, u8, &str); 3] = [
    ("/tmp", 4, "every sandbox has a private /tmp, empty at the start and gone at the end (not the host's), unless a tree the profile names under /tmp is bound over it"),
    ("/dev", 5, "every sandbox has a minimal /dev of its own (null zero full random urandom tty, pts, shm)"),
    ("/proc", 6, "every sandbox has a /proc of its own, showing only its own processes"),
];

/// Files of every sandbox's own /proc covered all the same (they show the host's keys).
const PROC_MASKED: [&str; 2] = ["/proc/keys", "/proc/key-users"];

/// Whether a path may be read (`write`: written) under `rules`, and which rule decides.
pub fn decide_path(rules: &Rules, path: &Path, write: bool) -> Verdict {
    let q = |p: &Path| format!("{:?}", p.display().to_string());
    if PROC_MASKED.iter().any(|m| path == Path::new(m)) {
        return no(format!(
            "{} is masked in every sandbox: it would list the host's keys",
            q(path)
        ));
    }
    if let Some((m, why)) = rules.masked.iter().find(|(m, _)| path.starts_with(m)) {
        let named = rules.unix_sockets.iter().any(|s| s.starts_with(m));
        if !named || !why.starts_with("where host services") {
            return no(format!("{} is {why}", q(m)));
        }
    }
    // The most specific entry decides; on a tie a mask, then a `write` tree, wins (a
    // path both read and written is writable, as the view makes it).
    let own: Vec<(PathBuf, u8)> = OWN.iter().map(|(p, k, _)| (PathBuf::from(p), *k)).collect();
    let entries = rules
        .deny
        .iter()
        .map(|p| (p, 0))
        .chain(rules.read.iter().map(|p| (p, 1)))
        .chain(rules.write.iter().map(|p| (p, 2)))
        .chain(rules.unix_sockets.iter().map(|p| (p, 3)))
        .chain(own.iter().map(|(p, k)| (p, *k)));
    let best = entries
        .filter(|(p, _)| path.starts_with(p))
        .max_by_key(|(p, kind)| {
            let rank = match kind {
                0 => 3,
                2 => 2,
                1 => 1,
                _ => 0,
            };
            (p.components().count(), rank)
        });
    let Some((tree, kind)) = best else {
        return no(format!(
            "not in the view: no `read` or `write` tree of {} holds it",
            rules.named()
        ));
    };
    match (kind, write) {
        (0, _) => no(format!("{} is masked by `deny`", q(tree))),
        (3, _) => yes(format!("{} is a host socket `unix_sockets` names", q(tree))),
        (1, false) => yes(format!(
            "inside the `read` tree {} (the file's own permissions still apply)",
            q(tree)
        )),
        (1, true) => {
            let within = rules
                .write
                .iter()
                .find(|w| tree.starts_with(w) && *w != tree);
            match within {
                Some(w) => no(format!(
                    "{} is a `read` path inside the `write` tree {}: it stays read-only (protected files such as .git/hooks and .git/config are kept so; writing them fails with EBUSY or EROFS)",
                    q(tree),
                    q(w)
                )),
                None => no(format!("read-only: inside the `read` tree {}", q(tree))),
            }
        }
        (2, _) => yes(format!(
            "inside the `write` tree {} (the file's own permissions still apply)",
            q(tree)
        )),
        (k, _) => {
            let what = OWN
                .iter()
                .find(|(_, n, _)| *n == k)
                .map_or("", |(_, _, w)| *w);
            Verdict {
                allowed: k != 6 || !write,
                rule: what.to_string(),
            }
        }
    }
}

/// An entered command's executable (`argv[0]` looked up as the sandbox will, with the
/// `PATH` of `env`, the entry's: `envrules::resolve`) as the view of `target` (a zone of
/// `plan`; none for another name) shows it, and the zones of `plan` whose sandboxes may
/// write it: what the approval request and `audit.decision` show of the command. A
/// sandbox's own `/tmp`, `/dev` and `/proc` are never the host's, so nothing there is
/// looked at.
pub fn command(
    plan: &Plan,
    target: &str,
    (argv, env, cwd): (&[String], &[(String, String)], &str),
) -> (Option<PathBuf>, Vec<String>) {
    let (Some(target), Some(argv0)) = (plan.rules(target), argv.first()) else {
        return (None, Vec::new());
    };
    let own = |p: &Path| OWN.iter().any(|(o, _, _)| p.starts_with(o));
    let may = |r: &Rules, p: &Path, write| !own(p) && decide_path(r, p, write).allowed;
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    let exe = crate::envrules::resolve(argv0, path, Path::new(cwd), &|p| may(&target, p, false));
    let writers = exe.iter().flat_map(|e| {
        let may_write =
            |z: &&crate::plan::ZonePlan| plan.rules(&z.name).is_some_and(|r| may(&r, e, true));
        plan.zones.iter().filter(may_write).map(|z| z.name.clone())
    });
    let writers = writers.collect();
    (exe, writers)
}
