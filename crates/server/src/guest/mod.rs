//! The host side of the guest protocol: one multiplexed connection per sandbox instance.

mod client;
mod throttle;

pub use client::{GuestConn, GuestError, Replies, Reply, MAX_QUEUED_BYTES, READ_WINDOW};
