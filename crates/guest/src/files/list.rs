//! `ListDir`: the entries of one directory, sorted by name, each lstat'ed.

use super::{checked, entry};
use crate::error::OpError;
use pandastack_guest_protocol::FileEntry;

/// The entries of directory `path` (no `.`/`..`), sorted by name. Entries that vanish while
/// listing are skipped.
///
/// # Errors
/// `Invalid` for a relative path or a non-directory, `NotFound` when it does not exist.
pub fn list(path: &str) -> Result<Vec<FileEntry>, OpError> {
    let dir = checked(path)?;
    let meta = std::fs::metadata(dir).map_err(|e| OpError::io(path, &e))?;
    if !meta.is_dir() {
        return Err(OpError::invalid(format!("{path} is not a directory")));
    }
    let mut entries = Vec::new();
    for item in std::fs::read_dir(dir).map_err(|e| OpError::io(path, &e))? {
        let Ok(item) = item else { continue };
        let p = item.path();
        if let Ok(meta) = std::fs::symlink_metadata(&p) {
            entries.push(entry(&p, &meta));
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}
