//! The run's guard: what the run's views hold, watched on the host for the whole run
//! (THREAT_MODEL 3.16), by a thread of the run's helper (`wardcell-shim --helper`, a
//! process of its own that the broker starts when the run starts), on its fd 3 (channel
//! H, docs/PROTOCOL.md 7.4).
//!
//! A mask or a read-only bind is a mount on one directory entry: when the host replaces
//! that entry (renames over it, removes and recreates it, creates it where it was missing),
//! the kernel detaches the mount in every other mount namespace, and the sandbox sees the
//! new file, unprotected. Nothing inside a sandbox can stop the host; so the host's side is
//! watched: every directory from a held path's tree down to it is watched with inotify
//! before the sandbox's view is built (the broker sends `Hold` and waits for `Held`), and
//! an event that replaces, removes or creates the held name (or creates a directory on the
//! way to a missing one that then holds it) is reported at once (`Lost`) to the broker,
//! which ends every sandbox of the run. Events the kernel dropped (a full queue) are
//! reported as losing everything (`/`). A `Tick` every second says the guard still
//! watches (and has the broker look at the run's repository); the broker takes a guard
//! that is silent for longer, or gone, as everything lost. Reports only: what is done
//! about them is the broker's.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use wardcell_common::protocol::{self, GuardReport, GuardRequest};

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

/// The watch of a run.
struct Guard {
    /// Why not, when the kernel gave no inotify instance: then nothing can be held, and
    /// [`Guard::hold`] says so.
    inotify: Result<Inotify, nix::errno::Errno>,
    state: State,
}

/// How often the guard says it still watches.
const TICK: Duration = Duration::from_secs(1);

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

/// Serve the broker on `sock` (the helper's fd 3) until it closes it: each request
/// answered, each lost path reported, a tick every [`TICK`]. Returns when the socket
/// ends or fails, or the events cannot be read (after saying everything is lost), with
/// every watch removed.
pub fn serve(sock: UnixStream) {
    let mut guard = Guard::new();
    let _ = watch(&mut guard, &sock);
    guard.end();
}

fn watch(guard: &mut Guard, sock: &UnixStream) -> Option<()> {
    let (mut input, mut output) = (sock, sock);
    let mut say = |r: &GuardReport| protocol::write_frame(&mut output, r).ok();
    let mut next = Instant::now() + TICK;
    loop {
        let left = next.saturating_duration_since(Instant::now());
        let ms = PollTimeout::try_from(left).unwrap_or(PollTimeout::ZERO);
        let mut fds = vec![PollFd::new(input.as_fd(), PollFlags::POLLIN)];
        if let Ok(inotify) = &guard.inotify {
            fds.push(PollFd::new(inotify.as_fd(), PollFlags::POLLIN));
        }
        let polled = poll(&mut fds, ms);
        let ready = |i: usize| {
            fds.get(i)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
        };
        let (asked, happened) = (ready(0), ready(1));
        drop(fds);
        if matches!(polled, Ok(0)) || left.is_zero() {
            say(&GuardReport::Tick)?;
            next = Instant::now() + TICK;
        }
        if happened {
            // Events that cannot be read: everything is lost, and nothing is watched.
            let Some(lost) = guard.lost() else {
                return say(&GuardReport::Lost("/".into())).and(None);
            };
            for p in lost {
                say(&GuardReport::Lost(p))?;
            }
        }
        if asked {
            match protocol::read_frame(&mut input).ok()? {
                GuardRequest::Hold(paths) => say(&match guard.hold(&paths) {
                    Ok(()) => GuardReport::Held,
                    Err(e) => GuardReport::Unheld(e.to_string()),
                })?,
                GuardRequest::End => {
                    guard.end();
                    say(&GuardReport::Ended)?
                }
            }
        }
    }
}

impl Guard {
    /// A watch holding nothing yet.
    fn new() -> Guard {
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC);
        Guard {
            inotify,
            state: State::default(),
        }
    }

    /// Hold `paths`, each `(path, tree)`: from now on the host replacing one is reported.
    /// An error (no watch could be added: the user's inotify limits) means it cannot be
    /// held, and the sandbox must not be built.
    fn hold(&mut self, paths: &[(PathBuf, PathBuf)]) -> io::Result<()> {
        if self.state.ended {
            return Err(io::Error::other("the run has ended"));
        }
        for (path, tree) in paths {
            if !self.state.known.insert(path.clone()) {
                continue;
            }
            let existed = std::fs::symlink_metadata(path).is_ok();
            let held = Held {
                path: path.clone(),
                tree: tree.clone(),
                existed,
            };
            self.arm(&held)?;
            self.state.held.push(held);
        }
        Ok(())
    }

    /// The run has ended: what happens to the paths from now on is no longer reported, and
    /// every watch is removed now, and none is added after. Removing a watch queues it for
    /// the kernel's delayed cleanup, which then runs while the run ends; an inotify
    /// instance closed with watches still on, or with their cleanup pending, waits for it
    /// (an SRCU grace period), which delayed the exit of the process holding it, and so
    /// `wardcell run`'s, by about 15 ms.
    fn end(&mut self) {
        self.state.ended = true;
        let watches = std::mem::take(&mut self.state.dirs).into_keys();
        if let Ok(inotify) = &self.inotify {
            for wd in watches {
                let _ = inotify.rm_watch(wd);
            }
        }
        self.state.watched.clear();
    }

    /// Watch every existing directory from `held`'s tree down to its parent.
    fn arm(&mut self, held: &Held) -> io::Result<()> {
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
            if self.state.watched.contains(dir) {
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
            self.state.dirs.insert(wd, dir.to_path_buf());
            self.state.watched.insert(dir.to_path_buf());
        }
        Ok(())
    }

    /// What the events queued now undid (nothing once the run has ended; `/` when the
    /// kernel dropped events); `None` when they cannot be read.
    fn lost(&mut self) -> Option<Vec<PathBuf>> {
        let events = match self.inotify.as_ref().map(Inotify::read_events) {
            Ok(Ok(events)) => events,
            Ok(Err(nix::errno::Errno::EINTR)) => Vec::new(),
            _ => return None,
        };
        let mut out = Vec::new();
        for e in events {
            if e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                out.push(PathBuf::from("/"));
            } else {
                out.extend(self.undone(e.wd, e.mask, e.name.as_deref()));
            }
        }
        if self.state.ended {
            out.clear();
        }
        Some(out)
    }

    /// The held paths one event undoes; re-arms below a directory created on the way.
    fn undone(
        &mut self,
        wd: WatchDescriptor,
        mask: AddWatchFlags,
        name: Option<&std::ffi::OsStr>,
    ) -> Vec<PathBuf> {
        use AddWatchFlags as F;
        let Some(dir) = self.state.dirs.get(&wd).cloned() else {
            return Vec::new();
        };
        // The watched directory itself went away (or was moved) from under its tree: it is
        // no longer watched there (a directory made there again is, when it is armed).
        let gone = mask.intersects(F::IN_DELETE_SELF | F::IN_MOVE_SELF | F::IN_IGNORED);
        if gone {
            self.state.dirs.remove(&wd);
            self.state.watched.remove(&dir);
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
        for h in self.state.held.clone() {
            if at == h.path {
                // The held name itself: replaced, removed or created.
                out.push(h.path.clone());
            } else if h.path.starts_with(&at) && at != h.tree && at.starts_with(&h.tree) {
                // A directory on the way: created, it may hold the name already (watched
                // from now on, then looked at); removed or moved, a mount on the name
                // went with it.
                let rearmed = created && self.arm(&h).is_ok();
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
    use std::collections::VecDeque;

    /// A guard and what it reported, not yet looked at.
    struct Watch {
        g: Guard,
        q: VecDeque<PathBuf>,
    }

    fn guard() -> Watch {
        Watch {
            g: Guard::new(),
            q: VecDeque::new(),
        }
    }

    impl Watch {
        /// The next path reported within `within`.
        fn next(&mut self, within: Duration) -> Option<PathBuf> {
            let until = Instant::now() + within;
            while self.q.is_empty() && Instant::now() < until {
                let left = until.saturating_duration_since(Instant::now());
                let inotify = self.g.inotify.as_ref().unwrap();
                let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
                let ms = PollTimeout::try_from(left).unwrap_or(PollTimeout::ZERO);
                if matches!(poll(&mut fds, ms), Ok(1..)) {
                    self.q.extend(self.g.lost().unwrap());
                }
            }
            self.q.pop_front()
        }
    }

    fn quiet(w: &mut Watch) {
        assert_eq!(w.next(Duration::from_millis(200)), None);
    }

    fn got(w: &mut Watch, want: &Path) {
        assert_eq!(w.next(Duration::from_secs(5)).as_deref(), Some(want));
    }

    #[test]
    fn replacing_removing_or_creating_a_held_name_is_reported_and_nothing_else() {
        let t = std::env::temp_dir().join(format!("wardcell-guard-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        std::fs::create_dir_all(t.join(".git")).unwrap();
        std::fs::write(t.join(".git/config"), "").unwrap();
        std::fs::write(t.join("secret"), "").unwrap();
        let mut w = guard();
        let held = |p: &str| (t.join(p), t.clone());
        w.g.hold(&[
            held(".git/config"),
            held("secret"),
            held(".aws/credentials"),
        ])
        .unwrap();
        // Other names, in the same directories: nothing.
        std::fs::write(t.join(".git/config.lock"), "x").unwrap();
        std::fs::write(t.join("other"), "x").unwrap();
        std::fs::remove_file(t.join("other")).unwrap();
        quiet(&mut w);
        // git's way of writing its config: a lock file renamed over it.
        std::fs::rename(t.join(".git/config.lock"), t.join(".git/config")).unwrap();
        got(&mut w, &t.join(".git/config"));
        std::fs::remove_file(t.join("secret")).unwrap();
        got(&mut w, &t.join("secret"));
        // A missing one: its directory created empty is watched, not reported...
        std::fs::create_dir(t.join(".aws")).unwrap();
        quiet(&mut w);
        // ...and the name created in it is.
        std::fs::write(t.join(".aws/credentials"), "k").unwrap();
        got(&mut w, &t.join(".aws/credentials"));
        // After the run's end, nothing.
        w.g.end();
        std::fs::write(t.join("secret"), "").unwrap();
        quiet(&mut w);
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn a_directory_on_the_way_moved_away_takes_the_mount_with_it() {
        let t = std::env::temp_dir().join(format!("wardcell-guard-mv-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        std::fs::create_dir_all(t.join(".config/gcloud")).unwrap();
        let mut w = guard();
        w.g.hold(&[(t.join(".config/gcloud"), t.clone())]).unwrap();
        std::fs::rename(t.join(".config"), t.join(".config.old")).unwrap();
        got(&mut w, &t.join(".config/gcloud"));
        // A whole directory moved in, the name already in it.
        std::fs::create_dir_all(t.join("new/gcloud")).unwrap();
        std::fs::rename(t.join("new"), t.join(".config")).unwrap();
        got(&mut w, &t.join(".config/gcloud"));
        // Made again, empty, then the name in it: the new directory is watched too.
        std::fs::remove_dir_all(t.join(".config")).unwrap();
        while w.next(Duration::from_millis(200)).is_some() {}
        std::fs::create_dir(t.join(".config")).unwrap();
        std::fs::create_dir(t.join(".config/gcloud")).unwrap();
        got(&mut w, &t.join(".config/gcloud"));
        std::fs::remove_dir_all(&t).unwrap();
    }

    /// The watches the kernel holds for `g`'s inotify instance (its fdinfo lists one
    /// `inotify wd:` line each).
    fn kernel_watches(g: &Guard) -> usize {
        use std::os::fd::AsRawFd;
        let fd = g.inotify.as_ref().unwrap().as_fd().as_raw_fd();
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
        let mut w = guard();
        w.g.hold(&[(t.join("a/b/c"), t.clone()), (t.join("d"), t.clone())])
            .unwrap();
        assert_eq!(kernel_watches(&w.g), 3, "{t:?}, a and a/b");
        w.g.end();
        // Gone from the kernel now, not when this process exits (which would wait for
        // them to be freed); and what the host does afterwards is not reported.
        assert_eq!(kernel_watches(&w.g), 0);
        std::fs::write(t.join("d"), "").unwrap();
        std::fs::write(t.join("a/b/c"), "").unwrap();
        quiet(&mut w);
        // Nothing is held after: a sandbox still being built then is refused.
        assert!(w.g.hold(&[(t.join("e"), t.clone())]).is_err());
        assert_eq!(kernel_watches(&w.g), 0);
        std::fs::remove_dir_all(&t).unwrap();
    }
}
