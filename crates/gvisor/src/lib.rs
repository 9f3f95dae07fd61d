//! The gVisor engine: one sandbox instance = one `runsc` container.
//!
//! # Mechanism
//! Each instance gets a directory with an OCI bundle (`bundle/config.json`), a private root
//! overlay directory (`--overlay2=root:dir=...`: never the default `root:self`, which leaks files
//! between sandboxes sharing a rootfs; notes pitfall 2), and the guest socket. The container's
//! first process is the guest daemon; its stdin/stdout are a socket pair held by a small *shim*
//! process (`pandastack shim`, [`shim`]) that is the parent of `runsc run` / `runsc restore` and
//! serves the pair on `<dir>/guest.sock`. The shim runs in its own session, so the server can be
//! killed and restarted without the guest losing its channel; gVisor re-attaches the stdio on
//! restore, so the same design carries snapshots, forks and hibernation.
//!
//! runsc runs with `--platform=ptrace` (systrap burns ~3 % of a core per idle sandbox here),
//! `--network=sandbox` in a network namespace of its own ([`net`]; `--network=none` when
//! networking is off), cgroup limits from the template and `RLIMIT_NPROC` so a fork bomb fails
//! with EAGAIN instead of crashing the sandbox (notes pitfall 9).

mod cgroup;
mod checkpoint;
mod config;
pub mod disk;
mod engine;
mod instance_disk;
mod loopdev;
pub mod net;
mod runsc;
pub mod shim;
mod targets;
mod volumes;

pub use cgroup::exists as cgroup_exists;
pub use engine::{GvisorConfig, GvisorEngine};
pub use instance_disk::DiskConfig;
