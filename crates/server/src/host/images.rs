//! Images across hosts (issue 12 points 6-7). With `--object-store`, every snapshot and
//! hibernation image this host writes is recorded in the store's `images` table and uploaded
//! in the background (the reply that made it is not delayed); a failed upload is retried with
//! backoff (1 s doubling to 60 s) for as long as the image exists, logged and recorded as an
//! event, and the local copy is kept either way. Another host restores such an image by
//! fetching it into `<data_dir>/object-cache/` (checked, coalesced: [`crate::objects`]).
//!
//! **Template identity.** A checkpoint restores only onto the byte-identical rootfs it was
//! taken on. The image's `origin` records the template build it ran on (its directory relative
//! to the data dir, e.g. `templates/code-interpreter/<hash>-g<N>`) and the build's *manifest
//! digest* (`pandastack_templates::transfer::manifest_digest`: every path with its type, mode,
//! owner, size, modification time in ns and symlink target). Builds are never changed in
//! place, so the digest is computed once per build and process (~1.5 s for code-interpreter).
//! A host restores another host's image onto its own build with that digest, or onto a copy
//! of the image's build fetched from the object store (`shared_builds.rs`): before an image is
//! uploaded, its build is published there, keyed by the digest.
//! The guest daemon directory (content-addressed by its SHA-256) must exist on both hosts.

use super::Host;
use crate::error::ApiError;
use crate::objects::{self, Objects};
use pandastack_store::images::{ImageRow, SNAPSHOT};
use pandastack_store::now_ms;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// First pause after a failed upload; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// Longest pause between upload attempts.
const RETRY_MAX: Duration = Duration::from_secs(60);

/// What a restore of an image needs on the host that restores it (the `origin` of its row).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Origin {
    /// The template build directory, relative to the data dir.
    pub build: String,
    /// The build's rootfs manifest digest (module doc), hex.
    pub manifest: String,
    /// The guest daemon directory's name (`guest/<sha256-16>`).
    pub guest: String,
}

impl Host {
    /// The object store, when `--object-store` is set.
    pub fn objects(&self) -> Option<&Arc<Objects>> {
        self.cfg.objects.as_ref()
    }

    /// The origin (module doc) of an image of a sandbox running on `rootfs` with `guest_dir`
    /// of this host; the manifest digest is computed once per build.
    ///
    /// # Errors
    /// 500 when `rootfs` is not a template build of this data dir or cannot be walked.
    pub async fn origin_of(&self, rootfs: &str, guest_dir: &str) -> Result<Origin, ApiError> {
        let rootfs = PathBuf::from(rootfs);
        let build = rootfs
            .parent()
            .and_then(|b| b.strip_prefix(&self.cfg.data_dir).ok())
            .map(|b| b.display().to_string())
            .ok_or_else(|| ApiError::internal("image origin", "rootfs outside the data dir"))?;
        let guest = Path::new(guest_dir)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let manifest = self.manifest_of(&rootfs).await?;
        Ok(Origin {
            build,
            manifest,
            guest,
        })
    }

    pub(super) async fn manifest_of(&self, rootfs: &Path) -> Result<String, ApiError> {
        if let Some(m) = self
            .manifests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(rootfs)
        {
            return Ok(m.clone());
        }
        let path = rootfs.to_path_buf();
        let started = std::time::Instant::now();
        let digest = tokio::task::spawn_blocking(move || {
            pandastack_templates::transfer::manifest_digest(&path)
        })
        .await
        .map_err(|e| ApiError::internal("rootfs manifest", e))?
        .map_err(|e| ApiError::internal("rootfs manifest", e))?;
        info!(rootfs = %rootfs.display(), ms = started.elapsed().as_millis() as u64, "rootfs manifest");
        self.manifests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(rootfs.to_path_buf(), digest.clone());
        Ok(digest)
    }

    /// This host's rootfs and guest dir for an image of `origin` taken on another host: its
    /// build of the same directory when the digests match, else [`Host::rootfs_for`] (another
    /// local build with that digest, or a copy from the object store).
    ///
    /// # Errors
    /// 409 when no build with the image's digest can be had here or this host lacks that guest
    /// daemon; 502/507 from fetching the build (see [`Host::rootfs_for`]).
    pub async fn local_dirs(&self, origin: &Origin) -> Result<(String, String), ApiError> {
        let same = self.cfg.data_dir.join(&origin.build).join("rootfs");
        let rootfs = if !origin.build.contains("..")
            && !origin.build.starts_with('/')
            && same.is_dir()
            && self.manifest_of(&same).await? == origin.manifest
        {
            same
        } else {
            self.rootfs_for(origin).await?
        };
        let guest = self.cfg.data_dir.join("guest").join(&origin.guest);
        if origin.guest.is_empty() || origin.guest.contains('/') || !guest.is_dir() {
            return Err(ApiError::Conflict(format!(
                "the image was taken with guest daemon {}, which this host ({}) does not have (run the same pandastack version on every host)",
                origin.guest, self.cfg.host_name
            )));
        }
        Ok((rootfs.display().to_string(), guest.display().to_string()))
    }

    /// Records an image this host wrote at `dir` and, with an object store, uploads it in the
    /// background. Without one nothing is recorded (images stay on their host, as before).
    pub(super) async fn record_image(
        self: &Arc<Self>,
        (kind, id, sandbox_id): (&str, &str, &str),
        dir: &Path,
        rootfs: &str,
        guest_dir: &str,
    ) {
        if self.objects().is_none() {
            return;
        }
        let origin = match self.origin_of(rootfs, guest_dir).await {
            Ok(o) => serde_json::to_value(o).unwrap_or_default(),
            Err(e) => {
                warn!(image = %id, error = %e, "image origin: the image stays on this host");
                return;
            }
        };
        let row = ImageRow {
            id: id.to_string(),
            kind: kind.to_string(),
            sandbox_id: sandbox_id.to_string(),
            host: self.cfg.host_name.clone(),
            dir: dir.display().to_string(),
            origin,
            created_at: now_ms(),
            uploaded_at: None,
            attempts: 0,
            error: None,
        };
        if let Some(old) = self.store.image(id).await.ok().flatten() {
            // A sandbox hibernated again: the previous image's objects go.
            self.forget_objects(&old);
        }
        if let Err(e) = self.store.put_image(&row).await {
            warn!(image = %id, error = %e, "recording an image: it stays on this host");
            return;
        }
        self.spawn_upload(row);
    }

    /// Resumes the uploads this host had not finished (start-up).
    pub async fn resume_uploads(self: &Arc<Self>) {
        if self.objects().is_none() {
            return;
        }
        // The first image of each build would otherwise wait for its manifest (~1.5 s) and
        // the build's upload.
        self.publish_current_builds_later();
        match self.store.pending_images(&self.cfg.host_name).await {
            Ok(rows) => {
                for row in rows {
                    if Path::new(&row.dir).is_dir() {
                        self.spawn_upload(row);
                    } else {
                        let _ = self.store.delete_image(&row.id).await;
                    }
                }
            }
            Err(e) => warn!(error = %e, "reading pending uploads"),
        }
    }

    fn spawn_upload(self: &Arc<Self>, row: ImageRow) {
        let me = self.clone();
        tokio::spawn(async move { me.upload(row).await });
    }

    /// Uploads `row`'s image until it succeeds or the image is gone (module doc).
    async fn upload(&self, row: ImageRow) {
        let Some(objects) = self.objects().cloned() else {
            return;
        };
        let prefix = prefix_of(&row);
        let mut pause = RETRY_FIRST;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = std::time::Instant::now();
            // The image is of use elsewhere only with its template build (shared_builds.rs).
            let result = match serde_json::from_value::<Origin>(row.origin.clone()) {
                Ok(origin) => match self.publish_origin(&origin).await {
                    Ok(()) => objects.upload_dir(&prefix, Path::new(&row.dir)).await,
                    // A tree `pack` refuses (a socket a RUN step left, a name that is not
                    // UTF-8) will never publish: the image goes up anyway, restorable on
                    // hosts holding a copy of that build.
                    Err(objects::ObjectsError::Io(e))
                        if e.kind() == std::io::ErrorKind::InvalidData =>
                    {
                        warn!(image = %row.id, build = %origin.build, error = %e, "template build cannot be published; uploading the image without it");
                        objects.upload_dir(&prefix, Path::new(&row.dir)).await
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(objects::ObjectsError::Config(format!("image origin: {e}"))),
            };
            // The image may have been deleted (or woken) while it uploaded.
            let current = self.store.image(&row.id).await.ok().flatten();
            if current
                .as_ref()
                .is_none_or(|c| c.created_at != row.created_at)
            {
                let _ = objects.delete_prefix(&prefix).await;
                return;
            }
            match result {
                Ok(bytes) => {
                    let ms = started.elapsed().as_millis() as u64;
                    if let Err(e) = self.store.image_upload_result(&row.id, Ok(now_ms())).await {
                        warn!(image = %row.id, error = %e, "recording an upload");
                    }
                    crate::metrics::observe("image_upload", started);
                    info!(image = %row.id, bytes, ms, attempt, "image uploaded");
                    return;
                }
                Err(e) => {
                    let why = e.to_string();
                    warn!(image = %row.id, attempt, error = %why, retry_in_s = pause.as_secs(), "image upload failed");
                    let _ = self.store.image_upload_result(&row.id, Err(&why)).await;
                    self.upload_event(&row, &format!("upload failed (attempt {attempt}): {why}"))
                        .await;
                    if !Path::new(&row.dir).is_dir() {
                        return;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// Records an event about `row`'s upload on its sandbox (state unchanged).
    async fn upload_event(&self, row: &ImageRow, what: &str) {
        let Ok(Some(sb)) = self.store.sandbox(&row.sandbox_id).await else {
            return;
        };
        let cause = format!("{} {} {what}", row.kind, row.id);
        if let Ok(ev) = self
            .store
            .insert_event(
                &sb.workspace_id,
                &sb.id,
                &sb.status,
                &sb.status,
                &cause,
                now_ms(),
            )
            .await
        {
            if !self.cfg.cluster {
                let _ = self.events.send(ev);
            }
        }
    }

    /// Whether image `id` is in the object store (false without one).
    pub async fn uploaded(&self, id: &str) -> bool {
        self.objects().is_some()
            && matches!(
                self.store.image(id).await,
                Ok(Some(ImageRow {
                    uploaded_at: Some(_),
                    ..
                }))
            )
    }

    /// Deletes image `id`'s row and, in the background, its objects (a deleted snapshot, a
    /// hibernation image consumed by its wake).
    pub(super) async fn drop_image(&self, id: &str) {
        if self.objects().is_none() {
            return;
        }
        match self.store.image(id).await {
            Ok(Some(row)) => {
                let _ = self.store.delete_image(id).await;
                self.forget_objects(&row);
            }
            Ok(None) => {}
            Err(e) => warn!(image = %id, error = %e, "reading an image row"),
        }
    }

    /// Deletes `row`'s objects in the background (errors logged: an orphan object costs
    /// storage, nothing else).
    fn forget_objects(&self, row: &ImageRow) {
        let Some(objects) = self.objects().cloned() else {
            return;
        };
        let prefix = prefix_of(row);
        self.teardowns.spawn(async move {
            if let Err(e) = objects.delete_prefix(&prefix).await {
                warn!(prefix = %prefix, error = %e, "deleting an image's objects");
            }
        });
    }

    /// A local copy of image `row` taken on another host, fetched from the object store into
    /// the object cache, with this host's rootfs and guest dir for it.
    ///
    /// # Errors
    /// 409 when it is not uploaded (yet), or this host lacks its template build or guest
    /// daemon (see [`Host::local_dirs`]); 502 when the fetch fails (a checksum mismatch
    /// included).
    pub async fn fetch_image(&self, row: &ImageRow) -> Result<(PathBuf, String, String), ApiError> {
        let objects = self.objects().ok_or_else(|| {
            ApiError::Conflict(format!(
                "image {} is on host {}, and this host has no object store",
                row.id, row.host
            ))
        })?;
        if row.uploaded_at.is_none() {
            return Err(ApiError::Conflict(format!(
                "image {} is on host {} and not uploaded to the object store yet{}",
                row.id,
                row.host,
                row.error
                    .as_ref()
                    .map(|e| format!(" (last attempt: {e})"))
                    .unwrap_or_default()
            )));
        }
        let origin: Origin = serde_json::from_value(row.origin.clone())
            .map_err(|e| ApiError::internal("image origin", e))?;
        let (rootfs, guest) = self.local_dirs(&origin).await?;
        let dir =
            objects::cache_dir(&self.cfg.data_dir).join(format!("{}-{}", row.id, row.created_at));
        let started = std::time::Instant::now();
        objects
            .fetch_dir(&prefix_of(row), &dir)
            .await
            .map_err(|e| ApiError::BadGateway(format!("fetching image {}: {e}", row.id)))?;
        crate::metrics::observe("image_fetch", started);
        Ok((dir, rootfs, guest))
    }

    /// Removes this host's fetched copies of images that are no longer in the store (a
    /// deleted snapshot; issue 12: a copy must not outlive its image). A copy of an image that
    /// still exists stays for the next restore. Store errors keep the copy (the next sweep
    /// decides). Run by the sweeper every 10 s.
    pub(super) async fn sweep_object_cache(&self) {
        if self.objects().is_none() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(objects::cache_dir(&self.cfg.data_dir)) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // `<image id>-<created_at ms>` (see `fetch_image`); anything else is a fetch's own.
            let Some((id, created)) = name.rsplit_once('-') else {
                continue;
            };
            let Ok(created) = created.parse::<i64>() else {
                continue;
            };
            let current = match self.store.image(id).await {
                Ok(row) => row.is_some_and(|r| r.created_at == created),
                Err(_) => true,
            };
            if !current {
                info!(image = %id, "removing the fetched copy of an image that is gone");
                let path = entry.path();
                self.teardowns
                    .spawn_blocking(move || std::fs::remove_dir_all(path));
            }
        }
    }

    /// Empties the object cache (start-up: what it held was fetched for restores that are
    /// over; a later restore fetches again).
    pub(super) fn clear_object_cache(&self) {
        let dir = objects::cache_dir(&self.cfg.data_dir);
        if dir.exists() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// The object-store prefix of an image row.
fn prefix_of(row: &ImageRow) -> String {
    match row.kind.as_str() {
        SNAPSHOT => objects::snapshot_prefix(&row.id),
        _ => objects::hibernate_prefix(&row.sandbox_id, row.created_at),
    }
}

/// The image id of sandbox `id`'s hibernation image.
pub fn hibernate_image_id(id: &str) -> String {
    format!("hibernate-{id}")
}
