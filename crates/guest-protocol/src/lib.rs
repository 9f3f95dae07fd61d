//! The protocol between the host (server, through the per-sandbox shim) and the guest daemon
//! `pandastack-guest` that runs as the first process of every sandbox.
//!
//! # Mechanism
//! The guest daemon's stdin and stdout are one end of a socket pair whose other end is held by the
//! shim on the host. gVisor re-attaches the container's stdio on restore, so this channel survives
//! checkpoint/restore, fork and hibernate/wake (see `shared/notes/gvisor-on-these-machines.md`,
//! pitfall 7), where a `runsc exec` per call (~30 ms) would be too slow.
//!
//! The channel carries [frames](frame): a small JSON header plus an optional raw byte body, so
//! file contents and process output travel without base64. Every request carries an `id` chosen by
//! the host; every reply and stream item carries the id it belongs to, so many requests can be in
//! flight at once (an exec stream beside a kernel run beside a file upload).
//!
//! # Versioning
//! [`PROTOCOL_VERSION`] is one number. The host's first frame on a connection is
//! [`HostMsg::Hello`]; the guest answers [`GuestMsg::HelloOk`] or, for any other version, an
//! [`GuestMsg::Error`] with [`ErrorCode::Version`]. Any change to a message below bumps the
//! version; `tests/schema.rs` freezes the JSON shape of each version.

pub mod frame;
mod messages;
mod runtime;

pub use frame::{read_frame, write_frame, Frame, FrameError, MAX_BODY_BYTES, MAX_HEADER_BYTES};
pub use messages::*;
pub use runtime::{TemplateRuntime, DEFAULT_ENV, TEMPLATE_RUNTIME_PATH};

/// The protocol version spoken by this build. Checked at connect by [`HostMsg::Hello`].
pub const PROTOCOL_VERSION: u32 = 1;

/// Processes (threads included) the guest daemon may have beyond a sandbox's own process limit
/// (issue 8 point 3: a fork bomb must leave the sandbox usable). gVisor counts `RLIMIT_NPROC`
/// per uid and everything in a sandbox runs as root, so the guest's threads and the user's
/// processes share one count: the engine gives the sandbox's first process (the guest) the
/// user limit plus this reserve, and the guest lowers the limit back to the user limit in every
/// process it starts. A fork loop then stops at the user limit while the guest can still start
/// the threads and processes of new execs (`pkill` included).
pub const GUEST_PROCESS_RESERVE: u64 = 64;
