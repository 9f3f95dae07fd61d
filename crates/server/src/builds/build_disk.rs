//! The disk a Dockerfile build writes on (issue 23 finding 5): a sparse ext4 image of the
//! template's `size_mb` (`<partial>/build-disk.img`) on an autoclear loop device, mounted at
//! `<partial>/build-disk`, made the way sandboxes' disks are (`pandastack_gvisor::disk`). The
//! build's overlay keeps its upper layer there, so everything the steps write (a `RUN`'s
//! files, `COPY`, `ADD`) lands on it: a step gets ENOSPC once the template's changes reach
//! `size_mb`, and the host's disk never holds more than that for the build. Dropped, the
//! disk is unmounted (which frees its loop device) and its image removed; a crash leaves it
//! mounted under the template store, where start-up recovery unmounts it
//! (`Host::recover_builds`).

use super::job::BuildError;
use pandastack_gvisor::disk;
use std::path::{Path, PathBuf};

/// Image file of a build's disk, inside the build's partial directory.
pub const IMAGE: &str = "build-disk.img";
/// Mount point of a build's disk, inside the build's partial directory.
pub const MOUNT: &str = "build-disk";

/// Free space under which a failed step is put down to the disk being full, bytes (ext4
/// keeps a little it never hands out).
const NEARLY_FULL: u64 = 4 << 20;

/// A mounted build disk.
pub struct BuildDisk {
    image: PathBuf,
    mount: PathBuf,
    size_mb: u32,
}

impl BuildDisk {
    /// Formats and mounts a disk of `size_mb` MiB in the build directory `work_dir`.
    ///
    /// # Errors
    /// [`BuildError`] (internal) when formatting or mounting fails; nothing is left behind.
    pub async fn create(work_dir: &Path, size_mb: u32) -> Result<BuildDisk, BuildError> {
        let image = work_dir.join(IMAGE);
        let mount = work_dir.join(MOUNT);
        let (i, m) = (image.clone(), mount.clone());
        tokio::task::spawn_blocking(move || {
            disk::format(&i, size_mb, disk::Kind::Scratch)?;
            let mounted = disk::mount(&i, &m);
            if mounted.is_err() {
                let _ = std::fs::remove_file(&i);
            }
            mounted
        })
        .await
        .map_err(|e| BuildError::internal("making the build disk", e))?
        .map_err(|e| BuildError::internal("making the build disk", e))?;
        Ok(BuildDisk {
            image,
            mount,
            size_mb,
        })
    }

    /// Where the disk is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Bytes still free on the disk (0 when it cannot be read).
    pub fn free_bytes(&self) -> u64 {
        disk::usage(&self.mount)
            .map(|(used, total)| total.saturating_sub(used))
            .unwrap_or(0)
    }

    /// The message of a step that failed for want of room: `error` with the template's
    /// `size_mb` named, when the disk is (nearly) full or the error says ENOSPC; `error` as it
    /// is otherwise.
    pub fn explain(&self, error: BuildError) -> BuildError {
        if error.0.contains("size_mb") {
            return error;
        }
        let enospc = error.0.contains("No space left on device") || error.0.contains("os error 28");
        if !enospc && self.free_bytes() > NEARLY_FULL {
            return error;
        }
        BuildError(format!(
            "{error}\nthe template's changes reached its size_mb ({} MiB): the build ran out of disk; build with a larger size_mb",
            self.size_mb
        ))
    }
}

impl Drop for BuildDisk {
    fn drop(&mut self) {
        if let Err(e) = disk::unmount(&self.mount) {
            tracing::warn!(error = %e, "unmounting a build disk");
        }
        let _ = std::fs::remove_file(&self.image);
        let _ = std::fs::remove_dir(&self.mount);
    }
}
