//! What a sandbox may leave in a repository that runs code on the host.
//!
//! Git runs hooks (`.git/hooks/*`) and commands named in `.git/config` (`core.hooksPath`,
//! `core.fsmonitor`, aliases with `!`, filters, ...) the next time someone uses git in
//! that directory, outside any sandbox. Where `.git/hooks` and `.git/config` exist when
//! a run starts, the built-in profiles bind them read-only and pin `.git`, so a sandbox
//! can change neither. Where they do not exist yet (no repository, or a repository
//! without them), the kernel offers no way to forbid one name in a writable tree, so what
//! appears is detected when each sandbox ends: the broker warns on stderr and audits
//! `sandbox.git_changed`.

use std::path::{Path, PathBuf};

/// What to look at when a sandbox ends: the repository of the run's directory, where
/// something that protects it was missing at the start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    pub git: PathBuf,
    hooks: bool,
    config: bool,
    dot_git_file: bool,
}

/// The watch for `cwd`, when a sandbox may write it and `hooks_there` / `config_there`
/// say whether `.git/hooks` and `.git/config` were there (and so bound read-only).
pub fn watch(cwd: &Path, writable: bool, hooks_there: bool, config_there: bool) -> Option<Watch> {
    let git = cwd.join(".git");
    let dot_git_file = !git.exists();
    let w = Watch {
        git,
        hooks: !hooks_there,
        config: !config_there,
        dot_git_file,
    };
    (writable && (w.hooks || w.config || w.dot_git_file)).then_some(w)
}

/// Config keys whose value git runs, or that point git at code: `section.key` with the
/// subsection left out, lower case.
const RUNS_CODE: &[&str] = &[
    "core.hookspath",
    "core.fsmonitor",
    "core.sshcommand",
    "core.editor",
    "core.pager",
    "core.askpass",
    "core.gitproxy",
    "sequence.editor",
    "diff.external",
    "diff.textconv",
    "diff.command",
    "merge.driver",
    "filter.clean",
    "filter.smudge",
    "filter.process",
    "credential.helper",
    "gpg.program",
    "include.path",
    "includeif.path",
    "uploadpack.packobjectshook",
    "remote.uploadpack",
    "remote.receivepack",
    "pager.*",
    "alias.*",
];

/// Code-running keys set in a git config file's text, as `section.key` (first of each).
pub fn code_keys(text: &str) -> Vec<String> {
    let mut section = String::new();
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            // [section] or [section "subsection"] (or [section.subsection]).
            let inner = line.trim_start_matches('[');
            let name: String = inner
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            section = name.to_ascii_lowercase();
            // A key may follow on the same line: `[core] hooksPath = x`.
            let rest = line.split_once(']').map(|(_, r)| r.trim()).unwrap_or("");
            if rest.is_empty() {
                continue;
            }
            check(&section, rest, &mut out);
            continue;
        }
        check(&section, line, &mut out);
    }
    out
}

fn check(section: &str, line: &str, out: &mut Vec<String>) {
    if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
        return;
    }
    let key: String = line
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect::<String>()
        .to_ascii_lowercase();
    if key.is_empty() {
        return;
    }
    let full = format!("{section}.{key}");
    let hit = RUNS_CODE.iter().any(|k| match k.strip_suffix(".*") {
        Some(s) => s == section,
        None => *k == full,
    });
    if hit && !out.contains(&full) {
        out.push(full);
    }
}

/// At most this many paths are reported: a sandbox could make millions of hooks.
const MAX_REPORTED: usize = 64;

/// What appeared that runs code, each as one line naming the path (and the key). Paths
/// are quoted and escaped: names come from the sandbox. Nothing here follows a link a
/// sandbox could plant, blocks on a FIFO, or reads more than 1 MiB.
pub fn changes(w: &Watch) -> Vec<String> {
    let mut out = Vec::new();
    let git_meta = std::fs::symlink_metadata(&w.git);
    if w.dot_git_file {
        if let Ok(m) = &git_meta {
            if !m.is_dir() {
                out.push(format!(
                    "{:?} (a link to another git directory, whose hooks and configuration git would use)",
                    w.git
                ));
            }
        }
    }
    if !git_meta.is_ok_and(|m| m.is_dir()) {
        return out;
    }
    if w.hooks {
        let hooks = w.git.join("hooks");
        if std::fs::symlink_metadata(&hooks).is_ok_and(|m| m.file_type().is_symlink()) {
            out.push(format!("{hooks:?} (a link to another directory of hooks)"));
        } else if let Ok(entries) = std::fs::read_dir(&hooks) {
            let mut found: Vec<String> = entries
                .flatten()
                .take(4096)
                .map(|e| e.path())
                .filter(|p| !p.to_string_lossy().ends_with(".sample"))
                .map(|p| format!("{p:?}"))
                .collect();
            found.sort();
            out.extend(found);
        }
    }
    if w.config {
        let path = w.git.join("config");
        match read_plain(&path) {
            Some(text) => {
                for key in code_keys(&text) {
                    out.push(format!("{path:?} ({key})"));
                }
            }
            None if std::fs::symlink_metadata(&path).is_ok() => {
                out.push(format!(
                    "{path:?} (not a plain file: git may still read it)"
                ));
            }
            None => {}
        }
    }
    out.truncate(MAX_REPORTED);
    out
}

/// A regular file's text, opened without following a link or blocking, at most 1 MiB.
fn read_plain(path: &Path) -> Option<String> {
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
    f.take(1 << 20).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nix_free_mkfifo(p: &Path) {
        let ok = std::process::Command::new("mkfifo")
            .arg(p)
            .status()
            .unwrap();
        assert!(ok.success());
    }

    #[test]
    fn code_running_keys_are_found_in_any_spelling() {
        let text = "[core]\n\trepositoryformatversion = 0\n\thooksPath = /tmp/h\n\
                    [filter \"lfs\"]\n\tsmudge = evil\n[alias]\n\tco = !sh -c x\n\
                    [user]\n\tname = me\n[core] fsmonitor = ./x\n# core.editor = no\n";
        assert_eq!(
            code_keys(text),
            [
                "core.hookspath",
                "filter.smudge",
                "alias.co",
                "core.fsmonitor"
            ]
        );
        assert!(code_keys("[core]\nbare = false\n[user]\nemail = a@b\n").is_empty());
    }

    #[test]
    fn new_hooks_and_config_are_reported_samples_are_not() {
        let dir = std::env::temp_dir().join(format!("wc-gitguard-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let w = watch(&dir, true, false, false).expect("a watch");
        assert!(changes(&w).is_empty());
        std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
        std::fs::write(dir.join(".git/hooks/pre-commit.sample"), "").unwrap();
        std::fs::write(dir.join(".git/config"), "[core]\nbare = false\n").unwrap();
        assert!(changes(&w).is_empty());
        std::fs::write(dir.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(dir.join(".git/config"), "[core]\nfsmonitor = x\n").unwrap();
        let got = changes(&w);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].ends_with(".git/hooks/pre-commit\""), "{got:?}");
        assert!(
            got[1].ends_with(".git/config\" (core.fsmonitor)"),
            "{got:?}"
        );
        // A FIFO in the place of the config neither blocks nor goes unreported.
        std::fs::remove_file(dir.join(".git/config")).unwrap();
        nix_free_mkfifo(&dir.join(".git/config"));
        let got = changes(&w);
        assert!(
            got.iter().any(|l| l.contains("not a plain file")),
            "{got:?}"
        );
        // Not writable, or both protected: nothing to watch.
        assert!(watch(&dir, false, false, false).is_none());
        assert!(watch(&dir, true, true, true).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
