//! `FileRead`: streams a file as `FileChunk` frames of at most [`CHUNK_BYTES`], then `FileEnd`.
//!
//! With a `window` the read is flow-controlled: it sends at most that many chunks the host has
//! not acknowledged (`FileReadAck`), then waits. The host acknowledges a chunk when its HTTP
//! client has taken it, so a slow downloader paces its own read and the frames of every other
//! request on the channel keep flowing. `FileAbort` (the client went away) ends the read.

use super::checked;
use crate::dispatch::Ctx;
use crate::error::OpError;
use pandastack_guest_protocol::{GuestMsg, RequestId};
use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How long a flow-controlled read waits for an acknowledgement before it gives up (a host
/// that vanished without aborting): 10 minutes.
pub const ACK_WAIT: Duration = Duration::from_secs(600);

/// The credits of one flow-controlled read.
#[derive(Default)]
struct Window {
    /// (chunks that may still be sent, aborted)
    state: Mutex<(u32, bool)>,
    wake: Condvar,
}

/// The flow-controlled reads in progress, by request id.
#[derive(Default)]
pub struct ReadWindows {
    reads: Mutex<HashMap<RequestId, Arc<Window>>>,
}

impl ReadWindows {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, Arc<Window>>> {
        self.reads.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn open(&self, id: RequestId, window: u32) -> Arc<Window> {
        let w = Arc::new(Window {
            state: Mutex::new((window.max(1), false)),
            wake: Condvar::new(),
        });
        self.lock().insert(id, w.clone());
        w
    }

    fn close(&self, id: RequestId) {
        self.lock().remove(&id);
    }

    /// One more chunk of read `id` may be sent. Unknown ids are ignored (a finished read).
    pub fn ack(&self, id: RequestId) {
        if let Some(w) = self.lock().get(&id).cloned() {
            w.state.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
            w.wake.notify_all();
        }
    }

    /// Stops read `id`; false when no such read is in progress.
    pub fn abort(&self, id: RequestId) -> bool {
        match self.lock().get(&id).cloned() {
            Some(w) => {
                w.state.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
                w.wake.notify_all();
                true
            }
            None => false,
        }
    }
}

impl Window {
    /// Takes one credit, waiting for an acknowledgement; false when the read was aborted or
    /// no acknowledgement came within [`ACK_WAIT`].
    fn take(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if state.1 {
                return false;
            }
            if state.0 > 0 {
                state.0 -= 1;
                return true;
            }
            let (next, timeout) = self
                .wake
                .wait_timeout(state, ACK_WAIT)
                .unwrap_or_else(|e| e.into_inner());
            state = next;
            if timeout.timed_out() && state.0 == 0 {
                return false;
            }
        }
    }
}

/// Largest `FileChunk` body sent, bytes.
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// Streams `path` to the host as the reply to `id`.
///
/// # Errors
/// `Invalid` for a relative path or a directory, `NotFound` when missing, `Io` when reading
/// fails (possibly after some chunks were sent; the error is then the final reply).
pub fn read(ctx: &Ctx, id: RequestId, path: &str, window: Option<u32>) -> Result<(), OpError> {
    let credits = window.map(|w| ctx.reads.open(id, w));
    let result = send_file(ctx, id, path, credits.as_deref());
    if credits.is_some() {
        ctx.reads.close(id);
    }
    result
}

fn send_file(
    ctx: &Ctx,
    id: RequestId,
    path: &str,
    credits: Option<&Window>,
) -> Result<(), OpError> {
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
        if credits.is_some_and(|w| !w.take()) {
            // The host gave up on this read: nobody waits for the rest or for FileEnd.
            return Ok(());
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
