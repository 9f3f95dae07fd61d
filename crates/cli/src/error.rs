//! [`CliError`]: every way a client command can fail. `run` prints it once as
//! `error: <message>` on stderr and maps it to the process exit code ([`CliError::exit_code`]).
//! Messages are one line, lower-case, and say what failed with what.

use std::io;

/// A failed client command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The server answered with a non-2xx status. `message` is the body's `error` (then
    /// `message`, `detail`) string, else the raw body text, else the status' reason phrase
    /// (contract §1.5).
    #[error("{message} (HTTP {status})")]
    Api {
        /// HTTP status code, e.g. 404.
        status: u16,
        /// One-line message from the server.
        message: String,
    },
    /// The request never got an HTTP answer: connection refused, DNS, TLS, or a timeout.
    #[error("cannot reach {url}: {cause}")]
    Connect {
        /// The URL that failed (without credentials).
        url: String,
        /// The innermost cause, e.g. `Connection refused (os error 111)`.
        cause: String,
    },
    /// A 2xx reply that does not have the shape the contract promises.
    #[error("unexpected reply from {what}: {detail}")]
    BadReply {
        /// The call, e.g. `GET /v1/sandboxes`.
        what: String,
        /// What was wrong with it.
        detail: String,
    },
    /// The stream of a running command broke or reported an error.
    #[error("{0}")]
    Stream(String),
    /// `PANDASTACK_API` / the config file is unusable, or no API key is configured.
    #[error("{0}")]
    Config(String),
    /// A flag value the parser accepted but the command cannot use.
    #[error("{0}")]
    Usage(String),
    /// A local file or terminal operation failed; `what` names the file or stream.
    #[error("{what}: {source}")]
    Io {
        /// E.g. `reading ./data.csv`.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `sandbox exec` saw the server report the command's timeout (`error` event containing
    /// "timeout"). Exits 124, like coreutils `timeout` and the server's own non-streaming exec.
    #[error("{0}")]
    Timeout(String),
}

/// Exit code for every failure except a command timeout.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code when the server reports that the command hit its timeout.
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code when stdout was closed under us (e.g. `| head`), as a shell reports SIGPIPE.
pub const EXIT_BROKEN_PIPE: i32 = 141;

impl CliError {
    /// Wraps a local I/O error with what was being done.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        CliError::Io {
            what: what.into(),
            source,
        }
    }

    /// True when the error is a write to a closed pipe; such errors end the command quietly.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Io { source, .. } if source.kind() == io::ErrorKind::BrokenPipe)
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Timeout(_) => EXIT_TIMEOUT,
            _ if self.is_broken_pipe() => EXIT_BROKEN_PIPE,
            _ => EXIT_FAILURE,
        }
    }
}

/// The innermost message of an error's `source()` chain (e.g. `connection closed before
/// message completed` rather than reqwest's generic `request or response body error`).
pub fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = err;
    while let Some(next) = inner.source() {
        inner = next;
    }
    inner.to_string()
}

/// Result of a client command.
pub type Result<T, E = CliError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_error_is_one_line_with_status() {
        let e = CliError::Api {
            status: 404,
            message: "sandbox abc not found".into(),
        };
        assert_eq!(e.to_string(), "sandbox abc not found (HTTP 404)");
        assert_eq!(e.exit_code(), EXIT_FAILURE);
    }

    #[test]
    fn connect_error_names_the_url() {
        let e = CliError::Connect {
            url: "http://127.0.0.1:1/v1/sandboxes".into(),
            cause: "Connection refused (os error 111)".into(),
        };
        assert_eq!(
            e.to_string(),
            "cannot reach http://127.0.0.1:1/v1/sandboxes: Connection refused (os error 111)"
        );
    }

    #[test]
    fn root_cause_is_the_innermost_message() {
        let inner = io::Error::other("connection closed before message completed");
        let outer = CliError::io("reading body", inner);
        assert_eq!(
            root_cause(&outer),
            "connection closed before message completed"
        );
    }

    #[test]
    fn exit_codes() {
        assert_eq!(
            CliError::Timeout("command timeout after 1 s".into()).exit_code(),
            124
        );
        let pipe = CliError::io("writing stdout", io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(pipe.is_broken_pipe());
        assert_eq!(pipe.exit_code(), 141);
    }
}
