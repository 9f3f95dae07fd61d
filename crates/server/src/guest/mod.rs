//! The host side of the guest protocol: one multiplexed connection per sandbox instance.

mod client;

pub use client::{GuestConn, GuestError, Reply};
