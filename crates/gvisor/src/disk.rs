//! Size-limited disks: a sparse file formatted ext4, attached to a loop device and mounted.
//!
//! A sandbox's writable root (gVisor's overlay upper layer) lives in a "filestore" file that
//! runsc creates in the directory named by `--overlay2=...:dir=`. Put on one of these disks,
//! that file can grow only to the disk's size: the sandbox gets ENOSPC, the host's disk is
//! never filled (docs/ARCHITECTURE.md, "Disk quota"). The image is sparse, so the host pays
//! only for what the sandbox writes (plus ~4 MiB of ext4 metadata).
//!
//! The pieces are plain Linux: `mkfs.ext4`, a loop device with autoclear (unmounting detaches
//! it, as with `mount -o loop`) and `mount(2)`/`umount2(2)` made in this process
//! ([`crate::loopdev`]). [`collect_stale`] finds what a crash left (mounts and loop devices
//! whose image lies under a directory) so start-up recovery can remove it, scoped to the data
//! dir.
//!
//! Two kinds of image ([`Kind`]): an instance's disk has no journal (it lives and dies with its
//! instance; a host crash loses the instance anyway), a volume (issue 9) has one, since it
//! outlives sandboxes and what a sandbox fsynced must survive a crash. Volumes are also grown
//! ([`grow`]), mounted read-only for read-only users ([`mount_volume`]) and measured while
//! closed ([`image_space`]).

use crate::loopdev::{self, MountOptions};
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

/// What an image is for, which decides how it is formatted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An instance's disk: no journal, inode tables left uninitialised (it is mounted with
    /// `noinit_itable`, so nothing zeroes them later).
    Scratch,
    /// A volume: an ext4 journal, inode tables "zeroed" by punching holes (discard on a sparse
    /// file), so neither `mkfs` nor the kernel's lazy init writes them (~0.1 s for 8 GiB here).
    Volume,
}

/// Makes `image` a sparse ext4 filesystem of `size_mb` MiB (at least [`MIN_DISK_MB`]; replacing
/// any file there), formatted for `kind`. No blocks are reserved for root.
///
/// # Errors
/// [`DiskError`] when the file cannot be made or `mkfs.ext4` fails (the file is removed).
pub fn format(image: &Path, size_mb: u32, kind: Kind) -> Result<(), DiskError> {
    let io = |what, source| DiskError::Io {
        what,
        path: image.to_path_buf(),
        source,
    };
    let file = std::fs::File::create(image).map_err(|e| io("creating image", e))?;
    file.set_len(u64::from(size_mb.max(MIN_DISK_MB)) << 20)
        .map_err(|e| io("sizing image", e))?;
    drop(file);
    let features: &[&str] = match kind {
        Kind::Scratch => &["-O", "^has_journal", "-E", "lazy_itable_init=1,nodiscard"],
        Kind::Volume => &["-E", "lazy_itable_init=0,lazy_journal_init=1"],
    };
    let mut args: Vec<&std::ffi::OsStr> =
        vec!["-q".as_ref(), "-F".as_ref(), "-m".as_ref(), "0".as_ref()];
    args.extend(features.iter().map(std::ffi::OsStr::new));
    args.push(image.as_os_str());
    let formatted = run("mkfs.ext4", &args, image);
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
    mount_loop(
        image,
        mount_point,
        MountOptions {
            read_only: false,
            data: "noinit_itable",
        },
    )
}

/// Mounts ext4 `image` on `mount_point` (created if missing) through an autoclear loop device
/// ([`crate::loopdev`]: no `mount` process on the path).
fn mount_loop(image: &Path, mount_point: &Path, opts: MountOptions<'_>) -> Result<(), DiskError> {
    std::fs::create_dir_all(mount_point).map_err(|source| DiskError::Io {
        what: "creating mount point",
        path: mount_point.to_path_buf(),
        source,
    })?;
    loopdev::mount(image, mount_point, opts).map_err(|source| DiskError::Io {
        what: "mounting",
        path: image.to_path_buf(),
        source,
    })
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
    let io = |source| DiskError::Io {
        what: "unmounting",
        path: mount_point.to_path_buf(),
        source,
    };
    for _ in 0..250 {
        match loopdev::unmount(mount_point, 0) {
            Ok(()) => return Ok(()),
            // Not a mount point (any more).
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => return Err(io(e)),
        }
    }
    loopdev::unmount(mount_point, libc::MNT_DETACH).map_err(io)
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
    let loops = loops_backed_by(|b| b.starts_with(root))
        .into_iter()
        .filter(|dev| !mounted(dev))
        .collect();
    (mounts, loops)
}

/// Loop devices whose backing file matches `wanted` (a deleted file counts by its old path).
fn loops_backed_by(wanted: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut loops = Vec::new();
    let Ok(devices) = std::fs::read_dir("/sys/block") else {
        return loops;
    };
    for d in devices.filter_map(Result::ok) {
        let name = d.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let Ok(backing) = std::fs::read_to_string(d.path().join("loop/backing_file")) else {
            continue;
        };
        if wanted(Path::new(backing.trim().trim_end_matches(" (deleted)"))) {
            loops.push(PathBuf::from("/dev").join(name));
        }
    }
    loops
}

/// Waits up to `limit` until no loop device is backed by `image`; true when none is. An ext4
/// image must never be mounted through two loop devices at once (two superblocks writing one
/// file corrupt it), and a filesystem unmounted lazily keeps its loop device until its last
/// user goes.
pub fn wait_unlooped(image: &Path, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if loops_backed_by(|b| b == image).is_empty() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Detaches loop device `dev` (`losetup -d`); one still mounted is left alone by the kernel.
///
/// # Errors
/// [`DiskError`] when `losetup` fails.
pub fn detach(dev: &Path) -> Result<(), DiskError> {
    run("losetup", &["-d".as_ref(), dev.as_os_str()], dev)
}

/// Mounts the volume `image` on `mount_point` (created if missing) through a loop device that is
/// detached when it is unmounted; `read_only` mounts the filesystem read-only (every bind of it
/// refuses writes with EROFS). A read-only mount of an image a crash left with an unreplayed
/// journal is refused by the kernel, so such an image is first mounted read-write once (which
/// replays the journal) and unmounted.
///
/// # Errors
/// [`DiskError`] when the directory cannot be made or `mount` fails.
pub fn mount_volume(image: &Path, mount_point: &Path, read_only: bool) -> Result<(), DiskError> {
    let mount = |read_only: bool| {
        mount_loop(
            image,
            mount_point,
            MountOptions {
                read_only,
                data: "",
            },
        )
    };
    match mount(read_only) {
        Err(_) if read_only => {
            mount(false)?;
            unmount(mount_point)?;
            mount(true)
        }
        other => other,
    }
}

/// Grows the unmounted volume `image` to `size_mb` MiB, keeping its files: `e2fsck -f -p`
/// (resize2fs insists on a checked filesystem), a longer file, `resize2fs`.
///
/// # Errors
/// [`DiskError`] when the check finds damage it cannot repair by itself, or a step fails (the
/// file is then cut back to its old length when the filesystem was not grown).
pub fn grow(image: &Path, size_mb: u32) -> Result<(), DiskError> {
    let io = |what, source| DiskError::Io {
        what,
        path: image.to_path_buf(),
        source,
    };
    let old = std::fs::metadata(image)
        .map_err(|e| io("reading image", e))?
        .len();
    let new = u64::from(size_mb) << 20;
    if new <= old {
        return Ok(());
    }
    check(image)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(image)
        .map_err(|e| io("opening image", e))?;
    file.set_len(new).map_err(|e| io("sizing image", e))?;
    let grown = run("resize2fs", &["-p".as_ref(), image.as_os_str()], image);
    if grown.is_err() {
        let _ = file.set_len(old);
    }
    grown
}

/// `e2fsck -f -p`: exit codes 0 (clean) and 1 (errors corrected) are success.
fn check(image: &Path) -> Result<(), DiskError> {
    let out = Command::new("e2fsck")
        .args(["-f", "-p"])
        .arg(image)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| DiskError::Io {
            what: "e2fsck",
            path: image.to_path_buf(),
            source,
        })?;
    match out.status.code() {
        Some(0 | 1) => Ok(()),
        _ => Err(DiskError::Command {
            command: "e2fsck",
            path: image.to_path_buf(),
            detail: String::from_utf8_lossy(&out.stdout)
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("filesystem damaged")
                .trim()
                .to_string(),
        }),
    }
}

/// Bytes free and total in the ext4 filesystem of the unmounted `image`, from its superblock
/// (exact after a clean unmount; a mounted filesystem writes its counts back only now and
/// then: use [`usage`] on its mount point instead).
///
/// # Errors
/// I/O errors, `InvalidData` when the file holds no ext4 superblock.
pub fn image_space(image: &Path) -> io::Result<(u64, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(image)?;
    let mut sb = [0u8; 1024];
    f.seek(SeekFrom::Start(1024))?;
    f.read_exact(&mut sb)?;
    let u32_at = |off: usize| u32::from_le_bytes([sb[off], sb[off + 1], sb[off + 2], sb[off + 3]]);
    if u16::from_le_bytes([sb[0x38], sb[0x39]]) != 0xEF53 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no ext4 superblock",
        ));
    }
    let wide = u32_at(0x60) & 0x80 != 0; // INCOMPAT_64BIT: the high halves are valid
    let hi = |off: usize| {
        if wide {
            u64::from(u32_at(off)) << 32
        } else {
            0
        }
    };
    let blocks = u64::from(u32_at(0x04)) | hi(0x150);
    let free = u64::from(u32_at(0x0C)) | hi(0x158);
    let block = 1024u64 << u32_at(0x18).min(16);
    Ok((free * block, blocks * block))
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

    #[test]
    fn volumes_are_formatted_sparse_measured_and_grown() {
        let dir = std::env::temp_dir().join(format!("pandastack-disk-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let image = dir.join("vol-test.ext4");
        format(&image, 256, Kind::Volume).unwrap();
        let (free, total) = image_space(&image).unwrap();
        assert_eq!(total, 256 << 20);
        assert!(free > 200 << 20 && free < total, "{free} of {total}");
        use std::os::unix::fs::MetadataExt;
        let allocated = std::fs::metadata(&image).unwrap().blocks() * 512;
        assert!(allocated < 16 << 20, "mkfs wrote {allocated} bytes");
        grow(&image, 512).unwrap();
        let (free2, total2) = image_space(&image).unwrap();
        assert_eq!(total2, 512 << 20);
        assert!(free2 > free, "{free2} <= {free}");
        assert!(image_space(&dir).is_err(), "a directory has no superblock");
        std::fs::write(dir.join("junk"), vec![0u8; 4096]).unwrap();
        assert_eq!(
            image_space(&dir.join("junk")).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The in-process loop mount (needs root and /dev/loop-control, as the engine does):
    /// read-write, then read-only (writes refused), and after each unmount no loop device
    /// is left backed by the image.
    #[test]
    fn volumes_mount_read_write_and_read_only_and_leave_no_loop_device() {
        let dir =
            std::env::temp_dir().join(format!("pandastack-mount-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (image, point) = (dir.join("vol.ext4"), dir.join("mnt"));
        format(&image, 64, Kind::Volume).unwrap();
        let looped = || loops_backed_by(|b| b == image.as_path());

        mount_volume(&image, &point, false).unwrap();
        assert!(is_mounted(&point));
        assert_eq!(looped().len(), 1);
        std::fs::write(point.join("kept"), b"data").unwrap();
        unmount(&point).unwrap();
        assert!(!is_mounted(&point));
        assert!(looped().is_empty(), "loop device left: {:?}", looped());

        mount_volume(&image, &point, true).unwrap();
        assert_eq!(std::fs::read(point.join("kept")).unwrap(), b"data");
        let refused = std::fs::write(point.join("new"), b"x").unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::EROFS));
        unmount(&point).unwrap();
        assert!(looped().is_empty(), "loop device left: {:?}", looped());
        // Unmounting what is not mounted is not an error.
        unmount(&point).unwrap();

        std::fs::write(dir.join("junk"), vec![0u8; 1 << 20]).unwrap();
        assert!(mount_volume(&dir.join("junk"), &point, false).is_err());
        // The device detaches when its last opener closes it: ours at once, but udev may be
        // probing the new device at that moment (seen in CI under load), so allow it 5 s.
        let junk = dir.join("junk");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !loops_backed_by(|b| b == junk.as_path()).is_empty()
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(
            loops_backed_by(|b| b == junk.as_path()).is_empty(),
            "a failed mount leaves its loop device"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
