//! Pipe readers: one thread per output stream forwards each read as an `Output` frame as soon
//! as it arrives (live streaming), in chunks of at most [`CHUNK_BYTES`].
//!
//! The [`Gate`] keeps `Output` from following `Exited`: a reader sends only while holding the
//! gate open, and the worker closes it before sending `Exited`. A reader outliving its exec
//! (a background grandchild still holds the pipe) keeps draining the pipe and drops the bytes.

use crate::channel::Out;
use pandastack_guest_protocol::{GuestMsg, OutputStream, RequestId};
use std::io::Read;
use std::sync::{Arc, Condvar, Mutex};

/// Largest `Output` body, bytes.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// Shared between an exec's worker, its pipe readers and its reaper callback.
#[derive(Default)]
pub struct Shared {
    /// Exit status and pipe count; the worker waits on `changed`.
    pub progress: Mutex<Progress>,
    pub changed: Condvar,
    /// True once `Exited` is being sent: no more `Output`.
    pub gate: Mutex<bool>,
}

/// What the worker waits for.
#[derive(Default)]
pub struct Progress {
    /// Raw wait status of the main process, once it exited.
    pub status: Option<i32>,
    /// Pipes not yet at end of stream.
    pub open_pipes: u8,
}

impl Shared {
    /// Locks the progress, surviving a poisoned lock.
    pub fn progress(&self) -> std::sync::MutexGuard<'_, Progress> {
        match self.progress.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Locks the gate, surviving a poisoned lock.
    pub fn gate(&self) -> std::sync::MutexGuard<'_, bool> {
        match self.gate.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// Starts a thread forwarding `pipe` as `stream` of exec `id`.
pub fn forward<R: Read + Send + 'static>(
    out: Arc<Out>,
    shared: Arc<Shared>,
    id: RequestId,
    stream: OutputStream,
    mut pipe: R,
) -> std::io::Result<()> {
    std::thread::Builder::new().spawn(move || {
        let mut buf = vec![0u8; CHUNK_BYTES];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let closed = shared.gate();
                    if !*closed {
                        out.send_with(&GuestMsg::Output { id, stream }, buf[..n].to_vec());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        shared.progress().open_pipes -= 1;
        shared.changed.notify_all();
    })?;
    Ok(())
}
