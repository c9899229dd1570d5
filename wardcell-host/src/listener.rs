//! A supervisor's socket: a Unix socket only its owner may connect to (0600), answered
//! by a thread of its own with at most a given number of connections at once, each in
//! a thread; and reads that give up at a fixed instant. Who may call, and what a
//! connection may ask, is the broker's (supervisor.rs).

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wardcell_common::throttle::Throttle;

/// Connections a supervisor takes a second, past [`ACCEPT_BURST`].
pub const ACCEPTS_PER_SECOND: u32 = 100;

/// Connections a supervisor takes at once before [`ACCEPTS_PER_SECOND`] applies.
pub const ACCEPT_BURST: u32 = 50;

/// How long a connection waits for one being served to end before it is answered busy.
pub const SLOT_WAIT: Duration = Duration::from_millis(500);

/// Wakes the thread blocked in `accept` on a listener being stopped (the broker's sys).
pub type Wake = fn(BorrowedFd<'_>, &Path);

/// What serves a connection, in a thread of its own.
pub type Handler = Arc<dyn Fn(UnixStream) + Send + Sync>;

pub struct Listener {
    path: PathBuf,
    listener: UnixListener,
    stopped: AtomicBool,
    active: Arc<AtomicUsize>,
    wake: Wake,
}

impl Listener {
    /// Listen at `path` (0600); `most`, the longest path a Unix socket may have here.
    pub fn bind(path: PathBuf, most: usize, wake: Wake) -> io::Result<Listener> {
        if path.as_os_str().len() > most {
            return Err(io::Error::other(format!(
                "its socket path {} is longer than the {most} bytes a Unix socket path may have; set XDG_RUNTIME_DIR to a shorter directory",
                path.display()
            )));
        }
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        Ok(Listener {
            path,
            listener,
            stopped: AtomicBool::new(false),
            active: Arc::new(AtomicUsize::new(0)),
            wake,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Answer until stopped: each connection to `handle` in a thread of its own while
    /// fewer than `max` are served (counted from `accept`), else, after waiting up to
    /// [`SLOT_WAIT`] for one to end, to `busy` in this one. Connections are taken at most
    /// [`ACCEPTS_PER_SECOND`] a second past a burst of [`ACCEPT_BURST`], and those whose
    /// peer has already gone (a flood's: connect, close) dropped unanswered, at most
    /// twenty times as many: a sandbox that connects and closes as fast as it can costs
    /// the broker a bounded share of a CPU, and the kernel keeps the rest in the socket's
    /// queue, in order, so that a real request among them is still taken within seconds.
    /// `gone` is told of each connection dropped because its peer had closed it already.
    pub fn serve(&self, max: usize, handle: Handler, busy: &dyn Fn(UnixStream), gone: &dyn Fn()) {
        let mut rate = Throttle::new(Instant::now(), ACCEPT_BURST, ACCEPTS_PER_SECOND);
        let mut dead = Throttle::new(Instant::now(), 10 * ACCEPT_BURST, 20 * ACCEPTS_PER_SECOND);
        for conn in self.listener.incoming() {
            if self.stopped.load(Ordering::SeqCst) {
                break;
            }
            let Ok(conn) = conn else { continue };
            // Gone already (a flood's connections close at once and wait, dead, in the
            // queue): nothing to answer, and nothing it may cost.
            if hung_up(conn.as_fd()) {
                gone();
                while !dead.admit(Instant::now()) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                continue;
            }
            while !rate.admit(Instant::now()) {
                std::thread::sleep(Duration::from_millis(1000 / u64::from(ACCEPTS_PER_SECOND)));
            }
            let until = Instant::now() + SLOT_WAIT;
            while self.active.load(Ordering::SeqCst) >= max && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            if self.active.fetch_add(1, Ordering::SeqCst) >= max {
                self.active.fetch_sub(1, Ordering::SeqCst);
                busy(conn);
                continue;
            }
            let (active, handle) = (self.active.clone(), handle.clone());
            let spawned = std::thread::Builder::new()
                .name("supervisor-conn".into())
                .spawn(move || {
                    handle(conn);
                    active.fetch_sub(1, Ordering::SeqCst);
                });
            if spawned.is_err() {
                self.active.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Stop accepting and remove the socket; the thread serving it ends.
    pub fn stop(&self) {
        if !self.stopped.swap(true, Ordering::SeqCst) {
            (self.wake)(self.listener.as_fd(), &self.path);
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Stop accepting and remove the socket, for a process that ends soon: the thread
    /// serving it is left asleep (nothing can connect to a removed socket, and one that
    /// connected before is dropped unanswered), not woken to end a moment before the
    /// process does.
    pub fn stop_at_exit(&self) {
        if !self.stopped.swap(true, Ordering::SeqCst) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether the peer of `conn` has closed it.
fn hung_up(conn: BorrowedFd<'_>) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(conn, PollFlags::empty())];
    poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLHUP))
}

/// Reads that give up at a fixed instant, however the bytes trickle in.
pub struct Deadline<'a> {
    pub conn: &'a UnixStream,
    pub until: Instant,
}

impl<'a> Deadline<'a> {
    pub fn new(conn: &'a UnixStream, until: Instant) -> Deadline<'a> {
        Deadline { conn, until }
    }
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no request in time",
            ));
        }
        self.conn.set_read_timeout(Some(left))?;
        (&*self.conn).read(buf)
    }
}

/// Why a read failed, in words: one that timed out ran into the deadline of `within`.
pub fn late(e: &io::Error, what: &str, within: Duration) -> String {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => format!(
            "the connection sent no {what} within {} s",
            within.as_secs()
        ),
        _ => e.to_string(),
    }
}

/// A caller sends nothing after its request: a readable connection means it is gone.
pub fn caller_gone(conn: &UnixStream) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(conn.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
}

/// One slot that callers take in turn, held with the holder's connection: a sandbox's
/// one `zone enter` at a time (the broker decides that there is one).
#[derive(Default)]
pub struct Slot {
    holder: std::sync::Mutex<Option<UnixStream>>,
    released: std::sync::Condvar,
}

impl Slot {
    fn holder(&self) -> std::sync::MutexGuard<'_, Option<UnixStream>> {
        self.holder.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The slot for `conn`; `None` while another caller holds it. A holder whose caller
    /// is gone is being ended: its release is waited for (up to `within`), not refused.
    pub fn take(&self, conn: &UnixStream, within: Duration) -> Option<Held<'_>> {
        let until = Instant::now() + within;
        let mut holder = self.holder();
        while let Some(h) = holder.as_ref() {
            let left = until.saturating_duration_since(Instant::now());
            if !caller_gone(h) || left.is_zero() {
                return None;
            }
            holder = self
                .released
                .wait_timeout(holder, left.min(Duration::from_millis(50)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *holder = Some(conn.try_clone().ok()?);
        Some(Held(self))
    }
}

/// The slot, held; released when dropped.
pub struct Held<'a>(&'a Slot);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        *self.0.holder() = None;
        self.0.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_is_taken_in_turn_and_waited_for_while_its_caller_is_gone() {
        let slot = Slot::default();
        let (a, a_peer) = UnixStream::pair().unwrap();
        let (b, _b_peer) = UnixStream::pair().unwrap();
        let held = slot.take(&a, Duration::from_secs(5)).expect("free");
        // A caller still there holds it: the next is refused at once.
        let t = Instant::now();
        assert!(slot.take(&b, Duration::from_secs(5)).is_none());
        assert!(t.elapsed() < Duration::from_secs(1));
        // Its caller gone, the next waits for the release instead.
        drop(a_peer);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(200));
                drop(held);
            });
            assert!(slot.take(&b, Duration::from_secs(5)).is_some());
        });
        // Released again when dropped.
        assert!(slot.take(&a, Duration::ZERO).is_some());
    }

    #[test]
    fn a_read_past_the_deadline_says_so() {
        let (a, _b) = UnixStream::pair().unwrap();
        let mut r = Deadline {
            conn: &a,
            until: Instant::now() + Duration::from_millis(100),
        };
        let e = r.read(&mut [0u8; 4]).unwrap_err();
        assert_eq!(
            late(&e, "request", Duration::from_secs(5)),
            "the connection sent no request within 5 s"
        );
    }
}
