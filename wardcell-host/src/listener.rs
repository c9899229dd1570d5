//! A supervisor's socket: a Unix socket only its owner may connect to (0600), answered
//! by a thread of its own with at most a given number of connections at once, each in
//! a thread; and reads that give up at a fixed instant. Who may call, and what a
//! connection may ask, is the broker's (supervisor.rs).

use std::collections::VecDeque;
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

/// Connections accepted that have sent nothing yet, kept at most: they wait here, not
/// in a slot, until their first byte comes. Past this, the one that has waited longest
/// is closed: idle connections cannot keep a request that speaks from being served.
pub const MAX_WAITING: usize = 64;

/// How long an accepted connection may take to send its first byte.
pub const FIRST_BYTE: Duration = Duration::from_secs(5);

/// How long a connection that has sent nothing waits before it may be served anyway (a
/// caller may wait for the supervisor's Hello before it sends its own), while fewer
/// than half the slots are taken: the other half is always left to callers that spoke.
pub const SILENT_GRACE: Duration = Duration::from_millis(100);

/// Why a connection was dropped unanswered: its peer had closed it already.
pub const CLOSED_BY_PEER: &str = "closed before it was answered";
/// ...it sent nothing within [`FIRST_BYTE`].
pub const SILENT: &str = "the connection sent no request within 5 s";
/// ...it had sent nothing, and [`MAX_WAITING`] others that had not either came after it.
pub const CROWDED_OUT: &str = "closed unanswered: it had sent nothing while 64 connections waited";

/// Wakes the thread blocked in `accept` on a listener being stopped (the broker's sys).
pub type Wake = fn(BorrowedFd<'_>, &Path);

/// What serves a connection, in a thread of its own, given the instant it was accepted
/// (its deadline counts from there, however long it waited to be handed over).
pub type Handler = Arc<dyn Fn(UnixStream, Instant) + Send + Sync>;

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
    /// fewer than `max` are served (counted from the handover), else, after waiting up to
    /// [`SLOT_WAIT`] for one to end, to `busy` in this one. A connection is handed over
    /// once it has said something (or hung up): until then it waits, without a slot,
    /// among at most [`MAX_WAITING`] (the longest waiting closed to make room) for at most
    /// [`FIRST_BYTE`], and is served silent only after [`SILENT_GRACE`] while fewer than
    /// half the slots are taken, so that connections that stay silent cannot keep a
    /// caller that speaks from being served. Connections are taken at most [`ACCEPTS_PER_SECOND`] a
    /// second past a burst of [`ACCEPT_BURST`], and those whose peer has already gone (a
    /// flood's: connect, close) dropped unanswered, at most twenty times as many: a
    /// sandbox that connects and closes as fast as it can costs the broker a bounded
    /// share of a CPU, and the kernel keeps the rest in the socket's queue, in order, so
    /// that a real request among them is still taken within seconds. `gone` is told of
    /// each connection dropped unanswered, and why ([`CLOSED_BY_PEER`], [`SILENT`],
    /// [`CROWDED_OUT`]).
    pub fn serve(
        &self,
        max: usize,
        handle: Handler,
        busy: &dyn Fn(UnixStream),
        gone: &dyn Fn(&str),
    ) {
        let mut rate = Throttle::new(Instant::now(), ACCEPT_BURST, ACCEPTS_PER_SECOND);
        let mut dead = Throttle::new(Instant::now(), 10 * ACCEPT_BURST, 20 * ACCEPTS_PER_SECOND);
        let mut waiting: VecDeque<(UnixStream, Instant)> = VecDeque::new();
        let _ = self.listener.set_nonblocking(true);
        while !self.stopped.load(Ordering::SeqCst) {
            let room = self.active.load(Ordering::SeqCst) < max / 2;
            let (incoming, spoke) = self.wait_for(&waiting, room);
            if self.stopped.load(Ordering::SeqCst) {
                break;
            }
            // Those that said something, in the order they came; then those silent too long.
            let mut still = VecDeque::with_capacity(waiting.len());
            for (i, (conn, at)) in waiting.drain(..).enumerate() {
                match spoke.contains(&i) {
                    true => self.hand_over((conn, at), max, &handle, busy),
                    false => still.push_back((conn, at)),
                }
            }
            waiting = still;
            let now = Instant::now();
            // Those silent for FIRST_BYTE are closed before any is served: one that had
            // waited that long must not be handed over with its time spent.
            while waiting
                .front()
                .is_some_and(|(_, at)| now.duration_since(*at) >= FIRST_BYTE)
            {
                waiting.pop_front();
                gone(SILENT);
            }
            // A silent one, after its grace, while half the slots are free.
            let grace_over = |w: &VecDeque<(UnixStream, Instant)>| {
                w.front()
                    .is_some_and(|(_, at)| now.duration_since(*at) >= SILENT_GRACE)
            };
            while self.active.load(Ordering::SeqCst) < max / 2 && grace_over(&waiting) {
                let waited = waiting.pop_front().expect("one is waiting");
                self.hand_over(waited, max, &handle, busy);
            }
            if !incoming {
                continue;
            }
            let Ok((conn, _)) = self.listener.accept() else {
                continue;
            };
            let _ = conn.set_nonblocking(false);
            // Gone already (a flood's connections close at once and wait, dead, in the
            // queue): nothing to answer, and nothing it may cost.
            if hung_up(conn.as_fd()) {
                gone(CLOSED_BY_PEER);
                while !dead.admit(Instant::now()) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                continue;
            }
            while !rate.admit(Instant::now()) {
                std::thread::sleep(Duration::from_millis(1000 / u64::from(ACCEPTS_PER_SECOND)));
            }
            if waiting.len() >= MAX_WAITING {
                waiting.pop_front();
                gone(CROWDED_OUT);
            }
            waiting.push_back((conn, Instant::now()));
        }
    }

    /// Wait until the listener or a waiting connection is ready, or the first of those
    /// waits ends (its grace, when there is `room` for a silent one): whether one is
    /// there to accept, and the indexes of those that spoke.
    fn wait_for(
        &self,
        waiting: &VecDeque<(UnixStream, Instant)>,
        room: bool,
    ) -> (bool, Vec<usize>) {
        use nix::poll::{poll, PollFd, PollFlags};
        let mut fds = vec![PollFd::new(self.listener.as_fd(), PollFlags::POLLIN)];
        fds.extend(
            waiting
                .iter()
                .map(|(c, _)| PollFd::new(c.as_fd(), PollFlags::POLLIN)),
        );
        let wait = if room { SILENT_GRACE } else { FIRST_BYTE };
        let until = waiting.front().map(|(_, at)| *at + wait);
        if poll(&mut fds, wardcell_common::terminal::timeout_until(until)).is_err() {
            return (false, Vec::new());
        }
        let ready = |f: &PollFd<'_>| f.revents().is_some_and(|r| !r.is_empty());
        let spoke = fds[1..]
            .iter()
            .enumerate()
            .filter(|(_, f)| ready(f))
            .map(|(i, _)| i);
        (ready(&fds[0]), spoke.collect())
    }

    /// Serve `conn`, accepted `at`, in a thread of its own once one of the `max` slots is
    /// free (waiting up to [`SLOT_WAIT`]), else answer it `busy`.
    fn hand_over(
        &self,
        (conn, at): (UnixStream, Instant),
        max: usize,
        handle: &Handler,
        busy: &dyn Fn(UnixStream),
    ) {
        let until = Instant::now() + SLOT_WAIT;
        while self.active.load(Ordering::SeqCst) >= max && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.active.fetch_add(1, Ordering::SeqCst) >= max {
            self.active.fetch_sub(1, Ordering::SeqCst);
            return busy(conn);
        }
        let (active, handle) = (self.active.clone(), handle.clone());
        let spawned = std::thread::Builder::new()
            .name("supervisor-conn".into())
            .spawn(move || {
                handle(conn, at);
                active.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            self.active.fetch_sub(1, Ordering::SeqCst);
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

    /// A silent connection that waited out its 5 s while the slots were taken is closed
    /// then, not handed over with a fresh deadline when they free (CI saw one closed
    /// after 10 s); one that speaks is handed its accept instant.
    #[test]
    fn a_silent_connection_is_closed_at_5_s_even_when_slots_free_then() {
        use std::sync::mpsc;
        let dir = std::env::temp_dir().join(format!("wardcell-listener-{}", std::process::id()));
        let _ = std::fs::create_dir(&dir);
        let path = dir.join("s");
        let wake: Wake = |_, path| drop(UnixStream::connect(path));
        let listener = Arc::new(Listener::bind(path.clone(), 108, wake).unwrap());
        let (handed, handed_rx) = mpsc::channel::<Duration>();
        let (gone_tx, gone_rx) = mpsc::channel::<String>();
        let handed = std::sync::Mutex::new(handed);
        let handle: Handler = Arc::new(move |mut conn, at| {
            let _ = handed.lock().unwrap().send(at.elapsed());
            // Hold the slot until the peer closes.
            while conn.read(&mut [0u8; 16]).is_ok_and(|n| n > 0) {}
        });
        // Not a scoped thread: a failed assertion must not wait for the serving to end.
        let serving = listener.clone();
        std::thread::spawn(move || {
            let gone_tx = std::sync::Mutex::new(gone_tx);
            let gone = |why: &str| drop(gone_tx.lock().unwrap().send(why.to_string()));
            serving.serve(4, handle, &|_| (), &gone);
        });
        let silent = UnixStream::connect(&path).unwrap();
        // Two that speak at once take half the slots before the silent one's grace.
        let mut speaking: Vec<UnixStream> = (0..2)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        for c in &mut speaking {
            std::io::Write::write_all(c, b"x").unwrap();
        }
        for _ in 0..2 {
            let waited = handed_rx.recv_timeout(Duration::from_secs(5)).unwrap();
            assert!(waited < Duration::from_secs(1), "{waited:?}");
        }
        // Slots free again just before the silent one's 5 s are up...
        std::thread::sleep(FIRST_BYTE - Duration::from_millis(200));
        drop(speaking);
        let why = gone_rx.recv_timeout(Duration::from_secs(2));
        // ...and it was closed, never handed over.
        assert!(handed_rx.recv_timeout(Duration::from_millis(300)).is_err());
        assert_eq!(why.as_deref(), Ok(SILENT));
        drop(silent);
        listener.stop();
        let _ = std::fs::remove_dir_all(&dir);
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
