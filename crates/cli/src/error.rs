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

impl From<pandastack_sdk::Error> for CliError {
    /// An SDK error as the CLI reports it: API errors with their status, no answer as
    /// `cannot reach URL: cause`, a command timeout as [`CliError::Timeout`] (exit 124).
    fn from(e: pandastack_sdk::Error) -> Self {
        use pandastack_sdk::Error as E;
        let status = e.status();
        match e {
            E::Connection { url, message } => CliError::Connect {
                url,
                cause: message,
            },
            E::Timeout { message } => CliError::Timeout(message),
            E::Stream { message } => CliError::Stream(message),
            e @ E::ExecInterrupted { .. } => CliError::Stream(e.to_string()),
            E::Decode { what, message } => CliError::BadReply {
                what,
                detail: message,
            },
            E::Config(m) => CliError::Config(m),
            E::Io { what, source } => CliError::Io { what, source },
            other => match status {
                Some(status) => CliError::Api {
                    status,
                    message: one_line(&other.to_string()),
                },
                None => CliError::Stream(other.to_string()),
            },
        }
    }
}

/// Longest server message kept in an error line, characters.
const MAX_MESSAGE_CHARS: usize = 300;

/// Collapses all whitespace runs to one space and caps the length.
fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= MAX_MESSAGE_CHARS {
        return joined;
    }
    let cut: String = joined.chars().take(MAX_MESSAGE_CHARS).collect();
    format!("{cut}...")
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
    fn sdk_errors_keep_status_and_message() {
        let e: CliError =
            pandastack_sdk::Error::from_reply(404, None, br#"{"error":"sandbox x\n not found"}"#)
                .into();
        assert_eq!(e.to_string(), "sandbox x not found (HTTP 404)");
        let e: CliError = pandastack_sdk::Error::Timeout {
            message: "command timeout after 1 s".into(),
        }
        .into();
        assert_eq!(e.exit_code(), EXIT_TIMEOUT);
        let long = format!(r#"{{"error":"{}"}}"#, "x".repeat(1000));
        let e: CliError = pandastack_sdk::Error::from_reply(500, None, long.as_bytes()).into();
        assert!(e.to_string().len() < 330);
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
