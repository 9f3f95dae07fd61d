//! The host channel: frames in on fd 0, frames out on fd 1.
//!
//! Writers share one [`Out`], a mutex around fd 1, so a frame is written whole before the next
//! one starts; a slow host blocks the writers, which is the backpressure exec output and file
//! reads need. The reader ([`serve`]) never exits: at end of stream it sleeps and reads again,
//! because after a gVisor restore the same fd is re-attached to a new peer.

use crate::dispatch::Guest;
use crate::hostio::HostFd;
use pandastack_guest_protocol::{
    read_frame, write_frame, ErrorCode, Frame, FrameError, GuestMsg, RequestId, MAX_HEADER_BYTES,
};
use std::io::{BufReader, BufWriter};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long the reader sleeps after end of stream before reading again, ms.
pub const EOF_RETRY_MS: u64 = 100;

/// The shared writer of guest -> host frames.
pub struct Out {
    sink: Mutex<Box<dyn std::io::Write + Send>>,
    broken: AtomicBool,
}

impl Out {
    /// A writer on fd 1.
    pub fn stdout() -> Arc<Out> {
        // fd 1 is open from process start and from here on used by this writer alone.
        Self::new(Box::new(BufWriter::with_capacity(64 * 1024, HostFd(1))))
    }

    /// A writer on any sink (tests).
    pub fn new(sink: Box<dyn std::io::Write + Send>) -> Arc<Out> {
        Arc::new(Out {
            sink: Mutex::new(sink),
            broken: AtomicBool::new(false),
        })
    }

    /// Sends `msg` with no body.
    pub fn send(&self, msg: &GuestMsg) {
        self.send_with(msg, Vec::new());
    }

    /// Sends `msg` with `body` (at most `MAX_BODY_BYTES`; callers chunk). A header over
    /// `MAX_HEADER_BYTES` (a huge kernel result or listing) would corrupt the host's reader, so
    /// it is replaced by an `Error{Io}` for the same id.
    pub fn send_with(&self, msg: &GuestMsg, body: Vec<u8>) {
        let frame = match Frame::new(msg, body) {
            Ok(f) if f.header.len() <= MAX_HEADER_BYTES as usize => f,
            Ok(f) => {
                let len = f.header.len();
                return self.send(&error(
                    msg.id(),
                    ErrorCode::Io,
                    &format!("reply too large ({len} bytes)"),
                ));
            }
            Err(e) => {
                glog!("cannot encode reply: {e}");
                return;
            }
        };
        let mut sink = match self.sink.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        match write_frame(&mut *sink, &frame) {
            Ok(()) => self.broken.store(false, Ordering::Relaxed),
            Err(e) => {
                if !self.broken.swap(true, Ordering::Relaxed) {
                    glog!("cannot write to host: {e}");
                }
            }
        }
    }

    /// Sends `Error{code, message}` for `id`.
    pub fn error(&self, id: RequestId, code: ErrorCode, message: &str) {
        self.send(&error(id, code, message));
    }
}

fn error(id: RequestId, code: ErrorCode, message: &str) -> GuestMsg {
    GuestMsg::Error {
        id,
        code,
        message: message.to_string(),
    }
}

/// Reads frames from fd 0 and dispatches them, forever.
pub fn serve(mut guest: Guest) -> ! {
    // fd 0 stays open for the life of the process and only this thread reads it.
    let mut input = BufReader::with_capacity(256 * 1024, HostFd(0));
    let mut at_eof = false;
    let mut bad_frames: u64 = 0;
    loop {
        match read_frame(&mut input) {
            Ok(frame) => {
                if at_eof {
                    glog!("host channel back");
                    at_eof = false;
                }
                guest.handle_frame(frame);
            }
            Err(FrameError::Closed) => {
                if !at_eof {
                    glog!("host channel closed; waiting for it to come back");
                    at_eof = true;
                }
                std::thread::sleep(Duration::from_millis(EOF_RETRY_MS));
            }
            Err(e) => {
                // A truncated or oversized frame leaves the stream unsynchronized; there is no
                // way to find the next frame boundary, so keep reading and log (rarely).
                if bad_frames.is_multiple_of(1000) {
                    glog!("bad frame ({} so far): {e}", bad_frames + 1);
                }
                bad_frames += 1;
            }
        }
    }
}
