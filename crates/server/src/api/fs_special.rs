//! Reads of special files through `GET .../fs?path=` (issue 23 finding 12).
//!
//! The guest daemon opens and streams whatever it is asked for. A device (`/dev/zero` never
//! ends), a FIFO (blocks until a writer comes), a socket (cannot be opened) or a pseudo-file
//! of `/proc` or `/sys` that refuses to be read (`/proc/self/mem` answers EIO) is not a file
//! a client can download, and answered 500 as if the server had failed. So before a read the
//! path is `lstat`ed: a device, FIFO or socket is refused with 400 naming `path`; and an I/O
//! error of the read's first frame for a path under `/proc` or `/sys` is a 400 naming `path`
//! too. (A symlink is followed by the read itself; the error mapping still applies.)

use crate::error::ApiError;
use crate::guest::GuestConn;
use pandastack_guest_protocol::{ErrorCode, FileEntry, GuestMsg, HostMsg};

/// `S_IFMT` and the file types that are refused (`<sys/stat.h>`).
const S_IFMT: u32 = 0o170_000;
const S_IFSOCK: u32 = 0o140_000;
const S_IFBLK: u32 = 0o060_000;
const S_IFCHR: u32 = 0o020_000;
const S_IFIFO: u32 = 0o010_000;

/// The kind of special file `mode` (an `st_mode`) is, or `None` for files, directories and
/// symlinks.
fn special_kind(mode: u32) -> Option<&'static str> {
    match mode & S_IFMT {
        S_IFCHR => Some("a character device"),
        S_IFBLK => Some("a block device"),
        S_IFIFO => Some("a FIFO"),
        S_IFSOCK => Some("a socket"),
        _ => None,
    }
}

/// Refuses a read of `path` when it is a device, a FIFO or a socket.
///
/// # Errors
/// 400 naming `path` for a special file; the guest's error for a path that cannot be
/// `lstat`ed is left to the read (which answers it the usual way, e.g. 404), so it is not an
/// error here; 503 when the guest channel closes.
pub async fn refuse_special(conn: &GuestConn, path: &str) -> Result<(), ApiError> {
    let reply = conn
        .call(HostMsg::Stat {
            id: conn.new_id(),
            path: path.to_string(),
        })
        .await?;
    if let (GuestMsg::Stat { entry, .. }, _) = reply {
        check_entry(&entry, path)?;
    }
    Ok(())
}

fn check_entry(entry: &FileEntry, path: &str) -> Result<(), ApiError> {
    match special_kind(entry.mode) {
        Some(kind) => Err(ApiError::BadRequest(format!(
            "path: {path} is {kind}, not a regular file; only files can be read"
        ))),
        None => Ok(()),
    }
}

/// The API error for a guest error answering the first frame of a read of `path`: an I/O
/// error on a `/proc` or `/sys` pseudo-file is the path's fault (400 naming `path`); every
/// other error as `fallback` maps it.
pub fn read_error(
    path: &str,
    code: ErrorCode,
    message: String,
    fallback: impl FnOnce(ErrorCode, String) -> ApiError,
) -> ApiError {
    let pseudo = ["/proc/", "/sys/"].iter().any(|p| path.starts_with(p));
    if pseudo && code == ErrorCode::Io {
        return ApiError::BadRequest(format!("path: {path} cannot be read: {message}"));
    }
    fallback(code, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(mode: u32) -> FileEntry {
        FileEntry {
            name: "x".into(),
            path: "/x".into(),
            is_dir: false,
            size: 0,
            mode,
            mtime: 0,
            is_symlink: false,
        }
    }

    #[test]
    fn devices_fifos_and_sockets_are_refused() {
        for mode in [0o020_666, 0o060_660, 0o010_644, 0o140_755] {
            let e = check_entry(&entry(mode), "/dev/x").unwrap_err();
            assert!(
                matches!(e, ApiError::BadRequest(ref m) if m.starts_with("path: ")),
                "{mode:o}"
            );
        }
        for mode in [0o100_644, 0o040_755, 0o120_777] {
            check_entry(&entry(mode), "/x").unwrap();
        }
    }

    #[test]
    fn io_errors_of_pseudo_files_name_the_path() {
        let internal = |_, m: String| ApiError::Internal(m);
        let e = read_error("/proc/self/mem", ErrorCode::Io, "EIO".into(), internal);
        assert!(matches!(e, ApiError::BadRequest(ref m) if m.contains("path: /proc/self/mem")));
        let e = read_error("/home/x", ErrorCode::Io, "EIO".into(), internal);
        assert!(matches!(e, ApiError::Internal(_)));
    }
}
