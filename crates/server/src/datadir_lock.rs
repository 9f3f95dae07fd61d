//! The data-dir lock: one server per data dir.
//!
//! A second server on the same data dir would run start-up recovery against the first one's
//! instances (destroying the ones it does not own, such as the first server's warm pool) and
//! then fight it over every guest socket. So before it touches anything, `pandastack server`
//! takes an exclusive `flock` on `<data_dir>/server.lock` and keeps it for the life of the
//! process; the kernel drops it when the process dies, even on `kill -9`, so a crash never
//! leaves a stale lock behind. The file holds the holder's pid, for the message the loser prints.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Name of the lock file inside the data dir.
pub const LOCK_FILE: &str = "server.lock";

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another live process holds it.
    #[error("data dir {dir} is in use by another pandastack server (pid {pid}); stop it first or use another --data-dir")]
    Busy { dir: PathBuf, pid: String },
    #[error("lock file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    /// Takes the lock of `data_dir` without waiting.
    ///
    /// # Errors
    /// [`LockError::Busy`] naming the holder's pid when another process holds it;
    /// [`LockError::Io`] when the file cannot be opened or written.
    pub fn acquire(data_dir: &Path) -> Result<Self, LockError> {
        let path = data_dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                return Err(LockError::Busy {
                    dir: data_dir.to_path_buf(),
                    pid: if pid.is_empty() { "unknown" } else { pid }.to_string(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(DataDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = std::env::temp_dir().join(format!("ps-lock-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = DataDirLock::acquire(&dir).unwrap();
        match DataDirLock::acquire(&dir) {
            Err(LockError::Busy { pid, .. }) => assert_eq!(pid, std::process::id().to_string()),
            other => panic!("expected Busy, got {other:?}"),
        }
        drop(first);
        DataDirLock::acquire(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
