//! What a sandbox may leave in a repository that runs code on the host.
//!
//! Git runs hooks and commands named in its configuration (`core.hooksPath`,
//! `core.fsmonitor`, aliases with `!`, filters, ...) the next time someone uses git in
//! that directory, outside any sandbox, or inside another zone's sandbox. The built-in
//! profiles bind `.git/hooks` and `.git/config` read-only (and pin `.git`), but git reads
//! more than those two names: `config.worktree`, `commondir`, a `.git` file's `gitdir:`,
//! submodules' own configuration and hooks under `modules/`. The kernel offers no way to
//! forbid names inside a writable tree, so the rest is **detected**: when a run starts,
//! its watcher (`wardcell-shim --git-watch`, confined) takes a snapshot of everything
//! here that can make git run code, and compares whenever the broker asks (every second,
//! when a sandbox ends, before an entry); the broker audits `sandbox.git_changed`,
//! refuses zone entries while something is there, and prints a warning at the run's end.

use std::path::{Path, PathBuf};

use wardcell_common::protocol::GitLook;

use crate::config::Parsed;

/// Parses a configuration file's bytes as git does: [`Parsed::of`], or a stand-in that
/// counts (tests).
pub type Parser<'a> = &'a dyn Fn(&[u8]) -> Parsed;

/// What a linked worktree's git reads from the main repository's `.git`: the files that
/// say where its common directory is and its own configuration (watched here, bound
/// read-only by the plan).
pub const WORKTREE_FILES: &[&str] = &["commondir", "gitdir", "config.worktree", "config"];

/// Whether a file's lines or an entry changed: what `lstat` says, never the content
/// alone (a sandbox can make content look innocent to a parser and still matter). The
/// change time is the kernel's own: a sandbox can set a file's modification time back
/// (`touch -r`), never its change time.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Missing,
    Dir,
    Link(PathBuf),
    File {
        ino: u64,
        size: u64,
        mtime: (i64, i64),
        ctime: (i64, i64),
    },
    Other,
}

fn seen(p: &Path) -> Seen {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(p) {
        Err(_) => Seen::Missing,
        Ok(m) if m.file_type().is_symlink() => {
            Seen::Link(std::fs::read_link(p).unwrap_or_default())
        }
        Ok(m) if m.is_dir() => Seen::Dir,
        Ok(m) if m.is_file() => Seen::File {
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        },
        Ok(_) => Seen::Other,
    }
}

/// What a path is for git.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// `.git` itself (a directory, or a file naming the real one).
    DotGit,
    /// A configuration file: reported when it gains a code-running key.
    Config,
    /// `commondir`, a hooks directory itself: any change is reported.
    Pointer,
    /// One hook.
    Hook,
    /// More entries than are looked at (linked worktrees, hooks): what lies past them
    /// cannot be checked, so it is reported every time, from the run's start on.
    TooMany,
}

/// At most this many entries are looked at in a hooks or modules directory: a sandbox
/// could make millions; more is reported as such.
const MAX_ENTRIES: usize = 20_000;
/// At most this many linked worktrees are looked at (two configurations each, parsed in
/// a process of their own when they change); more is reported as such.
const MAX_WORKTREES: usize = 256;
/// At most this many configurations are parsed in one look (a process each); the rest
/// are reported as not checked.
const MAX_PARSED: usize = 64;
/// At most this many paths are reported, each line at most this long (the frame's bounds).
const MAX_REPORTED: usize = GitLook::MOST;
const MAX_LINE: usize = GitLook::MOST_BYTES;
/// A configuration file larger than this is reported rather than parsed.
const MAX_CONFIG: u64 = crate::config::MAX_FILE as u64;

/// A configuration file's entries that are not known to be harmless ([`untrusted`]).
type Keys = Vec<(String, Option<Vec<u8>>)>;

/// The snapshot of one repository, taken when the run starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    cwd: PathBuf,
    /// What each path was (its kind, and a config's code-running keys), by path: a
    /// sandbox may leave 20,000 hooks, and each is looked up.
    before: std::collections::BTreeMap<PathBuf, (Seen, Keys)>,
}

/// Everything under `cwd` that can make git run code, as it is now. Only when a sandbox
/// may write `cwd` (`writable`).
pub fn watch(cwd: &Path, writable: bool, parse: Parser<'_>) -> Option<Watch> {
    writable.then(|| Watch {
        cwd: cwd.to_path_buf(),
        before: survey(cwd, None, parse)
            .into_iter()
            .map(|(p, _, s, k)| (p, (s, k)))
            .collect(),
    })
}

impl Watch {
    /// The snapshot of `cwd` when nothing there can make git run code (no `.git`): what
    /// [`watch`] takes of such a directory, without looking.
    pub fn of_nothing(cwd: &Path) -> Watch {
        Watch {
            cwd: cwd.to_path_buf(),
            before: Before::new(),
        }
    }
}

/// What was there before.
type Before = std::collections::BTreeMap<PathBuf, (Seen, Keys)>;

/// The git directory a `.git` file names (`gitdir: PATH`, relative to `cwd`).
fn gitdir_of(cwd: &Path, dot_git: &Path) -> Option<PathBuf> {
    let text = String::from_utf8(read_small(dot_git, 4096)?).ok()?;
    let line = text.lines().next()?.trim();
    let dir = line.strip_prefix("gitdir:")?.trim();
    Some(if dir.starts_with('/') {
        PathBuf::from(dir)
    } else {
        cwd.join(dir)
    })
}

/// Every path that can make git run code, what it is, and each configuration's entries
/// not known to be harmless: parsed by `parse` unless `before` holds the same file
/// unchanged.
fn survey(
    cwd: &Path,
    before: Option<&Before>,
    parse: Parser<'_>,
) -> Vec<(PathBuf, Role, Seen, Keys)> {
    let mut out: Vec<(PathBuf, Role, Seen, Keys)> = Vec::new();
    let dot_git = cwd.join(".git");
    let parsed = std::cell::Cell::new(0usize);
    let add = |p: PathBuf, role: Role, out: &mut Vec<_>| {
        let s = seen(&p);
        let unchanged = before
            .and_then(|b| b.get(&p))
            .filter(|(was, _)| *was == s && role == Role::Config);
        let keys = match (&role, &s) {
            _ if unchanged.is_some() => unchanged.map(|(_, k)| k.clone()).unwrap_or_default(),
            (Role::Config, Seen::File { .. }) if parsed.get() >= MAX_PARSED => {
                vec![("(not checked: too many changed at once)".into(), None)]
            }
            (Role::Config, Seen::File { size, .. }) if *size <= MAX_CONFIG => {
                parsed.set(parsed.get() + 1);
                // A configuration that cannot be read now (a lease a sandbox holds on it,
                // a lock, its mode) is one that could not be checked, never one with no
                // keys: git may read it a moment later.
                match read_small(&p, MAX_CONFIG) {
                    Some(t) => untrusted(parse(&t)),
                    None => vec![("(not checked: it could not be read)".into(), None)],
                }
            }
            _ => Vec::new(),
        };
        out.push((p, role, s, keys));
    };
    add(dot_git.clone(), Role::DotGit, &mut out);
    let gitdir = match seen(&dot_git) {
        Seen::Dir => Some(dot_git.clone()),
        Seen::File { .. } => gitdir_of(cwd, &dot_git),
        _ => None,
    };
    let Some(g) = gitdir else {
        return out;
    };
    let mut dirs = vec![g.clone()];
    // The common directory of a linked worktree holds the shared config and hooks.
    if let Some(c) = common_dir(&g) {
        dirs.push(c);
    }
    // Linked worktrees of this repository: git run in one reads its `commondir` (where
    // the configuration and hooks are), `config.worktree` and `config` here; `gitdir`
    // says where the worktree is. A common directory named there is watched as well.
    add(g.join("worktrees"), Role::Pointer, &mut out);
    let worktrees = entries(&g.join("worktrees"));
    if worktrees.len() > MAX_WORKTREES {
        out.push((
            g.join("worktrees/..."),
            Role::TooMany,
            Seen::Other,
            Vec::new(),
        ));
    }
    for wt in worktrees.into_iter().take(MAX_WORKTREES) {
        for name in WORKTREE_FILES {
            let role = match *name {
                "commondir" | "gitdir" => Role::Pointer,
                _ => Role::Config,
            };
            add(wt.join(name), role, &mut out);
        }
        // Usually `../..`, the main git directory itself: compared by where it leads.
        if let Some(c) = common_dir(&wt) {
            let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
                (Ok(x), Ok(y)) => x == y,
                _ => a == b,
            };
            if !dirs.iter().any(|d| same(d, &c)) && dirs.len() < 64 {
                dirs.push(c);
            }
        }
    }
    // Submodules' git directories, nested up to three levels.
    let mut i = 0;
    while i < dirs.len() && dirs.len() < 256 {
        let modules = dirs[i].join("modules");
        if dirs[i].components().count() < g.components().count() + 6 {
            for m in entries(&modules).into_iter().take(256) {
                if seen(&m) == Seen::Dir {
                    dirs.push(m);
                }
            }
        }
        i += 1;
    }
    for d in dirs {
        add(d.join("config"), Role::Config, &mut out);
        add(d.join("config.worktree"), Role::Config, &mut out);
        add(d.join("commondir"), Role::Pointer, &mut out);
        let hooks = d.join("hooks");
        add(hooks.clone(), Role::Pointer, &mut out);
        if seen(&hooks) == Seen::Dir {
            let all = entries(&hooks);
            if all.len() > MAX_ENTRIES {
                out.push((hooks.join("..."), Role::TooMany, Seen::Other, Vec::new()));
            }
            for h in all.into_iter().filter(|h| !is_sample(h)).take(MAX_ENTRIES) {
                add(h, Role::Hook, &mut out);
            }
        }
    }
    // The files those configurations include (`include.path`, `includeIf.*.path`, as a
    // path relative to the including file or absolute), and theirs, as git follows them
    // (at most ten deep): each is read as a configuration too.
    let mut i = 0;
    while i < out.len() && out.len() < MAX_ENTRIES {
        let (file, role, _, keys) = &out[i];
        let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let included: Vec<PathBuf> = match role {
            Role::Config => keys
                .iter()
                .filter(|(k, _)| {
                    k == "include.path" || k.starts_with("includeif.") && k.ends_with(".path")
                })
                .filter_map(|(_, v)| String::from_utf8(v.clone()?).ok())
                .filter(|v| !v.starts_with('~'))
                .map(|v| dir.join(v))
                .collect(),
            _ => Vec::new(),
        };
        for f in included.into_iter().take(16) {
            if !out.iter().any(|(p, ..)| *p == f) {
                add(f, Role::Config, &mut out);
            }
        }
        i += 1;
    }
    out
}

/// The common directory a git directory's `commondir` names, if it has one.
fn common_dir(g: &Path) -> Option<PathBuf> {
    let common = String::from_utf8(read_small(&g.join("commondir"), 4096)?).ok()?;
    let c = PathBuf::from(common.trim());
    Some(if c.is_absolute() { c } else { g.join(c) })
}

fn is_sample(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "sample")
}

/// A directory's entries (not following a link to it), at most MAX_ENTRIES + 1.
fn entries(dir: &Path) -> Vec<PathBuf> {
    if seen(dir) != Seen::Dir {
        return Vec::new();
    }
    let mut out: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .take(MAX_ENTRIES + 1)
            .map(|e| e.path())
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

/// What a configuration file holds that git might run code with: every entry whose key
/// is not known to be harmless (`config::HARMLESS`), as git reads the file (`parsed`),
/// as `section.key` for reports with its value to compare. A file git cannot read is one
/// entry, `(unreadable)`: git refuses it, another reader may not; one too large to check,
/// or whose parser failed, is one entry too.
pub fn untrusted(parsed: Parsed) -> Vec<(String, Option<Vec<u8>>)> {
    match parsed {
        Parsed::Entries(entries) => entries
            .into_iter()
            .filter(|e| !crate::config::harmless_entry(&e.key, e.value.as_deref()))
            .map(|e| (e.key, e.value))
            .collect(),
        Parsed::Bad(line) => vec![(format!("(unreadable from line {line})"), None)],
        Parsed::TooLarge => vec![("(too many entries to check)".into(), None)],
    }
}

/// The names of the entries of `now` that `was` lacked (a new key, or a new value of
/// one), each once, in order.
fn new_keys(now: &[(String, Option<Vec<u8>>)], was: &[(String, Option<Vec<u8>>)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (k, _) in now.iter().filter(|e| !was.contains(e)) {
        // Subsections as written can hold anything a sandbox chose: shown escaped.
        let k = wardcell_common::text::shown(k).into_owned();
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

/// What changed since the snapshot that can make git run code, one line each naming the
/// path (quoted and escaped: names come from the sandbox) and why.
pub fn changes(w: &Watch, parse: Parser<'_>) -> Vec<String> {
    let now = survey(&w.cwd, Some(&w.before), parse);
    let mut out: Vec<String> = Vec::new();
    for (path, role, s, keys) in &now {
        let (was, old_keys) = match w.before.get(path) {
            Some((was, k)) => (was.clone(), k.clone()),
            None => (Seen::Missing, Vec::new()),
        };
        if *role == Role::TooMany {
            out.push(format!(
                "{path:?} (more than are checked: what lies past them cannot be)"
            ));
            continue;
        }
        if *s == was {
            continue;
        }
        let line = match role {
            Role::TooMany => continue,
            Role::DotGit => match s {
                Seen::Dir if was == Seen::Missing => continue, // a new repository: its parts are checked below
                _ => format!("{path:?} (changed: git reads where the repository is from it)"),
            },
            Role::Pointer => match s {
                Seen::Missing => continue,
                Seen::Dir if was == Seen::Missing => continue,
                _ => format!("{path:?} (changed: it points git at other hooks or configuration)"),
            },
            Role::Hook => match s {
                Seen::Missing => continue,
                _ => format!("{path:?} (a hook git runs)"),
            },
            Role::Config => match s {
                Seen::Missing => continue,
                Seen::File { size, .. } if *size > MAX_CONFIG => {
                    format!("{path:?} (changed, and too large to check)")
                }
                Seen::File { .. } => {
                    let new = new_keys(keys, &old_keys);
                    if new.is_empty() {
                        continue;
                    }
                    format!("{path:?} ({})", new.join(", "))
                }
                _ => format!("{path:?} (not a plain file: git may still read it)"),
            },
        };
        out.push(within(line, MAX_LINE));
        if out.len() >= MAX_REPORTED {
            break;
        }
    }
    out
}

/// `line`, cut to at most `most` bytes (on a character's boundary) and marked as cut.
fn within(mut line: String, most: usize) -> String {
    if line.len() > most {
        let mut end = most - "...".len();
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push_str("...");
    }
    line
}

/// A regular file's bytes, opened without following a link or blocking, at most `max`.
fn read_small(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    const O_NOFOLLOW: i32 = 0o400000;
    const O_NONBLOCK: i32 = 0o4000;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NOFOLLOW | O_NONBLOCK)
        .open(path)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf).ok()?;
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wc-gitguard-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn more_worktrees_than_are_checked_are_always_reported_and_parsing_is_bounded() {
        let dir = tmp("many");
        std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
        let parsed = std::cell::Cell::new(0);
        let counting = |b: &[u8]| {
            parsed.set(parsed.get() + 1);
            Parsed::of(b)
        };
        let w = watch(&dir, true, &counting).expect("a watch");
        assert!(changes(&w, &counting).is_empty());
        // A sandbox makes worktrees, each with configuration: one look parses at most
        // MAX_PARSED of them, and reports the rest as not checked.
        for i in 0..MAX_PARSED + 10 {
            let wt = dir.join(format!(".git/worktrees/w{i}"));
            std::fs::create_dir_all(&wt).unwrap();
            std::fs::write(wt.join("config"), "[core]\n\tbare = false\n").unwrap();
        }
        parsed.set(0);
        let c = changes(&w, &counting);
        assert_eq!(parsed.get(), MAX_PARSED);
        assert_eq!(
            c.iter().filter(|l| l.contains("not checked")).count(),
            10,
            "{c:?}"
        );
        // Past MAX_WORKTREES, reported every time, even when that was so at the start.
        for i in 0..MAX_WORKTREES + 1 {
            std::fs::create_dir_all(dir.join(format!(".git/worktrees/x{i}"))).unwrap();
        }
        let w = watch(&dir, true, &Parsed::of).expect("a watch");
        let c = changes(&w, &Parsed::of);
        assert!(
            c.iter()
                .any(|l| l.contains("worktrees/...") && l.contains("more than are checked")),
            "{c:?}"
        );
    }

    #[test]
    fn every_key_not_known_harmless_is_found_as_git_reads_it() {
        let text = "\u{feff}[core]\n\trepositoryformatversion = 0\n\thooksPath = /tmp/h\n\
                    [filter \"lfs\"]\n\tsmudge = evil\n[alias]\n\tco = !sh -c x\n\
                    [user]\n\tname = me\n[core] fsmonitor = ./x\n# core.editor = no\n\
                    [mergetool \"x\"]\n\tcmd = evil\n[user][core] fsmonitor = a\n\
                    [user]\r[core] sshCommand = b\n[interactive]\n\tdiffFilter = c\n\
                    [mergetool \"m\"]\n\tpath = d\n[imap]\n\ttunnel = e\n";
        let keys: Vec<String> = untrusted(Parsed::of(text.as_bytes()))
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            keys,
            [
                "core.hookspath",
                "filter.lfs.smudge",
                "alias.co",
                "core.fsmonitor",
                "mergetool.x.cmd",
                "core.fsmonitor",
                "core.sshcommand",
                "interactive.difffilter",
                "mergetool.m.path",
                "imap.tunnel",
            ]
        );
        assert!(untrusted(Parsed::of(b"[core]\nbare = false\n[user]\nemail = a@b\n")).is_empty());
        // What git cannot read is reported as such.
        assert_eq!(untrusted(Parsed::of(b"[core\n")).len(), 1);
        // A key that was there with the same value is not new; a new value is.
        let was = untrusted(Parsed::of(b"[core]\neditor = vim\n"));
        assert!(new_keys(
            &untrusted(Parsed::of(b"[core]\n\teditor = vim\n[user]\nname = x\n")),
            &was
        )
        .is_empty());
        assert_eq!(
            new_keys(&untrusted(Parsed::of(b"[core]\neditor = evil\n")), &was),
            ["core.editor"]
        );
    }

    #[test]
    fn a_file_an_existing_config_includes_is_read_as_one() {
        let dir = tmp("include");
        std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
        std::fs::write(
            dir.join(".git/config"),
            "[include]\n\tpath = ../shared.cfg\n",
        )
        .unwrap();
        std::fs::write(dir.join("shared.cfg"), "[user]\n\tname = me\n").unwrap();
        let w = watch(&dir, true, &Parsed::of).expect("a watch");
        assert!(changes(&w, &Parsed::of).is_empty());
        std::fs::write(
            dir.join("shared.cfg"),
            "[user]\n\tname = me\n[user][core] fsmonitor = x\n",
        )
        .unwrap();
        let c = changes(&w, &Parsed::of);
        assert_eq!(c.len(), 1, "{c:?}");
        assert!(
            c[0].contains("shared.cfg") && c[0].contains("core.fsmonitor"),
            "{c:?}"
        );
    }

    #[test]
    fn a_config_rewritten_to_the_same_size_and_time_is_read_again_and_only_then() {
        let dir = tmp("same-size");
        std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
        let config = dir.join(".git/config");
        std::fs::write(&config, "[core]\n\teditor = vi\n").unwrap();
        let parsed = std::cell::Cell::new(0);
        let counting = |b: &[u8]| {
            parsed.set(parsed.get() + 1);
            Parsed::of(b)
        };
        let w = watch(&dir, true, &counting).expect("a watch");
        assert_eq!(parsed.get(), 1);
        // Unchanged: compared by what lstat says, not parsed again.
        assert!(changes(&w, &counting).is_empty());
        assert_eq!(parsed.get(), 1);
        // The same size, the modification time put back (as `touch -r` does): the change
        // time still says it changed.
        let mtime = std::fs::metadata(&config).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&config, "[core]\n\tpager = vim\n").unwrap();
        assert_eq!(std::fs::metadata(&config).unwrap().len(), 20);
        let f = std::fs::File::options().write(true).open(&config).unwrap();
        f.set_modified(mtime).unwrap();
        assert_eq!(
            std::fs::metadata(&config).unwrap().modified().unwrap(),
            mtime
        );
        let c = changes(&w, &counting);
        assert_eq!(parsed.get(), 2);
        assert!(c.len() == 1 && c[0].contains("core.pager"), "{c:?}");
    }

    #[test]
    fn new_hooks_config_and_pointers_are_reported_samples_are_not() {
        let dir = tmp("new");
        let w = watch(&dir, true, &Parsed::of).expect("a watch");
        assert!(changes(&w, &Parsed::of).is_empty());
        std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
        std::fs::write(dir.join(".git/hooks/pre-commit.sample"), "").unwrap();
        std::fs::write(dir.join(".git/config"), "[core]\nbare = false\n").unwrap();
        assert!(
            changes(&w, &Parsed::of).is_empty(),
            "{:?}",
            changes(&w, &Parsed::of)
        );
        std::fs::write(dir.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(dir.join(".git/config"), "[core]\nfsmonitor = x\n").unwrap();
        std::fs::write(dir.join(".git/commondir"), "../elsewhere\n").unwrap();
        let got = changes(&w, &Parsed::of);
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(
            got.iter().any(|l| l.contains("hooks/pre-commit\" (a hook")),
            "{got:?}"
        );
        assert!(
            got.iter().any(|l| l.ends_with("config\" (core.fsmonitor)")),
            "{got:?}"
        );
        assert!(got.iter().any(|l| l.contains("commondir")), "{got:?}");
        assert!(watch(&dir, false, &Parsed::of).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_existing_repository_is_watched_beyond_hooks_and_config() {
        let dir = tmp("existing");
        std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(dir.join(".git/modules/sub/hooks")).unwrap();
        std::fs::write(dir.join(".git/config"), "[core]\nbare = false\n").unwrap();
        std::fs::write(dir.join(".git/modules/sub/config"), "[core]\n").unwrap();
        let w = watch(&dir, true, &Parsed::of).unwrap();
        // Untouched config content rewritten without new keys: nothing to say.
        std::fs::write(
            dir.join(".git/config"),
            "[core]\nbare = false\n[user]\nname = x\n",
        )
        .unwrap();
        assert!(
            changes(&w, &Parsed::of).is_empty(),
            "{:?}",
            changes(&w, &Parsed::of)
        );
        std::fs::write(
            dir.join(".git/config.worktree"),
            "[core]\nfsmonitor = ./x\n",
        )
        .unwrap();
        std::fs::write(
            dir.join(".git/modules/sub/config"),
            "[core]\nhooksPath = /x\n",
        )
        .unwrap();
        std::fs::write(
            dir.join(".git/modules/sub/hooks/post-checkout"),
            "#!/bin/sh\n",
        )
        .unwrap();
        let got = changes(&w, &Parsed::of);
        assert_eq!(got.len(), 3, "{got:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn linked_worktrees_are_watched_and_their_common_dir_too() {
        let dir = tmp("worktrees");
        std::fs::create_dir_all(dir.join(".git/worktrees/wt")).unwrap();
        std::fs::write(dir.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(dir.join(".git/worktrees/wt/commondir"), "../..\n").unwrap();
        let w = watch(&dir, true, &Parsed::of).unwrap();
        // The usual `../..` is the main git directory, surveyed once.
        let once = survey(&dir, None, &Parsed::of)
            .iter()
            .filter(|(p, ..)| p.ends_with("config") && p.parent().unwrap().ends_with("wt/../.."))
            .count();
        assert_eq!(once, 0);
        assert!(
            changes(&w, &Parsed::of).is_empty(),
            "{:?}",
            changes(&w, &Parsed::of)
        );
        std::fs::create_dir_all(dir.join("planted")).unwrap();
        std::fs::write(dir.join("planted/config"), "[core]\nfsmonitor = x\n").unwrap();
        std::fs::create_dir_all(dir.join(".git/worktrees/evil")).unwrap();
        std::fs::write(
            dir.join(".git/worktrees/evil/commondir"),
            "../../../planted\n",
        )
        .unwrap();
        std::fs::write(
            dir.join(".git/worktrees/wt/config.worktree"),
            "[alias]\nx = !y\n",
        )
        .unwrap();
        let got = changes(&w, &Parsed::of);
        assert!(got.iter().any(|l| l.contains("evil/commondir")), "{got:?}");
        assert!(
            got.iter()
                .any(|l| l.contains("wt/config.worktree\" (alias.x)")),
            "{got:?}"
        );
        assert!(
            got.iter()
                .any(|l| l.contains("planted/config\" (core.fsmonitor)")),
            "{got:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_dot_git_file_rewritten_or_a_hooks_link_is_reported() {
        let dir = tmp("file");
        std::fs::create_dir_all(dir.join("real/hooks")).unwrap();
        std::fs::write(dir.join(".git"), "gitdir: real\n").unwrap();
        let w = watch(&dir, true, &Parsed::of).unwrap();
        std::fs::write(dir.join("real/hooks/pre-push"), "#!/bin/sh\n").unwrap();
        assert_eq!(
            changes(&w, &Parsed::of).len(),
            1,
            "{:?}",
            changes(&w, &Parsed::of)
        );
        std::fs::write(dir.join(".git"), "gitdir: planted-somewhere-else\n").unwrap();
        assert!(
            changes(&w, &Parsed::of)
                .iter()
                .any(|l| l.contains("\".git\"")
                    || l.ends_with(".git\" (changed: git reads where the repository is from it)")),
            "{:?}",
            changes(&w, &Parsed::of)
        );
        std::fs::remove_dir_all(&dir).unwrap();

        let dir = tmp("link");
        std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(dir.join("mine")).unwrap();
        let w = watch(&dir, true, &Parsed::of).unwrap();
        std::fs::remove_dir(dir.join(".git/hooks")).unwrap();
        std::os::unix::fs::symlink("../mine", dir.join(".git/hooks")).unwrap();
        assert!(
            changes(&w, &Parsed::of)
                .iter()
                .any(|l| l.contains("points git at other hooks")),
            "{:?}",
            changes(&w, &Parsed::of)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_fifo_in_the_place_of_the_config_neither_blocks_nor_goes_unreported() {
        let dir = tmp("fifo");
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        let w = watch(&dir, true, &Parsed::of).unwrap();
        let ok = std::process::Command::new("mkfifo")
            .arg(dir.join(".git/config"))
            .status()
            .unwrap();
        assert!(ok.success());
        let got = changes(&w, &Parsed::of);
        assert!(
            got.iter().any(|l| l.contains("not a plain file")),
            "{got:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
