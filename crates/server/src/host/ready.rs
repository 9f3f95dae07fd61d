//! [`Host::ready`]: the entry of every request that talks to a guest.

use super::{Host, Live};
use crate::error::ApiError;
use crate::host::live::Ready;
use crate::state::SandboxState;
use std::sync::Arc;

impl Host {
    /// Waits out lifecycle operations in progress, wakes a hibernated sandbox (seed 003:
    /// "wake is implicit on the next API request"), checks the sandbox is running, records
    /// activity and returns its guest connection with the lifecycle gate held shared.
    ///
    /// # Errors
    /// 409 naming the state when the sandbox is paused, failed or deleted (for a failure this
    /// process saw, `sandbox failed: <cause>` at once, even before the state says so); 503 when the
    /// guest is unreachable; wake errors.
    pub async fn ready(&self, live: &Arc<Live>) -> Result<Ready, ApiError> {
        loop {
            let gate = live.gate_arc().read_owned().await;
            let (state, envs) = {
                let r = live.row.lock().await;
                (SandboxState::parse(&r.status), r.envs.clone())
            };
            if let Some(cause) = live.failure() {
                return Err(ApiError::Conflict(format!("sandbox failed: {cause}")));
            }
            match state {
                SandboxState::Running => {
                    live.touch().await;
                    let conn = live.guest().await?;
                    return Ok(Ready::new(conn, envs, gate));
                }
                SandboxState::Hibernated => {
                    drop(gate);
                    self.wake(live, "implicit").await?;
                }
                other => {
                    return Err(ApiError::Conflict(format!(
                        "sandbox is {other}; it must be running"
                    )))
                }
            }
        }
    }
}
