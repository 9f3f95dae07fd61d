//! Per-template lock: `flock(2)` on `<root>/<name>/.lock`.
//!
//! The kernel drops the lock when the file is closed, also when the process
//! dies, so a crashed bake never leaves a stale lock behind.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Held exclusive lock; released on drop.
#[derive(Debug)]
pub(crate) struct TemplateLock {
    _file: File,
}

impl TemplateLock {
    /// Takes the lock at `path`, blocking while another holder has it; calls
    /// `on_wait` once before blocking.
    pub fn acquire(path: &Path, on_wait: impl FnOnce()) -> io::Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        if flock(&file, libc::LOCK_EX | libc::LOCK_NB).is_err() {
            on_wait();
            flock(&file, libc::LOCK_EX)?;
        }
        Ok(Self { _file: file })
    }
}

fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: the descriptor is owned by `file`, open for this whole call;
        // flock only changes kernel lock state and touches no memory of ours.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}
