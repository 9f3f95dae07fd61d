//! Pause and resume (seed 003): `runsc pause` stops every task of the sandbox from being
//! scheduled (no idle CPU) and keeps its memory; resume continues exactly where it stopped.

use super::{Host, Live};
use crate::error::ApiError;
use crate::state::{transition, SandboxState};
use std::sync::Arc;

impl Host {
    /// Pauses a running sandbox.
    ///
    /// # Errors
    /// 409 unless running; 500 when the engine fails.
    pub async fn pause(&self, live: &Arc<Live>) -> Result<(), ApiError> {
        let _gate = live.gate.write().await;
        let iid = self.running_instance(live, SandboxState::Paused).await?;
        self.engine
            .pause(&iid)
            .await
            .map_err(|e| ApiError::internal("pause", e))?;
        self.set_state(live, SandboxState::Paused, "api").await
    }

    /// Resumes a paused sandbox.
    ///
    /// # Errors
    /// 409 unless paused; 500 when the engine fails.
    pub async fn resume(&self, live: &Arc<Live>) -> Result<(), ApiError> {
        let _gate = live.gate.write().await;
        let iid = self.running_instance(live, SandboxState::Running).await?;
        self.engine
            .resume(&iid)
            .await
            .map_err(|e| ApiError::internal("resume", e))?;
        live.touch().await;
        self.set_state(live, SandboxState::Running, "api").await
    }

    /// Checks that the sandbox may go to `to` and returns its instance id.
    pub(super) async fn running_instance(
        &self,
        live: &Live,
        to: SandboxState,
    ) -> Result<String, ApiError> {
        let r = live.row.lock().await;
        transition(SandboxState::parse(&r.status), to)?;
        r.instance_id.clone().ok_or_else(|| {
            ApiError::Conflict(format!("sandbox is {}; it has no instance", r.status))
        })
    }
}
