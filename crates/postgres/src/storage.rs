//! Size-limited storage for one cluster: a sparse ext4 image file mounted through a loop
//! device (issue 10: "own data dir on its own size-limited storage").
//!
//! The image is created sparse at the full size (`storage_mb`), so it costs host disk only for
//! what is written; ext4 refuses writes past it with `ENOSPC`, which PostgreSQL reports as an
//! ordinary error (`could not extend file ...: No space left on device`). Growing truncates
//! the unmounted image larger and grows the filesystem (`resize2fs`).
//! `mount -o loop` allocates the loop device with auto-clear, so unmounting frees it.
//!
//! This is the one place that knows how a database's storage is made (a journal, unlike a
//! sandbox's throwaway disk: committed data must survive a host crash). Sandbox disk quotas and
//! volumes (issues 8, 9) make the same kind of image; the three should end up sharing one
//! implementation behind this interface.

use crate::tool::{command, run, run_accepting};
use crate::PgError;
use std::path::{Path, PathBuf};

/// Bytes per inode of the filesystem: a data directory holds a few files per table and index
/// (a fresh one ~1,300), so one inode per 32 KiB (160k on 5 GiB, ~30k tables) is ample while
/// the inode tables, which ext4 zeroes lazily after the first mount, stay small.
const BYTES_PER_INODE: u64 = 32 * 1024;
/// Fewest inodes of a filesystem, whatever its size.
const MIN_INODES: u64 = 16 * 1024;

/// One image file and where it is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskImage {
    pub image: PathBuf,
    pub mountpoint: PathBuf,
}

impl DiskImage {
    /// Describes the image at `image`, mounted at `mountpoint`.
    pub fn new(image: PathBuf, mountpoint: PathBuf) -> Self {
        DiskImage { image, mountpoint }
    }

    /// Creates the image (sparse, `size_mb` MiB) with an empty ext4 filesystem whose root
    /// directory belongs to `owner` (uid, gid), with no blocks reserved for root.
    ///
    /// # Errors
    /// I/O errors, or `mkfs.ext4`'s complaint. A partial image is removed.
    pub async fn create(&self, size_mb: u64, owner: (u32, u32)) -> Result<(), PgError> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&self.image)?;
        file.set_len(size_mb * 1024 * 1024)?;
        drop(file);
        let image = self.image.display().to_string();
        let extended = format!(
            "root_owner={}:{},lazy_itable_init=1,lazy_journal_init=1,nodiscard",
            owner.0, owner.1
        );
        let inodes = (size_mb * 1024 * 1024 / BYTES_PER_INODE)
            .max(MIN_INODES)
            .to_string();
        let made = run(
            "mkfs.ext4",
            command(
                "mkfs.ext4",
                &[
                    "-q", "-F", "-m", "0", "-N", &inodes, "-E", &extended, &image,
                ],
            ),
        )
        .await;
        if made.is_err() {
            let _ = std::fs::remove_file(&self.image);
        }
        made.map(drop)
    }

    /// True when something is mounted at the mountpoint.
    pub fn is_mounted(&self) -> bool {
        mounted_at(&self.mountpoint)
    }

    /// Mounts the image (a no-op when it is mounted already), creating the mountpoint.
    ///
    /// # Errors
    /// `mount`'s complaint.
    pub async fn mount(&self) -> Result<(), PgError> {
        if self.is_mounted() {
            return Ok(());
        }
        // `mount -o loop` reuses a loop device still attached to the image, with the size it
        // had then (after a grow, the old one): start from none.
        self.detach_loops().await;
        std::fs::create_dir_all(&self.mountpoint)?;
        run(
            "mount",
            command(
                "mount",
                &[
                    "-o",
                    // The image is new and sparse, so its inode tables read as zeros already:
                    // the kernel need not write them (5 GiB has ~40 MiB of them).
                    "loop,noatime,nodev,nosuid,noinit_itable",
                    "-t",
                    "ext4",
                    &self.image.display().to_string(),
                    &self.mountpoint.display().to_string(),
                ],
            ),
        )
        .await
        .map(drop)
    }

    /// Unmounts the image (a no-op when it is not mounted), which frees its loop device.
    ///
    /// # Errors
    /// `umount`'s complaint (a process still has files open there).
    pub async fn unmount(&self) -> Result<(), PgError> {
        if !self.is_mounted() {
            return Ok(());
        }
        run(
            "umount",
            command("umount", &[&self.mountpoint.display().to_string()]),
        )
        .await?;
        // A loop device whose auto-clear did not happen (it was attached by hand).
        self.detach_loops().await;
        Ok(())
    }

    /// Grows the image and its filesystem to `size_mb` MiB. The image must be unmounted: an
    /// online resize needs `CAP_SYS_RESOURCE`, which hosts like this one do not grant, so the
    /// caller stops the cluster for the second this takes (fsck, resize).
    ///
    /// # Errors
    /// `InvalidInput` while mounted; [`PgError::InUse`] while its filesystem is still mounted
    /// in another mount namespace; `e2fsck` / `resize2fs` complaints; I/O errors.
    pub async fn grow(&self, size_mb: u64) -> Result<(), PgError> {
        if self.is_mounted() {
            return Err(PgError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the image must be unmounted to grow",
            )));
        }
        if !self.detach_loops().await {
            // Resizing under a filesystem the kernel still has mounted would corrupt it.
            return Err(PgError::InUse);
        }
        let f = std::fs::OpenOptions::new().write(true).open(&self.image)?;
        let want = size_mb * 1024 * 1024;
        if f.metadata()?.len() < want {
            f.set_len(want)?;
        }
        drop(f);
        let image = self.image.display().to_string();
        // resize2fs insists on a freshly checked filesystem; -p repairs only what is safe
        // (exit 1: something was fixed).
        run_accepting("e2fsck", command("e2fsck", &["-f", "-p", &image]), &[0, 1]).await?;
        run("resize2fs", command("resize2fs", &[&image])).await?;
        Ok(())
    }

    /// Unmounts and deletes the image and the mountpoint. Missing pieces are fine.
    ///
    /// # Errors
    /// `umount`'s complaint; the image is then kept.
    pub async fn destroy(&self) -> Result<(), PgError> {
        self.unmount().await?;
        self.detach_loops().await;
        let _ = std::fs::remove_dir(&self.mountpoint);
        match std::fs::remove_file(&self.image) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Bytes in use and the filesystem's size in bytes (statvfs), when mounted.
    pub fn usage(&self) -> Option<(u64, u64)> {
        if !self.is_mounted() {
            return None;
        }
        let s = nix::sys::statvfs::statvfs(&self.mountpoint).ok()?;
        let frag = s.fragment_size();
        let total = s.blocks() * frag;
        let used = (s.blocks() - s.blocks_free()) * frag;
        Some((used, total))
    }

    /// Loop devices backed by the image (`losetup -j`).
    async fn loop_devices(&self) -> Vec<String> {
        let out = run(
            "losetup",
            command(
                "losetup",
                &["-n", "-O", "NAME", "-j", &self.image.display().to_string()],
            ),
        )
        .await
        .unwrap_or_default();
        out.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }

    /// Detaches every loop device of the image and waits (up to 1 s) until the kernel has
    /// let go of them (auto-clear after an unmount is asynchronous). False when one stays:
    /// its filesystem is still mounted in another mount namespace (a copy made while it was
    /// mounted, which [`share_root`] prevents for our own sandboxes).
    async fn detach_loops(&self) -> bool {
        if !self.image.exists() {
            return true;
        }
        for _ in 0..20 {
            let devs = self.loop_devices().await;
            if devs.is_empty() {
                return true;
            }
            for dev in devs {
                let _ = run("losetup", command("losetup", &["-d", &dev])).await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        tracing::warn!(image = %self.image.display(), "a loop device of the image stays attached (mounted in another mount namespace)");
        false
    }
}

/// True when `/proc/self/mountinfo` lists a mount at `path`.
pub fn mounted_at(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.display().to_string();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| unescape_mount_path(m) == want)
}

/// Makes `root` (the directory every image is mounted under) a shared mount point: a bind
/// mount of itself, `--make-shared`. Mount namespaces copied from the host's while an image is
/// mounted (runsc runs in one per sandbox) then hold a *slave* copy of it, and the host's
/// unmount reaches that copy too; a private copy would keep the filesystem, and its loop
/// device, alive until that sandbox exits (a grow or a delete would then act on a filesystem
/// still mounted elsewhere). Idempotent (after a crash the bind is still there).
///
/// # Errors
/// `mount`'s complaint.
pub async fn share_root(root: &Path) -> Result<(), PgError> {
    std::fs::create_dir_all(root)?;
    let path = root.display().to_string();
    if !mounted_at(root) {
        run("mount", command("mount", &["--bind", &path, &path])).await?;
    }
    run("mount", command("mount", &["--make-shared", &path]))
        .await
        .map(drop)
}

/// Undoes [`share_root`] when nothing is mounted below `root` any more (graceful stop).
pub async fn unshare_root(root: &Path) {
    if mounted_at(root) && mounts_under(root).iter().all(|m| m == root) {
        let path = root.display().to_string();
        if let Err(e) = run("umount", command("umount", &[&path])).await {
            tracing::warn!(error = %e, "unmounting the databases' bind mount");
        }
    }
}

/// Mount points under `dir` (for start-up recovery of what a crash left).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape_mount_path(m)))
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let digits = std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(digits, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path("/a\\040b"), "/a b");
        assert_eq!(unescape_mount_path("/plain"), "/plain");
        assert_eq!(unescape_mount_path("/end\\"), "/end\\");
    }
}
