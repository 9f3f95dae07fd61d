//! Fork, fork_tree and promote (seed 003 "Forking", seed 000 §3). A fork captures the running
//! parent once (`checkpoint --leave-running` into a temporary image) and restores that image
//! into N new sandboxes at once; the parent keeps running untouched and each child is an
//! independent copy (own memory, own overlay). Children record `parent_id` and `fork_tree_id`
//! in their metadata. An unpromoted child dies with its parent; `promote` makes it standalone
//! (metadata `promoted = "true"`) and can kill its siblings.

use super::{operations, CreateSpec, Host, Live};
use crate::error::ApiError;
use pandastack_store::SnapshotRow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A fork image on its way to another host (issue 12 point 4): what the host that restores
/// it needs, sent host to host as JSON.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ForkTransfer {
    /// The capture (its `rootfs`, `guest_dir` and `image_dir` are the parent host's).
    pub base: SnapshotRow,
    /// The template build and guest daemon it needs.
    pub origin: super::images::Origin,
    /// Its object-store prefix.
    pub prefix: String,
    /// The child's metadata (with `parent_id` and `fork_tree_id`).
    pub metadata: BTreeMap<String, String>,
    pub ttl_seconds: i64,
    pub envs: BTreeMap<String, String>,
    pub network: Option<pandastack_engine::NetworkPolicy>,
    /// MiB.
    pub disk_mb: u32,
    /// Children to restore from the one capture (a fork tree placed on another host);
    /// `None`: one child, answered as one sandbox (a fork).
    #[serde(default)]
    pub count: Option<usize>,
}

/// Restore targets a fork may make while its parent is captured, beyond the ready stock: the
/// checkpoint leaves about one core of this 2-core host idle for ~125 ms, time for about two.
/// Measured (10 runs each, P50): fork_tree(3) 691 -> 603 ms, the parent's stall 173 -> 197 ms;
/// a fork_tree(8) that made all six it lacked saved nothing (1437 vs 1421 ms: eight restores
/// share the cores) and stalled its parent 347 ms instead of 192, so it makes none.
pub const TARGETS_BESIDE_CHECKPOINT: usize = 2;

/// Largest `count` of one fork_tree.
pub const MAX_FORK_COUNT: usize = 16;

/// What `promote` did (contract §2.1: `{winner, tree_id, deleted, failures}`).
pub use pandastack_api::Promotion;

impl Host {
    /// Forks `parent` into `count` children carrying `metadata` (plus `parent_id`,
    /// `fork_tree_id`). Children inherit the parent's read-only volumes; its read-write ones
    /// cannot be shared (issue 9), so a parent holding one is forked only with
    /// `detach_volumes`, and its children start without them.
    ///
    /// # Errors
    /// 400 for a count of 0 or over [`MAX_FORK_COUNT`]; 409 unless the parent is running, or
    /// when it holds a read-write volume and `detach_volumes` is false; capacity errors as
    /// [`Host::create`] (for all `count` children at once); 500 when a restore fails
    /// (children already made are destroyed: all or nothing).
    pub async fn fork(
        &self,
        parent: &Arc<Live>,
        count: usize,
        metadata: BTreeMap<String, String>,
        detach_volumes: bool,
    ) -> Result<Vec<Arc<Live>>, ApiError> {
        if count == 0 || count > MAX_FORK_COUNT {
            return Err(ApiError::BadRequest(format!(
                "count must be between 1 and {MAX_FORK_COUNT}, got {count}"
            )));
        }
        let (workspace, memory_mb) = {
            let r = parent.row.lock().await;
            (r.workspace_id.clone(), r.memory_mb)
        };
        self.check_disk_reserve("fork", u64::from(memory_mb) << 20)?;
        let _admitted = self.admit(&workspace, memory_mb, count, true).await?;
        let held = parent.row.lock().await.volumes.clone();
        if let Some(rw) = held.iter().find(|v| !v.read_only) {
            if !detach_volumes {
                return Err(ApiError::Conflict(format!(
                    "sandbox {} holds volume {} read-write: a volume is attached to one sandbox at a time, so fork children cannot share it; fork with \"volumes\": \"detach\" to start the children without it",
                    parent.id, rw.name
                )));
            }
        }
        let inherited: Vec<_> = held.into_iter().filter(|v| v.read_only).collect();
        let tree_id = format!("tree-{}", uuid::Uuid::new_v4().simple());
        let image = self.fork_image_dir(parent, &tree_id).await;
        // Containers for the children are made while the parent is captured (the kept stock
        // covers a fork or two; a small tree needs more), when they fit beside the checkpoint.
        let class = self.child_target_class(parent).await;
        let (captured, ()) = tokio::join!(
            self.capture_fork(parent, &tree_id, &image, metadata, inherited),
            self.engine
                .make_targets(class, count, TARGETS_BESIDE_CHECKPOINT),
        );
        let (base, spec) = captured?;
        parent.touch().await;
        let children = self.restore_children(&spec, &base, &image, count).await;
        self.end_operation(&tree_id).await;
        children
    }

    /// Restores `count` fork children from `image` concurrently, then removes the image.
    /// When one fails the others are destroyed and its error returned.
    async fn restore_children(
        &self,
        spec: &CreateSpec,
        base: &SnapshotRow,
        image: &std::path::Path,
        count: usize,
    ) -> Result<Vec<Arc<Live>>, ApiError> {
        let results = futures::future::join_all(
            (0..count).map(|_| self.create_from_image(spec, base, image, "fork")),
        )
        .await;
        let _ = std::fs::remove_dir_all(image);
        let mut children = Vec::with_capacity(count);
        let mut first_err = None;
        for r in results {
            match r {
                Ok(c) => children.push(c),
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        if let Some(e) = first_err {
            for c in &children {
                let _ = self.destroy(c, "fork failed").await;
            }
            return Err(e);
        }
        Ok(children)
    }

    /// Records the fork operation of `tree_id` and captures `parent` into `image` (it stops
    /// answering for the checkpoint only, `--leave-running`). Returns the image's description
    /// and the spec of its children (metadata plus `parent_id` and `fork_tree_id`).
    ///
    /// # Errors
    /// 409 unless the parent is running; 500 when the checkpoint fails (the operation is
    /// abandoned, nothing is left).
    async fn capture_fork(
        &self,
        parent: &Arc<Live>,
        tree_id: &str,
        image: &std::path::Path,
        metadata: BTreeMap<String, String>,
        inherited: Vec<pandastack_store::SandboxVolume>,
    ) -> Result<(SnapshotRow, CreateSpec), ApiError> {
        // Crash-safe (operations.rs): a fork interrupted by a crash is undone whole.
        self.begin_operation(
            operations::FORK,
            tree_id,
            &parent.id,
            image,
            serde_json::Value::Null,
        )
        .await?;
        let _gate = parent.gate.write().await;
        let paused = std::time::Instant::now();
        if let Err(e) = self.capture(parent, image, true).await {
            self.abandon_operation(tree_id, image).await;
            return Err(e);
        }
        crate::metrics::observe("fork_pause", paused);
        let r = parent.snapshot_row().await;
        let base = self.capture_row(&r, tree_id, image, inherited.clone());
        let mut md = metadata;
        md.insert("parent_id".into(), r.id.clone());
        md.insert("fork_tree_id".into(), tree_id.to_string());
        let spec = CreateSpec {
            workspace_id: r.workspace_id.clone(),
            template: r.template.clone(),
            ttl_seconds: r.ttl_seconds,
            persistent: false,
            metadata: md,
            envs: r.envs.clone(),
            network: super::network::policy_of(&r),
            disk_mb: r.disk_mb.unwrap_or(self.cfg.default_disk_mb),
            volumes: inherited,
        };
        Ok((base, spec))
    }

    /// The first half of a fork onto another host (issue 12 point 4: the parent's host is
    /// full, or the `host` hint names another): captures `parent` here and uploads the image
    /// to the object store. The caller sends the returned [`ForkTransfer`] to the other host
    /// ([`Host::restore_transfer`]) and then calls [`Host::end_transfer`].
    ///
    /// # Errors
    /// 409 without an object store, unless the parent is running, or when it holds volumes
    /// (they are on this host); 500 when the capture fails; 502 when the upload fails.
    pub async fn fork_for_transfer(
        &self,
        parent: &Arc<Live>,
        metadata: BTreeMap<String, String>,
    ) -> Result<ForkTransfer, ApiError> {
        let objects = self.objects().cloned().ok_or_else(|| {
            ApiError::Conflict("a fork onto another host needs --object-store".into())
        })?;
        let (memory_mb, holds_volumes) = {
            let r = parent.row.lock().await;
            (r.memory_mb, !r.volumes.is_empty())
        };
        if holds_volumes {
            return Err(ApiError::Conflict(format!(
                "sandbox {} holds volumes, which are on this host: its forks stay here",
                parent.id
            )));
        }
        self.check_disk_reserve("fork", u64::from(memory_mb) << 20)?;
        let tree_id = format!("tree-{}", uuid::Uuid::new_v4().simple());
        let image = self.fork_image_dir(parent, &tree_id).await;
        let (base, spec) = self
            .capture_fork(parent, &tree_id, &image, metadata, Vec::new())
            .await?;
        parent.touch().await;
        let prefix = crate::objects::fork_prefix(&tree_id);
        let uploaded = async {
            let origin = self.origin_of(&base.rootfs, &base.guest_dir).await?;
            let started = std::time::Instant::now();
            self.publish_origin(&origin).await.map_err(|e| {
                ApiError::BadGateway(format!("publishing the parent's template build: {e}"))
            })?;
            objects
                .upload_dir(&prefix, &image)
                .await
                .map_err(|e| ApiError::BadGateway(format!("uploading the fork image: {e}")))?;
            crate::metrics::observe("fork_upload", started);
            Ok::<_, ApiError>(origin)
        }
        .await;
        let _ = std::fs::remove_dir_all(&image);
        match uploaded {
            Ok(origin) => Ok(ForkTransfer {
                base,
                origin,
                prefix,
                metadata: spec.metadata,
                ttl_seconds: spec.ttl_seconds,
                envs: spec.envs,
                network: spec.network,
                disk_mb: spec.disk_mb,
                count: None,
            }),
            Err(e) => {
                self.end_transfer(&tree_id).await;
                Err(e)
            }
        }
    }

    /// Ends the transfer of fork tree `tree_id`: its objects are deleted (the child, if any,
    /// has been restored from them) and its operation closed.
    pub async fn end_transfer(&self, tree_id: &str) {
        if let Some(objects) = self.objects() {
            if let Err(e) = objects
                .delete_prefix(&crate::objects::fork_prefix(tree_id))
                .await
            {
                tracing::warn!(tree_id, error = %e, "deleting a fork image's objects");
            }
        }
        self.end_operation(tree_id).await;
    }

    /// The second half of a fork onto another host: fetches the transferred image once and
    /// restores it into `t.count` children here (one when `None`), concurrently, as a fork
    /// tree does on its parent's host. When one fails, the others are destroyed.
    ///
    /// # Errors
    /// 400 for a count of 0 or over [`MAX_FORK_COUNT`]; capacity errors as [`Host::create`];
    /// 409 when this host cannot have the parent's template build; 502 when the fetch fails;
    /// 500 when a restore fails.
    pub async fn restore_transfer(&self, t: ForkTransfer) -> Result<Vec<Arc<Live>>, ApiError> {
        let count = t.count.unwrap_or(1);
        if count == 0 || count > MAX_FORK_COUNT {
            return Err(ApiError::BadRequest(format!(
                "count must be between 1 and {MAX_FORK_COUNT}"
            )));
        }
        let _admitted = self
            .admit(&t.base.workspace_id, t.base.memory_mb, count, true)
            .await?;
        let objects = self
            .objects()
            .ok_or_else(|| ApiError::Conflict("this host has no object store".into()))?;
        let (rootfs, guest_dir) = self.local_dirs(&t.origin).await?;
        let image = crate::objects::cache_dir(&self.cfg.data_dir).join(&t.base.id);
        objects
            .fetch_dir(&t.prefix, &image)
            .await
            .map_err(|e| ApiError::BadGateway(format!("fetching the fork image: {e}")))?;
        let base = SnapshotRow {
            rootfs,
            guest_dir,
            image_dir: image.display().to_string(),
            host: self.cfg.host_name.clone(),
            ..t.base
        };
        let spec = CreateSpec {
            workspace_id: base.workspace_id.clone(),
            template: base.template.clone(),
            ttl_seconds: t.ttl_seconds,
            persistent: false,
            metadata: t.metadata,
            envs: t.envs,
            network: t.network,
            disk_mb: t.disk_mb,
            volumes: Vec::new(),
        };
        self.restore_children(&spec, &base, &image, count).await
    }

    /// The class of restore target a child of `parent` lands on: its row's rootfs, guest
    /// dir, resources, network mode and disk, as `start_instance` builds the child's spec.
    async fn child_target_class(&self, parent: &Live) -> pandastack_engine::TargetClass {
        let r = parent.row.lock().await;
        pandastack_engine::TargetClass::of(&self.spec_of_row(&r))
    }

    /// Where a fork's transient capture goes: the RAM-backed scratch dir when it has room for
    /// twice the parent's memory (writing and reading it back is then memory speed), else
    /// `<data_dir>/forks`. Either way it is removed once the children are restored.
    async fn fork_image_dir(&self, parent: &Live, tree_id: &str) -> std::path::PathBuf {
        let on_disk = self.cfg.data_dir.join("forks").join(tree_id);
        let Some(scratch) = &self.cfg.scratch_dir else {
            return on_disk;
        };
        let iid = parent.row.lock().await.instance_id.clone();
        let need = match iid {
            Some(iid) => self
                .engine
                .stats(&iid)
                .await
                .map(|s| 2 * s.memory_bytes + (256 << 20))
                .unwrap_or(u64::MAX),
            None => u64::MAX,
        };
        match free_bytes(scratch) {
            Some(free) if free > need => scratch.join("forks").join(tree_id),
            _ => on_disk,
        }
    }

    /// Makes `child` standalone; with `cleanup_siblings`, destroys the other children of its
    /// fork tree (`tree_id`, default: the child's own `fork_tree_id`).
    ///
    /// # Errors
    /// 409 when the sandbox is not a fork child or `tree_id` is not its tree (the state of the
    /// sandbox, not the request, is wrong).
    pub async fn promote(
        &self,
        child: &Arc<Live>,
        tree_id: Option<String>,
        cleanup_siblings: bool,
    ) -> Result<Promotion, ApiError> {
        let own_tree = child.row.lock().await.metadata.get("fork_tree_id").cloned();
        let tree = match (tree_id, own_tree) {
            (Some(t), Some(own)) if t != own => {
                return Err(ApiError::Conflict(format!(
                    "tree_id: sandbox {} is not in fork tree {t}",
                    child.id
                )))
            }
            (_, Some(own)) => own,
            (_, None) => {
                return Err(ApiError::Conflict(format!(
                    "sandbox {} is not a fork child",
                    child.id
                )))
            }
        };
        {
            let mut r = child.row.lock().await;
            r.metadata.insert("promoted".into(), "true".into());
            self.store.put_sandbox(&r).await?;
        }
        let mut out = Promotion {
            winner: child.id.clone(),
            tree_id: Some(tree.clone()),
            deleted: Vec::new(),
            failures: BTreeMap::new(),
        };
        if cleanup_siblings {
            for other in self.all() {
                if other.id == child.id || other.workspace_id != child.workspace_id {
                    continue;
                }
                let sibling = other.row.lock().await.metadata.get("fork_tree_id") == Some(&tree);
                if sibling {
                    match self.destroy(&other, "promote cleanup").await {
                        Ok(()) => out.deleted.push(other.id.clone()),
                        Err(e) => {
                            out.failures.insert(other.id.clone(), e.to_string());
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Unpromoted fork children of `parent_id`.
    pub(super) async fn unpromoted_children(&self, parent_id: &str) -> Vec<Arc<Live>> {
        let mut out = Vec::new();
        for l in self.all() {
            let r = l.row.lock().await;
            if r.metadata.get("parent_id").map(String::as_str) == Some(parent_id)
                && r.metadata.get("promoted").map(String::as_str) != Some("true")
            {
                out.push(l.clone());
            }
        }
        out
    }
}

/// Free bytes of the filesystem holding `dir` (created if missing), if it can be read.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    std::fs::create_dir_all(dir).ok()?;
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string that outlives the call and `st` points to
    // writable memory of the right size; statvfs writes it only when it returns 0.
    let rc = unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised `st`.
    let st = unsafe { st.assume_init() };
    Some(st.f_bavail * st.f_frsize)
}
