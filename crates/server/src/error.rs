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
    /// 409: the resource's state forbids the operation; the message names the state.
    #[error("{0}")]
    Conflict(String),
    /// 500 with a message safe to show (e.g. "kernel died").
    #[error("{0}")]
    Internal(String),
    /// 504: a command or cell ran past its timeout and was killed (the message says
    /// "timeout", which the SDKs turn into `SandboxTimeout`, contract §1.5).
    #[error("{0}")]
    Timeout(String),
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
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
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
        (
            status,
            axum::Json(ErrorBody {
                error: self.to_string(),
            }),
        )
            .into_response()
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
        Version | Io | Kernel => ApiError::Internal(message),
    }
}
