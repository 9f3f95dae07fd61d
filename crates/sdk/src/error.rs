//! [`Error`]: every way a call can fail, one variant per exception of the published SDKs
//! (`pandastack==0.10.0` `exceptions.py`, `@pandastack/sdk@0.9.0`), split where a Rust caller
//! wants to `match` (409 and 429 are `BadRequestError` in both published SDKs; here they are
//! [`Error::Conflict`] and [`Error::RateLimited`]).
//!
//! Mapping of a non-2xx reply (contract §1.5): 401 and 403 [`Error::Auth`], 404
//! [`Error::NotFound`], 409 [`Error::Conflict`], 429 [`Error::RateLimited`], other 4xx
//! [`Error::BadRequest`], 5xx [`Error::Server`]; exec and `run_code` turn a 5xx whose message
//! says `timeout` or `deadline exceeded` (not `i/o timeout`) into [`Error::Timeout`]. The message
//! is the first non-empty string among the JSON body's `error`, `message` and `detail`, else the
//! body text, else `PandaStack API returned HTTP <n>`.

use std::time::Duration;

/// A failed SDK call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// 401 or 403: no key, an unknown, revoked or expired key (Py `AuthError`).
    #[error("{message}")]
    Auth {
        /// 401 or 403.
        status: u16,
        message: String,
    },
    /// 404: no such sandbox, snapshot, context, file... in the caller's workspace
    /// (Py `NotFoundError`).
    #[error("{message}")]
    NotFound { message: String },
    /// 409: the resource's state forbids the operation; the message names the state, e.g.
    /// `sandbox ... is paused` (Py `BadRequestError`).
    #[error("{message}")]
    Conflict { message: String },
    /// 429: a rate limit or quota. `retry_after` is the `Retry-After` header when the server sent
    /// one (Py `BadRequestError`; creates were already retried when it came with Retry-After).
    #[error("{message}")]
    RateLimited {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Any other 4xx (400, 413, 422...): the request is malformed; the message names the field
    /// (Py `BadRequestError`).
    #[error("{message}")]
    BadRequest { status: u16, message: String },
    /// A command or code cell ran past its timeout and was killed (Py `SandboxTimeout`).
    #[error("{message}")]
    Timeout { message: String },
    /// 5xx (500, 502, 503, 504, 507...) (Py `ServerError`). `retry_after` is the `Retry-After`
    /// header when present (503 capacity refusals, contract §1.4).
    #[error("{message}")]
    Server {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// The server reported a failure in the middle of a stream (an `error` event that is not a
    /// timeout; Py `ServerError`).
    #[error("{message}")]
    Stream { message: String },
    /// No HTTP answer: connection refused, reset, or the client-side deadline passed
    /// (Py `ConnectionError` / `APIConnectionError`, TS `NetworkError`).
    #[error("cannot reach {url}: {message}")]
    Connection {
        /// The URL that failed (never carries the key).
        url: String,
        message: String,
    },
    /// [`crate::ExecOptions::check`] was set and the command exited non-zero (Py
    /// `CommandFailed`).
    #[error("command exited with code {exit_code}")]
    CommandFailed {
        exit_code: i32,
        stdout: String,
        stderr: String,
    },
    /// An exec stream ended without an `exit` event: the command's outcome is unknown (Py
    /// `ExecInterrupted`). The partial output is the last 64 KiB of each stream.
    #[error("exec stream ended before the command reported an exit code")]
    ExecInterrupted {
        partial_stdout: String,
        partial_stderr: String,
    },
    /// A database reported `failed` while being provisioned (Py `RuntimeError`).
    #[error("{message}")]
    Failed { message: String },
    /// A 2xx reply that is not what the API promises (TS `NetworkError` for non-JSON bodies).
    #[error("unexpected reply from {what}: {message}")]
    Decode {
        /// The call, e.g. `POST /v1/sandboxes`.
        what: String,
        message: String,
    },
    /// The client cannot be built: no API key, an unusable URL.
    #[error("{0}")]
    Config(String),
    /// A local file could not be read or written (uploads and downloads).
    #[error("{what}: {source}")]
    Io {
        /// E.g. `reading ./data.csv`.
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// Result of an SDK call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Messages of a 5xx that mean "the guest is still starting" (contract §1.4 warm-up retry).
const WARMUP_MARKS: [&str; 3] = ["connection refused", "no route to host", "i/o timeout"];

impl Error {
    /// The error for a non-2xx reply with status `status`, its `Retry-After` and its body.
    pub fn from_reply(status: u16, retry_after: Option<Duration>, body: &[u8]) -> Error {
        let message = message_of(status, body);
        match status {
            401 | 403 => Error::Auth { status, message },
            404 => Error::NotFound { message },
            409 => Error::Conflict { message },
            429 => Error::RateLimited {
                message,
                retry_after,
            },
            400..=499 => Error::BadRequest { status, message },
            _ => Error::Server {
                status,
                message,
                retry_after,
            },
        }
    }

    /// The HTTP status of an API error; `None` for errors that had no HTTP reply.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Auth { status, .. }
            | Error::BadRequest { status, .. }
            | Error::Server { status, .. } => Some(*status),
            Error::NotFound { .. } => Some(404),
            Error::Conflict { .. } => Some(409),
            Error::RateLimited { .. } => Some(429),
            _ => None,
        }
    }

    /// The `Retry-After` the server sent with a 429 or 5xx.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::RateLimited { retry_after, .. } | Error::Server { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        }
    }

    /// True for a 5xx that says the sandbox's guest is not reachable yet (contract §1.4).
    pub(crate) fn is_warmup(&self) -> bool {
        match self {
            Error::Server { message, .. } => {
                let m = message.to_lowercase();
                WARMUP_MARKS.iter().any(|w| m.contains(w))
            }
            _ => false,
        }
    }

    /// Exec and `run_code`: a 5xx saying `timeout` or `deadline exceeded` (but not
    /// `i/o timeout`) is the command's own timeout (contract §1.5 special mappings).
    pub(crate) fn into_command_timeout(self) -> Error {
        match self {
            Error::Server { message, .. } if is_timeout_message(&message) => {
                Error::Timeout { message }
            }
            other => other,
        }
    }
}

/// True when a server message reports a command or cell timeout (contract §1.5, §3.1).
pub(crate) fn is_timeout_message(message: &str) -> bool {
    let m = message.to_lowercase();
    (m.contains("timeout") || m.contains("deadline exceeded")) && !m.contains("i/o timeout")
}

/// The message of an error body (contract §1.5).
fn message_of(status: u16, body: &[u8]) -> String {
    let from_json = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            ["error", "message", "detail"]
                .iter()
                .find_map(|k| match v.get(k) {
                    Some(serde_json::Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
                    Some(serde_json::Value::String(_) | serde_json::Value::Null) | None => None,
                    Some(other) => Some(other.to_string()),
                })
        });
    let text = from_json.unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    if text.is_empty() {
        format!("PandaStack API returned HTTP {status}")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_variants() {
        let e = Error::from_reply(404, None, br#"{"error":"sandbox x not found"}"#);
        assert!(matches!(&e, Error::NotFound { message } if message == "sandbox x not found"));
        assert!(matches!(
            Error::from_reply(403, None, b""),
            Error::Auth { status: 403, .. }
        ));
        assert!(matches!(
            Error::from_reply(409, None, br#"{"error":"sandbox is paused"}"#),
            Error::Conflict { .. }
        ));
        let e = Error::from_reply(429, Some(Duration::from_secs(3)), b"{}");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
        assert_eq!(e.status(), Some(429));
        assert!(matches!(
            Error::from_reply(413, None, b"too big"),
            Error::BadRequest { status: 413, .. }
        ));
        assert!(matches!(
            Error::from_reply(507, None, b""),
            Error::Server { status: 507, .. }
        ));
    }

    #[test]
    fn messages_come_from_error_message_detail_then_text() {
        assert_eq!(
            message_of(400, br#"{"error":"","message":"bad ttl"}"#),
            "bad ttl"
        );
        assert_eq!(message_of(422, br#"{"detail":["a"]}"#), r#"["a"]"#);
        assert_eq!(message_of(502, b" upstream died \n"), "upstream died");
        assert_eq!(message_of(503, b""), "PandaStack API returned HTTP 503");
    }

    #[test]
    fn timeouts_and_warmups_are_recognised() {
        let t = Error::from_reply(504, None, br#"{"error":"command timeout after 1 s"}"#);
        assert!(matches!(t.into_command_timeout(), Error::Timeout { .. }));
        let io = Error::from_reply(503, None, br#"{"error":"dial: i/o timeout"}"#);
        assert!(io.is_warmup());
        assert!(matches!(io.into_command_timeout(), Error::Server { .. }));
        let refused = Error::from_reply(503, None, br#"{"error":"connect: connection refused"}"#);
        assert!(refused.is_warmup());
        assert!(!Error::from_reply(500, None, br#"{"error":"kernel died"}"#).is_warmup());
        assert!(!Error::from_reply(400, None, br#"{"error":"connection refused"}"#).is_warmup());
    }
}
