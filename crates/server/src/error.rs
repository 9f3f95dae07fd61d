//! [`ApiError`]: the one HTTP error type. Every variant maps to a status code and a JSON body
//! `{"error": "<message>"}` (contract §7); internal detail is logged, never sent.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use pandastack_api::ErrorBody;
use tracing::error;

/// An error answered to an API client.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed; the message names the field.
    #[error("{0}")]
    BadRequest(String),
    /// 401: no or an unknown API key.
    #[error("{0}")]
    Unauthorized(String),
    /// 404: no such resource in the caller's workspace.
    #[error("{0}")]
    NotFound(String),
    /// 403: the operation is not permitted on this resource (e.g. writing a read-only path,
    /// deleting a built-in template).
    #[error("{0}")]
    Forbidden(String),
    /// 409: the resource's state forbids the operation; the message names the state.
    #[error("{0}")]
    Conflict(String),
    /// 413: the request body is larger than the endpoint accepts.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 429: a workspace quota or rate limit. With `retry_after_s` the reply carries
    /// `Retry-After` (the Python SDK retries creates on 429 only then, contract §1.4); a quota
    /// that waiting cannot lift has none.
    #[error("{message}")]
    TooManyRequests {
        message: String,
        retry_after_s: Option<u64>,
    },
    /// 503 with `Retry-After`: the host is at capacity (contract §1.4: the Python SDK retries
    /// creates on a 503 with Retry-After and a JSON `error`).
    #[error("{message}")]
    Busy { message: String, retry_after_s: u64 },
    /// 507: not enough storage (the host's disk reserve, or the sandbox's own disk quota).
    #[error("{0}")]
    InsufficientStorage(String),
    /// 500 with a message safe to show (e.g. "kernel died").
    #[error("{0}")]
    Internal(String),
    /// 504: a command or cell ran past its timeout and was killed (the message says
    /// "timeout", which the SDKs turn into `SandboxTimeout`, contract §1.5).
    #[error("{0}")]
    Timeout(String),
    /// 502: the port proxy reached nothing (or no HTTP) inside the sandbox.
    #[error("{0}")]
    BadGateway(String),
    /// 501: the operation does not exist on this server (database failover on one host).
    #[error("{0}")]
    NotImplemented(String),
    /// 503: the sandbox's guest channel is not reachable (message carries "connection refused"
    /// so the SDKs' warm-up retry applies, contract §1.4).
    #[error("{0}")]
    Unavailable(String),
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
        }
    }

    /// A 500 whose cause is logged but not sent.
    pub fn internal(what: &str, cause: impl std::fmt::Display) -> Self {
        error!(error = %cause, "{what}");
        if matches!(
            what,
            "sandbox boot"
                | "restore"
                | "checkpoint"
                | "pause"
                | "resume"
                | "template boot"
                | "template checkpoint"
        ) {
            crate::metrics::engine_failed(what);
        }
        ApiError::Internal(format!("{what} failed"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let retry_after = match &self {
            ApiError::Busy { retry_after_s, .. } => Some(*retry_after_s),
            ApiError::TooManyRequests { retry_after_s, .. } => *retry_after_s,
            _ => None,
        };
        let mut resp = (
            status,
            axum::Json(ErrorBody {
                error: self.to_string(),
            }),
        )
            .into_response();
        if let Some(secs) = retry_after {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(secs.max(1)),
            );
        }
        resp
    }
}

impl From<pandastack_store::StoreError> for ApiError {
    fn from(e: pandastack_store::StoreError) -> Self {
        match e {
            pandastack_store::StoreError::NotFound(what) => {
                ApiError::NotFound(format!("{what} not found"))
            }
            pandastack_store::StoreError::Conflict(what) => {
                ApiError::Conflict(format!("{what} already exists"))
            }
            other => ApiError::internal("store", other),
        }
    }
}

impl From<crate::guest::GuestError> for ApiError {
    fn from(e: crate::guest::GuestError) -> Self {
        match e {
            crate::guest::GuestError::Unavailable(_) => ApiError::Unavailable(e.to_string()),
            other => ApiError::internal("guest channel", other),
        }
    }
}

/// Maps a guest `Error` reply to an API error.
pub fn from_guest(code: pandastack_guest_protocol::ErrorCode, message: String) -> ApiError {
    use pandastack_guest_protocol::ErrorCode::*;
    match code {
        NotFound => ApiError::NotFound(message),
        Invalid => ApiError::BadRequest(message),
        Denied => ApiError::Forbidden(message),
        NoSpace => ApiError::InsufficientStorage(format!("sandbox disk is full: {message}")),
        Version | Io | Kernel | OutOfMemory => ApiError::Internal(message),
    }
}
