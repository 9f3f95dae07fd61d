//! `FileRead`: streams a file as `FileChunk` frames of at most [`CHUNK_BYTES`], then `FileEnd`.

use super::checked;
use crate::dispatch::Ctx;
use crate::error::OpError;
use pandastack_guest_protocol::{GuestMsg, RequestId};
use std::io::Read;

/// Largest `FileChunk` body sent, bytes.
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// Streams `path` to the host as the reply to `id`.
///
/// # Errors
/// `Invalid` for a relative path or a directory, `NotFound` when missing, `Io` when reading
/// fails (possibly after some chunks were sent; the error is then the final reply).
pub fn read(ctx: &Ctx, id: RequestId, path: &str) -> Result<(), OpError> {
    let p = checked(path)?;
    let mut file = std::fs::File::open(p).map_err(|e| OpError::io(path, &e))?;
    let meta = file.metadata().map_err(|e| OpError::io(path, &e))?;
    if meta.is_dir() {
        return Err(OpError::invalid(format!("{path} is a directory")));
    }
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = fill(&mut file, &mut buf).map_err(|e| OpError::io(path, &e))?;
        if n == 0 {
            break;
        }
        ctx.out
            .send_with(&GuestMsg::FileChunk { id }, buf[..n].to_vec());
        if n < buf.len() {
            break;
        }
    }
    ctx.out.send(&GuestMsg::FileEnd { id });
    Ok(())
}

/// Reads until `buf` is full or end of file; returns the bytes read.
fn fill(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
