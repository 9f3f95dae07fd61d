//! The data of Server-Sent Events (contract §3): each `data:` line is one of these as JSON.

use serde::{Deserialize, Serialize};

/// `event: stdout` / `event: stderr` of `POST .../exec/stream` (contract §3.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecChunk {
    /// UTF-8 text (a sequence split across reads is held back until whole).
    pub chunk: String,
}

/// `event: exit` of `POST .../exec/stream`: the last event before the server closes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecExit {
    pub exit_code: i32,
}

/// `event: error` of a stream: the command could not finish; a message containing `timeout`
/// means it ran past `timeout_seconds` (the SDKs raise `SandboxTimeout`, contract §3.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamError {
    pub error: String,
}

/// One line of `GET .../logs?follow=true` (contract §3.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogLine {
    /// The line, without its newline.
    pub line: String,
    /// `stdout` or `stderr`.
    pub stream: String,
}
