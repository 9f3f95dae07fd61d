//! Volumes on the host agent (issue 9; seed 001 §3, contract §2.6): named ext4 images of a
//! workspace (`<data_dir>/volumes/<vol id>.ext4`, sparse) that outlive sandboxes.
//!
//! A volume is *held* by the sandboxes it is attached to: one read-write, or any number
//! read-only while none holds it read-write (seed 001: "attached to one sandbox at a time").
//! The holds live on the holders' rows ([`SandboxRow::volumes`], persisted) and in an index
//! here that makes taking one atomic ([`Host::hold_volumes`]); start-up recovery rebuilds the
//! index from the rows. A hibernated sandbox keeps its holds (its volumes are attached again
//! when it wakes); a sandbox that is deleted or fails gives them up once the engine has
//! released the images ([`Host::release_volumes`]), so a volume is free only when its image is
//! closed. The engine mounts and binds the images (`/mnt/{name}` inside).

use super::Host;
use crate::error::ApiError;
use pandastack_api::{SandboxVolume as ApiSandboxVolume, Volume, VolumeAttachment};
use pandastack_engine::VolumeMount;
use pandastack_store::{now_ms, SandboxRow, SandboxVolume, StoreError, VolumeRow};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;
use tracing::{info, warn};

/// Longest volume name (issue 9: `[A-Za-z0-9._-]{1,64}`).
pub const MAX_VOLUME_NAME: usize = 64;
/// Smallest volume, MiB (room for the filesystem's journal and metadata).
pub const MIN_VOLUME_MB: u64 = 64;
/// Largest volume, MiB: 64 GiB, the ceiling the Python SDK documents (`VolumesAPI.create`:
/// "max 65,536 = 64 GiB").
pub const MAX_VOLUME_MB: u64 = 64 << 10;

/// Bytes a volume create or grow is taken to write at once (mkfs/resize2fs metadata of a
/// sparse image), for the host's disk reserve.
pub const VOLUME_WRITE_ESTIMATE: u64 = 64 << 20;

/// Volume limits (server flags; issue 9 "Quotas").
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeLimits {
    /// Volumes one workspace may have (`--workspace-max-volumes`).
    pub workspace_max_volumes: usize,
    /// Provisioned MiB of one workspace's volumes together (`--workspace-max-volume-gb`).
    pub workspace_max_volume_mb: u64,
}

impl Default for VolumeLimits {
    fn default() -> Self {
        VolumeLimits {
            workspace_max_volumes: 20,
            workspace_max_volume_mb: 100 << 10,
        }
    }
}

/// Who holds each volume: volume id -> (sandbox id, read-only).
#[derive(Debug, Default)]
pub struct Holds {
    by_volume: Mutex<HashMap<String, Vec<(String, bool)>>>,
    /// Volumes being grown or deleted: nobody may attach them meanwhile.
    resizing: Mutex<HashSet<String>>,
}

impl Holds {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<(String, bool)>>> {
        self.by_volume.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn resizing(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.resizing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The holders of a volume, read-write one first.
    pub fn of(&self, volume_id: &str) -> Vec<(String, bool)> {
        let mut v = self.lock().get(volume_id).cloned().unwrap_or_default();
        v.sort_by_key(|(_, ro)| *ro);
        v
    }

    /// Blocks new holds of `volume_id` (a resize, a delete, a drain moving it); false when
    /// it is blocked already.
    pub(super) fn block(&self, volume_id: &str) -> bool {
        self.resizing().insert(volume_id.to_string())
    }

    /// Ends [`Holds::block`].
    pub(super) fn unblock(&self, volume_id: &str) {
        self.resizing().remove(volume_id);
    }
}

/// 400 unless `name` is a valid volume name (issue 9: `[A-Za-z0-9._-]{1,64}`; `.` and `..`
/// would escape `/mnt`).
///
/// # Errors
/// 400 naming `field`.
pub fn check_volume_name(field: &str, name: &str) -> Result<(), ApiError> {
    let ok = (1..=MAX_VOLUME_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && name != "."
        && name != "..";
    if ok {
        return Ok(());
    }
    let shown: String = name.chars().take(MAX_VOLUME_NAME).collect();
    Err(ApiError::BadRequest(format!(
        "{field}: invalid volume name '{shown}': use 1 to {MAX_VOLUME_NAME} of A-Z a-z 0-9 . _ - (not . or ..)"
    )))
}

/// 400 unless `size_mb` is a size a volume can have.
fn check_size(size_mb: u64) -> Result<u32, ApiError> {
    if !(MIN_VOLUME_MB..=MAX_VOLUME_MB).contains(&size_mb) {
        return Err(ApiError::BadRequest(format!(
            "size_mb must be between {MIN_VOLUME_MB} and {MAX_VOLUME_MB}, got {size_mb}"
        )));
    }
    Ok(size_mb as u32)
}

impl Host {
    /// The image file of volume `id`.
    pub fn volume_image(&self, id: &str) -> PathBuf {
        self.cfg.data_dir.join("volumes").join(format!("{id}.ext4"))
    }

    /// The engine's view of the volumes a row holds.
    pub fn volume_mounts(&self, held: &[SandboxVolume]) -> Vec<VolumeMount> {
        held.iter()
            .map(|v| VolumeMount {
                name: v.name.clone(),
                image: self.volume_image(&v.volume_id),
                read_only: v.read_only,
            })
            .collect()
    }

    /// The workspace's volume `name`.
    ///
    /// # Errors
    /// 400 for an invalid name; 404 naming it when there is none.
    pub async fn volume(&self, workspace_id: &str, name: &str) -> Result<VolumeRow, ApiError> {
        check_volume_name("name", name)?;
        self.store
            .volume(workspace_id, name)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("volume {name} not found")))
    }

    /// Creates an empty volume (seed 001: `client.volumes.create(name=..., size_mb=8192)`).
    ///
    /// # Errors
    /// 400 for a bad name or size; 409 when the workspace has one of that name; 429 past the
    /// workspace's volume count or size quota; 507 when the host's disk could not hold it
    /// above its reserve; 500 when formatting fails (nothing is left).
    pub async fn create_volume(
        &self,
        workspace_id: &str,
        name: &str,
        size_mb: u64,
    ) -> Result<VolumeRow, ApiError> {
        check_volume_name("name", name)?;
        let size_mb = check_size(size_mb)?;
        if self.store.volume(workspace_id, name).await?.is_some() {
            return Err(ApiError::Conflict(format!("volume {name} already exists")));
        }
        let theirs = self.store.list_volumes(Some(workspace_id)).await?;
        self.check_volume_quota(&theirs, u64::from(size_mb), 1)?;
        self.check_volume_disk("volume create")?;
        let row = VolumeRow {
            id: format!("vol-{}", uuid::Uuid::new_v4().simple()),
            workspace_id: workspace_id.to_string(),
            name: name.to_string(),
            size_mb,
            created_at: now_ms(),
            host: self.cfg.host_name.clone(),
        };
        let image = self.volume_image(&row.id);
        let partial = image.with_extension("ext4.partial");
        std::fs::create_dir_all(self.cfg.data_dir.join("volumes"))
            .map_err(|e| ApiError::internal("volume create", e))?;
        self.engine
            .format_volume(&partial, size_mb)
            .await
            .map_err(|e| ApiError::internal("volume create", e))?;
        // The image is complete before the row exists: a crash leaves at most an orphan
        // image, which start-up recovery removes.
        if let Err(e) = std::fs::rename(&partial, &image) {
            let _ = std::fs::remove_file(&partial);
            return Err(ApiError::internal("volume create", e));
        }
        match self.store.insert_volume(&row).await {
            Ok(()) => {}
            Err(StoreError::Conflict(_)) => {
                let _ = std::fs::remove_file(&image);
                return Err(ApiError::Conflict(format!("volume {name} already exists")));
            }
            Err(e) => {
                let _ = std::fs::remove_file(&image);
                return Err(e.into());
            }
        }
        info!(volume = %row.name, volume_id = %row.id, size_mb, "volume created");
        Ok(row)
    }

    /// 429 when `extra_mb` more MiB (in `extra_count` more volumes) would take the workspace
    /// past its volume quota.
    fn check_volume_quota(
        &self,
        theirs: &[VolumeRow],
        extra_mb: u64,
        extra_count: usize,
    ) -> Result<(), ApiError> {
        let limits = &self.cfg.volume_limits;
        if theirs.len() + extra_count > limits.workspace_max_volumes {
            return Err(ApiError::TooManyRequests {
                message: format!(
                    "workspace quota: at most {} volumes (this workspace has {}); delete some first",
                    limits.workspace_max_volumes,
                    theirs.len()
                ),
                retry_after_s: None,
            });
        }
        let total: u64 = theirs.iter().map(|v| u64::from(v.size_mb)).sum();
        if total + extra_mb > limits.workspace_max_volume_mb {
            return Err(ApiError::TooManyRequests {
                message: format!(
                    "workspace quota: volumes may add up to {} MiB (this workspace has {total} MiB, {extra_mb} MiB more asked)",
                    limits.workspace_max_volume_mb
                ),
                retry_after_s: None,
            });
        }
        Ok(())
    }

    /// 507 when a volume create or grow would leave the data dir's filesystem below the
    /// host's disk reserve ([`Host::check_disk_reserve`], issue 8). Images are sparse: what
    /// such a call writes now is the filesystem's metadata (a few MiB, counted as
    /// [`VOLUME_WRITE_ESTIMATE`]); what sandboxes write later is bounded by the workspace's
    /// provisioned-size quota.
    fn check_volume_disk(&self, what: &str) -> Result<(), ApiError> {
        self.check_disk_reserve(what, VOLUME_WRITE_ESTIMATE)
    }

    /// Deletes a detached volume and its data (contract §2.6: "refused while attached").
    ///
    /// # Errors
    /// 404 when there is none; 409 naming the sandbox that holds it, or while it is being
    /// resized or deleted.
    pub async fn delete_volume(&self, workspace_id: &str, name: &str) -> Result<(), ApiError> {
        let vol = self.volume(workspace_id, name).await?;
        {
            // Under the holds' lock the volume is marked busy: no create can take it from now
            // until the row is gone (and one that took it just before is seen here).
            let holds = self.volume_holds.lock();
            if let Some((holder, _)) = holds.get(&vol.id).and_then(|h| h.first()) {
                return Err(ApiError::Conflict(format!(
                    "volume {name} is attached to sandbox {holder}; kill the sandbox first"
                )));
            }
            if !self.volume_holds.resizing().insert(vol.id.clone()) {
                return Err(ApiError::Conflict(format!(
                    "volume {name} is being resized or deleted"
                )));
            }
        }
        let deleted = self.store.delete_volume(&vol.id).await;
        self.volume_holds.resizing().remove(&vol.id);
        deleted?;
        let image = self.volume_image(&vol.id);
        if let Err(e) = std::fs::remove_file(&image) {
            warn!(volume_id = %vol.id, error = %e, "removing volume image");
        }
        info!(volume = %name, volume_id = %vol.id, "volume deleted");
        Ok(())
    }

    /// Grows a detached volume (seed 001: it cannot shrink).
    ///
    /// # Errors
    /// 400 for a size below the current one or out of range; 404; 409 while attached; 429
    /// past the workspace's size quota; 507 when the host cannot hold it; 500 when growing
    /// fails (the volume keeps its old size).
    pub async fn resize_volume(
        &self,
        workspace_id: &str,
        name: &str,
        size_mb: u64,
    ) -> Result<VolumeRow, ApiError> {
        let mut vol = self.volume(workspace_id, name).await?;
        let size_mb = check_size(size_mb)?;
        if size_mb < vol.size_mb {
            return Err(ApiError::BadRequest(format!(
                "size_mb: volume {name} has {} MiB and cannot shrink (got {size_mb})",
                vol.size_mb
            )));
        }
        if size_mb == vol.size_mb {
            return Ok(vol);
        }
        let others: Vec<VolumeRow> = self
            .store
            .list_volumes(Some(workspace_id))
            .await?
            .into_iter()
            .filter(|v| v.id != vol.id)
            .collect();
        self.check_volume_quota(&others, u64::from(size_mb), 0)?;
        self.check_volume_disk("volume resize")?;
        {
            let holds = self.volume_holds.lock();
            if let Some((holder, _)) = holds.get(&vol.id).and_then(|h| h.first()) {
                return Err(ApiError::Conflict(format!(
                    "volume {name} is attached to sandbox {holder}; it can grow only while detached"
                )));
            }
            if !self.volume_holds.resizing().insert(vol.id.clone()) {
                return Err(ApiError::Conflict(format!(
                    "volume {name} is being resized or deleted"
                )));
            }
        }
        let grown = match self
            .engine
            .grow_volume(&self.volume_image(&vol.id), size_mb)
            .await
        {
            Ok(()) => self
                .store
                .set_volume_size(&vol.id, size_mb)
                .await
                .map_err(ApiError::from),
            Err(e) => Err(ApiError::internal("volume resize", e)),
        };
        self.volume_holds.resizing().remove(&vol.id);
        grown?;
        info!(volume = %name, size_mb, "volume grown");
        vol.size_mb = size_mb;
        Ok(vol)
    }

    /// The wire form of a volume: its holders and the space in use (both known only on the
    /// volume's own host; elsewhere, e.g. in a list, none and 0).
    pub async fn volume_json(&self, v: &VolumeRow) -> Volume {
        let holders = self.volume_holds.of(&v.id);
        let used_bytes = if v.host != self.cfg.host_name {
            0
        } else {
            match self.engine.volume_usage(&self.volume_image(&v.id)).await {
                Ok(u) => u.used_bytes,
                Err(e) => {
                    warn!(volume_id = %v.id, error = %e, "reading volume usage");
                    0
                }
            }
        };
        Volume {
            id: v.id.clone(),
            name: v.name.clone(),
            size_mb: u64::from(v.size_mb),
            used_bytes,
            created_at: crate::api::rfc3339(v.created_at),
            attached_to: holders.first().map(|(id, _)| id.clone()),
            attachments: holders
                .into_iter()
                .map(|(sandbox_id, read_only)| VolumeAttachment {
                    sandbox_id,
                    read_only,
                })
                .collect(),
        }
    }

    /// The volumes of a create body (`[{name, read_only}]`, contract §2.1) as holds.
    ///
    /// # Errors
    /// 400 for a bad or repeated name; 404 naming an unknown volume.
    pub async fn resolve_volumes(
        &self,
        workspace_id: &str,
        asked: &[pandastack_api::VolumeMount],
    ) -> Result<Vec<SandboxVolume>, ApiError> {
        let mut out: Vec<SandboxVolume> = Vec::with_capacity(asked.len());
        for (i, v) in asked.iter().enumerate() {
            check_volume_name(&format!("volumes[{i}].name"), &v.name)?;
            if out.iter().any(|o| o.name == v.name) {
                return Err(ApiError::BadRequest(format!(
                    "volumes[{i}]: volume {} is listed twice",
                    v.name
                )));
            }
            let row = self
                .store
                .volume(workspace_id, &v.name)
                .await?
                .ok_or_else(|| ApiError::NotFound(format!("volume {} not found", v.name)))?;
            out.push(SandboxVolume {
                volume_id: row.id,
                name: row.name,
                read_only: v.read_only,
            });
        }
        Ok(out)
    }

    /// The host whose disk holds `volumes` (issue 12: images are local to one host), `None`
    /// for no volumes.
    ///
    /// # Errors
    /// 409 when they are on different hosts; 404 for one deleted meanwhile.
    pub async fn volumes_host(
        &self,
        volumes: &[SandboxVolume],
    ) -> Result<Option<String>, ApiError> {
        let mut host: Option<(String, &str)> = None;
        for v in volumes {
            let row = self
                .store
                .volume_by_id(&v.volume_id)
                .await?
                .ok_or_else(|| ApiError::NotFound(format!("volume {} not found", v.name)))?;
            match &host {
                Some((h, first)) if *h != row.host => {
                    return Err(ApiError::Conflict(format!(
                        "volumes {first} and {} are on different hosts ({h}, {}); a sandbox attaches volumes of one host",
                        v.name, row.host
                    )));
                }
                Some(_) => {}
                None => host = Some((row.host, &v.name)),
            }
        }
        Ok(host.map(|(h, _)| h))
    }

    /// `asked` (resolved) plus the volumes a snapshot was taken with (issue 9: "from_snapshot
    /// re-attaches the snapshot's volumes"); one named in both must be the same volume in the
    /// same mode.
    ///
    /// # Errors
    /// 404 for a snapshot volume deleted since; 400 for a clash.
    pub async fn with_snapshot_volumes(
        &self,
        asked: &[SandboxVolume],
        snapshot: &[SandboxVolume],
    ) -> Result<Vec<SandboxVolume>, ApiError> {
        let mut out = asked.to_vec();
        for v in snapshot {
            if self.store.volume_by_id(&v.volume_id).await?.is_none() {
                return Err(ApiError::NotFound(format!(
                    "volume {} (attached when the snapshot was taken) no longer exists",
                    v.name
                )));
            }
            match out.iter().find(|o| o.name == v.name) {
                None => out.push(v.clone()),
                Some(o) if o == v => {}
                Some(_) => {
                    return Err(ApiError::BadRequest(format!(
                    "volumes: the snapshot attaches volume {} {}; list it that way or not at all",
                    v.name,
                    if v.read_only {
                        "read-only"
                    } else {
                        "read-write"
                    }
                )))
                }
            }
        }
        Ok(out)
    }

    /// Takes the holds of sandbox `sandbox_id` on `volumes`, all or none: a volume may have
    /// one read-write holder, or read-only ones only. The holds are taken first and the
    /// volumes' rows checked after, so a delete running at the same time either sees the hold
    /// (and refuses) or has removed the row (and this refuses).
    ///
    /// # Errors
    /// 409 naming the volume and the sandbox holding it (or while it is resized or deleted);
    /// 404 for a volume deleted meanwhile.
    pub async fn hold_volumes(
        &self,
        sandbox_id: &str,
        volumes: &[SandboxVolume],
    ) -> Result<(), ApiError> {
        if volumes.is_empty() {
            return Ok(());
        }
        self.take_holds(sandbox_id, volumes)?;
        for v in volumes {
            let exists = self.store.volume_by_id(&v.volume_id).await;
            if !matches!(exists, Ok(Some(_))) {
                self.unhold_volumes(sandbox_id);
                exists?;
                return Err(ApiError::NotFound(format!("volume {} not found", v.name)));
            }
        }
        Ok(())
    }

    /// The in-memory half of [`Host::hold_volumes`], under the holds' lock.
    fn take_holds(&self, sandbox_id: &str, volumes: &[SandboxVolume]) -> Result<(), ApiError> {
        let mut holds = self.volume_holds.lock();
        for v in volumes {
            if self.volume_holds.resizing().contains(&v.volume_id) {
                return Err(ApiError::Conflict(format!(
                    "volume {} is being resized or deleted",
                    v.name
                )));
            }
            let held = holds
                .get(&v.volume_id)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let blocker = held
                .iter()
                .find(|(id, ro)| id != sandbox_id && (!*ro || !v.read_only));
            if let Some((holder, ro)) = blocker {
                let how = if *ro { "read-only" } else { "read-write" };
                return Err(ApiError::Conflict(format!(
                    "volume {} is attached {how} to sandbox {holder}; a volume is attached to one sandbox at a time (read-only ones may be shared)",
                    v.name
                )));
            }
        }
        for v in volumes {
            let held = holds.entry(v.volume_id.clone()).or_default();
            held.retain(|(id, _)| id != sandbox_id);
            held.push((sandbox_id.to_string(), v.read_only));
        }
        Ok(())
    }

    /// Gives up every hold of `sandbox_id` (its instance has released the images).
    pub fn unhold_volumes(&self, sandbox_id: &str) {
        let mut holds = self.volume_holds.lock();
        for held in holds.values_mut() {
            held.retain(|(id, _)| id != sandbox_id);
        }
        holds.retain(|_, held| !held.is_empty());
    }

    /// Releases the volumes of a sandbox that is being deleted or failed: the engine stops
    /// its instance's processes and closes the images first (issue 9: "after the sandbox's
    /// writes are flushed and the host mount is unmounted cleanly"), then the holds go and
    /// the row forgets them.
    pub async fn release_volumes(&self, live: &super::Live) {
        let (instance, held) = {
            let r = live.row.lock().await;
            (
                r.instance_id.clone().zip(r.instance_dir.clone()),
                !r.volumes.is_empty(),
            )
        };
        if !held {
            return;
        }
        if let Some((id, dir)) = instance {
            if let Err(e) = self
                .engine
                .release_volumes(&id, std::path::Path::new(&dir))
                .await
            {
                warn!(sandbox_id = %live.id, error = %e, "releasing volumes");
            }
        }
        self.unhold_volumes(&live.id);
        let mut r = live.row.lock().await;
        r.volumes.clear();
        if let Err(e) = self.store.put_sandbox(&r).await {
            warn!(sandbox_id = %live.id, error = %e, "recording released volumes");
        }
    }

    /// Rebuilds the holds from the rows of sandboxes that keep their volumes (start-up).
    pub(super) async fn rebuild_holds(&self, rows: &[SandboxRow]) {
        for r in rows {
            if !r.volumes.is_empty() {
                if let Err(e) = self.hold_volumes(&r.id, &r.volumes).await {
                    warn!(sandbox_id = %r.id, error = %e, "volume holds of a recovered sandbox");
                }
            }
        }
    }

    /// Removes volume images no volume row of this host names and no sandbox of this host
    /// holds (a crash during a create, a delete or a volume move).
    pub(super) async fn collect_orphan_volumes(&self) -> Result<(), ApiError> {
        let mut known: HashSet<String> = self
            .store
            .host_volumes(&self.cfg.host_name)
            .await?
            .into_iter()
            .map(|v| format!("{}.ext4", v.id))
            .collect();
        // And what this host's sandboxes hold: a drain interrupted after the volume rows
        // moved but before the sandbox did leaves them naming the other host
        // (volume_moves.rs), and this copy is the one the sandbox uses.
        for r in self.store.host_sandboxes(&self.cfg.host_name).await? {
            known.extend(r.volumes.iter().map(|v| format!("{}.ext4", v.volume_id)));
        }
        let Ok(files) = std::fs::read_dir(self.cfg.data_dir.join("volumes")) else {
            return Ok(());
        };
        for f in files.filter_map(Result::ok) {
            let name = f.file_name().to_string_lossy().into_owned();
            if !known.contains(&name) {
                warn!(file = %name, "removing a volume image no volume names");
                let _ = std::fs::remove_file(f.path());
            }
        }
        Ok(())
    }
}

/// The `volumes` of a sandbox's JSON.
pub fn sandbox_volumes(held: &[SandboxVolume]) -> Vec<ApiSandboxVolume> {
    held.iter()
        .map(|v| ApiSandboxVolume {
            name: v.name.clone(),
            read_only: v.read_only,
            mount_path: format!("{}/{}", pandastack_engine::VOLUMES_DIR, v.name),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_names_are_checked() {
        for ok in ["agent-workspace", "a", "build.cache_2", &"x".repeat(64)] {
            check_volume_name("name", ok).unwrap();
        }
        for bad in ["", ".", "..", "a/b", "a b", "ü", &"x".repeat(65), "../etc"] {
            let e = check_volume_name("name", bad).unwrap_err().to_string();
            assert!(e.starts_with("name: invalid volume name"), "{bad}: {e}");
        }
        assert!(check_size(63).is_err());
        assert_eq!(check_size(8192).unwrap(), 8192);
        assert!(check_size(MAX_VOLUME_MB + 1).is_err());
    }

    #[test]
    fn sandbox_json_lists_mount_paths() {
        let v = sandbox_volumes(&[SandboxVolume {
            volume_id: "vol-1".into(),
            name: "agent-workspace".into(),
            read_only: true,
        }]);
        assert_eq!(v[0].mount_path, "/mnt/agent-workspace");
        assert!(v[0].read_only);
    }
}
