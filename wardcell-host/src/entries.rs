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
