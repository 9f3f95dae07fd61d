//! Copying an entry of a build's upper layer into the new rootfs when it lives on another
//! filesystem (the build disk of issue 23 finding 5), where [`super::flatten`] cannot rename
//! it in. The copy keeps what a rename would: type, content, mode, owner, times, extended
//! attributes (overlayfs's own `trusted.overlay.*` left out) and hard links between copied
//! files. Sources are opened by descriptor without following symlinks; every write goes
//! through [`InRoot`].

use super::in_root::{self, InRoot};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::collections::HashMap;
use std::io;

/// Files copied so far with more than one link: (device, inode) -> in-root path of the copy.
pub type Links = HashMap<(u64, u64), String>;

/// Copies entry `name` of directory `from` to `path` in `dest`, replacing whatever is there
/// (a directory with everything below it). Sockets are left out (nothing in an image can use
/// one), and so are whiteouts; device nodes are refused.
///
/// # Errors
/// I/O errors; `InvalidData` naming the path of a device node.
pub fn copy_entry(
    from: &OwnedFd,
    name: &str,
    dest: &InRoot,
    path: &str,
    links: &mut Links,
) -> io::Result<()> {
    let st = rustix::fs::statat(from, name, AtFlags::SYMLINK_NOFOLLOW)?;
    let mode = st.st_mode & 0o7777;
    let owner = Some((st.st_uid, st.st_gid));
    let times = (st.st_mtime, st.st_mtime_nsec as i64);
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => {
            dest.remove_all(path)?;
            dest.mkdir_all(path, 0o700, owner)?;
            let sub = open(from, name, OFlags::DIRECTORY | OFlags::RDONLY)?;
            copy_xattrs(&sub, &dest.dir(path)?)?;
            let names: Vec<String> = rustix::fs::Dir::read_from(&sub)?
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str().ok().map(str::to_owned))
                .filter(|n| n != "." && n != "..")
                .collect();
            for n in names {
                copy_entry(&sub, &n, dest, &format!("{path}/{n}"), links)?;
            }
            dest.set_dir_attrs(path, mode, owner)?;
            dest.set_times(path, times)
        }
        FileType::RegularFile => {
            let key = (st.st_dev, st.st_ino);
            if st.st_nlink > 1 {
                if let Some(first) = links.get(&key) {
                    return dest.hard_link(path, first);
                }
            }
            if dest.kind(path)? == Some(in_root::Kind::Dir) {
                dest.remove_all(path)?;
            }
            let src = open(from, name, OFlags::RDONLY)?;
            let mut out = dest.create_file(path, mode, owner)?;
            io::copy(&mut std::fs::File::from(src.try_clone()?), &mut out)?;
            copy_xattrs(&src, &out.as_fd().try_clone_to_owned()?)?;
            in_root::set_file_times(&out, times)?;
            if st.st_nlink > 1 {
                links.insert(key, path.to_owned());
            }
            Ok(())
        }
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(from, name, Vec::new())?;
            let target = target.to_string_lossy().into_owned();
            dest.remove_all(path)?;
            dest.symlink(path, &target, owner)
        }
        FileType::Fifo => {
            dest.remove_all(path)?;
            dest.fifo(path, mode, owner)
        }
        // A socket is of no use in an image; a whiteout (0/0 character device) inside a
        // directory copied whole hides nothing (nothing of the lower layer shows through).
        FileType::Socket => Ok(()),
        FileType::CharacterDevice if st.st_rdev == 0 => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{path}: device nodes are not allowed in a template"),
        )),
    }
}

fn open(dir: &OwnedFd, name: &str, flags: OFlags) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name,
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Copies the extended attributes of `from` to `to`, overlayfs's own ones left out.
fn copy_xattrs(from: &OwnedFd, to: &OwnedFd) -> io::Result<()> {
    let size = match rustix::fs::flistxattr(from, &mut [0u8; 0][..]) {
        Ok(0) | Err(rustix::io::Errno::NOTSUP) => return Ok(()),
        Ok(n) => n,
        Err(e) => return Err(e.into()),
    };
    let mut names = vec![0u8; size];
    let n = rustix::fs::flistxattr(from, &mut names[..])?;
    for raw in names[..n].split(|b| *b == 0).filter(|s| !s.is_empty()) {
        let name = String::from_utf8_lossy(raw).into_owned();
        if name.starts_with("trusted.overlay.") {
            continue;
        }
        let mut value = vec![0u8; 64 * 1024];
        let len = rustix::fs::fgetxattr(from, name.as_str(), &mut value[..])?;
        rustix::fs::fsetxattr(
            to,
            name.as_str(),
            &value[..len],
            rustix::fs::XattrFlags::empty(),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn copies_what_a_rename_would_keep() {
        let (src, dst) = (TempDir::new("copy-tree-src"), TempDir::new("copy-tree-dst"));
        let s = src.path();
        std::fs::create_dir_all(s.join("app/lib")).unwrap();
        std::fs::write(s.join("app/lib/a"), "alpha").unwrap();
        std::fs::hard_link(s.join("app/lib/a"), s.join("app/b")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", s.join("app/link")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            s.join("app/gone"),
            FileType::CharacterDevice,
            Mode::empty(),
            0,
        )
        .unwrap();
        std::fs::write(dst.path().join("app"), "a file the directory replaces").unwrap();
        let from = rustix::fs::open(s, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
        let root = InRoot::open(dst.path()).unwrap();
        copy_entry(&from, "app", &root, "/app", &mut Links::new()).unwrap();
        let d = dst.path();
        assert_eq!(
            std::fs::read_to_string(d.join("app/lib/a")).unwrap(),
            "alpha"
        );
        let (a, b) = (
            std::fs::metadata(d.join("app/lib/a")).unwrap(),
            std::fs::metadata(d.join("app/b")).unwrap(),
        );
        assert_eq!(a.ino(), b.ino(), "hard links stay linked");
        assert_eq!(
            std::fs::read_link(d.join("app/link")).unwrap().to_str(),
            Some("/etc/passwd")
        );
        assert!(!d.join("app/gone").exists(), "whiteouts are not copied");
        assert_eq!(
            std::fs::metadata(d.join("app/lib")).unwrap().mtime(),
            std::fs::metadata(s.join("app/lib")).unwrap().mtime()
        );
    }
}
