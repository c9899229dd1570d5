//! What a run trusts that a sandbox could change through another name (issue 35, item 1).
//!
//! Every view binds the programs and files the run trusts read-only where a profile
//! writes their tree (the broker's `Plan::pinned`), but a bind covers one name: a file
//! with a second hard link inside a writable tree (cargo links `target/release/wardcell`
//! to `target/release/deps/wardcell-<hash>`) stays writable through it, and the next
//! program the run starts, or the next `wardcell run`, would be the sandbox's. Such a run
//! is refused, in `run` and in `policy check` alike, with what to do. A secret file with
//! a second name is refused wherever it is: the mask covers only the name the
//! configuration gives.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use wardcell_common::helper;
use wardcell_common::paths;
use wardcell_common::plan::{Plan, SecretPlan};

use crate::error::Error;

/// Refuse `plan` when a file it trusts has another name a sandbox of it could write, or
/// a secret file has another name at all.
pub fn check(plan: &Plan) -> Result<(), Error> {
    let writes: Vec<(&str, &PathBuf)> = plan
        .profiles()
        .flat_map(|p| p.write.iter().map(move |w| (p.name.as_str(), w)))
        .collect();
    // The directories of wardcell's programs are bound read-only where a tree is
    // writable; one that is a written tree itself cannot be.
    let client = std::env::current_exe().ok();
    let dirs = client.iter().flat_map(|c| {
        [
            c.parent().map(Path::to_path_buf),
            Some(paths::helper_dir(c)),
        ]
    });
    let dirs: Vec<PathBuf> = dirs
        .flatten()
        .filter_map(|d| std::fs::canonicalize(d).ok())
        .collect();
    for dir in &dirs {
        if let Some((profile, _)) = writes.iter().find(|(_, w)| *w == dir) {
            return Err(Error::Refused(format!(
                "{} holds wardcell's programs, and profile '{profile}' writes it, so a sandbox could replace them or put a program beside them that a later run or another zone starts; install wardcell outside every tree a profile writes (README, \"Try it\")",
                dir.display()
            )));
        }
    }
    // A pin binds a directory by its name: a second name for it (a bind mount of it, or
    // of a directory above it, inside a written tree) would stay writable.
    let mounts = Mount::all();
    let trusted_paths = trusted(plan).into_iter().filter_map(|(f, what)| {
        let file = std::fs::canonicalize(f).ok()?;
        let dir = file.parent()?.to_path_buf();
        Some([(dir, what), (file, what)])
    });
    let wardcell_dirs = dirs.iter().map(|d| (d.clone(), "wardcell's programs"));
    for (dir, what) in wardcell_dirs.chain(trusted_paths.flatten()) {
        for (profile, tree) in &writes {
            if let Some(alias) = reached(&mounts, tree, &dir) {
                return Err(Error::Refused(format!(
                    "{} ({what}) is also {} through a bind mount, and profile '{profile}' writes {}, so a sandbox could change it there; remove that mount, or install wardcell (and what the run trusts) where no written tree reaches",
                    dir.display(),
                    alias.display(),
                    tree.display()
                )));
            }
        }
    }
    for (file, what) in trusted(plan) {
        let Ok(real) = std::fs::canonicalize(&file) else {
            continue;
        };
        let names = std::fs::metadata(&real).map_or(1, |m| m.nlink());
        if names < 2 {
            continue;
        }
        if let Some((profile, tree)) = writes.iter().find(|(_, w)| real.starts_with(w)) {
            return Err(Error::Refused(format!(
                "{} ({what}) has {names} names (hard links), and profile '{profile}' writes {}, so a sandbox could change it through another one; copy it to a file of its own (`cp --remove-destination`), or run wardcell from outside {}",
                real.display(),
                tree.display(),
                tree.display()
            )));
        }
        // Its other names cannot be found in general (no inode lists its names): unless
        // each is where a cargo build puts it (`deps/` beside it, outside every written
        // tree), one may lie in any written tree on its filesystem.
        if 1 + names_in_deps(&real, &writes) >= names {
            continue;
        }
        let dev = Mount::of(&mounts, &real).map(|m| m.dev);
        let same = writes
            .iter()
            .find(|(_, w)| dev.is_some_and(|d| writable_devs(&mounts, w).contains(&d)));
        if let Some((profile, tree)) = same {
            return Err(Error::Refused(format!(
                "{} ({what}) has {names} names (hard links), and profile '{profile}' writes {} on the same filesystem, so a sandbox could change it through another name there; copy it to a file of its own (`cp --remove-destination`)",
                real.display(),
                tree.display()
            )));
        }
    }
    for file in wardcell_support::view::credential_files(plan) {
        let names = std::fs::metadata(&file).map_or(1, |m| m.nlink());
        if names > 1 {
            return Err(Error::Refused(format!(
                "the secret file {} has {names} names (hard links): every sandbox is kept from this one only; give the secret a file of its own",
                file.display()
            )));
        }
    }
    Ok(())
}

/// The programs the run trusts, and what each is.
fn trusted(plan: &Plan) -> Vec<(PathBuf, &'static str)> {
    let mut out = Vec::new();
    if let Ok(client) = std::env::current_exe() {
        let dir = paths::helper_dir(&client);
        for name in ["wardcell-broker", "wardcell-shim", "wardcell-proxy"] {
            out.push((dir.join(name), "a helper of wardcell"));
        }
        out.push((client, "the wardcell client"));
    }
    let program = |argv: Option<&Vec<String>>| {
        let prog = argv.and_then(|a| a.first())?;
        helper::program_path(prog, &Path::is_file)
    };
    out.extend(program(plan.approval.as_ref()).map(|p| (p, "the approval plugin")));
    for c in &plan.credentials {
        if let SecretPlan::Command(argv) = &c.secret {
            out.extend(program(Some(argv)).map(|p| (p, "a credential's command")));
        }
    }
    out
}

/// How many other names `file` has in `deps/` beside it (where cargo keeps the file a
/// build's `target/<profile>/NAME` is a link to), none of them in a written tree.
fn names_in_deps(file: &Path, writes: &[(&str, &PathBuf)]) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Some(deps) = file.parent().map(|d| d.join("deps")) else {
        return 0;
    };
    let Ok(me) = std::fs::metadata(file) else {
        return 0;
    };
    if writes.iter().any(|(_, w)| deps.starts_with(w)) {
        return 0;
    }
    let entries = std::fs::read_dir(&deps)
        .into_iter()
        .flatten()
        .flatten()
        .take(20_000);
    let same = entries.filter(|e| {
        e.metadata()
            .is_ok_and(|m| m.ino() == me.ino() && m.dev() == me.dev())
    });
    same.count() as u64
}

/// One line of /proc/self/mountinfo: which filesystem (its device), which of its
/// directories is the root of the mount, where it is mounted, whether it is read-only,
/// and, for an overlay, the directory its writes go to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    dev: (u32, u32),
    root: PathBuf,
    point: PathBuf,
    read_only: bool,
    upper: Option<PathBuf>,
}

/// The filesystems a sandbox writing `tree` can write: `tree`'s own and those of every
/// writable mount below it.
fn writable_devs(mounts: &[Mount], tree: &Path) -> Vec<(u32, u32)> {
    let own = Mount::of(mounts, tree).filter(|m| !m.read_only);
    let below = mounts
        .iter()
        .filter(|m| m.point.starts_with(tree) && !m.read_only);
    let mut devs: Vec<_> = own.into_iter().chain(below).map(|m| m.dev).collect();
    devs.sort();
    devs.dedup();
    devs
}

impl Mount {
    /// This process's mounts (none when /proc says nothing).
    fn all() -> Vec<Mount> {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        text.lines().filter_map(Mount::parse).collect()
    }

    /// `ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER`.
    fn parse(line: &str) -> Option<Mount> {
        let f: Vec<&str> = line.split(' ').collect();
        let (major, minor) = f.get(2)?.split_once(':')?;
        let sep = f.iter().position(|x| *x == "-")?;
        let upper = match f.get(sep + 1) {
            Some(&"overlay") => f.get(sep + 3).and_then(|o| {
                let o = o.split(',').find_map(|o| o.strip_prefix("upperdir="))?;
                Some(PathBuf::from(unescape(o)))
            }),
            _ => None,
        };
        Some(Mount {
            dev: (major.parse().ok()?, minor.parse().ok()?),
            root: PathBuf::from(unescape(f.get(3)?)),
            point: PathBuf::from(unescape(f.get(4)?)),
            read_only: f.get(5)?.split(',').any(|o| o == "ro"),
            upper,
        })
    }

    /// The mount `path` (absolute, canonical) is in: the last of the longest mount
    /// points above it (a later mount on the same point hides an earlier one).
    fn of<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
        mounts
            .iter()
            .filter(|m| path.starts_with(&m.point))
            .max_by_key(|m| m.point.components().count())
    }

    /// Where `path`, in this mount, is within its filesystem.
    fn inside(&self, path: &Path) -> PathBuf {
        let rest = path.strip_prefix(&self.point).unwrap_or(Path::new(""));
        self.root.join(rest)
    }
}

/// mountinfo's octal escapes (`\040` a space, `\011` a tab, `\012` a newline, `\134` a
/// backslash).
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) if b[i] == b'\\' => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where `dir` can also be written inside written tree `tree`: a path under `tree` that
/// is `dir` (or a directory under it) by another mount of the same filesystem, writable.
/// `tree`'s own name for `dir` (when `dir` is under it) is no second name: the pin
/// covers it.
fn reached(mounts: &[Mount], tree: &Path, dir: &Path) -> Option<PathBuf> {
    let target = Mount::of(mounts, dir)?;
    let want = target.inside(dir);
    // The mount `tree` is in, seen from `tree` down; then every mount below `tree`.
    let top = Mount::of(mounts, tree).map(|m| (m, tree.to_path_buf()));
    let below = mounts
        .iter()
        .filter(|m| m.point.starts_with(tree) && m.point != tree)
        .map(|m| (m, m.point.clone()));
    for (m, seen_at) in top.into_iter().chain(below) {
        if m.read_only {
            continue;
        }
        // An overlay writes to its upper directory: `dir` there is written through it.
        if let Some(rest) = m.upper.as_ref().and_then(|u| dir.strip_prefix(u).ok()) {
            return Some(joined(seen_at, rest));
        }
        if m.dev != target.dev {
            continue;
        }
        let from = m.inside(&seen_at);
        let Ok(rest) = want.strip_prefix(&from) else {
            continue;
        };
        let alias = joined(seen_at, rest);
        // Hidden by a mount on top of it, or its own name: not another one.
        let shown = Mount::of(mounts, &alias).is_some_and(|a| std::ptr::eq(a, m));
        if shown && alias != dir {
            return Some(alias);
        }
    }
    None
}

/// `at` with `rest` after it (no trailing `/` for an empty `rest`).
fn joined(at: PathBuf, rest: &Path) -> PathBuf {
    match rest.as_os_str().is_empty() {
        true => at,
        false => at.join(rest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mounts(text: &str) -> Vec<Mount> {
        text.lines().filter_map(Mount::parse).collect()
    }

    const HOST: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 8:1 /opt/wardcell /home/u/proj/vendor/w rw,relatime shared:1 - ext4 /dev/sda1 rw
31 22 8:2 / /home/u/data rw,relatime shared:2 - ext4 /dev/sdb1 rw
32 22 8:1 /opt /home/u/ro\\040view ro,relatime shared:1 - ext4 /dev/sda1 rw
33 22 8:1 /opt /srv/opt rw,relatime shared:1 - ext4 /dev/sda1 rw
34 22 8:1 /opt/tools/proxy /home/u/proj/proxy rw,relatime shared:1 - ext4 /dev/sda1 rw
35 22 0:50 / /home/u/proj/ov rw,relatime shared:3 - overlay overlay rw,lowerdir=/l,upperdir=/opt/tools,workdir=/w";

    #[test]
    fn a_bind_mount_of_a_trusted_directory_in_a_written_tree_is_found() {
        let m = mounts(HOST);
        let proj = Path::new("/home/u/proj");
        // Bound below the tree.
        assert_eq!(
            reached(&m, proj, Path::new("/opt/wardcell")),
            Some(PathBuf::from("/home/u/proj/vendor/w"))
        );
        // A directory under the bound one too.
        assert_eq!(
            reached(&m, proj, Path::new("/opt/wardcell/bin")),
            Some(PathBuf::from("/home/u/proj/vendor/w/bin"))
        );
        // The tree itself a bind of a directory above it.
        assert_eq!(
            reached(&m, Path::new("/srv/opt"), Path::new("/opt/wardcell")),
            Some(PathBuf::from("/srv/opt/wardcell"))
        );
        // Its own name, another filesystem, a read-only mount: no second name.
        assert_eq!(
            reached(&m, Path::new("/opt"), Path::new("/opt/wardcell")),
            None
        );
        assert_eq!(
            reached(&m, Path::new("/home/u/data"), Path::new("/opt/wardcell")),
            None
        );
        assert_eq!(
            reached(&m, Path::new("/home/u/ro view"), Path::new("/opt/wardcell")),
            None
        );
        assert_eq!(
            reached(&m, Path::new("/home/u/other"), Path::new("/opt/wardcell")),
            None
        );
        // A file bound by itself; an overlay writing into the trusted directory.
        assert_eq!(
            reached(&m, proj, Path::new("/opt/tools/proxy")),
            Some(PathBuf::from("/home/u/proj/proxy"))
        );
        assert_eq!(
            reached(&m, proj, Path::new("/opt/tools")),
            Some(PathBuf::from("/home/u/proj/ov"))
        );
        // What the written trees' filesystems are.
        assert_eq!(writable_devs(&m, Path::new("/home/u/data")), [(8, 2)]);
        assert!(writable_devs(&m, proj).contains(&(8, 1)));
    }

    #[test]
    fn mountinfo_escapes_are_read() {
        assert_eq!(unescape("/a\\040b\\134c\\011"), "/a b\\c\t");
        assert_eq!(unescape("/plain\\9"), "/plain\\9");
    }
}
