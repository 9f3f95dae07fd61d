//! `RUN` steps on a copy-on-write view of the parent template, and flattening what they
//! changed into the new template's own rootfs.
//!
//! A Dockerfile build with `RUN` steps mounts an overlay filesystem (the kernel's `overlay`):
//! the parent's published rootfs is the read-only lower layer, an empty directory of the build
//! the upper one, and the build sandboxes and the host-side steps work on the merged view, so
//! nothing is copied up front. When the steps are done the overlay is unmounted and
//! [`apply_upper`] turns the upper layer into a plain tree: the new rootfs starts as hard links
//! to the parent's files (`cp -al`; published rootfs are never written again, so sharing
//! inodes is safe), then every entry of the upper layer replaces its path (files are renamed
//! in, not copied), whiteouts delete theirs and opaque directories replace theirs whole. The
//! template is the parent plus what the steps changed, and takes only that much new disk.
//!
//! The overlay is mounted with `redirect_dir`, `index`, `metacopy` and `xino` off, so its
//! upper layer holds only full copies, whiteouts (0/0 character devices) and opaque markers
//! (`trusted.overlay.opaque=y`).

use super::copy_tree::{self, Links};
use super::in_root::InRoot;
use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::mount::{MountFlags, UnmountFlags};
use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

/// What [`apply_upper`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Entries moved in from the upper layer (files, symlinks, new directories).
    pub moved: u64,
    /// Paths deleted by whiteouts or replaced by opaque directories.
    pub removed: u64,
}

/// Mounts an overlay of `lower` (read-only) and `upper` (writes; `work` is the kernel's
/// scratch directory on the same filesystem, empty) at `merged`.
///
/// # Errors
/// I/O errors (EINVAL for paths overlayfs cannot take: they may not contain `,` or `:`).
pub fn mount(lower: &Path, upper: &Path, work: &Path, merged: &Path) -> io::Result<()> {
    let bad = |p: &Path| p.to_string_lossy().contains([',', ':', '\\']);
    if [lower, upper, work].into_iter().any(bad) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "overlay paths may not contain ',', ':' or '\\\\'",
        ));
    }
    let options = format!(
        "lowerdir={},upperdir={},workdir={},redirect_dir=off,index=off,metacopy=off,xino=off",
        lower.display(),
        upper.display(),
        work.display()
    );
    let data = CString::new(options).map_err(io::Error::other)?;
    rustix::mount::mount(
        "pandastack-build",
        merged,
        "overlay",
        MountFlags::NOSUID | MountFlags::NODEV,
        data.as_c_str(),
    )?;
    Ok(())
}

/// Unmounts `merged` (detached when still busy, so the caller can go on and the kernel
/// finishes once nothing uses it).
///
/// # Errors
/// I/O errors other than "not mounted".
pub fn unmount(merged: &Path) -> io::Result<()> {
    match rustix::mount::unmount(merged, UnmountFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(rustix::io::Errno::BUSY) => {
            rustix::mount::unmount(merged, UnmountFlags::DETACH)?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Unmounts every mount point at or below `dir` (what a crash left mounted), deepest first;
/// returns how many.
///
/// # Errors
/// `/proc/self/mountinfo` cannot be read, or an unmount fails.
pub fn unmount_below(dir: &Path) -> io::Result<usize> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|f| PathBuf::from(unescape(f)))
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in &points {
        rustix::mount::unmount(p, UnmountFlags::DETACH)?;
    }
    Ok(points.len())
}

/// Decodes the `\ooo` escapes of a mountinfo field.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match (b[i], octal) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Applies the (unmounted) upper layer at `upper` to `dest`, a copy of the lower layer whose
/// files are shared with it by hard links. The upper layer is consumed: its files are moved.
///
/// # Errors
/// I/O errors; the caller discards the half-applied tree.
pub fn apply_upper(upper: &Path, dest: &InRoot) -> io::Result<Applied> {
    let root = rustix::fs::open(
        upper,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut done = Applied::default();
    apply_dir(&root, "", dest, &mut done, &mut Links::new())?;
    Ok(done)
}

/// Moves entry `name` of `dir` to `path` in `dest`: a rename, or a copy when the upper layer
/// is on another filesystem (the build disk: EXDEV).
fn move_in(
    dir: &OwnedFd,
    name: &str,
    dest: &InRoot,
    path: &str,
    links: &mut Links,
) -> io::Result<()> {
    match dest.rename_into(dir, name, path) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            copy_tree::copy_entry(dir, name, dest, path, links)
        }
        other => other,
    }
}

fn apply_dir(
    dir: &OwnedFd,
    rel: &str,
    dest: &InRoot,
    done: &mut Applied,
    links: &mut Links,
) -> io::Result<()> {
    let names: Vec<String> = rustix::fs::Dir::read_from(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().ok().map(str::to_owned))
        .filter(|n| n != "." && n != "..")
        .collect();
    for name in names {
        let path = format!("{rel}/{name}");
        let st = rustix::fs::statat(dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW)?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::CharacterDevice if st.st_rdev == 0 => {
                dest.remove_all(&path)?;
                done.removed += 1;
            }
            FileType::Directory => {
                let sub = rustix::fs::openat2(
                    dir,
                    name.as_str(),
                    OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
                )?;
                let opaque = is_opaque(&sub);
                let exists_as_dir =
                    dest.is_dir(&path) && dest.kind(&path)? == Some(super::in_root::Kind::Dir);
                if opaque || !exists_as_dir {
                    if dest.kind(&path)?.is_some() {
                        dest.remove_all(&path)?;
                        done.removed += 1;
                    }
                    // A directory new in this layer (or replacing one) moves in whole.
                    move_in(dir, &name, dest, &path, links)?;
                    done.moved += 1;
                    continue;
                }
                apply_dir(&sub, &path, dest, done, links)?;
                dest.set_dir_attrs(&path, st.st_mode & 0o7777, Some((st.st_uid, st.st_gid)))?;
            }
            _ => {
                move_in(dir, &name, dest, &path, links)?;
                done.moved += 1;
            }
        }
    }
    Ok(())
}

/// `trusted.overlay.opaque` is `y`: the directory hides everything the lower layer had there.
fn is_opaque(dir: &OwnedFd) -> bool {
    let mut buf = [0u8; 8];
    matches!(
        rustix::fs::fgetxattr(dir, "trusted.overlay.opaque", &mut buf),
        Ok(n) if buf[..n] == *b"y"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use std::fs;
    use std::os::unix::fs::MetadataExt;

    /// A real overlay: lower files changed, deleted, replaced; new files and directories;
    /// then flattened onto a hard-linked copy of the lower layer.
    #[test]
    fn overlay_changes_flatten_onto_a_linked_copy() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            panic!("this test mounts an overlay and needs root");
        }
        let tmp = TempDir::new("flatten");
        let t = tmp.path();
        let (lower, upper, work, merged, dest) = (
            t.join("lower"),
            t.join("upper"),
            t.join("work"),
            t.join("merged"),
            t.join("dest"),
        );
        for d in [&upper, &work, &merged] {
            fs::create_dir_all(d).unwrap();
        }
        fs::create_dir_all(lower.join("etc/conf.d")).unwrap();
        fs::create_dir_all(lower.join("opt/old")).unwrap();
        fs::write(lower.join("etc/keep"), "keep").unwrap();
        fs::write(lower.join("etc/edit"), "before").unwrap();
        fs::write(lower.join("etc/gone"), "gone").unwrap();
        fs::write(lower.join("etc/conf.d/a"), "a").unwrap();
        fs::write(lower.join("opt/old/x"), "x").unwrap();

        mount(&lower, &upper, &work, &merged).unwrap();
        let m = |p: &str| merged.join(p);
        let result = (|| -> io::Result<()> {
            fs::write(m("etc/edit"), "after")?;
            fs::remove_file(m("etc/gone"))?;
            fs::remove_dir_all(m("opt/old"))?;
            fs::create_dir(m("opt/old"))?; // opaque: the old content must not come back
            fs::write(m("opt/old/y"), "y")?;
            fs::create_dir_all(m("usr/local/new"))?;
            fs::write(m("usr/local/new/tool"), "tool")?;
            fs::hard_link(m("usr/local/new/tool"), m("usr/local/new/tool-link"))?;
            std::os::unix::fs::symlink("/etc/keep", m("etc/keep-link"))?;
            Ok(())
        })();
        unmount(&merged).unwrap();
        result.unwrap();

        let cp = std::process::Command::new("cp")
            .arg("-al")
            .arg(&lower)
            .arg(&dest)
            .status()
            .unwrap();
        assert!(cp.success());
        let root = InRoot::open(&dest).unwrap();
        let done = apply_upper(&upper, &root).unwrap();
        assert!(done.moved >= 4 && done.removed >= 2, "{done:?}");

        let read = |p: &str| fs::read_to_string(dest.join(p)).unwrap();
        assert_eq!(read("etc/keep"), "keep");
        assert_eq!(read("etc/edit"), "after");
        assert!(!dest.join("etc/gone").exists());
        assert_eq!(read("opt/old/y"), "y");
        assert!(!dest.join("opt/old/x").exists());
        assert_eq!(read("usr/local/new/tool"), "tool");
        assert_eq!(
            fs::metadata(dest.join("usr/local/new/tool"))
                .unwrap()
                .nlink(),
            2
        );
        assert_eq!(
            fs::read_link(dest.join("etc/keep-link")).unwrap(),
            Path::new("/etc/keep")
        );
        // The lower layer (a published template) is untouched, and unchanged files are shared.
        assert_eq!(
            fs::read_to_string(lower.join("etc/edit")).unwrap(),
            "before"
        );
        assert!(lower.join("etc/gone").exists() && lower.join("opt/old/x").exists());
        assert_eq!(
            fs::metadata(lower.join("etc/keep")).unwrap().ino(),
            fs::metadata(dest.join("etc/keep")).unwrap().ino()
        );
        assert_eq!(unmount_below(t).unwrap(), 0);
    }

    #[test]
    fn mountinfo_escapes_decode() {
        assert_eq!(unescape("/a\\040b/c"), "/a b/c");
    }
}
