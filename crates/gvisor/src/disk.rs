//! Size-limited disks: a sparse file formatted ext4, attached to a loop device and mounted.
//!
//! A sandbox's writable root (gVisor's overlay upper layer) lives in a "filestore" file that
//! runsc creates in the directory named by `--overlay2=...:dir=`. Put on one of these disks,
//! that file can grow only to the disk's size: the sandbox gets ENOSPC, the host's disk is
//! never filled (docs/ARCHITECTURE.md, "Disk quota"). The image is sparse, so the host pays
//! only for what the sandbox writes (plus ~4 MiB of ext4 metadata).
//!
//! The pieces are plain Linux: `mkfs.ext4` (no journal: the disk dies with its instance, a host
//! crash loses the instance anyway), `mount -o loop` (util-linux attaches the loop device with
//! autoclear, so unmounting detaches it), `umount`. [`collect_stale`] finds what a crash left
//! (mounts and loop devices whose image lies under a directory) so start-up recovery can remove
//! it, scoped to the data dir. Sandbox volumes reuse the same machinery.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Smallest disk, MiB: ext4 needs room for its own metadata.
pub const MIN_DISK_MB: u32 = 64;

/// Errors of disk operations. Messages name the image or mount point; they are for logs (the
/// server maps them to generic API errors).
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{command} failed for {path}: {detail}")]
    Command {
        command: &'static str,
        path: PathBuf,
        detail: String,
    },
}

fn run(command: &'static str, args: &[&std::ffi::OsStr], path: &Path) -> Result<(), DiskError> {
    let out = Command::new(command)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| DiskError::Io {
            what: command,
            path: path.to_path_buf(),
            source,
        })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(DiskError::Command {
        command,
        path: path.to_path_buf(),
        detail: stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output")
            .trim()
            .to_string(),
    })
}

/// Makes `image` a sparse ext4 filesystem of `size_mb` MiB (replacing any file there).
///
/// # Errors
/// [`DiskError`] when the file cannot be made or `mkfs.ext4` fails (the file is removed).
pub fn format(image: &Path, size_mb: u32) -> Result<(), DiskError> {
    let io = |what, source| DiskError::Io {
        what,
        path: image.to_path_buf(),
        source,
    };
    let file = std::fs::File::create(image).map_err(|e| io("creating image", e))?;
    file.set_len(u64::from(size_mb.max(MIN_DISK_MB)) << 20)
        .map_err(|e| io("sizing image", e))?;
    drop(file);
    let formatted = run(
        "mkfs.ext4",
        &[
            "-q".as_ref(),
            "-F".as_ref(),
            // No journal (the disk lives and dies with one instance), no root reserve, inode
            // tables left uninitialised (mounted with noinit_itable: nothing zeroes them later).
            "-O".as_ref(),
            "^has_journal".as_ref(),
            "-m".as_ref(),
            "0".as_ref(),
            "-E".as_ref(),
            "lazy_itable_init=1,nodiscard".as_ref(),
            image.as_os_str(),
        ],
        image,
    );
    if formatted.is_err() {
        let _ = std::fs::remove_file(image);
    }
    formatted
}

/// Mounts the ext4 `image` on `mount_point` (created if missing) through a loop device that is
/// detached when the disk is unmounted.
///
/// # Errors
/// [`DiskError`] when the directory cannot be made or `mount` fails.
pub fn mount(image: &Path, mount_point: &Path) -> Result<(), DiskError> {
    std::fs::create_dir_all(mount_point).map_err(|source| DiskError::Io {
        what: "creating mount point",
        path: mount_point.to_path_buf(),
        source,
    })?;
    run(
        "mount",
        &[
            "-t".as_ref(),
            "ext4".as_ref(),
            "-o".as_ref(),
            "loop,noatime,nodev,nosuid,noinit_itable".as_ref(),
            image.as_os_str(),
            mount_point.as_os_str(),
        ],
        mount_point,
    )
}

/// True when `path` is a mount point of this process's mount namespace.
pub fn is_mounted(path: &Path) -> bool {
    mount_points().iter().any(|m| m == path)
}

/// Unmounts `mount_point` (which detaches its loop device). A disk still busy (the sandbox that
/// used it is exiting) is retried for up to 5 s, then detached lazily: it goes as soon as the
/// last file on it closes. Not mounted is not an error.
///
/// # Errors
/// [`DiskError`] when even the lazy unmount fails.
pub fn unmount(mount_point: &Path) -> Result<(), DiskError> {
    for _ in 0..50 {
        if !is_mounted(mount_point) {
            return Ok(());
        }
        if run("umount", &[mount_point.as_os_str()], mount_point).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    run(
        "umount",
        &["-l".as_ref(), mount_point.as_os_str()],
        mount_point,
    )
}

/// Bytes used and size of the filesystem mounted on `mount_point`.
///
/// # Errors
/// I/O errors of `statvfs`.
pub fn usage(mount_point: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(mount_point.as_os_str().as_bytes())
        .map_err(|e| io::Error::other(e.to_string()))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` points to writable memory of the size
    // statvfs fills; it is read only after statvfs reported success.
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it initialised the struct.
    let st = unsafe { st.assume_init() };
    let total = st.f_blocks * st.f_frsize;
    let free = st.f_bfree * st.f_frsize;
    Ok((total.saturating_sub(free), total))
}

/// Mount points of this process's mount namespace (from `/proc/self/mountinfo`, whose paths
/// escape spaces and the like as `\ooo`).
fn mount_points() -> Vec<PathBuf> {
    mounts().into_iter().map(|(point, _)| point).collect()
}

/// (mount point, source) of every mount of this process's mount namespace.
fn mounts() -> Vec<(PathBuf, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let point = l.split(' ').nth(4)?;
            // After the optional fields: " - <fstype> <source> <options>".
            let source = l.split(" - ").nth(1)?.split(' ').nth(1)?;
            Some((PathBuf::from(unescape(point)), unescape(source)))
        })
        .collect()
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let code = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(code);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a crash left under `root`: mount points below it, and loop devices whose image lies
/// below it that are no longer mounted (a crash between attach and mount, or a lazy unmount
/// that finished without its detach).
pub fn collect_stale(root: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let all = mounts();
    let mounted = |dev: &Path| all.iter().any(|(_, source)| Path::new(source) == dev);
    let mounts: Vec<PathBuf> = all
        .iter()
        .map(|(point, _)| point)
        .filter(|m| m.starts_with(root) && *m != root)
        .cloned()
        .collect();
    let mut loops = Vec::new();
    if let Ok(devices) = std::fs::read_dir("/sys/block") {
        for d in devices.filter_map(Result::ok) {
            let name = d.file_name().to_string_lossy().into_owned();
            if !name.starts_with("loop") {
                continue;
            }
            let backing = std::fs::read_to_string(d.path().join("loop/backing_file"))
                .map(|s| PathBuf::from(s.trim().trim_end_matches(" (deleted)")))
                .unwrap_or_default();
            let dev = PathBuf::from("/dev").join(name);
            if backing.starts_with(root) && !mounted(&dev) {
                loops.push(dev);
            }
        }
    }
    (mounts, loops)
}

/// Detaches loop device `dev` (`losetup -d`); one still mounted is left alone by the kernel.
///
/// # Errors
/// [`DiskError`] when `losetup` fails.
pub fn detach(dev: &Path) -> Result<(), DiskError> {
    run("losetup", &["-d".as_ref(), dev.as_os_str()], dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape(r"/a\040b/c"), "/a b/c");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape(r"/end\"), r"/end\");
    }
}
