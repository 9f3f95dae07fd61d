//! Putting an accepted build into the queue (issue 23 finding 6): the per-workspace cap
//! (429), the build row and log, and the queued builds of the same name it supersedes (they
//! end `failed` with an error naming the newer build, so the SDKs' waits end too: their
//! terminal statuses are `done` and `failed`, contract §2.8).

use super::job::Job;
use super::log::BuildLog;
use super::queue::QueueError;
use crate::error::ApiError;
use crate::host::Host;
use pandastack_store::{now_ms, TemplateBuildRow};
use std::sync::Arc;
use tracing::{info, warn};

impl Host {
    /// Records the build as queued and queues its job, failing the queued builds of the same
    /// name it supersedes.
    ///
    /// # Errors
    /// 429 when the workspace has `max_queued` builds queued; 500 on store errors.
    pub(super) async fn enqueue(
        &self,
        row: TemplateBuildRow,
        job: Job,
        log: Arc<BuildLog>,
    ) -> Result<TemplateBuildRow, ApiError> {
        let max = self.builds.cfg.max_queued.max(1);
        let _submitting = self.builds.submitting.lock().await;
        // Only a build of a name already queued can come in past the cap: it replaces it.
        if let Err(QueueError::Full { queued }) =
            self.builds.queue.check(&job.workspace_id, &job.name, max)
        {
            return Err(queue_full(queued, max));
        }
        self.store.put_template_build(&row).await?;
        log.line(&format!("Queued build {} of template {}", row.id, row.name));
        self.builds.live().insert(row.id.clone(), log);
        let superseded = match self.builds.queue.push(job, max) {
            Ok(s) => s,
            Err(QueueError::Full { queued }) => {
                // Not reached: checked above under the same lock.
                self.builds.live().remove(&row.id);
                return Err(queue_full(queued, max));
            }
        };
        for old in superseded {
            self.supersede(&old, &row.id).await;
        }
        Ok(row)
    }

    /// Ends the queued build `old` as `failed`: build `newer` of the same template replaced it.
    async fn supersede(&self, old: &Job, newer: &str) {
        let message = format!(
            "superseded: build {newer} of template {} was submitted before this one started",
            old.name
        );
        if let Some(log) = self.builds.live().remove(&old.id) {
            log.line(&format!("error: {message}"));
        }
        match self.store.template_build(&old.workspace_id, &old.id).await {
            Ok(Some(mut row)) => {
                let now = now_ms();
                row.status = "failed".into();
                row.error = Some(message);
                row.started_at = Some(now);
                row.ended_at = Some(now);
                if let Err(e) = self.store.put_template_build(&row).await {
                    warn!(build = %old.id, error = %e, "recording a superseded build");
                }
            }
            Ok(None) => {}
            Err(e) => warn!(build = %old.id, error = %e, "reading a superseded build"),
        }
        let _ = std::fs::remove_dir_all(self.builds_dir().join(&old.id).join("input"));
        info!(build = %old.id, newer, template = %old.name, workspace_id = %old.workspace_id, "template build superseded");
    }
}

/// The 429 of a workspace with `max` builds queued (issue 23 finding 6).
fn queue_full(queued: usize, max: usize) -> ApiError {
    ApiError::TooManyRequests {
        message: format!(
            "build queue: this workspace has {queued} builds queued (at most {max}, --max-queued-builds); wait for one to start"
        ),
        retry_after_s: Some(10),
    }
}
