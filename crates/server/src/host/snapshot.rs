//! Snapshots (seed 003 "Snapshotting", seed 000 §2): `runsc checkpoint --leave-running
//! --compression=none` writes memory, processes and the root overlay of a running sandbox to
//! `<data_dir>/snapshots/<snap-id>/` while it keeps running (uncompressed: ~3x faster to take
//! and restore than the default, notes table). A snapshot records its template generation and
//! the live kernels; restoring into a new sandbox goes through [`Host::create_from_snapshot`].

use super::{operations, CreateSpec, Host, Live};
use crate::error::ApiError;
use crate::state::SandboxState;
use pandastack_guest_protocol::{GuestMsg, HostMsg};
use pandastack_store::images::SNAPSHOT as SNAPSHOT_IMAGE;
use pandastack_store::{now_ms, SnapshotRow};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Total size of the files in `dir`, bytes.
pub fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

impl Host {
    /// Writes a checkpoint image of a running sandbox into `image` and returns the kernels
    /// that were live in it (`[{kernel_id, language, last_used_ms}]`). The caller holds the
    /// sandbox's gate exclusively.
    pub(super) async fn capture(
        &self,
        live: &Live,
        image: &Path,
        leave_running: bool,
    ) -> Result<serde_json::Value, ApiError> {
        let iid = {
            let r = live.row.lock().await;
            if r.status != SandboxState::Running.as_str()
                && r.status != SandboxState::Paused.as_str()
            {
                return Err(ApiError::Conflict(format!(
                    "sandbox is {}; it must be running",
                    r.status
                )));
            }
            r.instance_id
                .clone()
                .ok_or_else(|| ApiError::Conflict("sandbox has no instance".into()))?
        };
        let paused = live.row.lock().await.status == SandboxState::Paused.as_str();
        if paused {
            // A frozen sandbox cannot be checkpointed: thaw it for the capture.
            self.engine
                .resume(&iid)
                .await
                .map_err(|e| ApiError::internal("resume", e))?;
        }
        let conn = live.guest().await?;
        let kernels = match conn.call(HostMsg::KernelList { id: conn.new_id() }).await? {
            (GuestMsg::Kernels { kernels, .. }, _) => {
                serde_json::to_value(kernels).unwrap_or_default()
            }
            _ => serde_json::Value::Array(Vec::new()),
        };
        let result = self.engine.checkpoint(&iid, image, leave_running).await;
        if paused && leave_running {
            self.engine
                .pause(&iid)
                .await
                .map_err(|e| ApiError::internal("pause", e))?;
        }
        if let Err(e) = result {
            let _ = std::fs::remove_dir_all(image);
            return Err(ApiError::internal("checkpoint", e));
        }
        Ok(kernels)
    }

    /// Takes a snapshot of a running sandbox; it keeps running.
    ///
    /// # Errors
    /// 409 unless running; 429 at the workspace's snapshot quota; 507 when the host's disk is
    /// low; 500 when the checkpoint fails (nothing is left on disk).
    pub async fn snapshot(self: &Arc<Self>, live: &Arc<Live>) -> Result<SnapshotRow, ApiError> {
        let (workspace, memory_mb) = {
            let r = live.row.lock().await;
            (r.workspace_id.clone(), r.memory_mb)
        };
        self.check_snapshot_quota(&workspace).await?;
        // The image holds at most the sandbox's memory plus what it wrote.
        self.check_disk_reserve("snapshot", u64::from(memory_mb) << 20)?;
        let _gate = live.gate.write().await;
        let id = format!("snap-{}", uuid::Uuid::new_v4().simple());
        let image = self.cfg.data_dir.join("snapshots").join(&id);
        let partial = operations::partial_dir(&image);
        let r = live.snapshot_row().await;
        // Volumes are not copied (external state, like a database): a restore attaches them
        // again.
        let mut row = self.capture_row(&r, &id, &image, r.volumes.clone());
        // Crash-safe: the intent is recorded first, the image is written beside its final
        // place and renamed once complete (operations.rs).
        let detail = serde_json::to_value(&row).map_err(|e| ApiError::internal("snapshot", e))?;
        self.begin_operation(operations::SNAPSHOT, &id, &r.id, &partial, detail)
            .await?;
        let captured = self.capture(live, &partial, true).await;
        let finished = async {
            row.kernels = captured?;
            operations::publish(&partial, &image)?;
            row.size_bytes = dir_size(&image) as i64;
            Ok::<_, ApiError>(self.store.insert_snapshot(&row).await?)
        }
        .await;
        if let Err(e) = finished {
            let _ = std::fs::remove_dir_all(&image);
            self.abandon_operation(&id, &partial).await;
            return Err(e);
        }
        self.end_operation(&id).await;
        live.touch().await;
        // Issue 12: uploaded in the background; the reply says `uploaded: false` until then.
        let (me, snap) = (self.clone(), row.clone());
        tokio::spawn(async move {
            me.record_image(
                (SNAPSHOT_IMAGE, &snap.id, &snap.sandbox_id),
                Path::new(&snap.image_dir),
                &snap.rootfs,
                &snap.guest_dir,
            )
            .await
        });
        Ok(row)
    }

    /// Deletes a snapshot and its image.
    ///
    /// # Errors
    /// 404 when the workspace has no such snapshot.
    pub async fn delete_snapshot(&self, workspace_id: &str, id: &str) -> Result<(), ApiError> {
        let snap = self
            .store
            .snapshot(workspace_id, id)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("snapshot {id} not found")))?;
        self.store.delete_snapshot(workspace_id, id).await?;
        // Its objects too (issue 12); the image dir is this host's when it took the snapshot
        // (a dead host's copy goes at its next start: no row references it then).
        self.drop_image(id).await;
        if snap.host == self.cfg.host_name {
            let _ = std::fs::remove_dir_all(&snap.image_dir);
        }
        self.forget_cached(id);
        Ok(())
    }

    /// Checks that `snap` may still be restored: its template must not have been re-baked
    /// since (seed 000 gotchas: "re-baking the template invalidates derived snapshots").
    ///
    /// # Errors
    /// 409 saying which generation the snapshot needs and which is current.
    pub fn check_generation(&self, snap: &SnapshotRow) -> Result<(), ApiError> {
        let current = self.find_template(&snap.workspace_id, &snap.template)?;
        match current {
            Some(t) if t.generation as i64 == snap.template_generation => Ok(()),
            Some(t) => Err(ApiError::Conflict(format!(
                "snapshot {} was taken on template {} generation {}, but the template was re-baked (now generation {}); take a new snapshot",
                snap.id, snap.template, snap.template_generation, t.generation
            ))),
            None => Err(ApiError::Conflict(format!("snapshot {} needs template {}, which does not exist on this host (deleted, or never baked here)", snap.id, snap.template))),
        }
    }

    /// Creates a new sandbox from a checkpoint image. `base` gives template, resources, rootfs
    /// and guest dir (from the snapshot: request values for them are ignored, seed 000).
    pub(super) async fn create_from_image(
        &self,
        spec: &CreateSpec,
        base: &SnapshotRow,
        image: &Path,
        boot_mode: &str,
    ) -> Result<Arc<Live>, ApiError> {
        let started = Instant::now();
        let from_snapshot =
            (boot_mode == "snapshot" && base.id.starts_with("snap-")).then(|| base.id.clone());
        let mut row = spec.row(
            &base.template,
            base.template_generation,
            (base.cpu, base.memory_mb),
            (base.rootfs.clone(), base.guest_dir.clone()),
            (boot_mode, from_snapshot),
            &self.cfg.host_name,
        );
        // The image decides the layout: the disk of its sandbox (none for an image taken
        // before disks existed).
        row.disk_mb = base.disk_mb;
        self.hold_volumes(&row.id, &row.volumes).await?;
        if let Err(e) = self.store.put_sandbox(&row).await {
            self.unhold_volumes(&row.id);
            return Err(e.into());
        }
        let live = Arc::new(Live::new(row));
        self.insert(live.clone());
        match self.start_instance(&live, Some(image)).await {
            Ok(conn) => {
                live.set_conn(conn).await;
                live.row.lock().await.boot_ms = Some(started.elapsed().as_millis() as i64);
                self.set_state(&live, SandboxState::Running, boot_mode)
                    .await?;
                Ok(live)
            }
            Err(e) => {
                self.fail(&live, "restore failed").await;
                Err(e)
            }
        }
    }

    /// `POST /v1/sandboxes {from_snapshot}`: restores a user snapshot into a new sandbox id,
    /// with the volumes the snapshot was taken with attached again (issue 9) besides the
    /// ones the request lists.
    ///
    /// # Errors
    /// 404 for an unknown snapshot or a volume of it deleted since; 409 after a template
    /// re-bake or when one of its volumes is held elsewhere; capacity errors as
    /// [`Host::create`]; 500 when the restore fails.
    pub async fn create_from_snapshot(
        &self,
        mut spec: CreateSpec,
        snapshot_id: &str,
    ) -> Result<Arc<Live>, ApiError> {
        let snap = self
            .store
            .snapshot(&spec.workspace_id, snapshot_id)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("snapshot {snapshot_id} not found")))?;
        let remote = snap.host != self.cfg.host_name;
        if !remote {
            self.check_generation(&snap)?;
        }
        // A remote image is fetched here first: at most the sandbox's memory plus its writes.
        let fetched = if remote {
            u64::from(snap.memory_mb) << 20
        } else {
            0
        };
        self.check_disk_reserve("restore", fetched)?;
        let _admitted = self
            .admit(&spec.workspace_id, snap.memory_mb, 1, true)
            .await?;
        spec.volumes = self
            .with_snapshot_volumes(&spec.volumes, &snap.volumes)
            .await?;
        if !remote {
            let image = PathBuf::from(&snap.image_dir);
            return self
                .create_from_image(&spec, &snap, &image, "snapshot")
                .await;
        }
        // Taken on another host (issue 12 point 6): fetched from the object store onto this
        // host's copy of the same template build.
        if !snap.volumes.is_empty() {
            return Err(ApiError::Conflict(format!(
                "snapshot {} holds volumes, which are on host {}: restore it there",
                snap.id, snap.host
            )));
        }
        let image_row = self.store.image(&snap.id).await?.ok_or_else(|| {
            ApiError::Conflict(format!(
                "snapshot {} is on host {} and not in the object store",
                snap.id, snap.host
            ))
        })?;
        let (image, rootfs, guest_dir) = self.fetch_image(&image_row).await?;
        let base = SnapshotRow {
            rootfs,
            guest_dir,
            image_dir: image.display().to_string(),
            ..snap
        };
        self.create_from_image(&spec, &base, &image, "snapshot")
            .await
    }

    /// The snapshot row of a capture of sandbox `r` into `image` under `id` (a snapshot, or
    /// a fork tree's shared capture), on this host, holding `volumes`; its size and kernels
    /// are filled in once the image is written.
    pub(super) fn capture_row(
        &self,
        r: &pandastack_store::SandboxRow,
        id: &str,
        image: &Path,
        volumes: Vec<pandastack_store::SandboxVolume>,
    ) -> SnapshotRow {
        SnapshotRow {
            id: id.to_string(),
            workspace_id: r.workspace_id.clone(),
            sandbox_id: r.id.clone(),
            template: r.template.clone(),
            template_generation: r.template_generation,
            cpu: r.cpu,
            memory_mb: r.memory_mb,
            rootfs: r.rootfs.clone(),
            guest_dir: r.guest_dir.clone(),
            image_dir: image.display().to_string(),
            size_bytes: 0,
            kernels: serde_json::Value::Null,
            created_at: now_ms(),
            disk_mb: r.disk_mb,
            host: self.cfg.host_name.clone(),
            volumes,
        }
    }

    /// Removes this host's cached copies of image `id` (a deleted snapshot).
    fn forget_cached(&self, id: &str) {
        let cache = crate::objects::cache_dir(&self.cfg.data_dir);
        let Ok(entries) = std::fs::read_dir(&cache) else {
            return;
        };
        let prefix = format!("{id}-");
        for e in entries.filter_map(Result::ok) {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}
