//! `FileWrite` / `FileChunk` / `FileEnd` / `FileAbort`: atomic uploads.
//!
//! Chunks go straight to a temp file beside the destination, written synchronously on the
//! reader thread, so a 1 GiB upload never sits in memory and a slow disk slows the host down
//! rather than filling a buffer. `FileEnd` renames the temp file into place.
//!
//! After a failure the id is kept as failed: its remaining chunks and its end are swallowed,
//! since the host already got its one `Error`.

use super::checked;
use crate::channel::Out;
use crate::error::OpError;
use pandastack_guest_protocol::{ErrorCode, GuestMsg, RequestId};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

/// The uploads in progress, owned by the reader thread.
#[derive(Default)]
pub struct Uploads {
    active: HashMap<RequestId, Upload>,
}

enum Upload {
    Writing {
        file: File,
        tmp: PathBuf,
        dest: PathBuf,
        bytes: u64,
    },
    Failed,
}

impl Uploads {
    /// Starts upload `id` to `path`: creates missing parents and the temp file.
    ///
    /// # Errors
    /// `Invalid` for a relative path or a directory in the way, `Io` when the temp file cannot
    /// be created.
    pub fn begin(&mut self, id: RequestId, path: &str) -> Result<(), OpError> {
        match open(path, id) {
            Ok((file, tmp, dest)) => {
                self.active.insert(
                    id,
                    Upload::Writing {
                        file,
                        tmp,
                        dest,
                        bytes: 0,
                    },
                );
                Ok(())
            }
            Err(e) => {
                self.active.insert(id, Upload::Failed);
                Err(e)
            }
        }
    }

    /// Appends `body` to upload `id`.
    ///
    /// # Errors
    /// `NotFound` for an unknown id, `Io` when the write fails (the temp file is removed).
    pub fn chunk(&mut self, id: RequestId, body: &[u8]) -> Result<(), OpError> {
        match self.active.get_mut(&id) {
            Some(Upload::Writing {
                file,
                tmp,
                dest,
                bytes,
            }) => match file.write_all(body) {
                Ok(()) => {
                    *bytes += body.len() as u64;
                    Ok(())
                }
                Err(e) => {
                    let _ = std::fs::remove_file(&*tmp);
                    let err = OpError::io(&dest.to_string_lossy(), &e);
                    self.active.insert(id, Upload::Failed);
                    Err(err)
                }
            },
            Some(Upload::Failed) => Ok(()),
            None => Err(unknown(id)),
        }
    }

    /// Renames upload `id` into place and replies `FileWritten`.
    ///
    /// # Errors
    /// `NotFound` for an unknown id, `Io`/`Invalid` when the rename fails.
    pub fn end(&mut self, out: &Out, id: RequestId) -> Result<(), OpError> {
        match self.active.remove(&id) {
            Some(Upload::Writing {
                file,
                tmp,
                dest,
                bytes,
            }) => {
                drop(file);
                if let Err(e) = std::fs::rename(&tmp, &dest) {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(OpError::io(&dest.to_string_lossy(), &e));
                }
                out.send(&GuestMsg::FileWritten { id, bytes });
                Ok(())
            }
            Some(Upload::Failed) => Ok(()),
            None => Err(unknown(id)),
        }
    }

    /// Abandons upload `id`, removes its temp file and replies `Done` (nothing for an upload
    /// that already failed or is unknown).
    pub fn abort(&mut self, out: &Out, id: RequestId) -> Result<(), OpError> {
        if let Some(Upload::Writing { tmp, .. }) = self.active.remove(&id) {
            let _ = std::fs::remove_file(tmp);
            out.send(&GuestMsg::Done { id });
        }
        Ok(())
    }
}

fn unknown(id: RequestId) -> OpError {
    OpError::new(
        ErrorCode::NotFound,
        format!("no upload in progress for request {id}"),
    )
}

/// Creates the parents of `path` and a temp file beside it (with the mode of an existing
/// destination). Returns the file, its path and the destination.
fn open(path: &str, id: RequestId) -> Result<(File, PathBuf, PathBuf), OpError> {
    let dest = checked(path)?.to_path_buf();
    let (Some(parent), Some(name)) = (dest.parent(), dest.file_name()) else {
        return Err(OpError::invalid(format!("{path} is a directory")));
    };
    let existing = std::fs::metadata(&dest).ok();
    if existing.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(OpError::invalid(format!("{path} is a directory")));
    }
    std::fs::create_dir_all(parent).map_err(|e| OpError::io(&parent.to_string_lossy(), &e))?;
    // `.NAME.pandastack-upload-ID` while that fits in a name (255 bytes); a longer NAME would
    // make the temp file's own name too long, so then `.pandastack-upload-ID`.
    let suffix = format!(".pandastack-upload-{id}");
    let mut tmp_name = std::ffi::OsString::from(".");
    if name.len() + 1 + suffix.len() <= 255 {
        tmp_name.push(name);
    }
    tmp_name.push(&suffix);
    let tmp = parent.join(tmp_name);
    let file = File::create(&tmp).map_err(|e| OpError::io(path, &e))?;
    if let Some(meta) = existing {
        let _ = file.set_permissions(meta.permissions());
    }
    Ok((file, tmp, dest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink() -> std::sync::Arc<Out> {
        Out::new(Box::new(std::io::sink()))
    }

    #[test]
    fn upload_is_atomic_and_abort_cleans_up() {
        let dir = std::env::temp_dir().join(format!("pg-write-{}", std::process::id()));
        let dest = dir.join("a/b/f.txt");
        let dest_s = dest.to_string_lossy().into_owned();
        let mut up = Uploads::default();
        up.begin(1, &dest_s).unwrap();
        up.chunk(1, b"hello ").unwrap();
        assert!(!dest.exists());
        up.chunk(1, b"world").unwrap();
        up.end(&sink(), 1).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"hello world");

        up.begin(2, &dest_s).unwrap();
        up.chunk(2, b"zzz").unwrap();
        up.abort(&sink(), 2).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"hello world");
        assert_eq!(
            std::fs::read_dir(dest.parent().unwrap()).unwrap().count(),
            1
        );

        assert_eq!(up.chunk(3, b"x").unwrap_err().code, ErrorCode::NotFound);
        assert_eq!(
            up.begin(4, &dir.to_string_lossy()).unwrap_err().code,
            ErrorCode::Invalid
        );
        assert!(up.chunk(4, b"swallowed").is_ok());

        // A name of the longest length still gets a temp file (a shorter name of its own).
        let long = dir.join("n".repeat(255));
        let long_s = long.to_string_lossy().into_owned();
        up.begin(5, &long_s).unwrap();
        up.chunk(5, b"long").unwrap();
        up.end(&sink(), 5).unwrap();
        assert_eq!(std::fs::read(&long).unwrap(), b"long");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
