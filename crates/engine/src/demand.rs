//! Recent demand for what a host makes ahead of time (issue 11 point 2): the warm pool and the
//! restore targets each size their stock from the largest burst of claims seen lately, so a
//! burst finds a stock as large as the last one asked for, and an idle stock shrinks back.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A burst: claims within this window count together.
pub const BURST_WINDOW: Duration = Duration::from_secs(5);
/// How long a burst keeps a stock large.
pub const HISTORY: Duration = Duration::from_secs(300);

/// The times of recent claims on one stock (hits and misses alike), oldest first. Claims
/// older than [`HISTORY`] are dropped as they are looked at.
#[derive(Debug, Default, Clone)]
pub struct Bursts {
    claims: VecDeque<Instant>,
}

impl Bursts {
    /// Records one claim at `at` (callers pass `Instant::now()`; claims come in time order).
    pub fn record(&mut self, at: Instant) {
        self.claims.push_back(at);
    }

    /// The largest number of claims within any [`BURST_WINDOW`] of the last [`HISTORY`]
    /// before `now`; 0 without claims.
    pub fn largest(&mut self, now: Instant) -> usize {
        while self
            .claims
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > HISTORY)
        {
            self.claims.pop_front();
        }
        let mut best = 0;
        let mut lo = 0;
        for hi in 0..self.claims.len() {
            while self.claims[hi].saturating_duration_since(self.claims[lo]) > BURST_WINDOW {
                lo += 1;
            }
            best = best.max(hi - lo + 1);
        }
        best
    }

    /// The stock to keep now: the largest recent burst, at least `least` and at most `most`
    /// (`most` below `least` counts as `least`).
    pub fn goal(&mut self, now: Instant, least: usize, most: usize) -> usize {
        self.largest(now).clamp(least, most.max(least))
    }

    /// Claims still remembered.
    pub fn len(&self) -> usize {
        self.claims.len()
    }

    /// No claim is remembered.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_the_most_claims_within_the_window() {
        let mut b = Bursts::default();
        let now = Instant::now();
        assert_eq!(b.largest(now), 0);
        let base = now - Duration::from_secs(100);
        for i in 0..10 {
            b.record(base + Duration::from_millis(100 * i));
        }
        for i in 0..3 {
            b.record(base + Duration::from_secs(50 + 10 * i));
        }
        assert_eq!(b.largest(now), 10);
        let later = base + HISTORY + Duration::from_secs(10);
        assert_eq!(b.largest(later), 1, "the burst aged out");
        assert_eq!(b.len(), 3);
    }

    #[test]
    fn the_goal_follows_the_burst_between_its_bounds() {
        let mut b = Bursts::default();
        let now = Instant::now();
        assert_eq!(b.goal(now, 2, 8), 2, "no demand: the least");
        for _ in 0..5 {
            b.record(now);
        }
        assert_eq!(b.goal(now, 2, 8), 5);
        for _ in 0..10 {
            b.record(now);
        }
        assert_eq!(b.goal(now, 2, 8), 8, "capped at the most");
        assert_eq!(b.goal(now, 2, 0), 2, "a most below the least is the least");
        assert_eq!(
            b.goal(now + HISTORY + Duration::from_secs(1), 2, 8),
            2,
            "aged out"
        );
    }
}
