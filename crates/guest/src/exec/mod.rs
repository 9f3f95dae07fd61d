//! Exec: run a command line, stream its output, report its exit.
//!
//! [`start`] spawns the process on the reader thread (so an `ExecKill` right behind the `Exec`
//! always finds it) and hands it to a worker ([`run`]) that watches the exit status, the two
//! output pipes and the timeout.

pub mod command_line;
mod run;
pub mod spawn;
mod vfork;
pub mod warm;

use crate::dispatch::Ctx;
use crate::error::OpError;
use pandastack_guest_protocol::RequestId;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// An exec request, as received.
#[derive(Debug, Clone)]
pub struct Request {
    /// The command line.
    pub cmd: String,
    /// Variables on top of the default environment.
    pub env: BTreeMap<String, String>,
    /// Working directory, relative ones resolved against the default.
    pub cwd: Option<String>,
    /// Kill the process group after this many ms.
    pub timeout_ms: Option<u64>,
}

/// The running execs: request id -> process group id.
#[derive(Default)]
pub struct Execs {
    groups: Mutex<HashMap<RequestId, i32>>,
    /// The next shell exec's bash, started ahead ([`warm`]).
    pub warm: Mutex<Option<warm::WarmShell>>,
}

impl Execs {
    fn insert(&self, id: RequestId, pgid: i32) {
        self.lock().insert(id, pgid);
    }

    fn remove(&self, id: RequestId) {
        self.lock().remove(&id);
    }

    fn pgid(&self, id: RequestId) -> Option<i32> {
        self.lock().get(&id).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, i32>> {
        match self.groups.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// Starts exec `id`. Output and the exit arrive later as frames.
///
/// # Errors
/// `NotFound` for a missing working directory, `Io` when no process could be started.
pub fn start(ctx: &Ctx, id: RequestId, req: Request) -> Result<(), OpError> {
    run::start(ctx, id, req)
}

/// Kills the process group of exec `id` with SIGKILL. Unknown ids (usually an exec that just
/// ended) are ignored: the exec's own `Exited` is its only final reply.
pub fn kill(ctx: &Ctx, id: RequestId) {
    if let Some(pgid) = ctx.execs.pgid(id) {
        kill_group(pgid);
    }
}

/// Sends SIGKILL to process group `pgid`.
pub(crate) fn kill_group(pgid: i32) {
    if pgid > 1 {
        // SAFETY: kill takes plain integers; a negative pid addresses the process group.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}
