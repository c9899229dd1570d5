//! The sandbox's filesystem: a view built from nothing.
//!
//! Runs as PID 1 of the new PID namespace, with CAP_SYS_ADMIN in the new user namespace
//! (raised as an ambient capability by the broker for exactly this), before any
//! capability is dropped. Every step either succeeds or stops the run.
//!
//! 1. Every path of the spec is opened from the host's tree without following a link at
//!    any component, and compared with what it was when the run started: a sandbox of
//!    this run may have replaced it since. A difference refuses the sandbox.
//! 2. The root is a fresh tmpfs. Into it go only: the spec's trees (bound from those
//!    descriptors, read-only or writable, never setuid or device-bearing), a private
//!    `/tmp`, a minimal `/dev`, its own `/proc`, the masks, the Unix sockets the spec
//!    names, and the symbolic links met on the way to the trees. A mount point inside a
//!    bound tree is opened the same way and must be the very object recorded.
//! 3. A read-only path inside a writable tree, and each of its ancestors there, is a mount
//!    point: it cannot be renamed or replaced from inside.
//! 4. The tmpfs root becomes read-only, the process pivots into it, and the host's tree is
//!    detached: nothing else of the host exists inside, by any path.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{mount, MntFlags, MsFlags};
use nix::sys::stat::Mode;

use crate::changed as identity;
use wardcell_common::identity::{Identity, Kind};
use wardcell_common::plan::{SandboxSpec, ViewEntry, ViewKind};

use crate::mount_plan::{key, plan, within, Op};
use crate::sys;

/// Why a sandbox could not be built: `step` is `identity` when a path changed.
pub struct Failure {
    pub step: &'static str,
    pub message: String,
}

type Result<T> = std::result::Result<T, Failure>;

fn fail(message: String) -> Failure {
    Failure {
        step: "mounts",
        message,
    }
}

/// Descriptors of what the view holds, for Landlock rules that name the same objects.
pub struct View {
    /// The view's root when it is read-only. Its rule is the only read rule: Landlock
    /// checks an access by walking up from the object across mount points to the root,
    /// so the rights given there reach every read tree, `/proc` and the rest the view
    /// holds beneath it (3.6 in THREAT_MODEL).
    pub read: Vec<OwnedFd>,
    pub write: Vec<OwnedFd>,
    /// The Unix sockets the view holds (connectable under Landlock's socket rules).
    pub sockets: Vec<OwnedFd>,
    /// The certificates of the spec's `ca_files`, one after another, read before the
    /// host's tree went away.
    pub ca_certificates: Vec<u8>,
    /// The host's tree, detached, is freed when its last descriptor goes: kept here so
    /// that init lets it go after the command has started, not before.
    pub host: Vec<OwnedFd>,
}

/// Device nodes every sandbox gets, bound from the host.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// Hard attributes of every tree bound from the host.
const TREE_ATTRS: u64 = sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;

/// Carry out the mount part of `spec`.
/// What does not depend on the spec, made while the broker prepares it: the filesystems
/// of the root, `/tmp`, `/dev` (its links and mount points made), `/dev/pts`, `/dev/shm`
/// and `/proc`, not yet attached anywhere, and the host's device nodes, held, each with a
/// read-only bind of it ready to attach.
pub struct Prepared {
    root: OwnedFd,
    tmp: OwnedFd,
    dev: OwnedFd,
    pts: OwnedFd,
    shm: OwnedFd,
    proc: OwnedFd,
    held_dev: Vec<(&'static str, OwnedFd)>,
    /// A read-only bind of each held device node, not yet attached.
    dev_nodes: Vec<(&'static str, OwnedFd)>,
}

/// Before the spec: nothing we mount propagates back to the host (nor the host's mounts
/// to us), and everything [`Prepared`] holds. Changes nothing a path resolves to.
pub fn prepare() -> Result<Prepared> {
    do_mount(
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
    )?;
    let tmpfs = |opts: &[(&str, &str)], attrs: u64, what: &str| {
        sys::new_fs(c"tmpfs", opts, attrs).map_err(|e| fail(format!("making {what}: {e}")))
    };
    let root = tmpfs(&[("mode", "0755"), ("size", "1m")], 0, "the sandbox's root")?;
    let tmp = tmpfs(
        &[("mode", "1777")],
        sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        "/tmp",
    )?;
    // Room for a CA bundle (system roots + the run's CA) when the proxy intercepts.
    let dev = tmpfs(
        &[("mode", "0755"), ("size", "2m")],
        sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NOEXEC,
        "/dev",
    )?;
    let shm = tmpfs(
        &[("mode", "1777")],
        sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        "/dev/shm",
    )?;
    let pts = sys::new_fs(
        c"devpts",
        &[("newinstance", ""), ("ptmxmode", "0666"), ("mode", "620")],
        sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NOEXEC,
    )
    .map_err(|e| fail(format!("mounting /dev/pts: {e}")))?;
    let proc = sys::new_fs(
        c"proc",
        &[],
        sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV | sys::MOUNT_ATTR_NOEXEC,
    )
    .map_err(|e| fail(format!("mounting /proc: {e}")))?;
    let held_dev = hold_devices()?;
    populate_dev(&dev, held_dev.iter().map(|(n, _)| *n))?;
    let dev_nodes = held_dev
        .iter()
        .map(|(n, f)| Ok((*n, clone_node(f.as_fd(), &Path::new("/dev").join(n))?)))
        .collect::<Result<Vec<_>>>()?;
    Ok(Prepared {
        root,
        tmp,
        dev,
        pts,
        shm,
        proc,
        held_dev,
        dev_nodes,
    })
}

/// Carry out the mount part of `spec` on what [`prepare`] made.
pub fn setup(spec: &SandboxSpec, prepared: Prepared) -> Result<View> {
    let Prepared {
        root: fresh_root,
        tmp,
        dev,
        pts,
        shm,
        proc,
        mut held_dev,
        mut dev_nodes,
    } = prepared;
    // 1. Everything from the host, checked, before anything changes. Keyed by bytes, as
    //    in [`plan`]: comparing paths component by component cost more than the lookups.
    let mut host: HashMap<&[u8], OwnedFd> = HashMap::with_capacity(spec.view.len());
    for e in &spec.view {
        if matches!(e.what, ViewKind::Mask | ViewKind::Link(_)) || host.contains_key(key(&e.path)) {
            continue;
        }
        host.insert(key(&e.path), open_checked(e)?);
    }
    if spec.controlling_tty {
        let console = hold_terminal()?;
        dev_nodes.push((
            "console",
            clone_node(console.as_fd(), Path::new("/dev/console"))?,
        ));
        held_dev.push(("console", console));
    }
    let mut ca_certificates = Vec::new();
    for (path, was) in &spec.ca_files {
        ca_certificates.extend(read_roots(path, *was)?);
    }
    if ca_certificates.len() > MAX_CA_CERTIFICATES {
        return Err(fail(format!(
            "the CA certificates of {} come to {} bytes, more than the {MAX_CA_CERTIFICATES} bytes (1.5 MiB) a sandbox's bundle holds; name a smaller CA file in the CA variables",
            spec.ca_files
                .iter()
                .map(|(p, _)| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            ca_certificates.len()
        )));
    }
    let host_fd = |p: &Path| host_fd(&host, p);
    let mut recorded: HashMap<&[u8], Identity> = HashMap::with_capacity(spec.view.len());
    for e in &spec.view {
        if let Some(id) = e.id {
            recorded.entry(key(&e.path)).or_insert(id);
        }
    }
    let ids = |p: &Path| recorded.get(key(p)).copied();
    let mut ops = plan(&spec.view);

    // 2. The root: a fresh tmpfs, or, for a profile that names `/` itself, that tree.
    let whole = ops
        .iter()
        .position(|(p, op)| p == Path::new("/") && matches!(op, Op::Tree { .. }));
    let (root, mut ours) = match whole.map(|i| ops.remove(i)) {
        Some((p, Op::Tree { writable })) => (bound_tree(host_fd(&p)?, &p, writable)?, Vec::new()),
        _ => {
            let dev = dev_of(fresh_root.as_fd())?;
            (fresh_root, vec![dev])
        }
    };
    // Every tree from the host cloned now, before the root is staged on the host's /tmp:
    // a tree that holds /tmp (a profile writing /tmp, or run from there), cloned after,
    // would carry the half-built root along and show it in the place of /tmp.
    // Each step's tree, at the step's index.
    let mut trees: Vec<Option<OwnedFd>> = Vec::with_capacity(ops.len());
    for (path, op) in &ops {
        trees.push(match op {
            Op::Tree { writable } => Some(bound_tree(host_fd(path)?, path, *writable)?),
            _ => None,
        });
    }
    let stage = sys::open_nofollow(None, Path::new("/tmp"))
        .map_err(|e| fail(format!("opening /tmp to build the sandbox's root in: {e}")))?;
    sys::move_mount(root.as_fd(), stage.as_fd())
        .map_err(|e| fail(format!("attaching the sandbox's root: {e}")))?;

    let mut covers = Covers {
        held_dev: &held_dev,
        empty: None,
        null: None,
    };
    let mut view = View {
        read: Vec::new(),
        write: Vec::new(),
        sockets: Vec::new(),
        ca_certificates,
        host: Vec::new(),
    };
    let mut last = LastDir::default();
    let mut skeleton_src: HashMap<PathBuf, OwnedFd> = HashMap::new();
    let mut skeleton_fs: Vec<OwnedFd> = Vec::new();
    for ((path, op), tree) in ops.into_iter().zip(trees) {
        // A tree mounted at the held directory, or above it, would cover it; any other
        // step may change it: let it go. (The sort puts those first, so this is a guard.)
        if !matches!(op, Op::Tree { .. }) || within(&last.path, &path) {
            last = LastDir::default();
        }
        match op {
            Op::Tmp => {
                attach(&root, &path, tmp.as_fd(), Kind::Dir, None, &ours)?;
                ours.push(dev_of(tmp.as_fd())?);
                view.write.push(clone_fd(tmp.as_fd())?);
            }
            Op::Dev => {
                attach(&root, &path, dev.as_fd(), Kind::Dir, None, &ours)?;
                minimal_dev(&dev, &dev_nodes, &pts, &shm)?;
                ours.push(dev_of(dev.as_fd())?);
                view.write.push(clone_fd(dev.as_fd())?);
            }
            Op::Proc => {
                // Beneath the root, with its rights (see Op::Tree).
                attach(&root, &path, proc.as_fd(), Kind::Dir, None, &ours)?;
            }
            Op::Tree { writable } => {
                let tree = tree.ok_or_else(|| fail(format!("{} was not bound", path.display())))?;
                let kind = ids(&path).map(|i| i.kind).unwrap_or(Kind::Dir);
                attach_via(
                    &mut last,
                    &root,
                    &path,
                    tree.as_fd(),
                    kind,
                    ids(&path),
                    &ours,
                )?;
                // A read tree needs no Landlock rule of its own: it lies beneath the view's
                // root, whose rule grants the same rights to everything mounted below it
                // (Landlock walks up across mount points). Its descriptor is closed with
                // the host's once the command has started.
                if writable {
                    view.write.push(tree);
                } else {
                    view.host.push(tree);
                }
            }
            Op::Skeleton { skip } => {
                // Its host directory: a tree's, opened and checked in step 1, or the
                // entry of the same name in its parent skeleton's.
                let tree = host.get(key(&path));
                let src = match (tree, split(&path)) {
                    (Some(f), _) => Some(clone_fd(f.as_fd())?),
                    (None, Ok((parent, name))) => match skeleton_src.get(parent) {
                        Some(dir) => open_below(dir.as_fd(), name, &path)?,
                        None => None,
                    },
                    (None, Err(e)) => return Err(e),
                };
                // A tree's skeleton is a filesystem of its own, made read-only with the
                // root (step 4): wherever it lies (a home under the private /tmp, say),
                // nothing can be written or renamed in it.
                if tree.is_some() {
                    let fs =
                        sys::new_fs(c"tmpfs", &[("mode", "0755"), ("size", "16m")], TREE_ATTRS)
                            .map_err(|e| fail(format!("making {}: {e}", path.display())))?;
                    attach(&root, &path, fs.as_fd(), Kind::Dir, None, &ours)?;
                    ours.push(dev_of(fs.as_fd())?);
                    skeleton_fs.push(fs);
                }
                if let Some(src) = src {
                    skeleton(&root, &path, src.as_fd(), &skip, &ours)?;
                    skeleton_src.insert(path, src);
                }
            }
            Op::Pin => {
                let here = match sys::open_nofollow(Some(root.as_fd()), &path) {
                    Ok(f) => f,
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                    Err(e) => return Err(changed(&path, e)),
                };
                let copy = sys::clone_tree(here.as_fd())
                    .map_err(|e| fail(format!("pinning {}: {e}", path.display())))?;
                sys::move_mount(copy.as_fd(), here.as_fd())
                    .map_err(|e| fail(format!("pinning {}: {e}", path.display())))?;
            }
            Op::Mask { sockets } => {
                let id = ids(&path);
                mask(&root, &path, id, &sockets, &host, &mut covers, &ours)?;
                for s in &sockets {
                    view.sockets.push(clone_fd(host_fd(s)?)?);
                }
            }
            Op::Socket => {
                let src = host_fd(&path)?;
                let copy = clone_node(src, &path)?;
                attach(&root, &path, copy.as_fd(), Kind::Socket, ids(&path), &ours)?;
                view.sockets.push(copy);
            }
            Op::Link(target) => {
                let (parent, name) = split(&path)?;
                let dir = make_dirs(&root, parent, &ours)?;
                if let Some(dir) = dir {
                    use std::os::fd::AsRawFd;
                    match nix::unistd::symlinkat(&target, Some(dir.as_fd().as_raw_fd()), name) {
                        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                        Err(e) => {
                            return Err(fail(format!("making the link {}: {e}", path.display())))
                        }
                    }
                }
            }
        }
    }

    // 4. The root read-only, then pivot into it and let the host's tree go. Everything in
    //    the view may be read: what must not be is not in it (masks are empty).
    if whole.is_none() {
        sys::mount_setattr_fd(root.as_fd(), sys::MOUNT_ATTR_RDONLY, 0, false)
            .map_err(|e| fail(format!("making the sandbox's root read-only: {e}")))?;
    }
    for fs in &skeleton_fs {
        sys::mount_setattr_fd(fs.as_fd(), sys::MOUNT_ATTR_RDONLY, 0, false)
            .map_err(|e| fail(format!("making a skeleton read-only: {e}")))?;
    }
    match ops_root_writable(whole.is_some(), &spec.view) {
        true => view.write.push(clone_fd(root.as_fd())?),
        false => view.read.push(clone_fd(root.as_fd())?),
    }
    {
        use std::os::fd::AsRawFd;
        nix::unistd::fchdir(root.as_raw_fd())
            .map_err(|e| fail(format!("entering the root: {e}")))?;
    }
    nix::unistd::pivot_root(".", ".").map_err(|e| fail(format!("pivot_root: {e}")))?;
    drop(covers);
    view.host.extend(host.into_values());
    view.host.extend(held_dev.into_iter().map(|(_, f)| f));
    view.host.push(stage);
    Ok(view)
}

/// After [`setup`]: detach the host's tree, which `pivot_root` left stacked on the
/// sandbox's root, and enter that root. Until then a name looked up from `/` may reach
/// the host's tree: nothing is looked up by name between the two (main.rs, step 3).
/// Detaching waits for an RCU grace period, so init does it while the command's process
/// confines itself.
pub fn let_host_go() -> Result<()> {
    nix::mount::umount2(".", MntFlags::MNT_DETACH)
        .map_err(|e| fail(format!("detaching the host's tree: {e}")))?;
    nix::unistd::chdir("/").map_err(|e| fail(format!("chdir /: {e}")))
}

/// A recursive clone of the host's tree at `src` (`path`), with the hard attributes and,
/// unless `writable`, read-only.
fn bound_tree(src: BorrowedFd<'_>, path: &Path, writable: bool) -> Result<OwnedFd> {
    let set = TREE_ATTRS | if writable { 0 } else { sys::MOUNT_ATTR_RDONLY };
    if let Some(tree) = sys::clone_tree_attr(src, set) {
        return Ok(tree);
    }
    let tree =
        sys::clone_tree(src).map_err(|e| fail(format!("binding {}: {e}", path.display())))?;
    sys::mount_setattr_fd(tree.as_fd(), set, 0, true)
        .map_err(|e| fail(format!("restricting the mount of {}: {e}", path.display())))?;
    Ok(tree)
}

/// Whether the view's root is a tree the profile writes (it names `/` for writing).
fn ops_root_writable(whole: bool, view: &[ViewEntry]) -> bool {
    whole
        && view
            .iter()
            .any(|e| e.path == Path::new("/") && e.what == ViewKind::Write)
}

/// The host descriptor opened for `p` in step 1.
fn host_fd<'a>(host: &'a HashMap<&[u8], OwnedFd>, p: &Path) -> Result<BorrowedFd<'a>> {
    host.get(key(p))
        .map(|f| f.as_fd())
        .ok_or_else(|| fail(format!("{} was not opened", p.display())))
}

fn do_mount(src: Option<&str>, target: &Path, fstype: Option<&str>, flags: MsFlags) -> Result<()> {
    mount(src, target, fstype, flags, None::<&str>).map_err(|e| {
        fail(format!(
            "mounting {} on {}: {e}",
            fstype.or(src).unwrap_or("(remount)"),
            target.display()
        ))
    })
}

/// Open a spec path from the host without following links; it must be what it was.
fn open_checked(e: &ViewEntry) -> Result<OwnedFd> {
    let opened = sys::open_nofollow(None, &e.path);
    match e.id {
        Some(was) => {
            let now = opened
                .as_ref()
                .map_err(clone_err)
                .and_then(|f| identity_of(f.as_fd()));
            identity::verify(&e.path, was, now).map_err(|message| Failure {
                step: "identity",
                message,
            })?;
            opened.map_err(|e| fail(e.to_string()))
        }
        None => {
            let f = opened.map_err(|err| changed(&e.path, err))?;
            let id = identity_of(f.as_fd()).map_err(|err| changed(&e.path, err))?;
            if e.what == ViewKind::Socket && id.kind != Kind::Socket {
                return Err(Failure {
                    step: "identity",
                    message: format!("{} is not a socket", e.path.display()),
                });
            }
            Ok(f)
        }
    }
}

fn clone_err(e: &std::io::Error) -> std::io::Error {
    match e.raw_os_error() {
        Some(n) => std::io::Error::from_raw_os_error(n),
        None => std::io::Error::other(e.to_string()),
    }
}

fn changed(path: &Path, e: std::io::Error) -> Failure {
    use crate::changed::{no_descriptor_left, out_of_descriptors};
    let message = if out_of_descriptors(&e) {
        no_descriptor_left(path, &e)
    } else {
        format!(
            "{} cannot be opened without following a symbolic link ({e}); nothing was started",
            path.display()
        )
    };
    Failure {
        step: "identity",
        message,
    }
}

fn identity_of(fd: BorrowedFd<'_>) -> std::io::Result<Identity> {
    use std::os::fd::AsRawFd;
    let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
    Ok(Identity::from_stat(st.st_dev, st.st_ino, st.st_mode))
}

fn dev_of(fd: BorrowedFd<'_>) -> Result<u64> {
    identity_of(fd)
        .map(|i| i.dev)
        .map_err(|e| fail(format!("fstat: {e}")))
}

fn clone_fd(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    fd.try_clone_to_owned()
        .map_err(|e| fail(format!("dup: {e}")))
}

fn split(path: &Path) -> Result<(&Path, &std::ffi::OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(p), Some(n)) => Ok((p, n)),
        _ => Err(fail(format!("{} cannot be a mount point", path.display()))),
    }
}

/// The directory `dir` in the view, made (0755, each missing component) where it lies in
/// a filesystem of our own; `None` when it is missing inside a tree bound from the host,
/// where nothing is ever created.
fn make_dirs<'a>(root: &'a OwnedFd, dir: &Path, ours: &[u64]) -> Result<Option<Dir<'a>>> {
    use std::os::fd::AsRawFd;
    let mut cur = Dir::Root(root.as_fd());
    let mut at = PathBuf::from("/");
    for comp in dir.components().skip(1) {
        at.push(comp);
        let next = match sys::open_nofollow(Some(cur.as_fd()), Path::new(comp.as_os_str())) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                if !ours.contains(&dev_of(cur.as_fd())?) {
                    return Ok(None);
                }
                nix::sys::stat::mkdirat(
                    Some(cur.as_fd().as_raw_fd()),
                    comp.as_os_str(),
                    Mode::from_bits_truncate(0o755),
                )
                .map_err(|e| fail(format!("creating {}: {e}", at.display())))?;
                sys::open_nofollow(Some(cur.as_fd()), Path::new(comp.as_os_str()))
                    .map_err(|e| fail(format!("opening {}: {e}", at.display())))?
            }
            Err(e) => return Err(changed(&at, e)),
        };
        cur = Dir::Owned(next);
    }
    Ok(Some(cur))
}

/// A directory of the view: the root itself, or one opened below it.
enum Dir<'a> {
    Root(BorrowedFd<'a>),
    Owned(OwnedFd),
}

impl AsFd for Dir<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Dir::Root(f) => *f,
            Dir::Owned(f) => f.as_fd(),
        }
    }
}

/// Attach `mnt` at `path` in the view. The mount point is made where it lies in one of our
/// own filesystems; inside a tree bound from the host it must exist and, when `id` is
/// given, be that very object (a sandbox may have swapped it since it was opened).
fn attach(
    root: &OwnedFd,
    path: &Path,
    mnt: BorrowedFd<'_>,
    kind: Kind,
    id: Option<Identity>,
    ours: &[u64],
) -> Result<()> {
    attach_via(&mut LastDir::default(), root, path, mnt, kind, id, ours)
}

/// The directory the last [`attach_via`] mounted in, and whether it is one of our own
/// filesystems: the next sibling is mounted there without opening it again (the steps
/// are sorted, so siblings come one after another, each after everything mounted on
/// its ancestors).
#[derive(Default)]
struct LastDir {
    path: PathBuf,
    dir: Option<(OwnedFd, bool)>,
}

/// [`attach`], reusing `last` when `path`'s directory is the one it holds.
fn attach_via(
    last: &mut LastDir,
    root: &OwnedFd,
    path: &Path,
    mnt: BorrowedFd<'_>,
    kind: Kind,
    id: Option<Identity>,
    ours: &[u64],
) -> Result<()> {
    use std::os::fd::AsRawFd;
    let (parent, name) = split(path)?;
    if last.dir.is_none() || key(&last.path) != key(parent) {
        let dir = make_dirs(root, parent, ours)?.ok_or_else(|| {
            fail(format!(
                "{} does not exist in the sandbox's view to mount on",
                parent.display()
            ))
        })?;
        let mine = ours.contains(&dev_of(dir.as_fd())?);
        let owned = match dir {
            Dir::Owned(f) => f,
            Dir::Root(f) => clone_fd(f)?,
        };
        *last = LastDir {
            path: parent.to_path_buf(),
            dir: Some((owned, mine)),
        };
    }
    let Some((dir, mine)) = &last.dir else {
        unreachable!("set above");
    };
    let (dir, mine) = (dir.as_fd(), *mine);
    // In a filesystem of our own the mount point is new: made, then mounted on by its
    // name in the directory just made or opened (no link followed). Nothing else can
    // reach that filesystem, so there is nothing to check and no descriptor to open.
    if mine {
        let made = if kind == Kind::Dir {
            nix::sys::stat::mkdirat(Some(dir.as_raw_fd()), name, Mode::from_bits_truncate(0o755))
        } else {
            create_file(dir, name)
        };
        match made {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => return Err(fail(format!("creating {}: {e}", path.display()))),
        }
        return sys::move_mount_to(mnt, dir, name)
            .map_err(|e| fail(format!("mounting on {}: {e}", path.display())));
    }
    let target = match sys::open_nofollow(Some(dir), Path::new(name)) {
        Ok(t) => {
            if let Some(was) = id {
                identity::verify(path, was, identity_of(t.as_fd())).map_err(|message| Failure {
                    step: "identity",
                    message,
                })?;
            }
            t
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            return Err(fail(format!(
                "{} does not exist in the sandbox's view to mount on",
                path.display()
            )));
        }
        Err(e) => return Err(changed(path, e)),
    };
    sys::move_mount(mnt, target.as_fd())
        .map_err(|e| fail(format!("mounting on {}: {e}", path.display())))
}

/// The most entries a skeleton directory holds (a bind each).
const MAX_SKELETON_ENTRIES: usize = 8192;

/// Entry `name` of the host directory `dir`, opened without following a link (an `O_PATH`
/// descriptor to a link itself); `None` when it is not there.
fn open_below(dir: BorrowedFd<'_>, name: &std::ffi::OsStr, path: &Path) -> Result<Option<OwnedFd>> {
    match sys::open_nofollow(Some(dir), Path::new(name)) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(changed(path, e)),
    }
}

/// [`Op::Skeleton`]: `path`, a directory of the view's own with the mode (and, where
/// this user namespace maps it, the owner) of the host's directory `src`, holding each
/// of `src`'s entries but `skip`: a read-only bind (nosuid, nodev) of each, on a mount
/// point of our own, which nothing the host does to `src` afterwards can detach; a
/// symbolic link made again. `src` not a directory (a link, a file): what its parent
/// skeleton would have put there instead.
fn skeleton(
    root: &OwnedFd,
    path: &Path,
    src: BorrowedFd<'_>,
    skip: &[std::ffi::OsString],
    ours: &[u64],
) -> Result<()> {
    use std::os::fd::AsRawFd;
    let (parent, name) = split(path)?;
    let st = nix::sys::stat::fstat(src.as_raw_fd()).map_err(|e| fail(format!("fstat: {e}")))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        let dir = make_dirs(root, parent, ours)?
            .ok_or_else(|| fail(format!("{} is not in the view", parent.display())))?;
        return place(dir.as_fd(), name, src, path);
    }
    let dir = make_dirs(root, path, ours)?
        .ok_or_else(|| fail(format!("{} is not in the view", path.display())))?;
    // Its mode and owner as the host has them (an owner this namespace does not map
    // stays ours).
    let flags =
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC;
    let mine = nix::fcntl::openat(Some(dir.as_fd().as_raw_fd()), ".", flags, Mode::empty())
        .map_err(|e| fail(format!("opening {}: {e}", path.display())))?;
    let mode = Mode::from_bits_truncate(st.st_mode & 0o7777);
    let _ = nix::sys::stat::fchmod(mine, mode);
    let (uid, gid) = (
        nix::unistd::Uid::from_raw(st.st_uid),
        nix::unistd::Gid::from_raw(st.st_gid),
    );
    let _ = nix::unistd::fchown(mine, Some(uid), Some(gid));
    let _ = nix::unistd::close(mine);
    let list = nix::fcntl::openat(Some(src.as_raw_fd()), ".", flags, Mode::empty())
        .map_err(|e| changed(path, e.into()))?;
    let mut list = nix::dir::Dir::from_fd(list).map_err(|e| changed(path, e.into()))?;
    let mut names = Vec::new();
    for entry in list.iter() {
        let entry = entry.map_err(|e| changed(path, e.into()))?;
        let n = std::ffi::OsStr::from_bytes(entry.file_name().to_bytes());
        if n != "." && n != ".." && !skip.iter().any(|s| s == n) {
            names.push(n.to_os_string());
        }
        if names.len() > MAX_SKELETON_ENTRIES {
            return Err(fail(format!(
                "{} has more than {MAX_SKELETON_ENTRIES} entries, and a mask inside it is held by binding each of them; narrow the profile's read paths to the directories it needs",
                path.display()
            )));
        }
    }
    for n in names {
        let at = path.join(&n);
        if let Some(entry) = open_below(src, &n, &at)? {
            place(dir.as_fd(), &n, entry.as_fd(), &at)?;
        }
    }
    Ok(())
}

/// Put host entry `entry` at `name` in our directory `dir`: a symbolic link made again
/// (never followed here), anything else a read-only bind (nosuid, nodev) on a mount
/// point made for it.
fn place(
    dir: BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    entry: BorrowedFd<'_>,
    path: &Path,
) -> Result<()> {
    use std::os::fd::AsRawFd;
    let st = nix::sys::stat::fstat(entry.as_raw_fd()).map_err(|e| changed(path, e.into()))?;
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        let target = nix::fcntl::readlinkat(Some(entry.as_raw_fd()), "")
            .map_err(|e| fail(format!("reading the link {}: {e}", path.display())))?;
        return nix::unistd::symlinkat(target.as_os_str(), Some(dir.as_raw_fd()), name)
            .map_err(|e| fail(format!("making the link {}: {e}", path.display())));
    }
    let copy = bound_tree(entry, path, false)?;
    let made = match st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        true => {
            nix::sys::stat::mkdirat(Some(dir.as_raw_fd()), name, Mode::from_bits_truncate(0o755))
        }
        false => create_file(dir, name),
    };
    made.map_err(|e| fail(format!("creating {}: {e}", path.display())))?;
    sys::move_mount_to(copy.as_fd(), dir, name)
        .map_err(|e| fail(format!("mounting on {}: {e}", path.display())))
}

/// Make `path` empty and unreadable where the view shows it: an empty read-only tmpfs
/// with mode 000 for a directory, a read-only `/dev/null` in the place of anything else.
/// With sockets inside, a tmpfs whose directories can be traversed but not listed (0711)
/// holding only those, then made read-only.
fn mask(
    root: &OwnedFd,
    path: &Path,
    id: Option<Identity>,
    sockets: &[PathBuf],
    host: &HashMap<&[u8], OwnedFd>,
    covers: &mut Covers<'_>,
    ours: &[u64],
) -> Result<()> {
    let hard = sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV | sys::MOUNT_ATTR_NOEXEC;
    let shown = match sys::open_nofollow(Some(root.as_fd()), path) {
        Ok(f) => Some(f),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
        Err(e) => return Err(changed(path, e)),
    };
    if shown.is_none() && sockets.is_empty() {
        return Ok(()); // nothing of it in the view
    }
    if !sockets.is_empty() {
        let fs = sys::new_fs(c"tmpfs", &[("mode", "0711"), ("size", "16k")], hard)
            .map_err(|e| fail(format!("masking {}: {e}", path.display())))?;
        attach(root, path, fs.as_fd(), Kind::Dir, id, ours)?;
        let inner = [dev_of(fs.as_fd())?];
        for s in sockets {
            let copy = clone_node(host_fd(host, s)?, s)?;
            let rel = s.strip_prefix(path).unwrap_or(s);
            make_dirs_mode(&fs, rel.parent().unwrap_or(Path::new("")))?;
            attach(
                &fs,
                &Path::new("/").join(rel),
                copy.as_fd(),
                Kind::Socket,
                None,
                &inner,
            )?;
        }
        return sys::mount_setattr_fd(fs.as_fd(), sys::MOUNT_ATTR_RDONLY, 0, false)
            .map_err(|e| fail(format!("masking {}: {e}", path.display())));
    }
    let shown = shown.expect("checked above");
    let now = identity_of(shown.as_fd()).map_err(|e| changed(path, e))?;
    if let Some(was) = id {
        identity::verify(path, was, Ok(now)).map_err(|message| Failure {
            step: "identity",
            message,
        })?;
    }
    let dir = now.kind == Kind::Dir;
    let cover = if dir {
        match &covers.empty {
            // One empty filesystem for every directory mask: a bind of the first, which
            // a clone keeps read-only, nosuid, nodev and noexec (the kernel copies a
            // mount's flags to its clone).
            Some(first) => sys::clone_tree(first.as_fd()),
            None => sys::new_fs(
                c"tmpfs",
                &[("mode", "000"), ("size", "4k"), ("nr_inodes", "1")],
                hard | sys::MOUNT_ATTR_RDONLY,
            ),
        }
    } else {
        covers.null()?
    }
    .map_err(|e| fail(format!("masking {}: {e}", path.display())))?;
    sys::move_mount(cover.as_fd(), shown.as_fd())
        .map_err(|e| fail(format!("masking {}: {e}", path.display())))?;
    if dir && covers.empty.is_none() {
        covers.empty = Some(cover);
    } else if !dir && covers.null.is_none() {
        covers.null = Some(cover);
    }
    Ok(())
}

/// What masks are made of: the host's /dev/null for files, one empty read-only tmpfs
/// (made at the first directory mask) for directories.
struct Covers<'a> {
    held_dev: &'a [(&'a str, OwnedFd)],
    empty: Option<OwnedFd>,
    /// The first file mask: the next ones are clones of it.
    null: Option<OwnedFd>,
}

impl Covers<'_> {
    /// A new read-only bind of the host's /dev/null, to cover one file with; the outer
    /// error when this host has none, the inner one from the kernel. After the first, a
    /// clone of the first, which keeps its flags (one mount-table change fewer a mask).
    fn null(&self) -> Result<std::io::Result<OwnedFd>> {
        if let Some(first) = &self.null {
            return Ok(sys::clone_tree(first.as_fd()));
        }
        let null = self
            .held_dev
            .iter()
            .find(|(n, _)| *n == "null")
            .map(|(_, f)| f.as_fd())
            .ok_or_else(|| fail("no /dev/null on this host to mask files with".into()))?;
        let hard = sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV | sys::MOUNT_ATTR_NOEXEC;
        Ok(sys::clone_tree(null).and_then(|c| {
            sys::mount_setattr_fd(c.as_fd(), hard | sys::MOUNT_ATTR_RDONLY, 0, false)?;
            Ok(c)
        }))
    }
}

/// A bind of one socket or device node, on a read-only mount: connecting, reading and
/// writing the device still work, changing the host's inode (chmod, chown, times) does
/// not (Landlock does not mediate those).
fn clone_node(fd: BorrowedFd<'_>, path: &Path) -> Result<OwnedFd> {
    let copy = sys::clone_tree(fd).map_err(|e| fail(format!("binding {}: {e}", path.display())))?;
    sys::mount_setattr_fd(
        copy.as_fd(),
        sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NOEXEC,
        0,
        false,
    )
    .map_err(|e| fail(format!("binding {} read-only: {e}", path.display())))?;
    Ok(copy)
}

/// Directories 0711 below a mask's own tmpfs, for the sockets it keeps reachable.
fn make_dirs_mode(fs: &OwnedFd, rel: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let mut cur = clone_fd(fs.as_fd())?;
    for comp in rel.components() {
        let name = comp.as_os_str();
        match nix::sys::stat::mkdirat(Some(cur.as_raw_fd()), name, Mode::from_bits_truncate(0o711))
        {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => return Err(fail(format!("creating {}: {e}", rel.display()))),
        }
        cur = sys::open_nofollow(Some(cur.as_fd()), Path::new(name))
            .map_err(|e| fail(format!("opening {}: {e}", rel.display())))?;
    }
    Ok(())
}

/// The host's device nodes, held before anything changes. With `pty`, the first of fds
/// 0 to 2 that is a terminal is the broker's pty slave, a node of the host's devpts that
/// no path in the sandbox reaches: it is held too, to be bound at /dev/console (as
/// container managers do), so that `ttyname(0)` (`tty`) finds it by scanning /dev.
fn hold_devices() -> Result<Vec<(&'static str, OwnedFd)>> {
    let mut held = Vec::new();
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        match sys::open_nofollow(None, &host) {
            Ok(f) => held.push((*name, f)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(fail(format!("opening {}: {e}", host.display()))),
        }
    }
    Ok(held)
}

/// The broker's pty slave at the first of fds 0 to 2 that is a terminal (see
/// [`hold_devices`]).
fn hold_terminal() -> Result<OwnedFd> {
    // By its name in this namespace's copy of the host's /dev/pts (a mount of the
    // broker's namespace cannot be bound here), checked to be the same terminal.
    let fd = wardcell_support::tty::first_std_tty();
    let name = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map_err(|e| fail(format!("naming the terminal: {e}")))?;
    let slave = sys::open_nofollow(None, &name)
        .map_err(|e| fail(format!("opening the terminal {}: {e}", name.display())))?;
    use std::os::fd::AsRawFd;
    let rdev = |fd: i32| nix::sys::stat::fstat(fd).ok().map(|st| st.st_rdev);
    if rdev(slave.as_raw_fd()).is_none() || rdev(fd) != rdev(slave.as_raw_fd()) {
        return Err(fail("the terminal's name leads to another device".into()));
    }
    Ok(slave)
}

/// A new empty file `name` (0644) in our own directory `dir`, to mount a node on; it must
/// not exist yet.
fn create_file(dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> nix::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = nix::fcntl::openat(
        Some(dir.as_raw_fd()),
        name,
        nix::fcntl::OFlag::O_CREAT
            | nix::fcntl::OFlag::O_EXCL
            | nix::fcntl::OFlag::O_WRONLY
            | nix::fcntl::OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )?;
    let _ = nix::unistd::close(fd);
    Ok(())
}

/// A minimal /dev's contents, in its still detached tmpfs: an empty file for each held
/// device node (the terminal's, which only the spec asks for, is made when it is bound),
/// the usual links, and the mount points of `pts` and `shm`.
fn populate_dev<'a>(dev: &OwnedFd, nodes: impl Iterator<Item = &'a str>) -> Result<()> {
    use std::os::fd::AsRawFd;
    let at = Some(dev.as_raw_fd());
    let create = |name: &str| {
        create_file(dev.as_fd(), std::ffi::OsStr::new(name))
            .map_err(|e| fail(format!("creating /dev/{name}: {e}")))
    };
    for name in nodes {
        create(name)?;
    }
    let links = [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ];
    for (name, target) in links {
        nix::unistd::symlinkat(target, at, name)
            .map_err(|e| fail(format!("creating /dev/{name}: {e}")))?;
    }
    for sub in ["pts", "shm"] {
        nix::sys::stat::mkdirat(at, sub, Mode::from_bits_truncate(0o755))
            .map_err(|e| fail(format!("creating /dev/{sub}: {e}")))?;
    }
    Ok(())
}

/// The minimal /dev, once attached: the device nodes (read-only binds of the held ones,
/// made by [`prepare`]), a fresh devpts and a /dev/shm.
fn minimal_dev(
    dev: &OwnedFd,
    nodes: &[(&str, OwnedFd)],
    pts: &OwnedFd,
    shm: &OwnedFd,
) -> Result<()> {
    let inner = [dev_of(dev.as_fd())?];
    for (name, node) in nodes {
        attach(
            dev,
            &Path::new("/").join(name),
            node.as_fd(),
            Kind::Other,
            None,
            &inner,
        )?;
    }
    attach(dev, Path::new("/pts"), pts.as_fd(), Kind::Dir, None, &inner)?;
    attach(dev, Path::new("/shm"), shm.as_fd(), Kind::Dir, None, &inner)
}

/// The most certificates a sandbox's CA bundle holds: its `/dev` is a 2 MiB tmpfs.
const MAX_CA_CERTIFICATES: usize = 1536 << 10;

/// One of the spec's CA files: opened without following a link, the very file recorded
/// at the start, a regular file, at most 16 MiB, and only its PEM certificate blocks kept
/// (whatever else a file there holds never reaches the sandbox).
fn read_roots(path: &Path, was: Identity) -> Result<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let fd = sys::open_nofollow(None, path).map_err(|e| changed(path, e))?;
    identity::verify(path, was, identity_of(fd.as_fd())).map_err(|message| Failure {
        step: "identity",
        message,
    })?;
    if was.kind != Kind::File {
        return Err(fail(format!("{} is not a regular file", path.display())));
    }
    // Reopened for reading through the descriptor, never by name again.
    let mut text = Vec::new();
    File::open(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .and_then(|f| f.take(16 << 20).read_to_end(&mut text))
        .map_err(|e| {
            fail(format!(
                "reading the CA certificates in {}: {e}",
                path.display()
            ))
        })?;
    Ok(pem_certificates(&text))
}

/// Only the `CERTIFICATE` PEM blocks of `text`, each ending with a newline.
pub fn pem_certificates(text: &[u8]) -> Vec<u8> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let text = String::from_utf8_lossy(text);
    let mut out = String::new();
    // The block being read: kept only once its END line comes with nothing but base64
    // lines before it. Any other line (another BEGIN, a header, a malformed END) drops it.
    let mut block: Option<String> = None;
    for line in text.lines() {
        let line = line.trim_end();
        if line == BEGIN {
            block = Some(format!("{BEGIN}\n"));
        } else if line == END {
            if let Some(b) = block.take() {
                out.push_str(&b);
                out.push_str(END);
                out.push('\n');
            }
        } else if let Some(b) = &mut block {
            let base64 = !line.is_empty()
                && line
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'='));
            if base64 {
                b.push_str(line);
                b.push('\n');
            } else {
                block = None;
            }
        }
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_certificate_blocks_reach_the_bundle() {
        let text = b"junk SECRET\n-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\nmore SECRET\n-----BEGIN PRIVATE KEY-----\nKKK\n-----END PRIVATE KEY-----\n-----BEGIN CERTIFICATE-----\nBBBB\n";
        let got = String::from_utf8(pem_certificates(text)).unwrap();
        assert_eq!(
            got,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
        );
    }

    // Review: a certificate block whose END line is not exactly the marker (indented
    // here) stays open across the private key that follows, up to the next certificate's
    // END: the key reaches the sandbox's bundle. A block must end at any other BEGIN
    // line and hold base64 only.
    #[test]
    fn a_key_after_a_malformed_certificate_block_never_reaches_the_bundle() {
        let text = b"-----BEGIN CERTIFICATE-----\nAAAA\n  -----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----\nSECRETKEY\n-----END PRIVATE KEY-----\n-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n";
        let got = String::from_utf8(pem_certificates(text)).unwrap();
        assert!(!got.contains("SECRETKEY"), "{got}");
        assert!(!got.contains("PRIVATE KEY"), "{got}");
    }
}
