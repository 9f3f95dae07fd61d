//! The guest daemon: runs as PID 1 inside every sandbox and serves the host over the frame
//! protocol of `pandastack-guest-protocol`.
//!
//! # Mechanism
//! fd 0 and fd 1 are one end of a socket pair held by the host. One reader thread
//! ([`channel::serve`]) decodes [`HostMsg`](pandastack_guest_protocol::HostMsg) frames and
//! dispatches them ([`dispatch`]); long operations (an exec, a file read, a kernel run) get their
//! own thread. Every reply goes through one [`channel::Out`], a mutex around fd 1, so frames never
//! interleave. A single [`reaper`] collects every exited child (PID 1 inherits orphans) and routes
//! the status of the children we spawned to whoever waits on them. In a sandbox a [`memory`]
//! guard kills the largest process when memory runs out, so the sandbox lives on. Logs go to stderr, terse.

#[macro_use]
pub mod log;

pub mod channel;
pub mod dispatch;
pub mod error;
pub mod exec;
pub mod files;
pub mod hostio;
pub mod kernel;
pub mod limits;
pub mod memory;
pub mod reaper;
pub mod setup;

/// Prepares the sandbox (directories, environment) and serves the host forever.
///
/// Never returns: PID 1 exiting would kill the sandbox.
pub fn run() {
    let config = setup::prepare();
    let guest = dispatch::Guest::new(config);
    if std::process::id() == 1 {
        guest.guard_memory();
    }
    channel::serve(guest);
}
