//! A token bucket for events the sandbox can cause as fast as it likes (a proxy refusal,
//! a connection to its supervisor, a refused zone entry): a burst, then a steady rate;
//! what is held back past that is counted, and the count is written as one event. Pure:
//! the caller gives the time.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Throttle {
    burst: u32,
    per_second: u32,
    tokens: u32,
    /// When the last token was added (or the bucket was made).
    since: Instant,
    held: u64,
}

impl Throttle {
    /// A full bucket of `burst`, refilled at `per_second` (both at least 1).
    pub fn new(now: Instant, burst: u32, per_second: u32) -> Throttle {
        Throttle {
            burst: burst.max(1),
            per_second: per_second.max(1),
            tokens: burst.max(1),
            since: now,
            held: 0,
        }
    }

    /// May one more event be written at `now`? If not, it is counted.
    pub fn admit(&mut self, now: Instant) -> bool {
        let per_token = Duration::from_secs(1) / self.per_second;
        let elapsed = now.saturating_duration_since(self.since).as_nanos();
        let new = (elapsed / per_token.as_nanos()).min(u128::from(self.burst)) as u32;
        if new > 0 {
            self.tokens = (self.tokens + new).min(self.burst);
            self.since = if self.tokens == self.burst {
                now
            } else {
                self.since + per_token * new
            };
        }
        if self.tokens == 0 {
            self.held += 1;
            return false;
        }
        self.tokens -= 1;
        true
    }

    /// How many were held back since the last call.
    pub fn take_held(&mut self) -> u64 {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_rate_events_are_counted_not_dropped() {
        let t0 = Instant::now();
        let mut t = Throttle::new(t0, 100, 20);
        let admitted = (0..1000).filter(|_| t.admit(t0)).count();
        assert_eq!(admitted, 100);
        assert_eq!(t.take_held(), 900);
        assert_eq!(t.take_held(), 0, "counted once");
        // A second later, one second's worth again, and no more.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!((0..1000).filter(|_| t.admit(t1)).count(), 20);
        // After a long quiet, a full burst, never more.
        let t2 = t1 + Duration::from_secs(3600);
        assert_eq!((0..1000).filter(|_| t.admit(t2)).count(), 100);
        // Time going backwards (it cannot, but) admits nothing new.
        assert!(!t.admit(t0));
    }
}
