//! Start-up recovery: re-adopt every sandbox the store says exists (with the volumes it
//! holds), and destroy engine instances nobody owns. This is what makes `kill -9` of the
//! server lose nothing: instances and their shims live on in their own sessions; the new
//! server reconnects to their sockets.

use super::{Host, Live};
use crate::state::SandboxState;
use pandastack_engine::InstanceStatus;
use std::collections::HashSet;
use std::sync::Arc;
use tracing::{info, warn};

impl Host {
    /// Finishes or rolls back interrupted operations, re-adopts live sandboxes, destroys
    /// orphans and collects unreferenced images. Sandboxes whose instance is gone are marked
    /// `failed`.
    ///
    /// # Errors
    /// Store errors.
    pub async fn recover(self: &Arc<Self>) -> Result<(), crate::error::ApiError> {
        // Snapshots, hibernations and forks a crash interrupted first: they change rows.
        self.finish_interrupted_operations().await?;
        let rows = self.store.host_sandboxes(&self.cfg.host_name).await?;
        // Who holds which volume, before anything below releases some (issue 9).
        self.rebuild_holds(&rows).await;
        // The engine first rebuilds host-wide state (the firewall rules of the instances that
        // live on) and removes what a crash left of the others (network namespaces, links).
        let keep: Vec<(String, std::path::PathBuf)> = rows
            .iter()
            .filter(|r| {
                matches!(
                    SandboxState::parse(&r.status),
                    SandboxState::Running | SandboxState::Paused
                )
            })
            .filter_map(|r| Some((r.instance_id.clone()?, r.instance_dir.clone()?.into())))
            .collect();
        self.engine
            .recover(&keep)
            .await
            .map_err(|e| crate::error::ApiError::internal("engine recovery", e))?;
        let mut owned = HashSet::new();
        for row in rows {
            let state = SandboxState::parse(&row.status);
            let live = Arc::new(Live::new(row.clone()));
            self.insert(live.clone());
            match (state, row.instance_id.as_deref()) {
                (SandboxState::Hibernated, _) => {}
                // A failed sandbox holds no volume (a crash may have come between).
                (SandboxState::Failed, _) => self.release_volumes(&live).await,
                (SandboxState::Running | SandboxState::Paused, Some(iid)) => {
                    owned.insert(iid.to_string());
                    let status = self
                        .engine
                        .status(iid)
                        .await
                        .unwrap_or(InstanceStatus::Missing);
                    let alive = matches!(status, InstanceStatus::Running | InstanceStatus::Paused);
                    if alive {
                        info!(sandbox_id = %row.id, instance_id = iid, "re-adopted sandbox");
                        // Its lease (several hosts) lives on with it; taken again in case it
                        // ran out while this server was down and no host has collected it.
                        if self.cfg.cluster {
                            self.store
                                .acquire_lease(&row.id, &self.cfg.host_name, super::LEASE_TTL_MS)
                                .await?;
                        }
                    } else {
                        warn!(sandbox_id = %row.id, instance_id = iid, ?status, "instance gone after restart");
                        self.fail(&live, "instance lost while the server was down")
                            .await;
                    }
                }
                _ => self.fail(&live, "server stopped during a transition").await,
            }
        }
        let known = self.engine.list().await.unwrap_or_default();
        for iid in known.iter().filter(|i| !owned.contains(*i)) {
            warn!(instance_id = %iid, "destroying orphan instance");
            let dir = self.cfg.data_dir.join("instances").join(iid);
            self.destroy_instance_later(iid.clone(), dir);
        }
        // Fork captures in the RAM scratch dir live only while a fork runs: none does now.
        if let Some(scratch) = &self.cfg.scratch_dir {
            let _ = std::fs::remove_dir_all(scratch.join("forks"));
        }
        // Instance directories of containers runsc no longer knows (a crash between the two
        // steps of a destroy, a reboot): nothing runs there, so they go now.
        if let Ok(dirs) = std::fs::read_dir(self.cfg.data_dir.join("instances")) {
            for d in dirs.filter_map(Result::ok) {
                let name = d.file_name().to_string_lossy().into_owned();
                if !owned.contains(&name) && !known.contains(&name) {
                    warn!(instance_id = %name, "removing directory of a vanished instance");
                    // Through the engine: the directory may hold a mounted disk.
                    let _ = self.engine.destroy(&name, &d.path()).await;
                }
            }
        }
        self.collect_unreferenced_images().await?;
        self.collect_orphan_volumes().await?;
        // Issue 12: fetched copies are for restores that are over; uploads a stop cut short
        // start again.
        self.clear_object_cache();
        self.clear_partial_fetched_builds();
        self.resume_uploads().await;
        Ok(())
    }
}
