//! What the run's views hold, watched on the host for the whole run (THREAT_MODEL 3.16).
//!
//! A mask or a read-only bind is a mount on one directory entry: when the host replaces
//! that entry (renames over it, removes and recreates it, creates it where it was missing),
//! the kernel detaches the mount in every other mount namespace, and the sandbox sees the
//! new file, unprotected. Nothing inside a sandbox can stop the host; so the host's side is
//! watched: every directory from a held path's tree down to it is watched with inotify
//! before the sandbox's view is built, and an event that replaces, removes or creates the
//! held name (or creates a directory on the way to a missing one that then holds it) is
//! reported at once to the broker, which ends every sandbox of the run. Events the kernel
//! dropped (a full queue) are reported as losing everything. Reports only: what is done
//! about them is the broker's.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use crate::error::BrokerError;

/// One held path: where it is, the bound tree it lies in (whose own replacement the view
/// does not see: it holds the tree by descriptor), and whether it existed when held (a
/// mount then sits on it).
#[derive(Debug, Clone)]
struct Held {
    path: PathBuf,
    tree: PathBuf,
    existed: bool,
}

#[derive(Default)]
struct State {
    held: Vec<Held>,
    /// The held paths, and the watched directories, by path: a profile may hold thousands.
    known: HashSet<PathBuf>,
    watched: HashSet<PathBuf>,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    /// Set once the run has ended: nothing is reported after.
    ended: bool,
}

/// The watch of a run; reports through the callback given to [`Guard::start`].
pub struct Guard {
    /// Why not, when the kernel gave no inotify instance: then nothing can be held, and
    /// [`Guard::hold`] says so.
    inotify: Result<Arc<Inotify>, nix::errno::Errno>,
    state: Arc<Mutex<State>>,
}

/// How often the broker's `tick` runs while the run lasts.
pub const TICK: std::time::Duration = std::time::Duration::from_secs(1);

/// The events that change a directory's entries, or the directory itself.
fn events() -> AddWatchFlags {
    use AddWatchFlags as F;
    F::IN_CREATE
        | F::IN_DELETE
        | F::IN_MOVED_FROM
        | F::IN_MOVED_TO
        | F::IN_DELETE_SELF
        | F::IN_MOVE_SELF
        | F::IN_ONLYDIR
        | F::IN_DONT_FOLLOW
}

impl Default for Guard {
    fn default() -> Guard {
        Guard::new()
    }
}

impl Guard {
    /// A watch holding nothing yet. Events are queued from the first [`Guard::hold`] on,
    /// and read once [`Guard::start`] has started the thread.
    pub fn new() -> Guard {
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC).map(Arc::new);
        let state = Arc::new(Mutex::new(State::default()));
        Guard { inotify, state }
    }

    /// Start the watching thread (in the broker: once the signals it takes are blocked,
    /// which the thread inherits). While `owner` (the run) lives, `lost` is called with
    /// the held path an event undid (once per event; `/` for events the kernel dropped),
    /// and `tick` once every [`TICK`] (the broker looks at the run's repository then).
    /// Without inotify nothing is started: nothing can be held then, and no sandbox is
    /// built ([`Guard::hold`]).
    pub fn start<T: Send + Sync + 'static>(
        &self,
        owner: Weak<T>,
        lost: fn(&T, &Path),
        tick: fn(&T),
    ) -> Result<(), BrokerError> {
        let Ok(inotify) = self.inotify.clone() else {
            return Ok(());
        };
        let watcher = Guard {
            inotify: Ok(inotify),
            state: self.state.clone(),
        };
        let lost = {
            let owner = owner.clone();
            move |p: &Path| owner.upgrade().iter().for_each(|o| lost(o, p))
        };
        let tick = move || owner.upgrade().iter().for_each(|o| tick(o));
        let spawned = std::thread::Builder::new().name("guard".into());
        let spawned = spawned.spawn(move || watcher.watch(lost, tick));
        spawned
            .map(drop)
            .map_err(|e| BrokerError::Sandbox(format!("starting a thread: {e}")))
    }

    /// Hold `paths`, each `(path, tree)`: from now on the host replacing one is reported.
    /// An error (no watch could be added: the user's inotify limits) means it cannot be
    /// held, and the sandbox must not be built.
    pub fn hold(&self, paths: &[(PathBuf, PathBuf)]) -> Result<(), BrokerError> {
        self.hold_all(paths)
            .map_err(|e| BrokerError::Refused(crate::messages::unheld(&e)))
    }

    fn hold_all(&self, paths: &[(PathBuf, PathBuf)]) -> io::Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.ended {
            return Err(io::Error::other("the run has ended"));
        }
        for (path, tree) in paths {
            if !state.known.insert(path.clone()) {
                continue;
            }
            let existed = std::fs::symlink_metadata(path).is_ok();
            let held = Held {
                path: path.clone(),
                tree: tree.clone(),
                existed,
            };
            self.arm(&mut state, &held)?;
            state.held.push(held);
        }
        Ok(())
    }

    /// The run has ended: what happens to the paths from now on is no longer reported, and
    /// every watch is removed now, and none is added after. Removing a watch queues it for
    /// the kernel's delayed cleanup, which then runs while the run ends; an inotify
    /// instance closed with watches still on, or with their cleanup pending, waits for it
    /// (an SRCU grace period), which delayed this process's exit, and `wardcell run`'s, by
    /// about 15 ms.
    pub fn end(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.ended = true;
        let watches = std::mem::take(&mut state.dirs).into_keys();
        if let Ok(inotify) = &self.inotify {
            for wd in watches {
                let _ = inotify.rm_watch(wd);
            }
        }
        state.watched.clear();
    }

    /// Watch every existing directory from `held`'s tree down to its parent.
    fn arm(&self, state: &mut State, held: &Held) -> io::Result<()> {
        let Some(parent) = held.path.parent() else {
            return Ok(());
        };
        let mut dirs: Vec<&Path> = parent
            .ancestors()
            .take_while(|a| a.starts_with(&held.tree))
            .collect();
        dirs.reverse();
        for dir in dirs {
            if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
                break;
            }
            if state.watched.contains(dir) {
                continue;
            }
            let inotify = self.inotify.as_ref().map_err(|e| io::Error::from(*e))?;
            let wd = match inotify.add_watch(dir, events()) {
                Ok(wd) => wd,
                // Closed to the user: closed to every sandbox of the user's as well (the
                // same uid, no capability), so nothing below it is in any view to hold.
                Err(nix::errno::Errno::EACCES) => break,
                Err(e) => return Err(io::Error::other(format!("watching {}: {e}", dir.display()))),
            };
            state.dirs.insert(wd, dir.to_path_buf());
            state.watched.insert(dir.to_path_buf());
        }
        Ok(())
    }

    fn watch(self, lost: impl Fn(&Path), tick: impl Fn()) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let Ok(inotify) = self.inotify.clone() else {
            return;
        };
        let mut next = std::time::Instant::now() + TICK;
        loop {
            let left = next.saturating_duration_since(std::time::Instant::now());
            let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
            let ms = PollTimeout::try_from(left.as_millis() as i32).unwrap_or(PollTimeout::ZERO);
            if matches!(poll(&mut fds, ms), Ok(0)) || left.is_zero() {
                if !self.state.lock().unwrap_or_else(|p| p.into_inner()).ended {
                    tick();
                }
                next = std::time::Instant::now() + TICK;
                continue;
            }
            let events = match inotify.read_events() {
                Ok(events) => events,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return lost(Path::new("/")),
            };
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            for e in events {
                let undone = if e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    vec![PathBuf::from("/")]
                } else {
                    self.undone(&mut state, e.wd, e.mask, e.name.as_deref())
                };
                if !state.ended {
                    undone.iter().for_each(|p| lost(p));
                }
            }
        }
    }

    /// The held paths one event undoes; re-arms below a directory created on the way.
    fn undone(
        &self,
        state: &mut State,
        wd: WatchDescriptor,
        mask: AddWatchFlags,
        name: Option<&std::ffi::OsStr>,
    ) -> Vec<PathBuf> {
        use AddWatchFlags as F;
        let Some(dir) = state.dirs.get(&wd).cloned() else {
            return Vec::new();
        };
        // The watched directory itself went away (or was moved) from under its tree: it is
        // no longer watched there (a directory made there again is, when it is armed).
        let gone = mask.intersects(F::IN_DELETE_SELF | F::IN_MOVE_SELF | F::IN_IGNORED);
        if gone {
            state.dirs.remove(&wd);
            state.watched.remove(&dir);
            if let Ok(inotify) = &self.inotify {
                let _ = inotify.rm_watch(wd);
            }
        }
        if mask.contains(F::IN_IGNORED) {
            return Vec::new();
        }
        let at = match name {
            Some(n) if !gone => dir.join(n),
            _ => dir,
        };
        let created = mask.intersects(F::IN_CREATE | F::IN_MOVED_TO);
        let mut out = Vec::new();
        for h in state.held.clone() {
            if at == h.path {
                // The held name itself: replaced, removed or created.
                out.push(h.path.clone());
            } else if h.path.starts_with(&at) && at != h.tree && at.starts_with(&h.tree) {
                // A directory on the way: created, it may hold the name already (watched
                // from now on, then looked at); removed or moved, a mount on the name
                // went with it.
                let rearmed = created && self.arm(state, &h).is_ok();
                let there = std::fs::symlink_metadata(&h.path).is_ok();
                if !rearmed || there || (!created && h.existed) {
                    out.push(h.path.clone());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{channel, Receiver};
    use std::time::Duration;

    /// What the broker's run stands for here: where reports go.
    type Owner = Mutex<std::sync::mpsc::Sender<PathBuf>>;

    fn guard() -> (Guard, Receiver<PathBuf>, Arc<Owner>) {
        let (tx, rx) = channel();
        let owner = Arc::new(Mutex::new(tx));
        let g = Guard::new();
        let lost = |o: &Owner, p: &Path| drop(o.lock().unwrap().send(p.to_path_buf()));
        g.start(Arc::downgrade(&owner), lost, |_| {}).unwrap();
        (g, rx, owner)
    }

    fn quiet(rx: &Receiver<PathBuf>) {
        assert_eq!(rx.recv_timeout(Duration::from_millis(200)).ok(), None);
    }

    fn got(rx: &Receiver<PathBuf>, want: &Path) {
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).ok().as_deref(),
            Some(want)
        );
    }

    #[test]
    fn replacing_removing_or_creating_a_held_name_is_reported_and_nothing_else() {
        let t = std::env::temp_dir().join(format!("wardcell-guard-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        std::fs::create_dir_all(t.join(".git")).unwrap();
        std::fs::write(t.join(".git/config"), "").unwrap();
        std::fs::write(t.join("secret"), "").unwrap();
        let (g, rx, _owner) = guard();
        let held = |p: &str| (t.join(p), t.clone());
        g.hold(&[
            held(".git/config"),
            held("secret"),
            held(".aws/credentials"),
        ])
        .unwrap();
        // Other names, in the same directories: nothing.
        std::fs::write(t.join(".git/config.lock"), "x").unwrap();
        std::fs::write(t.join("other"), "x").unwrap();
        std::fs::remove_file(t.join("other")).unwrap();
        quiet(&rx);
        // git's way of writing its config: a lock file renamed over it.
        std::fs::rename(t.join(".git/config.lock"), t.join(".git/config")).unwrap();
        got(&rx, &t.join(".git/config"));
        std::fs::remove_file(t.join("secret")).unwrap();
        got(&rx, &t.join("secret"));
        // A missing one: its directory created empty is watched, not reported...
        std::fs::create_dir(t.join(".aws")).unwrap();
        quiet(&rx);
        // ...and the name created in it is.
        std::fs::write(t.join(".aws/credentials"), "k").unwrap();
        got(&rx, &t.join(".aws/credentials"));
        // After the run's end, nothing.
        g.end();
        std::fs::write(t.join("secret"), "").unwrap();
        quiet(&rx);
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn a_directory_on_the_way_moved_away_takes_the_mount_with_it() {
        let t = std::env::temp_dir().join(format!("wardcell-guard-mv-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        std::fs::create_dir_all(t.join(".config/gcloud")).unwrap();
        let (g, rx, _owner) = guard();
        g.hold(&[(t.join(".config/gcloud"), t.clone())]).unwrap();
        std::fs::rename(t.join(".config"), t.join(".config.old")).unwrap();
        got(&rx, &t.join(".config/gcloud"));
        // A whole directory moved in, the name already in it.
        std::fs::create_dir_all(t.join("new/gcloud")).unwrap();
        std::fs::rename(t.join("new"), t.join(".config")).unwrap();
        got(&rx, &t.join(".config/gcloud"));
        // Made again, empty, then the name in it: the new directory is watched too.
        std::fs::remove_dir_all(t.join(".config")).unwrap();
        while rx.recv_timeout(Duration::from_millis(200)).is_ok() {}
        std::fs::create_dir(t.join(".config")).unwrap();
        std::fs::create_dir(t.join(".config/gcloud")).unwrap();
        got(&rx, &t.join(".config/gcloud"));
        std::fs::remove_dir_all(&t).unwrap();
    }

    /// The watches the kernel holds for `g`'s inotify instance (its fdinfo lists one
    /// `inotify wd:` line each).
    fn kernel_watches(g: &Guard) -> usize {
        use std::os::fd::{AsFd, AsRawFd};
        let fd = g.inotify.as_ref().unwrap().as_ref().as_fd().as_raw_fd();
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
        info.lines()
            .filter(|l| l.starts_with("inotify wd:"))
            .count()
    }

    #[test]
    fn the_runs_end_removes_every_watch_and_reports_nothing_after() {
        let t = std::env::temp_dir().join(format!("wardcell-guard-end-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        std::fs::create_dir_all(t.join("a/b")).unwrap();
        let (g, rx, _owner) = guard();
        g.hold(&[(t.join("a/b/c"), t.clone()), (t.join("d"), t.clone())])
            .unwrap();
        assert_eq!(kernel_watches(&g), 3, "{t:?}, a and a/b");
        g.end();
        // Gone from the kernel now, not when this process exits (which would wait for
        // them to be freed); and what the host does afterwards is not reported.
        assert_eq!(kernel_watches(&g), 0);
        std::fs::write(t.join("d"), "").unwrap();
        std::fs::write(t.join("a/b/c"), "").unwrap();
        quiet(&rx);
        // Nothing is held after: a sandbox still being built then is refused.
        assert!(g.hold(&[(t.join("e"), t.clone())]).is_err());
        assert_eq!(kernel_watches(&g), 0);
        std::fs::remove_dir_all(&t).unwrap();
    }
}
