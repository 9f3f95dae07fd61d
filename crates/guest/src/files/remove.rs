//! `Remove`: a file, a symlink (not its target), or a directory with everything in it.

use super::checked;
use crate::error::OpError;

/// Removes `path`.
///
/// # Errors
/// `Invalid` for a relative path or `/`, `NotFound` when it does not exist, `Io` otherwise.
pub fn remove(path: &str) -> Result<(), OpError> {
    let p = checked(path)?;
    if p.parent().is_none() {
        return Err(OpError::invalid("refusing to remove /"));
    }
    let meta = std::fs::symlink_metadata(p).map_err(|e| OpError::io(path, &e))?;
    let result = if meta.is_dir() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    };
    result.map_err(|e| OpError::io(path, &e))
}
