//! Hibernate and wake (seed 003): hibernate checkpoints the sandbox to
//! `<data_dir>/hibernate/<sandbox id>/` and stops its runsc container, so it holds no process
//! and no host RAM; wake restores that image into a new instance under the **same** sandbox id.
//! Any request to a hibernated sandbox wakes it first ([`Host::ready`]).

use super::images::hibernate_image_id;
use super::{operations, Host, Live};
use crate::error::ApiError;
use crate::state::SandboxState;
use pandastack_store::images::HIBERNATE as HIBERNATE_IMAGE;
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
    pub async fn hibernate(
        self: &Arc<Self>,
        live: &Arc<Live>,
        cause: &str,
    ) -> Result<(), ApiError> {
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
        if result.is_ok() {
            // Issue 12 point 7: uploaded in the background, so another host can wake it.
            let (rootfs, guest_dir) = {
                let r = live.row.lock().await;
                (r.rootfs.clone(), r.guest_dir.clone())
            };
            let (me, id) = (self.clone(), live.id.clone());
            tokio::spawn(async move {
                me.record_image(
                    (HIBERNATE_IMAGE, &hibernate_image_id(&id), &id),
                    &image,
                    &rootfs,
                    &guest_dir,
                )
                .await
            });
        }
        result
    }

    /// Wakes a hibernated sandbox (no-op when it is already awake).
    ///
    /// # Errors
    /// 503 with `Retry-After` when the host is full (it stays hibernated) or another host took
    /// the sandbox over (a retry reaches that host); 500 when the restore fails; the sandbox
    /// is then marked failed.
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
        if self.cfg.cluster {
            // Another host may have taken it over while this one was seen down (issue 12
            // point 7): then it must not wake here too.
            if let Some(stored) = self.store.sandbox(&live.id).await? {
                if stored.host != self.cfg.host_name {
                    self.remove(&live.id);
                    // A retry goes to the host that has it now (cluster::forward).
                    return Err(ApiError::Busy {
                        message: format!(
                            "sandbox {} moved to host {}; retry",
                            live.id, stored.host
                        ),
                        retry_after_s: 1,
                    });
                }
            }
        }
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
                // The image is used up: its upload (done or not) and objects go.
                self.drop_image(&hibernate_image_id(&live.id)).await;
                Ok(())
            }
            Err(e) => {
                self.fail(live, "wake failed").await;
                Err(e)
            }
        }
    }

    /// Takes over hibernated sandbox `id` of a host that is down (issue 12 point 7): its
    /// image must be in the object store and this host must hold its template build. The row
    /// moves to this host atomically (one taker); the image is fetched and becomes this
    /// sandbox's hibernation image, so the caller's wake restores it. `None`: no such sandbox
    /// to take (unknown, another workspace's, not hibernated, or on this host).
    ///
    /// # Errors
    /// 503 with `Retry-After` while its host is still up (the request goes there); 409 when its
    /// image was not uploaded (lost with its host), it holds volumes (they are on its host),
    /// or this host lacks its template build; 502 when the fetch fails.
    pub async fn adopt_hibernated(
        &self,
        workspace_id: &str,
        id: &str,
    ) -> Result<Option<Arc<Live>>, ApiError> {
        if self.objects().is_none() || !self.cfg.cluster {
            return Ok(None);
        }
        let Some(row) = self.store.sandbox(id).await? else {
            return Ok(None);
        };
        if row.workspace_id != workspace_id
            || row.deleted_at.is_some()
            || row.status != SandboxState::Hibernated.as_str()
            || row.host == self.cfg.host_name
        {
            return Ok(None);
        }
        let owner = self
            .store
            .hosts()
            .await?
            .into_iter()
            .find(|h| h.name == row.host);
        if owner.as_ref().is_some_and(|h| !crate::cluster::is_down(h)) {
            return Err(ApiError::Busy {
                message: format!("sandbox {id} is hibernated on host {}; retry", row.host),
                retry_after_s: 1,
            });
        }
        if !row.volumes.is_empty() {
            return Err(ApiError::Conflict(format!(
                "sandbox {id} holds volumes on host {}, which is down; it wakes there once that host is back",
                row.host
            )));
        }
        let Some(image) = self.store.image(&hibernate_image_id(id)).await? else {
            return Err(ApiError::Conflict(format!(
                "sandbox {id} was hibernated on host {}, which is down, and its image is not in the object store",
                row.host
            )));
        };
        tracing::warn!(sandbox_id = %id, from = %row.host, "taking over a hibernated sandbox of a host that is down");
        // Another host may take it first (or it changed): the request is then answered as it
        // stands.
        self.take_hibernated(row, &image).await
    }

    /// Takes over hibernated sandbox `id` from host `from`, which is draining and uploaded its
    /// image (issue 12 point 8, asked by `from` itself): as [`Host::adopt_hibernated`], without
    /// waiting for `from` to be down, and with the volumes it holds (`volumes`, uploaded by
    /// `from`: volume_moves.rs). The caller wakes it (or leaves it hibernated).
    ///
    /// # Errors
    /// 409 when it is not hibernated on `from` (woken, deleted or moved meanwhile), a volume
    /// it holds was not sent, or its image is not in the object store; as
    /// [`Host::fetch_image`] and [`Host::receive_volumes`].
    pub async fn adopt_drained(
        &self,
        id: &str,
        from: &str,
        volumes: &[super::volume_moves::VolumeTransfer],
    ) -> Result<Arc<Live>, ApiError> {
        let not_there =
            || ApiError::Conflict(format!("sandbox {id} is not hibernated on host {from}"));
        let row = self
            .store
            .sandbox(id)
            .await?
            .filter(|r| {
                r.deleted_at.is_none()
                    && r.status == SandboxState::Hibernated.as_str()
                    && r.host == from
            })
            .ok_or_else(not_there)?;
        let image = self
            .store
            .image(&hibernate_image_id(id))
            .await?
            .ok_or_else(|| {
                ApiError::Conflict(format!("sandbox {id}'s image is not in the object store"))
            })?;
        tracing::info!(sandbox_id = %id, from = %from, volumes = row.volumes.len(), "taking over a sandbox of a draining host");
        // Its volumes come along (volume_moves.rs): fetched first, their rows moved after.
        let held = row.volumes.clone();
        // The slow parts first (the image, the volumes: fetches change nothing shared), then
        // the volume rows and the sandbox row right after each other.
        self.fetch_image(&image).await?;
        let fetched = self.receive_volumes(&held, volumes).await?;
        let rows = match self.take_volume_rows(from, &held).await {
            Ok(rows) => rows,
            Err(e) => {
                self.drop_received_volumes(&fetched);
                return Err(e);
            }
        };
        let taken = self.take_hibernated(row, &image).await;
        let live = match taken {
            Ok(Some(live)) => live,
            Ok(None) | Err(_) => {
                self.give_volume_rows_back(from, &rows).await;
                self.drop_received_volumes(&fetched);
                return Err(taken.err().unwrap_or_else(not_there));
            }
        };
        self.hold_volumes(id, &held).await?;
        Ok(live)
    }

    /// Fetches hibernated sandbox `row`'s `image` and moves its row to this host (one taker:
    /// `None` when the row changed first), as a hibernated [`Live`] whose wake restores the
    /// fetched image.
    async fn take_hibernated(
        &self,
        row: pandastack_store::SandboxRow,
        image: &pandastack_store::ImageRow,
    ) -> Result<Option<Arc<Live>>, ApiError> {
        let (dir, rootfs, guest_dir) = self.fetch_image(image).await?;
        if !self
            .store
            .move_hibernated(&row.id, &row.host, &self.cfg.host_name)
            .await?
        {
            // The fetched copy stays in the object cache (a winner may be waking from it).
            return Ok(None);
        }
        let mut row = row;
        row.host = self.cfg.host_name.clone();
        row.rootfs = rootfs;
        row.guest_dir = guest_dir;
        row.hibernate_image = Some(dir.display().to_string());
        self.store.put_sandbox(&row).await?;
        // The image row (still naming the old host) goes with the wake that uses it.
        let live = Arc::new(Live::new(row));
        self.insert(live.clone());
        Ok(Some(live))
    }

    /// Forgets `live`, which another host took over (a drain): its local hibernation image
    /// goes; the instance is already gone (hibernated).
    pub fn forget_moved(&self, live: &Live, local_image: Option<PathBuf>) {
        self.remove(&live.id);
        if let Some(image) = local_image {
            self.teardowns
                .spawn_blocking(move || std::fs::remove_dir_all(image));
        }
    }
}
