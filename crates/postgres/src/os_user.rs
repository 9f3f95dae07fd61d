//! The OS user that runs the clusters.

use crate::PgError;
use std::path::Path;

/// Uid and gid of an OS user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OsUser {
    pub uid: u32,
    pub gid: u32,
}

impl OsUser {
    /// Looks `name` up (NSS).
    ///
    /// # Errors
    /// [`PgError::NotInstalled`] when there is no such user (the Debian package makes
    /// `postgres`).
    pub fn lookup(name: &str) -> Result<OsUser, PgError> {
        match nix::unistd::User::from_name(name) {
            Ok(Some(u)) => Ok(OsUser {
                uid: u.uid.as_raw(),
                gid: u.gid.as_raw(),
            }),
            _ => Err(PgError::NotInstalled),
        }
    }

    /// Gives `path` to this user.
    ///
    /// # Errors
    /// I/O errors.
    pub fn chown(&self, path: &Path) -> std::io::Result<()> {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
    }

    /// Creates directory `path` (and its parents) owned by this user with mode `mode`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn make_dir(&self, path: &Path, mode: u32) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(path)?;
        self.chown(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    }
}
