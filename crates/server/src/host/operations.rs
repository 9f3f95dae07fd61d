//! Crash-safe lifecycle operations (issue 8): a snapshot, hibernate or fork writes its
//! checkpoint image into `<final>.partial`, after recording its intent in the store
//! ([`OperationRow`]); the image is renamed into place only once complete, and the record is
//! removed when the operation has taken effect. After a crash, start-up recovery
//! ([`Host::finish_interrupted_operations`]) finishes or rolls back every operation still
//! recorded, and [`Host::collect_unreferenced_images`] removes every image directory no row
//! references.
//!
//! Recovery's rules: a snapshot whose image is complete is kept (its row is inserted), any
//! other is removed and the sandbox keeps running; a hibernate whose image is complete leaves
//! the sandbox `hibernated` and wakeable, any other is removed and the sandbox stays running if
//! its instance lives; an interrupted fork is undone whole (its children are deleted: no client
//! ever learnt their ids). A checkpoint still running when the server comes back (it outlives
//! the server that started it) is waited for.

use super::{Host, Live};
use crate::error::ApiError;
use crate::state::SandboxState;
use pandastack_engine::CheckpointOutcome;
use pandastack_store::{now_ms, OperationRow, SnapshotRow};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How long recovery waits for a checkpoint that is still being written.
const CHECKPOINT_WAIT: Duration = Duration::from_secs(180);

/// Operation kinds.
pub(super) const SNAPSHOT: &str = "snapshot";
pub(super) const HIBERNATE: &str = "hibernate";
pub(super) const FORK: &str = "fork";

/// The directory an image is written into before it is complete.
pub fn partial_dir(image: &Path) -> PathBuf {
    let mut name = image.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    image.with_file_name(name)
}

/// Renames a complete image into place.
pub(super) fn publish(partial: &Path, image: &Path) -> Result<(), ApiError> {
    let _ = std::fs::remove_dir_all(image);
    std::fs::rename(partial, image).map_err(|e| ApiError::internal("publishing image", e))
}

impl Host {
    /// Records that `kind` starts writing `partial` for `sandbox_id`.
    ///
    /// # Errors
    /// Store errors (nothing has started then).
    pub(super) async fn begin_operation(
        &self,
        kind: &str,
        id: &str,
        sandbox_id: &str,
        partial: &Path,
        detail: serde_json::Value,
    ) -> Result<(), ApiError> {
        let _ = std::fs::remove_dir_all(partial);
        self.store
            .insert_operation(&OperationRow {
                id: id.to_string(),
                kind: kind.to_string(),
                sandbox_id: sandbox_id.to_string(),
                image_dir: partial.display().to_string(),
                detail,
                started_at: now_ms(),
                host: self.cfg.host_name.clone(),
            })
            .await?;
        Ok(())
    }

    /// Forgets operation `id` (finished, or failed and cleaned up).
    pub(super) async fn end_operation(&self, id: &str) {
        if let Err(e) = self.store.delete_operation(id).await {
            warn!(operation = id, error = %e, "forgetting an operation");
        }
    }

    /// Rolls back operation `id` that failed before taking effect: its partial image goes.
    pub(super) async fn abandon_operation(&self, id: &str, partial: &Path) {
        let _ = std::fs::remove_dir_all(partial);
        self.end_operation(id).await;
    }

    /// Finishes or rolls back every operation a crash interrupted (start-up, before sandboxes
    /// are re-adopted).
    ///
    /// # Errors
    /// Store errors.
    pub(super) async fn finish_interrupted_operations(&self) -> Result<(), ApiError> {
        for op in self.store.operations(&self.cfg.host_name).await? {
            let partial = PathBuf::from(&op.image_dir);
            let outcome = self.settled_outcome(&partial).await;
            let files: Vec<String> = std::fs::read_dir(&partial)
                .map(|d| {
                    d.filter_map(Result::ok)
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            info!(operation = %op.id, kind = %op.kind, ?outcome, ?files, "finishing an interrupted operation");
            match op.kind.as_str() {
                SNAPSHOT => self.recover_snapshot(&op, &partial, &outcome).await?,
                HIBERNATE => self.recover_hibernate(&op, &partial, &outcome).await?,
                FORK => self.recover_fork(&op).await?,
                other => warn!(operation = %op.id, kind = other, "unknown operation kind"),
            }
            let _ = std::fs::remove_dir_all(&partial);
            self.end_operation(&op.id).await;
        }
        Ok(())
    }

    /// The outcome of the checkpoint into `partial`, waiting while one is still running.
    async fn settled_outcome(&self, partial: &Path) -> CheckpointOutcome {
        let started = Instant::now();
        loop {
            match self.engine.checkpoint_outcome(partial) {
                CheckpointOutcome::Running if started.elapsed() < CHECKPOINT_WAIT => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => return other,
            }
        }
    }

    async fn recover_snapshot(
        &self,
        op: &OperationRow,
        partial: &Path,
        outcome: &CheckpointOutcome,
    ) -> Result<(), ApiError> {
        let Ok(mut row) = serde_json::from_value::<SnapshotRow>(op.detail.clone()) else {
            warn!(operation = %op.id, "snapshot operation without its row: rolled back");
            return Ok(());
        };
        if self
            .store
            .snapshot(&row.workspace_id, &row.id)
            .await?
            .is_some()
        {
            return Ok(());
        }
        let image = PathBuf::from(&row.image_dir);
        if !image.exists() {
            if *outcome != CheckpointOutcome::Complete {
                return Ok(());
            }
            publish(partial, &image)?;
        }
        row.size_bytes = super::snapshot::dir_size(&image) as i64;
        self.store.insert_snapshot(&row).await?;
        info!(snapshot_id = %row.id, sandbox_id = %row.sandbox_id, "kept a snapshot finished after a restart");
        Ok(())
    }

    async fn recover_hibernate(
        &self,
        op: &OperationRow,
        partial: &Path,
        outcome: &CheckpointOutcome,
    ) -> Result<(), ApiError> {
        let Some(row) = self.store.sandbox(&op.sandbox_id).await? else {
            return Ok(());
        };
        let image = PathBuf::from(op.detail["image"].as_str().unwrap_or_default().to_string());
        let state = SandboxState::parse(&row.status);
        if image.as_os_str().is_empty()
            || !matches!(state, SandboxState::Running | SandboxState::Paused)
        {
            return Ok(());
        }
        // Complete and still beside its place, or already renamed into it (the crash came
        // between the rename and the state change).
        if *outcome == CheckpointOutcome::Complete {
            publish(partial, &image)?;
        } else if self.engine.checkpoint_outcome(&image) != CheckpointOutcome::Complete {
            // A torn image: the sandbox goes on as its instance allows (re-adopted if alive).
            let _ = std::fs::remove_dir_all(&image);
            return Ok(());
        }
        let (iid, dir) = (row.instance_id.clone(), row.instance_dir.clone());
        let live = Arc::new(Live::new(row));
        {
            let mut r = live.row.lock().await;
            r.instance_id = None;
            r.instance_dir = None;
            r.hibernate_image = Some(image.display().to_string());
        }
        self.set_state(
            &live,
            SandboxState::Hibernated,
            "hibernate finished after a restart",
        )
        .await?;
        if let (Some(iid), Some(dir)) = (iid, dir) {
            // The checkpoint stopped the instance; its container and directory go now.
            let _ = self.engine.destroy(&iid, Path::new(&dir)).await;
        }
        Ok(())
    }

    async fn recover_fork(&self, op: &OperationRow) -> Result<(), ApiError> {
        for row in self.store.host_sandboxes(&self.cfg.host_name).await? {
            if row.metadata.get("fork_tree_id") != Some(&op.id) {
                continue;
            }
            let (iid, dir) = (row.instance_id.clone(), row.instance_dir.clone());
            let live = Live::new(row);
            let _ = self
                .set_state(
                    &live,
                    SandboxState::Deleted,
                    "fork interrupted by a server restart",
                )
                .await;
            if let (Some(iid), Some(dir)) = (iid, dir) {
                let _ = self.engine.destroy(&iid, Path::new(&dir)).await;
            }
        }
        Ok(())
    }

    /// Removes image directories no row references: snapshots without a snapshot row,
    /// hibernation images of no hibernated sandbox, fork captures (always transient), and
    /// partial images (every operation has been finished by now). Start-up only.
    ///
    /// # Errors
    /// Store errors.
    pub(super) async fn collect_unreferenced_images(&self) -> Result<(), ApiError> {
        let snapshots: Vec<PathBuf> = self
            .store
            .snapshot_image_dirs(&self.cfg.host_name)
            .await?
            .into_iter()
            .map(PathBuf::from)
            .collect();
        let hibernated: Vec<PathBuf> = self
            .store
            .host_sandboxes(&self.cfg.host_name)
            .await?
            .into_iter()
            .filter_map(|r| r.hibernate_image.map(PathBuf::from))
            .collect();
        let root = &self.cfg.data_dir;
        for (dir, keep) in [
            (root.join("snapshots"), snapshots.as_slice()),
            (root.join("hibernate"), hibernated.as_slice()),
            (root.join("forks"), &[][..]),
        ] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.filter_map(Result::ok) {
                if !keep.contains(&e.path()) {
                    warn!(path = %e.path().display(), "removing an unreferenced image");
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        Ok(())
    }
}
