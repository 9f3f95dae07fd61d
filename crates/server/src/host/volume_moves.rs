//! Volumes that move with a drained sandbox (issue 12 point 8: a drain moves a sandbox
//! "under the same sandbox id, same code-context handles, same volumes").
//!
//! A volume's image lives on its host's disk (`volumes/<id>.ext4`, sparse ext4). A drain moves
//! a sandbox with its volumes when it is their only holder here (a volume shared read-only
//! with another sandbox of this host stays, and so does the sandbox, the report says why):
//!
//! 1. Before the checkpoint the volumes are blocked: nothing else may attach them meanwhile.
//! 2. The hibernation closes their images (unmounted, writes in the file); each is uploaded
//!    as a one-file tar under `volumes/<id>/<ms>/image.tar`, sparse (the tar crate skips the
//!    holes with `SEEK_DATA`, so an 8 GiB volume holding 10 MiB sends about 10 MiB).
//! 3. The adopting host fetches each into `volumes/<id>.ext4.partial` (checked against the
//!    manifest's SHA-256 while it is read; holes come back as holes), renames it into place,
//!    moves each volume row (`host` = itself, conditional on the old host), then the sandbox
//!    row, and takes the holds, so the wake attaches them as on any wake.
//! 4. On success the draining host drops its holds and its copy of each image whose row now
//!    names the new host; either way the uploaded objects are deleted and the blocks lifted.
//!    When the adoption fails before the sandbox row moved, the target gives the volume rows
//!    back and removes what it fetched, and the volumes stay here, usable. A host removes an
//!    image only when its row names another host, so no crash loses a volume (at worst two
//!    hosts hold a copy until the one the row does not name restarts).

use super::Host;
use crate::error::ApiError;
use pandastack_store::SandboxVolume;
use std::path::Path;
use std::time::Instant;
use tracing::{info, warn};

/// The archive's object name under a volume transfer's prefix.
const ARCHIVE: &str = "image.tar";

/// One volume on its way to another host (part of a drain's adoption request).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct VolumeTransfer {
    pub volume_id: String,
    /// Its object-store prefix.
    pub prefix: String,
    /// Bytes of the archive unpacked (the image's data; for the receiver's disk reserve).
    pub bytes: u64,
}

/// A volume id as this server makes them (`vol-` and 32 hex digits): it names a file.
fn valid_volume_id(id: &str) -> bool {
    id.strip_prefix("vol-")
        .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

impl Host {
    /// Draining side, before the checkpoint: `sandbox_id` must be the only holder of each
    /// volume in `held`; they are then blocked from new holds until
    /// [`Host::end_volume_move`].
    ///
    /// # Errors
    /// 409 naming a volume another sandbox of this host holds too, or one being resized or
    /// deleted (nothing is left blocked).
    pub fn begin_volume_move(
        &self,
        sandbox_id: &str,
        held: &[SandboxVolume],
    ) -> Result<(), ApiError> {
        for (i, v) in held.iter().enumerate() {
            let others: Vec<String> = self
                .volume_holds
                .of(&v.volume_id)
                .into_iter()
                .map(|(id, _)| id)
                .filter(|id| id != sandbox_id)
                .collect();
            let why = if !others.is_empty() {
                Some(format!(
                    "volume {} is also attached to sandbox {} here",
                    v.name,
                    others.join(", ")
                ))
            } else if !self.volume_holds.block(&v.volume_id) {
                Some(format!("volume {} is being resized or deleted", v.name))
            } else {
                None
            };
            if let Some(why) = why {
                for done in &held[..i] {
                    self.volume_holds.unblock(&done.volume_id);
                }
                return Err(ApiError::Conflict(why));
            }
        }
        Ok(())
    }

    /// Draining side, after the hibernation closed the images: uploads each volume of `held`.
    ///
    /// # Errors
    /// 409 without an object store; 502 when an upload fails (what was uploaded is deleted).
    pub async fn send_volumes(
        &self,
        sandbox_id: &str,
        held: &[SandboxVolume],
    ) -> Result<Vec<VolumeTransfer>, ApiError> {
        let objects = self
            .objects()
            .cloned()
            .ok_or_else(|| ApiError::Conflict("moving volumes needs --object-store".into()))?;
        let mut sent = Vec::with_capacity(held.len());
        for v in held {
            let image = self.volume_image(&v.volume_id);
            let prefix = format!("volumes/{}/{}", v.volume_id, pandastack_store::now_ms());
            let started = Instant::now();
            let uploaded = objects
                .upload_stream(&prefix, ARCHIVE, move |out| {
                    let mut tar = tar::Builder::new(out);
                    let mut file = std::fs::File::open(&image)?;
                    tar.append_file("image.ext4", &mut file)?;
                    tar.into_inner()?.flush()
                })
                .await;
            match uploaded {
                Ok((sent_bytes, bytes, ())) => {
                    info!(sandbox_id, volume_id = %v.volume_id, bytes, sent_bytes,
                        ms = started.elapsed().as_millis() as u64, "volume uploaded for a move");
                    sent.push(VolumeTransfer {
                        volume_id: v.volume_id.clone(),
                        prefix,
                        bytes,
                    });
                }
                Err(e) => {
                    let _ = objects.delete_prefix(&prefix).await;
                    self.forget_volume_objects(&sent);
                    return Err(ApiError::BadGateway(format!(
                        "uploading volume {}: {e}",
                        v.name
                    )));
                }
            }
        }
        Ok(sent)
    }

    /// Draining side, at the end: lifts the blocks of `held`; when the sandbox `moved`, its
    /// holds go, and this host's copy of each image whose row now names `target` (a copy is
    /// never removed before the row says another host has the volume). The transfer objects
    /// are deleted either way (the adopting host has its copies).
    pub async fn end_volume_move(
        &self,
        sandbox_id: &str,
        held: &[SandboxVolume],
        sent: &[VolumeTransfer],
        moved: bool,
        target: &str,
    ) {
        if moved {
            self.unhold_volumes(sandbox_id);
            for v in held {
                let there = matches!(
                    self.store.volume_by_id(&v.volume_id).await,
                    Ok(Some(row)) if row.host == target
                );
                if !there {
                    warn!(volume_id = %v.volume_id, target, "a moved sandbox's volume row does not name its new host: the image stays here");
                    continue;
                }
                let image = self.volume_image(&v.volume_id);
                if let Err(e) = std::fs::remove_file(&image) {
                    warn!(volume_id = %v.volume_id, error = %e, "removing a moved volume's image");
                }
            }
        }
        for v in held {
            self.volume_holds.unblock(&v.volume_id);
        }
        self.forget_volume_objects(sent);
    }

    fn forget_volume_objects(&self, sent: &[VolumeTransfer]) {
        let Some(objects) = self.objects().cloned() else {
            return;
        };
        let prefixes: Vec<String> = sent.iter().map(|t| t.prefix.clone()).collect();
        self.teardowns.spawn(async move {
            for p in prefixes {
                if let Err(e) = objects.delete_prefix(&p).await {
                    warn!(prefix = %p, error = %e, "deleting a volume transfer's objects");
                }
            }
        });
    }

    /// Adopting side: fetches every volume `held` names from `sent` into place; returns the
    /// ids fetched. Call [`Host::drop_received_volumes`] with them when the adoption fails
    /// after this.
    ///
    /// # Errors
    /// 409 when a held volume has no transfer (or a bad id), or this host already has an
    /// image of it; 507 when the disk reserve cannot hold them; 502 when a fetch fails (what
    /// was fetched is removed).
    pub async fn receive_volumes(
        &self,
        held: &[SandboxVolume],
        sent: &[VolumeTransfer],
    ) -> Result<Vec<String>, ApiError> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let objects = self
            .objects()
            .cloned()
            .ok_or_else(|| ApiError::Conflict("this host has no object store".into()))?;
        let mut plan = Vec::with_capacity(held.len());
        for v in held {
            let t = sent
                .iter()
                .find(|t| t.volume_id == v.volume_id)
                .filter(|t| {
                    valid_volume_id(&v.volume_id)
                        && t.prefix.starts_with(&format!("volumes/{}/", v.volume_id))
                        && !t.prefix.contains("..")
                })
                .ok_or_else(|| {
                    ApiError::Conflict(format!("volume {} was not sent with the sandbox", v.name))
                })?;
            if self.volume_image(&v.volume_id).exists() {
                return Err(ApiError::Conflict(format!(
                    "this host already has an image of volume {}",
                    v.name
                )));
            }
            plan.push(t.clone());
        }
        self.check_disk_reserve("volume move", plan.iter().map(|t| t.bytes).sum())?;
        // The first volume this host has.
        std::fs::create_dir_all(self.cfg.data_dir.join("volumes"))
            .map_err(|e| ApiError::internal("volume move", e))?;
        let mut fetched_ids = Vec::with_capacity(plan.len());
        for t in &plan {
            let image = self.volume_image(&t.volume_id);
            let partial = super::partial_path(&image);
            let _ = std::fs::remove_file(&partial);
            let into = partial.clone();
            let fetched = objects
                .fetch_stream(&t.prefix, ARCHIVE, move |input| unpack_one(input, &into))
                .await
                .map_err(|e| ApiError::BadGateway(format!("fetching volume {}: {e}", t.volume_id)))
                .and_then(|()| {
                    std::fs::rename(&partial, &image)
                        .map_err(|e| ApiError::internal("volume move", e))
                });
            if let Err(e) = fetched {
                let _ = std::fs::remove_file(&partial);
                self.drop_received_volumes(&fetched_ids);
                return Err(e);
            }
            fetched_ids.push(t.volume_id.clone());
        }
        // The draining host removes its copies once the rows name this host: these must be
        // on disk by then.
        if let Ok(dir) = std::fs::File::open(self.cfg.data_dir.join("volumes")) {
            let _ = dir.sync_all();
        }
        Ok(fetched_ids)
    }

    /// Adopting side: removes the images [`Host::receive_volumes`] fetched (`ids`: the
    /// adoption failed before the sandbox row moved here).
    pub fn drop_received_volumes(&self, ids: &[String]) {
        for id in ids {
            if valid_volume_id(id) {
                let _ = std::fs::remove_file(self.volume_image(id));
            }
        }
    }

    /// Adopting side, before the sandbox row moves: moves the volume rows of `held` from
    /// `from` to this host (each conditional on `from`), so that whatever crashes when, an
    /// image is only ever removed by a host its row does not name ([`Host::end_volume_move`],
    /// start-up's orphan collection). Returns the ids moved.
    ///
    /// # Errors
    /// Store errors (what moved is moved back).
    pub async fn take_volume_rows(
        &self,
        from: &str,
        held: &[SandboxVolume],
    ) -> Result<Vec<String>, ApiError> {
        let mut moved = Vec::with_capacity(held.len());
        for v in held {
            match self
                .store
                .move_volume(&v.volume_id, from, &self.cfg.host_name)
                .await
            {
                Ok(true) => moved.push(v.volume_id.clone()),
                Ok(false) => {
                    warn!(volume_id = %v.volume_id, from, "a moved volume's row was not on the draining host")
                }
                Err(e) => {
                    self.give_volume_rows_back(from, &moved).await;
                    return Err(e.into());
                }
            }
        }
        Ok(moved)
    }

    /// Undoes [`Host::take_volume_rows`] (the sandbox row did not move here).
    pub async fn give_volume_rows_back(&self, from: &str, moved: &[String]) {
        for id in moved {
            if let Err(e) = self.store.move_volume(id, &self.cfg.host_name, from).await {
                warn!(volume_id = %id, from, error = %e, "giving a volume row back");
            }
        }
    }
}

/// Writes the one file of a volume archive to `path` (holes kept). Blocking.
fn unpack_one(input: &mut dyn std::io::Read, path: &Path) -> std::io::Result<()> {
    let mut archive = tar::Archive::new(input);
    let mut entries = archive.entries()?;
    let mut entry = entries.next().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "empty volume archive")
    })??;
    if !matches!(
        entry.header().entry_type(),
        tar::EntryType::Regular | tar::EntryType::GNUSparse
    ) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "a volume archive holds one file",
        ));
    }
    // The tar crate's error hides its cause in the source: keep both in the message.
    entry.unpack(path).map_err(|e| {
        let cause = std::error::Error::source(&e)
            .map(|c| format!(": {c}"))
            .unwrap_or_default();
        std::io::Error::new(e.kind(), format!("{e}{cause}"))
    })?;
    std::fs::File::open(path)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparse_image_travels_as_its_data_and_comes_back_with_its_holes() {
        use std::io::{Seek, SeekFrom, Write};
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("volmove-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let image = dir.join("v.ext4");
        let mut f = std::fs::File::create(&image).unwrap();
        f.set_len(1 << 30).unwrap();
        f.write_all(b"superblock").unwrap();
        f.seek(SeekFrom::Start(512 << 20)).unwrap();
        f.write_all(&[7u8; 4096]).unwrap();
        drop(f);
        let mut archive = Vec::new();
        {
            let mut tar = tar::Builder::new(&mut archive);
            tar.append_file("image.ext4", &mut std::fs::File::open(&image).unwrap())
                .unwrap();
            tar.finish().unwrap();
        }
        assert!(
            archive.len() < 1 << 20,
            "the holes were sent: {} bytes",
            archive.len()
        );
        let copy = dir.join("copy.ext4");
        unpack_one(&mut archive.as_slice(), &copy).unwrap();
        let (a, b) = (
            std::fs::read(&image).unwrap(),
            std::fs::read(&copy).unwrap(),
        );
        assert!(a == b, "contents differ");
        assert!(
            std::fs::metadata(&copy).unwrap().blocks() * 512 < 1 << 20,
            "the copy is not sparse"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_volume_ids_name_files() {
        assert!(valid_volume_id(&format!("vol-{}", "a1".repeat(16))));
        for bad in [
            "vol-",
            "../x",
            &format!("vol-{}/", "a".repeat(31)),
            &format!("snap-{}", "a".repeat(32)),
        ] {
            assert!(!valid_volume_id(bad), "{bad}");
        }
    }
}
