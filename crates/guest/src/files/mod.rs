//! File operations, one file each. Every path must be absolute: the host has no notion of the
//! guest's current directory, and a relative path would silently depend on it.

mod list;
mod make_dir;
mod read;
mod remove;
mod stat;
mod write;

pub use list::list;
pub use make_dir::make_dir;
pub use read::{read, ReadWindows};
pub use remove::remove;
pub use stat::{entry, stat};
pub use write::Uploads;

use crate::error::OpError;
use std::path::Path;

/// `path` as a `Path` when it is absolute and free of NUL bytes.
///
/// # Errors
/// `Invalid` otherwise.
pub fn checked(path: &str) -> Result<&Path, OpError> {
    if !path.starts_with('/') {
        return Err(OpError::invalid(format!("path {path:?} is not absolute")));
    }
    if path.contains('\0') {
        return Err(OpError::invalid("path contains a NUL byte"));
    }
    Ok(Path::new(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absolute_paths() {
        assert!(checked("/a/b").is_ok());
        assert_eq!(
            checked("a/b").unwrap_err().code,
            pandastack_guest_protocol::ErrorCode::Invalid
        );
        assert!(checked("").is_err());
        assert!(checked("/a\0").is_err());
    }
}
