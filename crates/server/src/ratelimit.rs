//! The per-workspace request rate limit (issue 8): a token bucket per workspace (GCRA, from
//! the `governor` crate) checked on every authenticated request. Past it the answer is 429
//! with `Retry-After` (the Python SDK retries creates on that, contract §1.4).

use crate::error::ApiError;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::num::NonZeroU32;

/// Requests per second per workspace by default (`--rate-limit`).
pub const DEFAULT_REQUESTS_PER_SECOND: u32 = 100;

/// The limiter of one server; `None` inside when disabled.
pub struct WorkspaceRateLimit {
    limiter: Option<DefaultKeyedRateLimiter<String>>,
}

impl WorkspaceRateLimit {
    /// `per_second` requests per second per workspace with bursts of twice that; 0 disables
    /// the limit.
    pub fn new(per_second: u32) -> Self {
        let limiter = NonZeroU32::new(per_second).map(|rate| {
            let burst = rate.saturating_mul(NonZeroU32::MIN.saturating_add(1));
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        WorkspaceRateLimit { limiter }
    }

    /// Takes one request from `workspace_id`'s bucket.
    ///
    /// # Errors
    /// 429 with `Retry-After` (whole seconds, at least 1) when the bucket is empty.
    pub fn check(&self, workspace_id: &str) -> Result<(), ApiError> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        // Buckets of workspaces gone quiet are forgotten now and then.
        if limiter.len() > 10_000 {
            limiter.retain_recent();
        }
        limiter
            .check_key(&workspace_id.to_string())
            .map_err(|not_until| {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                ApiError::TooManyRequests {
                    message: format!(
                        "rate limit: too many requests for this workspace; retry in {:.1} s",
                        wait.as_secs_f64()
                    ),
                    retry_after_s: Some(wait.as_secs_f64().ceil().max(1.0) as u64),
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_429_with_retry_after_and_workspaces_are_apart() {
        let l = WorkspaceRateLimit::new(5);
        for _ in 0..10 {
            l.check("ws-a").unwrap();
        }
        match l.check("ws-a") {
            Err(ApiError::TooManyRequests {
                retry_after_s: Some(s),
                ..
            }) => assert!(s >= 1, "{s}"),
            other => panic!("expected 429, got {other:?}"),
        }
        l.check("ws-b").unwrap();
        let off = WorkspaceRateLimit::new(0);
        for _ in 0..1000 {
            off.check("ws-a").unwrap();
        }
    }
}
