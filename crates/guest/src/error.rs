//! The error a request handler returns; the dispatcher turns it into a
//! [`GuestMsg::Error`](pandastack_guest_protocol::GuestMsg::Error) for the request's id.

use pandastack_guest_protocol::ErrorCode;
use std::io;

/// A failed request: the protocol error category and a short, lower-case sentence.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct OpError {
    /// Category the host maps to an HTTP status.
    pub code: ErrorCode,
    /// What failed and with what, e.g. `/x/y: no such file or directory`.
    pub message: String,
}

impl OpError {
    /// An error of category `code`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        OpError {
            code,
            message: message.into(),
        }
    }

    /// A malformed or disallowed request.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Invalid, message)
    }

    /// A kernel that died or could not start.
    pub fn kernel(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Kernel, message)
    }

    /// Maps an OS error on `what` (usually a path) to a category: missing -> NotFound; what the
    /// caller can fix (a directory where a file was expected or the reverse, a name too long, a
    /// symlink loop) -> Invalid; read-only or not permitted -> Denied; disk full -> NoSpace;
    /// anything else -> Io.
    pub fn io(what: &str, err: &io::Error) -> Self {
        let code = match err.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => ErrorCode::NotFound,
            Some(libc::EISDIR)
            | Some(libc::EEXIST)
            | Some(libc::ENOTEMPTY)
            | Some(libc::EINVAL)
            | Some(libc::ENAMETOOLONG)
            | Some(libc::ELOOP) => ErrorCode::Invalid,
            Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM) => ErrorCode::Denied,
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => ErrorCode::NoSpace,
            _ if err.kind() == io::ErrorKind::NotFound => ErrorCode::NotFound,
            _ if err.kind() == io::ErrorKind::InvalidInput => ErrorCode::Invalid,
            _ => ErrorCode::Io,
        };
        OpError::new(code, format!("{what}: {}", reason(err)))
    }
}

/// The OS error text without Rust's ` (os error N)` suffix, lower-cased first letter.
pub fn reason(err: &io::Error) -> String {
    let text = err.to_string();
    let text = match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_os_errors() {
        let e = OpError::io("/x", &io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(e.code, ErrorCode::NotFound);
        assert_eq!(e.message, "/x: no such file or directory");
        let e = OpError::io("/d", &io::Error::from_raw_os_error(libc::EISDIR));
        assert_eq!(e.code, ErrorCode::Invalid);
        let e = OpError::io("/d", &io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(e.code, ErrorCode::NoSpace);
        let e = OpError::io("/.pandastack/x", &io::Error::from_raw_os_error(libc::EROFS));
        assert_eq!(e.code, ErrorCode::Denied);
        assert_eq!(e.message, "/.pandastack/x: read-only file system");
        let e = OpError::io("/d", &io::Error::from_raw_os_error(libc::EIO));
        assert_eq!(e.code, ErrorCode::Io);
        for errno in [libc::ENAMETOOLONG, libc::ELOOP] {
            let e = OpError::io("/l", &io::Error::from_raw_os_error(errno));
            assert_eq!(e.code, ErrorCode::Invalid, "errno {errno}");
        }
    }
}
