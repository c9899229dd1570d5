//! The processes a run's end must end and wait for (entered sandboxes, approval
//! plugins): reserved before their decision is written, given their process once
//! started, released when their completion is written. Which entries are allowed, and
//! when a run ends, are the broker's.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::process::Watched;

pub struct Entries<W> {
    /// Reserved entries, with their process once it started.
    list: Mutex<Vec<(u32, Option<W>)>>,
    done: Condvar,
    ending: AtomicBool,
    next: AtomicU32,
}

impl<W: Watched> Default for Entries<W> {
    fn default() -> Self {
        Entries {
            list: Mutex::new(Vec::new()),
            done: Condvar::new(),
            ending: AtomicBool::new(false),
            next: AtomicU32::new(0),
        }
    }
}

impl<W: Watched> Entries<W> {
    fn list(&self) -> MutexGuard<'_, Vec<(u32, Option<W>)>> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An entry about to be decided and started; `None` once ending. Until the [`Entry`]
    /// is dropped, [`Entries::end`] waits for it.
    pub fn reserve(&self) -> Option<Entry<'_, W>> {
        let mut list = self.list();
        // Checked under the lock `end` takes after setting `ending`: a reservation made
        // here is one it sees.
        if self.is_ending() {
            return None;
        }
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        list.push((key, None));
        Some(Entry { entries: self, key })
    }

    pub fn is_ending(&self) -> bool {
        self.ending.load(Ordering::SeqCst)
    }

    /// From now on no entry is reserved, and every one started is killed.
    pub fn kill(&self) {
        self.ending.store(true, Ordering::SeqCst);
        for p in self.list().iter().filter_map(|(_, p)| p.as_ref()) {
            let _ = p.signal(libc::SIGKILL);
        }
    }

    /// [`Entries::kill`], then wait up to `within` until every entry is released.
    pub fn end(&self, within: Duration) {
        self.kill();
        let deadline = Instant::now() + within;
        let mut list = self.list();
        while !list.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            list = self
                .done
                .wait_timeout(list, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// A reserved entry; released when dropped.
pub struct Entry<'a, W: Watched> {
    entries: &'a Entries<W>,
    key: u32,
}

impl<W: Watched> Entry<'_, W> {
    /// It has started `process`: the end can now kill it (at once, if ending already).
    pub fn attach(&self, process: &W) {
        let Ok(p) = process.try_clone() else {
            let _ = process.signal(libc::SIGKILL);
            return;
        };
        let mut list = self.entries.list();
        if self.entries.is_ending() {
            let _ = p.signal(libc::SIGKILL);
        }
        if let Some(slot) = list.iter_mut().find(|(k, _)| *k == self.key) {
            slot.1 = Some(p);
        }
    }
}

impl<W: Watched> Drop for Entry<'_, W> {
    fn drop(&mut self) {
        self.entries.list().retain(|(k, _)| *k != self.key);
        self.entries.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, BorrowedFd};
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;

    /// A process stand-in that counts the signals it is sent (the bookkeeping is what is
    /// tested here; the broker's sys tests signal real processes).
    struct Counted(Arc<std::sync::atomic::AtomicUsize>, UnixStream);

    impl AsFd for Counted {
        fn as_fd(&self) -> BorrowedFd<'_> {
            self.1.as_fd()
        }
    }

    impl Watched for Counted {
        fn signal(&self, _: i32) -> std::io::Result<()> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn try_clone(&self) -> std::io::Result<Counted> {
            Ok(Counted(self.0.clone(), self.1.try_clone()?))
        }
    }

    #[test]
    fn entries_are_killed_and_waited_for_and_none_start_after() {
        let entries = Entries::<Counted>::default();
        let kills = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let p = Counted(kills.clone(), UnixStream::pair().unwrap().0);
        let started = entries.reserve().unwrap();
        started.attach(&p);
        let deciding = entries.reserve().unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                drop(started);
                drop(deciding);
            });
            let t = Instant::now();
            entries.end(Duration::from_secs(5));
            // Waited for both, the one still deciding too.
            assert!(t.elapsed() >= Duration::from_millis(100));
            assert!(t.elapsed() < Duration::from_secs(5));
        });
        assert_eq!(kills.load(Ordering::SeqCst), 1);
        assert!(entries.is_ending());
        assert!(entries.reserve().is_none());
    }

    #[test]
    fn a_process_attached_once_ending_is_killed_at_once() {
        let entries = Entries::<Counted>::default();
        let kills = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let e = entries.reserve().unwrap();
        entries.kill();
        e.attach(&Counted(kills.clone(), UnixStream::pair().unwrap().0));
        assert_eq!(kills.load(Ordering::SeqCst), 1);
    }
}
