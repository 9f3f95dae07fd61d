//! Hibernate and wake (seed 003): hibernate checkpoints the sandbox to
//! `<data_dir>/hibernate/<sandbox id>/` and stops its runsc container, so it holds no process
//! and no host RAM; wake restores that image into a new instance under the **same** sandbox id.
//! Any request to a hibernated sandbox wakes it first ([`Host::ready`]).

use super::{operations, Host, Live};
use crate::error::ApiError;
use crate::state::SandboxState;
use std::path::{Path, PathBuf};
use std::sync::Arc;

impl Host {
    /// The sandbox `id` of the workspace, woken first when hibernated (issue 3: any request
    /// addressed to a hibernated sandbox wakes it, lifecycle ones included).
    ///
    /// # Errors
    /// 404 as [`Host::get`]; wake errors.
    pub async fn get_awake(&self, workspace_id: &str, id: &str) -> Result<Arc<Live>, ApiError> {
        let live = self.get(workspace_id, id)?;
        if live.row.lock().await.status == SandboxState::Hibernated.as_str() {
            self.wake(&live, "implicit").await?;
        }
        Ok(live)
    }

    /// Hibernates a running or paused sandbox.
    ///
    /// # Errors
    /// 409 unless running or paused; 507 when the host's disk is low (it keeps running); 500
    /// when the checkpoint fails (the sandbox then keeps running, or is marked failed if the
    /// engine lost it).
    pub async fn hibernate(&self, live: &Arc<Live>, cause: &str) -> Result<(), ApiError> {
        let memory_mb = live.row.lock().await.memory_mb;
        self.check_disk_reserve("hibernate", u64::from(memory_mb) << 20)?;
        let _gate = live.gate.write().await;
        let iid = self
            .running_instance(live, SandboxState::Hibernated)
            .await?;
        let image = self.cfg.data_dir.join("hibernate").join(&live.id);
        let _ = std::fs::remove_dir_all(&image);
        // Crash-safe (operations.rs): intent first, the image complete before it is used.
        let op_id = format!("hibernate-{}", live.id);
        let partial = operations::partial_dir(&image);
        let detail = serde_json::json!({"image": image.display().to_string()});
        self.begin_operation(operations::HIBERNATE, &op_id, &live.id, &partial, detail)
            .await?;
        let captured = match self.capture(live, &partial, false).await {
            Ok(_) => operations::publish(&partial, &image),
            Err(e) => Err(e),
        };
        if let Err(e) = captured {
            self.abandon_operation(&op_id, &partial).await;
            if self
                .engine
                .status(&iid)
                .await
                .map(|s| s != pandastack_engine::InstanceStatus::Running)
                .unwrap_or(true)
            {
                self.fail(live, "hibernate failed").await;
            }
            return Err(e);
        }
        live.drop_conn().await;
        // The stopped container takes runsc ~2 s to tear down (notes pitfall 6): do it in the
        // background; the sandbox is hibernated as soon as its image is written.
        let (dir, held) = {
            let r = live.row.lock().await;
            (r.instance_dir.clone(), !r.volumes.is_empty())
        };
        if let Some(dir) = dir {
            // The sandbox keeps its volumes while hibernated, but its images are closed now
            // (not by the slow teardown), so a wake right after can attach them again.
            if held {
                if let Err(e) = self.engine.release_volumes(&iid, Path::new(&dir)).await {
                    tracing::warn!(sandbox_id = %live.id, error = %e, "releasing volumes at hibernate");
                }
            }
            self.destroy_instance_later(iid.clone(), PathBuf::from(dir));
        }
        {
            let mut r = live.row.lock().await;
            r.instance_id = None;
            r.instance_dir = None;
            r.guest_ip = None;
            r.hibernate_image = Some(image.display().to_string());
        }
        let result = self.set_state(live, SandboxState::Hibernated, cause).await;
        self.end_operation(&op_id).await;
        result
    }

    /// Wakes a hibernated sandbox (no-op when it is already awake).
    ///
    /// # Errors
    /// 503 with `Retry-After` when the host is full (it stays hibernated); 500 when the
    /// restore fails; the sandbox is then marked failed.
    pub async fn wake(&self, live: &Arc<Live>, cause: &str) -> Result<(), ApiError> {
        let _gate = live.gate.write().await;
        let image = {
            let r = live.row.lock().await;
            if r.status != SandboxState::Hibernated.as_str() {
                return match SandboxState::parse(&r.status) {
                    SandboxState::Running | SandboxState::Paused => Ok(()),
                    other => Err(ApiError::Conflict(format!(
                        "sandbox is {other}; cannot wake it"
                    ))),
                };
            }
            r.hibernate_image.clone().map(PathBuf::from)
        };
        let image =
            image.ok_or_else(|| ApiError::internal("wake", "hibernated sandbox has no image"))?;
        let memory_mb = live.row.lock().await.memory_mb;
        let _admitted = self.admit(&live.workspace_id, memory_mb, 1, false).await?;
        match self.start_instance(live, Some(&image)).await {
            Ok(conn) => {
                live.set_conn(conn).await;
                {
                    let mut r = live.row.lock().await;
                    r.hibernate_image = None;
                    r.last_active_at = pandastack_store::now_ms();
                }
                self.set_state(live, SandboxState::Running, cause).await?;
                let _ = std::fs::remove_dir_all(&image);
                Ok(())
            }
            Err(e) => {
                self.fail(live, "wake failed").await;
                Err(e)
            }
        }
    }
}
