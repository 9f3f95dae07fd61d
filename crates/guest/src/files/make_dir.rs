//! `MakeDir`: `mkdir -p`.

use super::checked;
use crate::error::OpError;

/// Creates directory `path` and its missing parents; an existing directory is fine.
///
/// # Errors
/// `Invalid` for a relative path or when a file is in the way, `Io` otherwise.
pub fn make_dir(path: &str) -> Result<(), OpError> {
    std::fs::create_dir_all(checked(path)?).map_err(|e| OpError::io(path, &e))
}
