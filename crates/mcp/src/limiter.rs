//! A token bucket per workspace for tool calls: `rate` calls per second on average, bursts of
//! up to `2 × rate` (at least 1). A refused call is a tool error naming the wait, not a protocol
//! failure. Buckets are kept per workspace id (one `local` bucket for stdio).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Default tool calls per second per workspace.
pub const DEFAULT_CALLS_PER_SECOND: f64 = 20.0;

/// The limiter of one MCP endpoint.
#[derive(Debug)]
pub struct Limiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Limiter {
    /// A limiter of `calls_per_second` per workspace; 0 or less disables it.
    pub fn new(calls_per_second: f64) -> Limiter {
        Limiter {
            rate: calls_per_second,
            burst: (calls_per_second * 2.0).max(1.0),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one call from `workspace`'s bucket; `Err(wait)` when it is empty.
    pub fn check(&self, workspace: &str) -> Result<(), Duration> {
        self.check_at(workspace, Instant::now())
    }

    fn check_at(&self, workspace: &str, now: Instant) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = buckets.entry(workspace.to_string()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.rate).min(self.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - b.tokens) / self.rate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_then_refills_at_the_rate() {
        let l = Limiter::new(2.0);
        let t0 = Instant::now();
        for _ in 0..4 {
            assert!(l.check_at("ws-a", t0).is_ok());
        }
        let wait = l.check_at("ws-a", t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-6, "{wait:?}");
        // Another workspace has its own bucket.
        assert!(l.check_at("ws-b", t0).is_ok());
        assert!(l.check_at("ws-a", t0 + Duration::from_millis(500)).is_ok());
        assert!(l.check_at("ws-a", t0 + Duration::from_millis(500)).is_err());
        // Never more than the burst, however long the pause.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..4 {
            assert!(l.check_at("ws-a", later).is_ok());
        }
        assert!(l.check_at("ws-a", later).is_err());
    }

    #[test]
    fn zero_disables_and_slow_rates_allow_one() {
        let off = Limiter::new(0.0);
        for _ in 0..1000 {
            assert!(off.check("w").is_ok());
        }
        let slow = Limiter::new(0.25);
        assert!(slow.check("w").is_ok());
        let wait = slow.check("w").unwrap_err();
        assert!(wait > Duration::from_secs(3), "{wait:?}");
    }
}
