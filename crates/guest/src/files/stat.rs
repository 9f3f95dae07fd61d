//! `Stat`: lstat a path (symlinks are reported, not followed).

use super::checked;
use crate::error::OpError;
use pandastack_guest_protocol::FileEntry;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The entry for `path`, symlinks not followed.
///
/// # Errors
/// `Invalid` for a relative path, `NotFound` when it does not exist.
pub fn stat(path: &str) -> Result<FileEntry, OpError> {
    let p = checked(path)?;
    let meta = std::fs::symlink_metadata(p).map_err(|e| OpError::io(path, &e))?;
    Ok(entry(p, &meta))
}

/// A [`FileEntry`] from `path` and its lstat metadata.
pub fn entry(path: &Path, meta: &Metadata) -> FileEntry {
    let name = match path.file_name() {
        Some(n) => n.to_string_lossy().into_owned(),
        None => "/".to_string(),
    };
    FileEntry {
        name,
        path: path.to_string_lossy().into_owned(),
        is_dir: meta.is_dir(),
        size: meta.len(),
        mode: meta.mode(),
        mtime: meta.mtime(),
        is_symlink: meta.file_type().is_symlink(),
    }
}
