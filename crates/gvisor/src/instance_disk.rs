//! The disk of one instance (`<instance dir>/disk.img` mounted on `<instance dir>/disk/`) and a
//! stock of spare disk images made ahead of time.
//!
//! runsc runs with `--overlay2=root:dir=<instance dir>/disk`: the root overlay keeps its
//! filestore on that disk. Only the root is overlaid (`all` would overlay every writable bind,
//! and a volume's writes would then never reach the volume). `/tmp` belongs to the root overlay
//! too, so it is on the disk and in checkpoints, not in RAM: gVisor mounts its own RAM tmpfs
//! at `/tmp` only when the rootfs's `/tmp` is empty (runsc `boot/vfs.go`, `mountTmp`), and
//! [`keep_tmp_in_root`] makes sure it is not. Formatting a disk costs ~0.1 s, so a few
//! spare images of the default size wait in `<data_dir>/disks/`; attaching one is a rename and
//! a mount (~30 ms). Spares are made in the background, never on a create's path.

use crate::disk::{self, DiskError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tracing::{debug, warn};

/// Image file of an instance's disk, inside its directory.
pub const IMAGE: &str = "disk.img";
/// Mount point of an instance's disk, inside its directory.
pub const MOUNT: &str = "disk";
/// The empty file kept in a rootfs's `/tmp` (seen in the sandbox as `/tmp/.pandastack-keep`).
pub const TMP_MARKER: &str = ".pandastack-keep";
/// Where instances without a disk (made before disks existed) keep their overlay filestore.
pub const LEGACY_OVERLAY: &str = "overlay";

/// The `--overlay2=root:dir=` directory of the instance in `dir`: its disk's mount point, or
/// the legacy unbounded directory for an instance without a disk.
pub fn overlay_dir(dir: &Path, has_disk: bool) -> PathBuf {
    dir.join(if has_disk { MOUNT } else { LEGACY_OVERLAY })
}

/// Makes `rootfs/tmp` non-empty (an empty [`TMP_MARKER`] file), so runsc keeps `/tmp` in the
/// root overlay instead of mounting a RAM tmpfs over it. Idempotent; a rootfs without a `/tmp`
/// directory is left as it is (runsc would mount a tmpfs there: the instance still starts).
///
/// The rootfs may come from a user (a rootfs tar, a Dockerfile build), so nothing in it is
/// followed: a `tmp` that is a symlink (to a host path, say) counts as no `/tmp`, and the
/// marker is created with `O_NOFOLLOW | O_EXCL` relative to the opened directory (issue 23
/// finding 4: a tar's `tmp -> /tmp/hostmark` made this write on the host).
///
/// # Errors
/// I/O errors other than the marker being there already.
pub fn keep_tmp_in_root(rootfs: &Path) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let root = rustix::fs::open(
        rootfs,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let tmp = match rustix::fs::openat(
        &root,
        "tmp",
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        // Missing, a symlink (ELOOP) or not a directory: not ours to fix here.
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
            return Ok(())
        }
        Err(e) => return Err(e.into()),
    };
    match rustix::fs::openat(
        &tmp,
        TMP_MARKER,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    ) {
        Ok(_) | Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Settings of the spare-disk stock.
#[derive(Debug, Clone)]
pub struct DiskConfig {
    /// Where spare images wait (`<data_dir>/disks`); emptied at start.
    pub spares_dir: PathBuf,
    /// Size of the spares, MiB (the server's default disk size).
    pub spare_mb: u32,
    /// Spares kept ready.
    pub stock: usize,
}

/// The spare-disk stock of one engine.
#[derive(Debug, Clone)]
pub struct Disks {
    cfg: Option<DiskConfig>,
    refilling: Arc<AtomicBool>,
}

impl Disks {
    /// The stock of `cfg` (None: no spares; every disk is formatted when attached). Leftover
    /// spares of a previous process are removed.
    pub fn new(cfg: Option<DiskConfig>) -> Self {
        if let Some(c) = &cfg {
            let _ = std::fs::remove_dir_all(&c.spares_dir);
            let _ = std::fs::create_dir_all(&c.spares_dir);
        }
        let disks = Disks {
            cfg,
            refilling: Arc::default(),
        };
        disks.refill();
        disks
    }

    /// Gives instance directory `dir` a mounted disk of `size_mb` MiB.
    ///
    /// # Errors
    /// [`DiskError`] when formatting or mounting fails.
    pub fn attach(&self, dir: &Path, size_mb: u32) -> Result<(), DiskError> {
        let image = dir.join(IMAGE);
        if !self.take_spare(&image, size_mb) {
            disk::format(&image, size_mb, disk::Kind::Scratch)?;
        }
        disk::mount(&image, &dir.join(MOUNT))?;
        self.refill();
        Ok(())
    }

    /// Unmounts the disk of instance directory `dir`, if it has one (its image goes with the
    /// directory).
    ///
    /// # Errors
    /// [`DiskError`] when it cannot be unmounted even lazily.
    pub fn detach(dir: &Path) -> Result<(), DiskError> {
        let mount_point = dir.join(MOUNT);
        if mount_point.exists() {
            disk::unmount(&mount_point)?;
        }
        Ok(())
    }

    /// Bytes used and size of the disk of instance directory `dir`, when it has one mounted.
    pub fn usage(dir: &Path) -> Option<(u64, u64)> {
        let mount_point = dir.join(MOUNT);
        disk::is_mounted(&mount_point)
            .then(|| disk::usage(&mount_point).ok())
            .flatten()
    }

    fn take_spare(&self, image: &Path, size_mb: u32) -> bool {
        let Some(c) = self.cfg.as_ref().filter(|c| c.spare_mb == size_mb) else {
            return false;
        };
        let Ok(entries) = std::fs::read_dir(&c.spares_dir) else {
            return false;
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".img"))
            .any(|e| std::fs::rename(e.path(), image).is_ok())
    }

    /// Tops the stock up in the background (one refill at a time).
    fn refill(&self) {
        let Some(c) = self.cfg.clone() else { return };
        if c.stock == 0 || self.refilling.swap(true, Ordering::SeqCst) {
            return;
        }
        let flag = self.refilling.clone();
        std::thread::spawn(move || {
            loop {
                let have = std::fs::read_dir(&c.spares_dir)
                    .map(|d| {
                        d.filter_map(Result::ok)
                            .filter(|e| e.file_name().to_string_lossy().ends_with(".img"))
                            .count()
                    })
                    .unwrap_or(0);
                if have >= c.stock {
                    break;
                }
                let name = format!("spare-{}", uuid::Uuid::new_v4().simple());
                let partial = c.spares_dir.join(format!("{name}.partial"));
                match disk::format(&partial, c.spare_mb, disk::Kind::Scratch).and_then(|()| {
                    std::fs::rename(&partial, c.spares_dir.join(format!("{name}.img"))).map_err(
                        |source| DiskError::Io {
                            what: "keeping spare disk",
                            path: partial.clone(),
                            source,
                        },
                    )
                }) {
                    Ok(()) => debug!(spare = %name, "spare disk ready"),
                    Err(e) => {
                        warn!(error = %e, "making a spare disk");
                        let _ = std::fs::remove_file(&partial);
                        break;
                    }
                }
            }
            flag.store(false, Ordering::SeqCst);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ps-{name}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_marker_goes_into_a_real_tmp_only() {
        let rootfs = scratch("keep-tmp");
        std::fs::create_dir(rootfs.join("tmp")).unwrap();
        keep_tmp_in_root(&rootfs).unwrap();
        keep_tmp_in_root(&rootfs).unwrap();
        assert!(rootfs.join("tmp").join(TMP_MARKER).is_file());

        // issue 23 finding 4: `tmp -> <host dir>` is not followed.
        let evil = scratch("keep-tmp-evil");
        let host = scratch("keep-tmp-host");
        std::os::unix::fs::symlink(&host, evil.join("tmp")).unwrap();
        keep_tmp_in_root(&evil).unwrap();
        assert_eq!(std::fs::read_dir(&host).unwrap().count(), 0);
        for d in [rootfs, evil, host] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}
