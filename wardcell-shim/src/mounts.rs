//! The sandbox's mount namespace: fresh /proc, a minimal /dev, a private /tmp, masks.
//!
//! Runs as PID 1 of the new PID namespace, with CAP_SYS_ADMIN in the new user namespace
//! (raised as an ambient capability by the broker for exactly this), before any
//! capability is dropped. Every step either succeeds or stops the run.

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{symlink, DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};

use wardcell_common::plan::SandboxSpec;

type Result<T> = std::result::Result<T, String>;

const NONE: Option<&str> = None;

fn do_mount(
    src: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<()> {
    mount(src, target, fstype, flags, data).map_err(|e| {
        format!(
            "mounting {} on {}: {e}",
            fstype.or(src).unwrap_or("(remount)"),
            target.display()
        )
    })
}

/// Device nodes every sandbox gets, bound from the host.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// Carry out the mount part of `spec`.
pub fn setup(spec: &SandboxSpec) -> Result<()> {
    // 0. Before anything is mounted over them: hold wardcell's own sockets that must stay
    //    reachable, and resolve every mask (a private /tmp would hide both).
    let held: Vec<(PathBuf, fs::File)> = spec
        .sockets
        .iter()
        .map(|p| {
            crate::sys::open_path(p)
                .map(|f| (p.clone(), f))
                .map_err(|e| format!("opening {}: {e}", p.display()))
        })
        .collect::<Result<_>>()?;
    let resolved: Vec<PathBuf> = spec
        .mask
        .iter()
        .filter_map(|p| fs::canonicalize(p).ok())
        .collect();
    // 1. Nothing we mount propagates back to the host, nor the host's mounts to us.
    do_mount(
        NONE,
        Path::new("/"),
        NONE,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        NONE,
    )?;

    // 2. Make the ancestors of every mask that lie in a writable tree mount points of their
    //    own: a mount point cannot be renamed, so the sandbox cannot move a masked
    //    directory (wardcell's config, say) aside and plant a new one at its path.
    //    Recursive binds, outermost first, so that nothing already mounted is lost.
    for dir in pinned_ancestors(&resolved, &spec.write) {
        do_mount(
            Some(path_str(&dir)?),
            &dir,
            NONE,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            NONE,
        )?;
    }

    // 3. Everything read-only but the write trees: Landlock does not mediate chmod,
    //    chown, utime or extended attributes, a read-only mount refuses them (EROFS).
    //    Each write tree is bound onto itself and made writable again, with what is
    //    mounted below it (a mount that was read-only on the host stays read-only).
    crate::sys::mount_setattr(Path::new("/"), crate::sys::MOUNT_ATTR_RDONLY, 0, true)
        .map_err(|e| format!("making the filesystem read-only: {e}"))?;
    for w in writable_roots(&spec.write) {
        do_mount(
            Some(path_str(&w)?),
            &w,
            NONE,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            NONE,
        )?;
        let clear = crate::sys::MOUNT_ATTR_RDONLY;
        if let Err(e) = crate::sys::mount_setattr(&w, 0, clear, true) {
            // A mount below it that the host keeps read-only is locked so: leave those,
            // and make the tree's own mount writable.
            if e.raw_os_error() != Some(libc::EPERM) {
                return Err(format!("making {} writable: {e}", w.display()));
            }
            crate::sys::mount_setattr(&w, 0, clear, false)
                .map_err(|e| format!("making {} writable: {e}", w.display()))?;
        }
    }

    //    A read path inside a write tree is the more specific rule: read-only again.
    for r in readonly_inside(&spec.read, &spec.write) {
        do_mount(
            Some(path_str(&r)?),
            &r,
            NONE,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            NONE,
        )?;
        crate::sys::mount_setattr(&r, crate::sys::MOUNT_ATTR_RDONLY, 0, true)
            .map_err(|e| format!("making {} read-only: {e}", r.display()))?;
    }

    // 4. A /proc of our own PID namespace: host processes are invisible.
    do_mount(
        Some("proc"),
        Path::new("/proc"),
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        NONE,
    )?;

    // 5. A minimal /dev.
    minimal_dev(spec.controlling_tty)?;

    // 6. A private /tmp unless the profile names it.
    if spec.private_tmp {
        do_mount(
            Some("tmpfs"),
            Path::new("/tmp"),
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=1777"),
        )?;
    }

    // 7. Masks: deny paths, wardcell's directories, host sockets. A mask names what a
    //    path leads to (/var/run is often a link to /run); a missing one hides nothing.
    for path in ordered_masks(&resolved) {
        let inside: Vec<&(PathBuf, fs::File)> =
            held.iter().filter(|(s, _)| s.starts_with(&path)).collect();
        if inside.is_empty() {
            mask(&path)?;
        } else {
            mask_with_sockets(&path, &inside)?;
        }
    }
    Ok(())
}

/// A mask that still lets the sandbox reach the given sockets by name: a tmpfs whose
/// directories can be traversed but not listed (0711), holding only those sockets, bound
/// in from the host, then made read-only.
fn mask_with_sockets(path: &Path, sockets: &[&(PathBuf, fs::File)]) -> Result<()> {
    let hard = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    // Under a private /tmp the masked directory may not exist yet: make the mount point.
    fs::create_dir_all(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    do_mount(
        Some("tmpfs"),
        path,
        Some("tmpfs"),
        hard,
        Some("mode=0711,size=16k"),
    )?;
    for (sock, f) in sockets {
        if let Some(dir) = sock.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o711)
                .create(dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        fs::File::create(sock).map_err(|e| format!("creating {}: {e}", sock.display()))?;
        let src = format!("/proc/self/fd/{}", f.as_raw_fd());
        do_mount(Some(&src), sock, NONE, MsFlags::MS_BIND, NONE)?;
    }
    do_mount(
        NONE,
        path,
        NONE,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | hard,
        NONE,
    )
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .ok_or_else(|| format!("path {} is not UTF-8", p.display()))
}

/// Read paths strictly inside a write tree (and existing): they stay read-only.
pub fn readonly_inside(read: &[PathBuf], write: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = read
        .iter()
        .filter(|r| write.iter().any(|w| r.starts_with(w) && *r != w))
        .filter(|r| r.exists())
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The write trees that exist, without those inside another (already covered), in order.
pub fn writable_roots(write: &[PathBuf]) -> Vec<PathBuf> {
    ordered_masks(write)
        .into_iter()
        .filter(|w| w.exists())
        .collect()
}

/// Masks sorted so parents come first, without any mask that lies inside another (it is
/// hidden already, and its path cannot be reached to mount on).
pub fn ordered_masks(masks: &[PathBuf]) -> Vec<PathBuf> {
    let mut sorted: Vec<PathBuf> = masks.to_vec();
    sorted.sort();
    sorted.dedup();
    let mut out: Vec<PathBuf> = Vec::new();
    for p in sorted {
        if !out.iter().any(|q| p.starts_with(q)) {
            out.push(p);
        }
    }
    out
}

/// Ancestors of masks (and the masks' parents' chain) whose parent directory the sandbox
/// may write, outermost first. The masks themselves become mount points when masked.
pub fn pinned_ancestors(masks: &[PathBuf], write: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for m in ordered_masks(masks) {
        for a in m.ancestors().skip(1) {
            if a == Path::new("/") {
                break;
            }
            let parent_writable = a
                .parent()
                .is_some_and(|parent| write.iter().any(|w| parent.starts_with(w)));
            if parent_writable && a.is_dir() && !out.iter().any(|o| o == a) {
                out.push(a.to_path_buf());
            }
        }
    }
    // Outermost first: a recursive bind of an outer directory carries the inner ones.
    out.sort_by_key(|p| p.components().count());
    out
}

/// Make `path` empty and unreadable: an empty read-only tmpfs with mode 000 for a
/// directory, a read-only /dev/null in the place of anything else.
fn mask(path: &Path) -> Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("masking {}: {e}", path.display())),
    };
    let hard = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    if meta.is_dir() {
        do_mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            hard | MsFlags::MS_RDONLY,
            Some("mode=000,size=4k,nr_inodes=1"),
        )
    } else {
        do_mount(Some("/dev/null"), path, NONE, MsFlags::MS_BIND, NONE)?;
        do_mount(
            NONE,
            path,
            NONE,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | hard,
            NONE,
        )
    }
}

/// With `pty`, fd 0 is the broker's pty slave, a node of the host's devpts that no path
/// in the sandbox reaches: it is bound at /dev/console (as container managers do), so
/// that `ttyname(0)` (`tty`) finds it by scanning /dev.
fn minimal_dev(pty: bool) -> Result<()> {
    // Hold the host's device nodes before /dev is covered, then bind them back in
    // through /proc/self/fd (our fresh /proc).
    let mut held = Vec::new();
    if pty {
        // By its name in this namespace's copy of the host's /dev/pts (a mount of the
        // broker's namespace cannot be bound here), checked to be the same terminal.
        let slave = fs::read_link("/proc/self/fd/0")
            .and_then(|name| crate::sys::open_path(&name))
            .map_err(|e| format!("opening the terminal: {e}"))?;
        let rdev = |m: std::io::Result<fs::Metadata>| m.ok().map(|m| m.rdev());
        if rdev(slave.metadata()).is_none()
            || rdev(fs::metadata("/proc/self/fd/0")) != rdev(slave.metadata())
        {
            return Err("the terminal's name leads to another device".into());
        }
        held.push(("console", slave));
    }
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        match crate::sys::open_path(&host) {
            Ok(f) => held.push((*name, f)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("opening {}: {e}", host.display())),
        }
    }
    let dev = Path::new("/dev");
    do_mount(
        Some("tmpfs"),
        dev,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        // Room for a CA bundle (system roots + the run's CA) when the proxy intercepts.
        Some("mode=0755,size=2m"),
    )?;
    for (name, f) in &held {
        let node = dev.join(name);
        fs::File::create(&node).map_err(|e| format!("creating {}: {e}", node.display()))?;
        let src = format!("/proc/self/fd/{}", f.as_raw_fd());
        do_mount(Some(&src), &node, NONE, MsFlags::MS_BIND, NONE)?;
    }
    drop(held);
    let links = [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ];
    for (name, target) in links {
        symlink(target, dev.join(name)).map_err(|e| format!("creating /dev/{name}: {e}"))?;
    }
    for sub in ["pts", "shm"] {
        fs::create_dir(dev.join(sub)).map_err(|e| format!("creating /dev/{sub}: {e}"))?;
    }
    do_mount(
        Some("devpts"),
        &dev.join("pts"),
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
    )?;
    do_mount(
        Some("tmpfs"),
        &dev.join("shm"),
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=1777"),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pb(v: &[&str]) -> Vec<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn read_paths_inside_write_trees_stay_read_only() {
        let tmp = std::env::temp_dir().join(format!("wc-ro-{}", std::process::id()));
        fs::create_dir_all(tmp.join("p/.git/hooks")).unwrap();
        let read = vec![tmp.clone(), tmp.join("p/.git/hooks"), tmp.join("p/missing")];
        let write = vec![tmp.join("p")];
        assert_eq!(
            readonly_inside(&read, &write),
            vec![tmp.join("p/.git/hooks")]
        );
        fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn masks_inside_masks_are_dropped() {
        let m = ordered_masks(&pb(&[
            "/h/.ssh/keys",
            "/run",
            "/h/.ssh",
            "/run/user/1",
            "/h/.ssh",
        ]));
        assert_eq!(m, pb(&["/h/.ssh", "/run"]));
    }

    #[test]
    fn ancestors_pinned_only_where_writable() {
        let tmp = std::env::temp_dir().join(format!("wc-pin-{}", std::process::id()));
        let cfg = tmp.join("home/.config/wardcell");
        fs::create_dir_all(&cfg).unwrap();
        let home = tmp.join("home");
        // With the home writable, .config must not be renamable.
        let got = pinned_ancestors(std::slice::from_ref(&cfg), std::slice::from_ref(&home));
        assert_eq!(got, vec![tmp.join("home/.config")]);
        // With only the project writable, nothing needs pinning.
        let got = pinned_ancestors(std::slice::from_ref(&cfg), &[tmp.join("elsewhere")]);
        assert!(got.is_empty());
        // With the parent of home writable, home itself is pinned too, outermost first.
        let got = pinned_ancestors(&[cfg], std::slice::from_ref(&tmp));
        assert_eq!(got, vec![home, tmp.join("home/.config")]);
        fs::remove_dir_all(&tmp).unwrap();
    }
}
