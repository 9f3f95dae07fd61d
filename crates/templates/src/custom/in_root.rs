//! File operations confined to one directory tree (a template rootfs being built), seen the way
//! a chroot would see it.
//!
//! Every path is resolved from the tree's root with `openat2(RESOLVE_IN_ROOT)`: `..` stops at the
//! root and symlinks, absolute ones included, resolve inside the tree. A rootfs that came from a
//! user's tar can hold `etc -> /etc` or `a -> ../../..`; no operation here can reach the host
//! through them. The final component of a path is never followed when it is replaced or created
//! (an existing symlink there is removed first), so a link cannot redirect a write either.
//!
//! Paths are in-sandbox paths (`/usr/bin/python3` or `usr/bin/python3`); `.` and empty
//! components are skipped and `..` is refused, because callers build them from validated input.

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Timespec, Timestamps};
use std::fs::File;
use std::io;
use std::path::Path;

/// Ownership of a created entry: `(uid, gid)`, numeric as in the tree's own `/etc/passwd`.
pub type Owner = (u32, u32);

/// An open directory tree; operations resolve every path inside it.
#[derive(Debug)]
pub struct InRoot {
    root: OwnedFd,
}

/// What is at a path, without following a final symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    /// A FIFO, socket or device node.
    Other,
}

impl InRoot {
    /// Opens the tree at `dir` (a host path the caller trusts).
    ///
    /// # Errors
    /// I/O errors opening it (missing, not a directory).
    pub fn open(dir: &Path) -> io::Result<Self> {
        let root = rustix::fs::open(
            dir,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(InRoot { root })
    }

    /// Resolves `components` inside the tree and opens the result with `flags`.
    fn resolve(&self, components: &[&str], flags: OFlags) -> io::Result<OwnedFd> {
        let rel = if components.is_empty() {
            ".".to_string()
        } else {
            components.join("/")
        };
        Ok(rustix::fs::openat2(
            &self.root,
            rel.as_str(),
            flags | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_XDEV,
        )?)
    }

    /// The directory at `path`, following symlinks inside the tree.
    ///
    /// # Errors
    /// `NotFound` when missing, `NotADirectory` (raw ENOTDIR) when not a directory.
    pub fn dir(&self, path: &str) -> io::Result<OwnedFd> {
        let parts = components(path)?;
        self.resolve(&parts, OFlags::DIRECTORY | OFlags::RDONLY)
    }

    /// What `path` is, not following a final symlink; `None` when nothing is there (or a
    /// parent is missing or not a directory).
    ///
    /// # Errors
    /// `..` in the path, or unexpected I/O errors.
    pub fn kind(&self, path: &str) -> io::Result<Option<Kind>> {
        let parts = components(path)?;
        let Some((name, parent)) = parts.split_last() else {
            return Ok(Some(Kind::Dir));
        };
        let dir = match self.resolve(parent, OFlags::DIRECTORY | OFlags::RDONLY) {
            Ok(d) => d,
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        match rustix::fs::statat(&dir, *name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(kind_of(st.st_mode))),
            Err(e) if e == rustix::io::Errno::NOENT => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Mode bits (permission and type) of what `path` finally names, following symlinks
    /// inside the tree; `None` when it does not resolve.
    pub fn stat_mode(&self, path: &str) -> Option<u32> {
        let parts = components(path).ok()?;
        let fd = self.resolve(&parts, OFlags::PATH).ok()?;
        rustix::fs::fstat(&fd).ok().map(|st| st.st_mode)
    }

    /// True when `path` resolves to a regular file with an execute bit.
    pub fn is_executable(&self, path: &str) -> bool {
        self.stat_mode(path)
            .is_some_and(|m| FileType::from_raw_mode(m) == FileType::RegularFile && m & 0o111 != 0)
    }

    /// True when `path` resolves to a directory.
    pub fn is_dir(&self, path: &str) -> bool {
        self.stat_mode(path)
            .is_some_and(|m| FileType::from_raw_mode(m) == FileType::Directory)
    }

    /// Names in directory `path` (following symlinks inside the tree); empty when it is not a
    /// readable directory.
    pub fn list(&self, path: &str) -> Vec<String> {
        let Ok(fd) = self.dir(path) else {
            return Vec::new();
        };
        let Ok(dir) = rustix::fs::Dir::new(fd) else {
            return Vec::new();
        };
        dir.filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().ok().map(str::to_owned))
            .filter(|n| n != "." && n != "..")
            .collect()
    }

    /// Creates `path` and its missing parents as directories (new ones get `mode` and `owner`;
    /// existing ones are left as they are) and returns the last one.
    ///
    /// # Errors
    /// `..` in the path, a component that exists and is not a directory (ENOTDIR), I/O errors.
    pub fn mkdir_all(&self, path: &str, mode: u32, owner: Option<Owner>) -> io::Result<OwnedFd> {
        let parts = components(path)?;
        let mut dir = self.resolve(&[], OFlags::DIRECTORY | OFlags::RDONLY)?;
        for i in 1..=parts.len() {
            match self.resolve(&parts[..i], OFlags::DIRECTORY | OFlags::RDONLY) {
                Ok(next) => dir = next,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    let name = parts[i - 1];
                    match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(mode)) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                    let next = self.resolve(&parts[..i], OFlags::DIRECTORY | OFlags::RDONLY)?;
                    set_owner_mode(&next, owner, mode)?;
                    dir = next;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(dir)
    }

    /// Creates (or replaces) the regular file `path` with `mode` and `owner`, creating missing
    /// parents (mode 0755, root). Whatever non-directory was at `path` (a file, a symlink) is
    /// removed first; a directory there is an error (EISDIR).
    ///
    /// # Errors
    /// As [`InRoot::mkdir_all`], plus EISDIR and I/O errors creating the file.
    pub fn create_file(&self, path: &str, mode: u32, owner: Option<Owner>) -> io::Result<File> {
        let (dir, name) = self.prepare_entry(path)?;
        let fd = rustix::fs::openat(
            &dir,
            name.as_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        set_owner_mode(&fd, owner, mode)?;
        Ok(File::from(fd))
    }

    /// Creates the symlink `path` -> `target` (the target is stored as given, and resolves
    /// inside the sandbox when used) owned by `owner`.
    ///
    /// # Errors
    /// As [`InRoot::create_file`].
    pub fn symlink(&self, path: &str, target: &str, owner: Option<Owner>) -> io::Result<()> {
        let (dir, name) = self.prepare_entry(path)?;
        rustix::fs::symlinkat(target, &dir, name.as_str())?;
        if let Some((uid, gid)) = owner {
            rustix::fs::chownat(
                &dir,
                name.as_str(),
                Some(uid_of(uid)),
                Some(gid_of(gid)),
                AtFlags::SYMLINK_NOFOLLOW,
            )?;
        }
        Ok(())
    }

    /// Creates `path` as a hard link to the existing non-directory `target` (both inside the
    /// tree; a final symlink in `target` is linked itself, not followed).
    ///
    /// # Errors
    /// `NotFound` when the target is missing, EPERM for a directory target, as
    /// [`InRoot::create_file`] otherwise.
    pub fn hard_link(&self, path: &str, target: &str) -> io::Result<()> {
        let parts = components(target)?;
        let source = self.resolve(&parts, OFlags::PATH | OFlags::NOFOLLOW)?;
        let (dir, name) = self.prepare_entry(path)?;
        rustix::fs::linkat(&source, "", &dir, name.as_str(), AtFlags::EMPTY_PATH)?;
        Ok(())
    }

    /// Creates a FIFO at `path`.
    ///
    /// # Errors
    /// As [`InRoot::create_file`].
    pub fn fifo(&self, path: &str, mode: u32, owner: Option<Owner>) -> io::Result<()> {
        let (dir, name) = self.prepare_entry(path)?;
        rustix::fs::mknodat(
            &dir,
            name.as_str(),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )?;
        // fchmod/fchown do not work on the O_PATH descriptors a FIFO can be opened with here:
        // go through the name, just created in a directory that only this build writes to.
        if let Some((uid, gid)) = owner {
            rustix::fs::chownat(
                &dir,
                name.as_str(),
                Some(uid_of(uid)),
                Some(gid_of(gid)),
                AtFlags::SYMLINK_NOFOLLOW,
            )?;
        }
        rustix::fs::chmodat(
            &dir,
            name.as_str(),
            Mode::from_raw_mode(mode & 0o7777),
            AtFlags::empty(),
        )?;
        Ok(())
    }

    /// Makes sure `path` is a directory: a directory stays as it is, anything else there (a
    /// file, a symlink) is replaced by an empty directory with `mode`.
    ///
    /// # Errors
    /// As [`InRoot::mkdir_all`].
    pub fn ensure_dir(&self, path: &str, mode: u32) -> io::Result<()> {
        match self.kind(path)? {
            Some(Kind::Dir) => Ok(()),
            Some(_) => {
                let (dir, name) = self.prepare_entry(path)?;
                rustix::fs::mkdirat(&dir, name.as_str(), Mode::from_raw_mode(mode))?;
                let fd = self.dir(path)?;
                set_owner_mode(&fd, Some((0, 0)), mode)
            }
            None => self.mkdir_all(path, mode, Some((0, 0))).map(|_| ()),
        }
    }

    /// Removes the non-directory entry at `path` (a final symlink itself, not its target);
    /// nothing there is fine.
    ///
    /// # Errors
    /// EISDIR for a directory, `..` in the path, I/O errors.
    pub fn remove_file(&self, path: &str) -> io::Result<()> {
        let parts = components(path)?;
        let Some((name, parent)) = parts.split_last() else {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        };
        let dir = match self.resolve(parent, OFlags::DIRECTORY | OFlags::RDONLY) {
            Ok(d) => d,
            Err(e) if is_absent(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        match rustix::fs::unlinkat(&dir, *name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes whatever is at `path` (a directory with everything in it, or a file or
    /// symlink itself), never following a symlink; nothing there is fine.
    ///
    /// # Errors
    /// `..` in the path, the root itself, I/O errors.
    pub fn remove_all(&self, path: &str) -> io::Result<()> {
        let parts = components(path)?;
        let Some((name, parent)) = parts.split_last() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the root itself cannot be removed",
            ));
        };
        let dir = match self.resolve(parent, OFlags::DIRECTORY | OFlags::RDONLY) {
            Ok(d) => d,
            Err(e) if is_absent(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        remove_entry(&dir, name)
    }

    /// Moves the entry `name` of directory `from` (outside the tree, on the same filesystem)
    /// to `path`, replacing whatever is there; missing parents are created (0755, root).
    ///
    /// # Errors
    /// As [`InRoot::create_file`], and EXDEV across filesystems.
    pub fn rename_into(&self, from: &OwnedFd, name: &str, path: &str) -> io::Result<()> {
        self.remove_all(path)?;
        let (dir, target) = self.prepare_entry(path)?;
        rustix::fs::renameat(from, name, &dir, target.as_str())?;
        Ok(())
    }

    /// Sets mode and owner of an existing directory `path` (tar entries for directories that
    /// already exist, `COPY --chown` of a directory).
    ///
    /// # Errors
    /// `NotFound`, ENOTDIR, I/O errors.
    pub fn set_dir_attrs(&self, path: &str, mode: u32, owner: Option<Owner>) -> io::Result<()> {
        let fd = self.dir(path)?;
        set_owner_mode(&fd, owner, mode)
    }

    /// Sets the access and modification times of `path` itself (a final symlink is not
    /// followed; `""` is the root) to `(seconds, nanoseconds)`.
    ///
    /// # Errors
    /// `NotFound`, ENOTDIR, I/O errors.
    pub fn set_times(&self, path: &str, (sec, nsec): (i64, i64)) -> io::Result<()> {
        let parts = components(path)?;
        let times = timestamps(sec, nsec);
        let Some((name, parent)) = parts.split_last() else {
            let root = self.resolve(&[], OFlags::DIRECTORY | OFlags::RDONLY)?;
            rustix::fs::futimens(&root, &times)?;
            return Ok(());
        };
        let dir = self.resolve(parent, OFlags::DIRECTORY | OFlags::RDONLY)?;
        rustix::fs::utimensat(&dir, *name, &times, AtFlags::SYMLINK_NOFOLLOW)?;
        Ok(())
    }

    /// Reads the regular file `path` (following symlinks inside the tree), at most `max`
    /// bytes; `None` when it does not exist.
    ///
    /// # Errors
    /// I/O errors other than absence; a file longer than `max` (EFBIG).
    pub fn read(&self, path: &str, max: u64) -> io::Result<Option<Vec<u8>>> {
        use std::io::Read;
        let parts = components(path)?;
        let fd = match self.resolve(&parts, OFlags::RDONLY) {
            Ok(fd) => fd,
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        File::from(fd).take(max + 1).read_to_end(&mut out)?;
        if out.len() as u64 > max {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        Ok(Some(out))
    }

    /// The parent directory of `path` (created if missing) and its last component, with any
    /// non-directory entry already there removed.
    fn prepare_entry(&self, path: &str) -> io::Result<(OwnedFd, String)> {
        let parts = components(path)?;
        let Some((name, parent)) = parts.split_last() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the root itself cannot be replaced",
            ));
        };
        let dir = self.mkdir_all(&parent.join("/"), 0o755, Some((0, 0)))?;
        match rustix::fs::statat(&dir, *name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                return Err(io::Error::from_raw_os_error(libc::EISDIR));
            }
            Ok(_) => rustix::fs::unlinkat(&dir, *name, AtFlags::empty())?,
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
        Ok((dir, (*name).to_owned()))
    }
}

/// Removes entry `name` of `dir` and, for a directory, everything below it, by descriptors
/// (no path is resolved twice, no symlink followed).
fn remove_entry(dir: &OwnedFd, name: &str) -> io::Result<()> {
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
        return Ok(());
    }
    let sub = rustix::fs::openat(
        dir,
        name,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let names: Vec<String> = rustix::fs::Dir::read_from(&sub)?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().ok().map(str::to_owned))
        .filter(|n| n != "." && n != "..")
        .collect();
    for n in names {
        remove_entry(&sub, &n)?;
    }
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
    Ok(())
}

/// Sets the modification time of an open file (tar entries keep theirs).
///
/// # Errors
/// I/O errors.
pub fn set_mtime(file: &File, seconds: i64) -> io::Result<()> {
    let t = Timespec {
        tv_sec: seconds,
        tv_nsec: 0,
    };
    rustix::fs::futimens(
        file.as_fd(),
        &Timestamps {
            last_access: t,
            last_modification: t,
        },
    )?;
    Ok(())
}

/// Sets the access and modification times of an open file to `(seconds, nanoseconds)` (a
/// template build moved between hosts keeps its times exactly: `crate::transfer`).
///
/// # Errors
/// I/O errors.
pub fn set_file_times(file: &File, (sec, nsec): (i64, i64)) -> io::Result<()> {
    rustix::fs::futimens(file.as_fd(), &timestamps(sec, nsec))?;
    Ok(())
}

fn timestamps(sec: i64, nsec: i64) -> Timestamps {
    let t = Timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

/// Owner first, then mode: chown clears the setuid and setgid bits.
fn set_owner_mode(fd: &impl AsFd, owner: Option<Owner>, mode: u32) -> io::Result<()> {
    if let Some((uid, gid)) = owner {
        rustix::fs::fchown(fd, Some(uid_of(uid)), Some(gid_of(gid)))?;
    }
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode & 0o7777))?;
    Ok(())
}

fn uid_of(uid: u32) -> rustix::fs::Uid {
    rustix::fs::Uid::from_raw_unchecked(uid)
}

fn gid_of(gid: u32) -> rustix::fs::Gid {
    rustix::fs::Gid::from_raw_unchecked(gid)
}

fn kind_of(mode: u32) -> Kind {
    match FileType::from_raw_mode(mode) {
        FileType::Directory => Kind::Dir,
        FileType::RegularFile => Kind::File,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    }
}

fn is_absent(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR))
}

/// The normal components of an in-sandbox path.
///
/// # Errors
/// `InvalidInput` for a `..` component or a NUL byte.
pub fn components(path: &str) -> io::Result<Vec<&str>> {
    if path.contains('\0') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"));
    }
    let parts: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path must not contain '..'",
        ));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use std::io::Write;

    #[test]
    fn symlinks_resolve_inside_the_tree() {
        let tmp = TempDir::new("inroot");
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        std::os::unix::fs::symlink("../../../..", root.join("up")).unwrap();
        let t = InRoot::open(&root).unwrap();

        // A write through an absolute symlink lands inside the tree, at <root>/<target>, and
        // fails when that does not exist there (it never reaches the host's directory).
        assert!(t.create_file("/escape/x", 0o644, None).is_err());
        assert!(!outside.join("x").exists());
        let inside = root.join(outside.strip_prefix("/").unwrap());
        std::fs::create_dir_all(&inside).unwrap();
        let mut f = t.create_file("/escape/x", 0o644, None).unwrap();
        f.write_all(b"hi").unwrap();
        assert!(!outside.join("x").exists());
        assert_eq!(std::fs::read(inside.join("x")).unwrap(), b"hi");

        // `..` through a symlink stops at the root.
        t.create_file("up/etc/y", 0o644, None).unwrap();
        assert!(root.join("etc/y").exists());
        assert!(components("a/../b").is_err());
    }

    #[test]
    fn final_symlinks_are_replaced_not_followed() {
        let tmp = TempDir::new("inroot-final");
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/passwd"), "root").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();
        let t = InRoot::open(&root).unwrap();
        t.create_file("link", 0o755, None).unwrap();
        assert_eq!(std::fs::read(root.join("etc/passwd")).unwrap(), b"root");
        assert_eq!(t.kind("link").unwrap(), Some(Kind::File));
        assert!(t.is_executable("link"));
        assert!(t.create_file("etc", 0o644, None).is_err());
    }

    #[test]
    fn ensure_dir_replaces_a_symlink_and_reads_are_bounded() {
        let tmp = TempDir::new("inroot-dir");
        let root = tmp.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        std::os::unix::fs::symlink("/etc", root.join(".pandastack")).unwrap();
        let t = InRoot::open(&root).unwrap();
        t.ensure_dir(".pandastack", 0o755).unwrap();
        assert_eq!(t.kind(".pandastack").unwrap(), Some(Kind::Dir));
        t.mkdir_all("a/b/c", 0o700, None).unwrap();
        assert!(t.is_dir("/a/b/c"));
        std::fs::write(root.join("f"), vec![b'x'; 10]).unwrap();
        assert_eq!(t.read("f", 10).unwrap().unwrap().len(), 10);
        assert!(t.read("f", 9).is_err());
        assert_eq!(t.read("missing", 9).unwrap(), None);
        t.hard_link("g", "f").unwrap();
        assert_eq!(std::fs::read(root.join("g")).unwrap().len(), 10);
        t.symlink("s", "/f", None).unwrap();
        assert_eq!(t.kind("s").unwrap(), Some(Kind::Symlink));
        assert_eq!(t.list("/").len(), 5);
        std::fs::write(tmp.path().join("outside-file"), "moved").unwrap();
        let from = InRoot::open(tmp.path()).unwrap();
        t.rename_into(&from.dir("/").unwrap(), "outside-file", "/new/place")
            .unwrap();
        assert_eq!(std::fs::read(root.join("new/place")).unwrap(), b"moved");
        t.remove_file("s").unwrap();
        t.remove_file("s").unwrap();
        std::os::unix::fs::symlink("/", root.join("rootlink")).unwrap();
        t.remove_all("rootlink").unwrap();
        assert!(
            root.join("f").exists(),
            "a removed symlink to / removes nothing else"
        );
        assert!(
            t.remove_file("a").is_err(),
            "remove_file refuses a directory"
        );
        t.remove_all("a").unwrap();
        assert!(!root.join("a").exists());
        t.remove_all("missing/deeper").unwrap();
    }
}
