//! Warnings a sandbox can cause, bounded (issue 23 finding 3): each kind is logged at most
//! once every [`EVERY`] across all sandboxes, with the count of those left out since, and any
//! text that came from a guest is clipped to [`MAX_TEXT_BYTES`]. Nothing a guest sends can
//! then flood the server's log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Least time between two warnings of one kind.
pub const EVERY: Duration = Duration::from_secs(10);
/// Longest guest-supplied text put in a warning, bytes.
pub const MAX_TEXT_BYTES: usize = 200;

/// One kind of warning: when it was last logged and how many were left out since.
pub struct Throttle {
    last: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
}

impl Throttle {
    /// A kind never logged yet (for a `static`).
    pub const fn new() -> Self {
        Throttle {
            last: Mutex::new(None),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when a warning of this kind may be logged at `now`, `n` being how many were
    /// left out since the last one; None when it is to be left out (and is counted).
    pub fn allow(&self, now: Instant) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|at| now.saturating_duration_since(at) < EVERY) {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *last = Some(now);
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }
}

/// `text` cut to at most [`MAX_TEXT_BYTES`] on a character boundary.
pub fn clip(text: &str) -> &str {
    let cut = (0..=MAX_TEXT_BYTES.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    &text[..cut]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_kind_every_ten_seconds_with_the_count_left_out() {
        let t = Throttle::new();
        let t0 = Instant::now();
        assert_eq!(t.allow(t0), Some(0));
        for s in 1..10 {
            assert_eq!(t.allow(t0 + Duration::from_secs(s)), None);
        }
        assert_eq!(t.allow(t0 + Duration::from_secs(10)), Some(9));
        assert_eq!(t.allow(t0 + Duration::from_secs(11)), None);
        assert_eq!(t.allow(t0 + Duration::from_secs(30)), Some(1));
    }

    #[test]
    fn guest_text_is_clipped_on_a_character_boundary() {
        assert_eq!(clip("short"), "short");
        assert_eq!(clip(&"x".repeat(1000)).len(), MAX_TEXT_BYTES);
        let s = format!("{}é", "x".repeat(MAX_TEXT_BYTES - 1));
        assert_eq!(clip(&s).len(), MAX_TEXT_BYTES - 1);
    }
}
