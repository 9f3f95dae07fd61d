//! The retries of contract §1.4, as the Python SDK does them:
//!
//! - **404 once**: a 404 on `GET`, `DELETE` or `HEAD` is resent once after 200 ms (a replica
//!   that has not seen a new sandbox yet).
//! - **warm-up**: exec, `create_code_context` and the file calls resend a 5xx whose message says
//!   `connection refused`, `no route to host` or `i/o timeout`, after 0.5 s growing ×1.5 up to
//!   2 s, until [`crate::ClientBuilder::ready_timeout`] (env `PANDASTACK_EXEC_READY_TIMEOUT`,
//!   seconds, default 20) has passed.
//! - **capacity**: creates, forks and fork-trees resend a 503 that carries `Retry-After` and a
//!   JSON `error`, any 507, and a 429 with `Retry-After`, after Retry-After (507 without one:
//!   0.5 s) plus a random 0..cap with cap 1, 2, 4, 8, then 15 s, while the total stays within
//!   [`crate::ClientBuilder::max_create_retry`] (env `PANDASTACK_MAX_CREATE_RETRY_SECONDS`,
//!   default 60; 0 disables it).
//!
//! Bodies that are streams (uploads from a reader) cannot be sent twice and are never retried.

use rand::Rng;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::Method;
use std::time::{Duration, SystemTime};

/// Which retries a call takes part in (the 404 retry follows from its method).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RetryClass {
    /// Exec, code contexts, file calls.
    pub warmup: bool,
    /// Creates, forks, fork-trees.
    pub capacity: bool,
}

/// Wait before the one resend of a 404.
pub(crate) const NOT_FOUND_DELAY: Duration = Duration::from_millis(200);
/// First warm-up wait; each next one is ×1.5, at most [`WARMUP_MAX_DELAY`].
const WARMUP_FIRST_DELAY: Duration = Duration::from_millis(500);
const WARMUP_MAX_DELAY: Duration = Duration::from_secs(2);
/// Base wait after a 507 without Retry-After.
const INSUFFICIENT_STORAGE_DELAY: Duration = Duration::from_millis(500);
/// Jitter caps of the capacity retry, seconds; the last repeats.
const CAPACITY_JITTER_CAPS: [f64; 5] = [1.0, 2.0, 4.0, 8.0, 15.0];

/// True for the methods whose 404 is resent once.
pub(crate) fn retries_not_found(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::DELETE | Method::HEAD)
}

/// The `n`-th (0-based) warm-up wait.
pub(crate) fn warmup_delay(n: u32) -> Duration {
    let secs = WARMUP_FIRST_DELAY.as_secs_f64() * 1.5f64.powi(n as i32);
    Duration::from_secs_f64(secs.min(WARMUP_MAX_DELAY.as_secs_f64()))
}

/// `Retry-After` as delta-seconds or an HTTP-date (a date in the past is zero).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let raw = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = raw.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = httpdate::parse_http_date(raw).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// The base wait of a capacity refusal, or `None` when the reply is not one: 503 with both
/// `Retry-After` and a JSON body whose `error` is a non-empty string; any 507; 429 with
/// `Retry-After` (contract §1.4).
pub(crate) fn capacity_wait(
    status: u16,
    retry_after: Option<Duration>,
    body: &[u8],
) -> Option<Duration> {
    match status {
        503 => {
            let has_error = serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| {
                    v.get("error")
                        .and_then(|e| e.as_str())
                        .map(|s| !s.is_empty())
                })
                .unwrap_or(false);
            if has_error {
                retry_after
            } else {
                None
            }
        }
        507 => Some(retry_after.unwrap_or(INSUFFICIENT_STORAGE_DELAY)),
        429 => retry_after,
        _ => None,
    }
}

/// The base wait plus the random part of the `n`-th (0-based) capacity retry.
pub(crate) fn with_jitter(base: Duration, n: usize) -> Duration {
    let cap = CAPACITY_JITTER_CAPS[n.min(CAPACITY_JITTER_CAPS.len() - 1)];
    base + Duration::from_secs_f64(rand::thread_rng().gen_range(0.0..cap))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        assert_eq!(retry_after(&headers("3")), Some(Duration::from_secs(3)));
        assert_eq!(
            retry_after(&headers("0.5")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            retry_after(&headers("Wed, 21 Oct 2015 07:28:00 GMT")),
            Some(Duration::ZERO)
        );
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
        let got = retry_after(&headers(&later)).unwrap();
        assert!(
            got > Duration::from_secs(27) && got <= Duration::from_secs(30),
            "{got:?}"
        );
        assert_eq!(retry_after(&headers("soon")), None);
        assert_eq!(retry_after(&headers("-1")), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn capacity_refusals_are_the_documented_ones() {
        let ra = Some(Duration::from_secs(2));
        let err = br#"{"error":"no capacity"}"#;
        assert_eq!(capacity_wait(503, ra, err), ra);
        assert_eq!(
            capacity_wait(503, None, err),
            None,
            "503 without Retry-After"
        );
        assert_eq!(capacity_wait(503, ra, b"{}"), None, "503 without an error");
        assert_eq!(
            capacity_wait(503, ra, b"busy"),
            None,
            "503 with a text body"
        );
        assert_eq!(
            capacity_wait(507, None, b""),
            Some(Duration::from_millis(500))
        );
        assert_eq!(capacity_wait(429, ra, b""), ra);
        assert_eq!(capacity_wait(429, None, err), None);
        assert_eq!(capacity_wait(500, ra, err), None);
        assert_eq!(capacity_wait(502, ra, err), None);
    }

    #[test]
    fn delays_grow_and_are_capped() {
        assert_eq!(warmup_delay(0), Duration::from_millis(500));
        assert_eq!(warmup_delay(1), Duration::from_millis(750));
        assert_eq!(warmup_delay(10), Duration::from_secs(2));
        for n in 0..8 {
            let d = with_jitter(Duration::from_secs(1), n);
            let cap = CAPACITY_JITTER_CAPS[n.min(4)];
            assert!(
                d >= Duration::from_secs(1) && d.as_secs_f64() < 1.0 + cap,
                "{n}: {d:?}"
            );
        }
    }

    #[test]
    fn only_reads_and_deletes_retry_404() {
        assert!(retries_not_found(&Method::GET));
        assert!(retries_not_found(&Method::DELETE));
        assert!(!retries_not_found(&Method::POST));
        assert!(!retries_not_found(&Method::PUT));
    }
}
