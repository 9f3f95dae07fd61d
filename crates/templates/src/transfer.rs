//! A template build's rootfs moved between hosts (issue 12 point 6: "cross-host restore needs
//! the byte-identical rootfs the image was taken on, so a template build is published once and
//! other hosts fetch it").
//!
//! **Identity.** A checkpoint restores only onto the rootfs it ran on. [`manifest_digest`] is
//! the SHA-256 over every path of a tree with its type, mode, owner, size (files), modification
//! time in nanoseconds and symlink target, depth first with names in byte order. Copies of one
//! bake (`cp -al`, `cp -a`, `rsync -a`) have the digest of the original; two bakes of one
//! recipe never do (generated files and times differ).
//!
//! **The archive.** [`pack`] writes the tree as a tar in that same order: directories,
//! regular files (a file with several links once, then hard-link entries), symlinks and
//! FIFOs, with numeric owners, the full mode and, in a pax `mtime` record before every entry,
//! the modification time to the nanosecond (a tar header holds whole seconds, and the tar
//! crate's own unpacking keeps only those and turns 0 into 1). [`unpack`] recreates the tree in
//! an empty directory through [`InRoot`] (every path resolved inside it, `..` and absolute
//! names refused, so an archive altered in the object store cannot write outside), sets each
//! entry's times after its content and every directory's after the whole tree, so
//! [`manifest_digest`] of the copy equals the original's: the caller checks that before it
//! uses the copy. Extended attributes are not carried (the digest does not cover them and the
//! baked templates set none). Device nodes and sockets are refused by [`pack`]: a template
//! rootfs has none (its `/dev` is the sandbox's own).

use crate::custom::in_root::{self, InRoot};
use sha2::Digest;
use std::collections::HashMap;
use std::fs::Metadata;
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use tar::{EntryType, Header};

/// What [`pack`] wrote or [`unpack`] made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tree {
    /// Entries (every path, the root excluded).
    pub entries: u64,
    /// Bytes of regular file content (hard links counted once).
    pub bytes: u64,
}

/// Calls `f` with every path of the tree at `root` (relative, the root itself excluded) and
/// its metadata, not following symlinks: depth first, the names of a directory in byte order,
/// a directory before what it holds.
fn walk(root: &Path, mut f: impl FnMut(&Path, &Metadata) -> io::Result<()>) -> io::Result<()> {
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(root.join(&rel))?
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        names.sort();
        let mut dirs = Vec::new();
        for name in names {
            let path = rel.join(&name);
            let md = std::fs::symlink_metadata(root.join(&path))?;
            f(&path, &md)?;
            if md.file_type().is_dir() {
                dirs.push(path);
            }
        }
        stack.extend(dirs.into_iter().rev());
    }
    Ok(())
}

/// The manifest digest of the tree at `root` (module doc), hex. Blocking; ~1.5 s for the
/// code-interpreter rootfs here.
///
/// # Errors
/// I/O errors of the walk.
pub fn manifest_digest(root: &Path) -> io::Result<String> {
    let mut hash = sha2::Sha256::new();
    walk(root, |path, md| {
        let ft = md.file_type();
        let kind = if ft.is_dir() {
            'd'
        } else if ft.is_symlink() {
            'l'
        } else if ft.is_file() {
            'f'
        } else {
            'o'
        };
        let target = if ft.is_symlink() {
            std::fs::read_link(root.join(path))?.display().to_string()
        } else {
            String::new()
        };
        // A directory's size depends on the filesystem, not its content.
        let size = if ft.is_dir() { 0 } else { md.size() };
        hash.update(
            format!(
                "{}\0{kind}\0{:o}\0{}\0{}\0{size}\0{}.{}\0{target}\n",
                path.display(),
                md.mode(),
                md.uid(),
                md.gid(),
                md.mtime(),
                md.mtime_nsec()
            )
            .as_bytes(),
        );
        Ok(())
    })?;
    Ok(hex::encode(hash.finalize()))
}

/// Writes the tree at `root` to `out` as a tar (module doc). Blocking.
///
/// # Errors
/// I/O errors reading the tree or writing `out`; `InvalidData` naming the path for a name
/// that is not UTF-8, a device node or a socket.
pub fn pack(root: &Path, out: impl Write) -> io::Result<Tree> {
    let mut tar = tar::Builder::new(out);
    let mut done = Tree::default();
    let root_md = std::fs::symlink_metadata(root)?;
    append_entry(
        &mut tar,
        Path::new("."),
        &root_md,
        EntryType::Directory,
        None,
    )?;
    // The first path of every file with several links, by (device, inode).
    let mut first: HashMap<(u64, u64), PathBuf> = HashMap::new();
    walk(root, |path, md| {
        if path.to_str().is_none() {
            return Err(refused(path, "its name is not UTF-8"));
        }
        done.entries += 1;
        let ft = md.file_type();
        if ft.is_dir() {
            append_entry(&mut tar, path, md, EntryType::Directory, None)
        } else if ft.is_symlink() {
            let target = std::fs::read_link(root.join(path))?;
            append_entry(&mut tar, path, md, EntryType::Symlink, Some(&target))
        } else if ft.is_file() {
            if md.nlink() > 1 {
                if let Some(original) = first.get(&(md.dev(), md.ino())) {
                    return append_entry(&mut tar, path, md, EntryType::Link, Some(original));
                }
                first.insert((md.dev(), md.ino()), path.to_path_buf());
            }
            done.bytes += md.size();
            let file = std::fs::File::open(root.join(path))?;
            let mut header = header_of(md, EntryType::Regular);
            header.set_size(md.size());
            append_mtime(&mut tar, md)?;
            // A file that changed size while packed fails the append (short read). Builds
            // are never changed in place, so content is what the bake left.
            tar.append_data(&mut header, path, file.take(md.size()))
        } else if ft.is_fifo() {
            append_entry(&mut tar, path, md, EntryType::Fifo, None)
        } else {
            Err(refused(
                path,
                "device nodes and sockets cannot be published",
            ))
        }
    })?;
    tar.into_inner()?.flush()?;
    Ok(done)
}

fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {why}", path.display()),
    )
}

fn header_of(md: &Metadata, kind: EntryType) -> Header {
    let mut h = Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(md.mode() & 0o7777);
    h.set_uid(u64::from(md.uid()));
    h.set_gid(u64::from(md.gid()));
    h.set_mtime(u64::try_from(md.mtime()).unwrap_or(0));
    h.set_size(0);
    h
}

/// An entry without content: a pax `mtime` record, then its header (and link target).
fn append_entry<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &Path,
    md: &Metadata,
    kind: EntryType,
    link: Option<&Path>,
) -> io::Result<()> {
    let mut header = header_of(md, kind);
    append_mtime(tar, md)?;
    match link {
        Some(target) => tar.append_link(&mut header, path, target),
        None => tar.append_data(&mut header, path, io::empty()),
    }
}

/// A pax extended header with the entry's `mtime` in seconds and nanoseconds (applies to the
/// entry that follows it).
fn append_mtime<W: Write>(tar: &mut tar::Builder<W>, md: &Metadata) -> io::Result<()> {
    let record = pax_record("mtime", &format!("{}.{:09}", md.mtime(), md.mtime_nsec()));
    let mut h = Header::new_ustar();
    h.set_entry_type(EntryType::XHeader);
    h.set_path("././@PaxHeader")?;
    h.set_mode(0o644);
    h.set_size(record.len() as u64);
    h.set_cksum();
    tar.append(&h, record.as_slice())
}

/// One pax record: `"<length> <key>=<value>\n"`, the length counting itself.
fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let body = format!(" {key}={value}\n");
    let mut len = body.len() + 1;
    while format!("{len}").len() + body.len() != len {
        len += 1;
    }
    format!("{len}{body}").into_bytes()
}

/// Seconds and nanoseconds of a pax `mtime` value written by [`pack`].
fn parse_mtime(value: &str) -> Option<(i64, i64)> {
    let (sec, nsec) = value.split_once('.').unwrap_or((value, "0"));
    let sec: i64 = sec.parse().ok()?;
    let digits = nsec.get(..nsec.len().min(9))?;
    let nsec: i64 = format!("{digits:0<9}").parse().ok()?;
    Some((sec, nsec))
}

/// Recreates the tree written by [`pack`] from `input` in the empty directory `dest`
/// (module doc). Blocking. The caller removes `dest` when this fails and compares
/// [`manifest_digest`] of `dest` with the original's when it succeeds.
///
/// # Errors
/// `InvalidData` naming the entry for an absolute name, a `..` component, an entry type
/// [`pack`] does not write, or an entry without its `mtime` record; I/O errors.
pub fn unpack(input: impl Read, dest: &Path) -> io::Result<Tree> {
    let root = InRoot::open(dest)?;
    let mut archive = tar::Archive::new(input);
    let mut done = Tree::default();
    // Directories get their times once nothing more is created in them.
    let mut dirs: Vec<(String, (i64, i64))> = Vec::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, format!("{raw}: {why}"));
        if raw.starts_with('/') {
            return Err(bad("absolute name"));
        }
        let path = in_root::components(&raw)
            .map_err(|_| bad("'..' in the name"))?
            .join("/");
        let mtime = entry
            .pax_extensions()?
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .find(|x| x.key_bytes() == b"mtime")
            .and_then(|x| x.value().ok().and_then(parse_mtime))
            .ok_or_else(|| bad("no mtime record"))?;
        let header = entry.header();
        let kind = header.entry_type();
        let mode = header.mode()?;
        let owner = (
            u32::try_from(header.uid()?).map_err(|_| bad("uid"))?,
            u32::try_from(header.gid()?).map_err(|_| bad("gid"))?,
        );
        let link = || -> io::Result<String> {
            let target = entry
                .link_name_bytes()
                .ok_or_else(|| bad("no link target"))?;
            Ok(String::from_utf8_lossy(&target).into_owned())
        };
        let with_path = |e: io::Error| io::Error::new(e.kind(), format!("{raw}: {e}"));
        if !path.is_empty() {
            done.entries += 1;
        }
        match kind {
            EntryType::Directory => {
                if path.is_empty() {
                    root.set_dir_attrs("", mode, Some(owner))
                } else {
                    root.mkdir_all(&path, mode, Some(owner)).map(drop)
                }
                .map_err(with_path)?;
                dirs.push((path, mtime));
            }
            EntryType::Regular => {
                let mut file = root
                    .create_file(&path, mode, Some(owner))
                    .map_err(with_path)?;
                done.bytes += io::copy(&mut entry, &mut file).map_err(with_path)?;
                in_root::set_file_times(&file, mtime).map_err(with_path)?;
            }
            EntryType::Symlink => {
                let target = link()?;
                root.symlink(&path, &target, Some(owner))
                    .map_err(with_path)?;
                root.set_times(&path, mtime).map_err(with_path)?;
            }
            EntryType::Link => {
                let target = link()?;
                if target.starts_with('/') {
                    return Err(bad("hard link to an absolute name"));
                }
                root.hard_link(&path, &target).map_err(with_path)?;
            }
            EntryType::Fifo => {
                root.fifo(&path, mode, Some(owner)).map_err(with_path)?;
                root.set_times(&path, mtime).map_err(with_path)?;
            }
            other => {
                return Err(bad(&format!(
                    "entries of type {other:?} are not written by pack"
                )))
            }
        }
    }
    for (path, mtime) in dirs.iter().rev() {
        root.set_times(path, *mtime)
            .map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use std::os::unix::fs::PermissionsExt;

    /// A tree with what a rootfs holds: nested dirs, a setuid binary owned by another user, a
    /// file with two links, symlinks (relative, absolute, dangling), a FIFO, a long name, an
    /// empty file, times with nanoseconds (one at 0, as reproducible builds leave them).
    fn sample(root: &Path) {
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        std::fs::create_dir_all(root.join("var/mail")).unwrap();
        std::fs::write(root.join("usr/bin/su"), b"#!/bin/sh\n").unwrap();
        std::os::unix::fs::chown(root.join("usr/bin/su"), Some(0), Some(42)).unwrap();
        std::fs::set_permissions(
            root.join("usr/bin/su"),
            std::fs::Permissions::from_mode(0o4755),
        )
        .unwrap();
        std::fs::set_permissions(
            root.join("var/mail"),
            std::fs::Permissions::from_mode(0o2775),
        )
        .unwrap();
        std::os::unix::fs::chown(root.join("var/mail"), Some(0), Some(8)).unwrap();
        std::fs::write(root.join("usr/bin/python3.11"), vec![7u8; 100_000]).unwrap();
        std::fs::hard_link(
            root.join("usr/bin/python3.11"),
            root.join("usr/bin/python3"),
        )
        .unwrap();
        std::os::unix::fs::symlink("python3", root.join("usr/bin/py")).unwrap();
        std::os::unix::fs::symlink("/usr/bin", root.join("bin")).unwrap();
        std::os::unix::fs::symlink("nowhere", root.join("dangling")).unwrap();
        std::fs::write(root.join("empty"), b"").unwrap();
        let long = "d".repeat(120);
        std::fs::create_dir_all(root.join(&long)).unwrap();
        std::fs::write(root.join(&long).join("f".repeat(120)), b"long").unwrap();
        let ok = std::process::Command::new("mkfifo")
            .arg(root.join("fifo"))
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let set = |rel: &str, sec: i64, nsec: i64| {
            let t = rustix::fs::Timespec {
                tv_sec: sec,
                tv_nsec: nsec,
            };
            rustix::fs::utimensat(
                rustix::fs::CWD,
                root.join(rel),
                &rustix::fs::Timestamps {
                    last_access: t,
                    last_modification: t,
                },
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .unwrap();
        };
        set("empty", 0, 0);
        set("usr/bin/py", 1_700_000_000, 123_456_789);
        set("usr/bin/su", 1_600_000_000, 1);
        set("usr/bin", 1_650_000_000, 999_999_999);
    }

    #[test]
    fn a_tree_round_trips_to_the_same_manifest_digest() {
        let tmp = TempDir::new("transfer-rt");
        let src = tmp.path().join("src");
        sample(&src);
        let digest = manifest_digest(&src).unwrap();
        let mut tar = Vec::new();
        let packed = pack(&src, &mut tar).unwrap();
        let dest = tmp.path().join("dest");
        std::fs::create_dir_all(&dest).unwrap();
        let unpacked = unpack(tar.as_slice(), &dest).unwrap();
        assert_eq!(packed, unpacked);
        assert_eq!(manifest_digest(&dest).unwrap(), digest);
        let md = std::fs::metadata(dest.join("usr/bin/su")).unwrap();
        assert_eq!((md.mode() & 0o7777, md.gid()), (0o4755, 42));
        assert_eq!(
            std::fs::metadata(dest.join("usr/bin/python3"))
                .unwrap()
                .ino(),
            std::fs::metadata(dest.join("usr/bin/python3.11"))
                .unwrap()
                .ino()
        );
        assert_eq!(std::fs::metadata(dest.join("empty")).unwrap().mtime(), 0);
    }

    /// The real thing: the baked `base` rootfs CI gives the engine's tests
    /// (`PANDASTACK_TEST_ROOTFS`; ~0.5 GiB) packs and unpacks to its own digest, streamed
    /// through a pipe.
    #[test]
    fn a_baked_rootfs_round_trips_to_its_digest() {
        let Ok(src) = std::env::var("PANDASTACK_TEST_ROOTFS") else {
            assert_ne!(
                std::env::var("PANDASTACK_REQUIRE_SANDBOX_TESTS").as_deref(),
                Ok("1"),
                "PANDASTACK_TEST_ROOTFS is not set"
            );
            eprintln!("skipped: PANDASTACK_TEST_ROOTFS is not set");
            return;
        };
        let src = PathBuf::from(src);
        let tmp = TempDir::new("transfer-real");
        let dest = tmp.path().join("rootfs");
        std::fs::create_dir_all(&dest).unwrap();
        let (reader, writer) = std::io::pipe().unwrap();
        let from = src.clone();
        let packer = std::thread::spawn(move || pack(&from, writer));
        let unpacked = unpack(reader, &dest).unwrap();
        let packed = packer.join().unwrap().unwrap();
        assert_eq!(packed, unpacked);
        assert!(packed.entries > 10_000, "{packed:?}");
        assert_eq!(
            manifest_digest(&dest).unwrap(),
            manifest_digest(&src).unwrap()
        );
    }

    #[test]
    fn the_digest_follows_content_metadata_not_the_tree_location() {
        let tmp = TempDir::new("transfer-digest");
        let a = tmp.path().join("a");
        std::fs::create_dir_all(a.join("etc/sub")).unwrap();
        std::fs::write(a.join("etc/hostname"), b"sandbox").unwrap();
        std::os::unix::fs::symlink("hostname", a.join("etc/link")).unwrap();
        let digest = manifest_digest(&a).unwrap();
        // A hard-linked copy (what `cp -al` makes) has the same digest.
        let b = tmp.path().join("b");
        let ok = std::process::Command::new("cp")
            .args(["-al", &a.display().to_string(), &b.display().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        assert_eq!(manifest_digest(&b).unwrap(), digest);
        // Any change of content size, name or link target changes it.
        std::fs::write(a.join("etc/hostname"), b"sandbox2").unwrap();
        assert_ne!(manifest_digest(&a).unwrap(), digest);
        std::fs::remove_file(b.join("etc/link")).unwrap();
        std::os::unix::fs::symlink("other", b.join("etc/link")).unwrap();
        assert_ne!(manifest_digest(&b).unwrap(), digest);
    }

    #[test]
    fn an_archive_naming_paths_outside_is_refused() {
        let tmp = TempDir::new("transfer-bad");
        for (name, kind, link) in [
            ("../escape", EntryType::Regular, None),
            ("/etc/passwd", EntryType::Regular, None),
            ("x", EntryType::Link, Some("/etc/shadow")),
            ("y", EntryType::Link, Some("../../etc/shadow")),
            ("dev", EntryType::Char, None),
        ] {
            let mut b = tar::Builder::new(Vec::new());
            let mut h = Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(0o644);
            h.set_size(0);
            let raw = h.as_old_mut().name.as_mut();
            raw[..name.len()].copy_from_slice(name.as_bytes());
            if let Some(l) = link {
                h.set_link_name(l).unwrap();
            }
            h.set_cksum();
            let record = pax_record("mtime", "1.5");
            let mut x = Header::new_ustar();
            x.set_entry_type(EntryType::XHeader);
            x.set_path("././@PaxHeader").unwrap();
            x.set_size(record.len() as u64);
            x.set_cksum();
            b.append(&x, record.as_slice()).unwrap();
            b.append(&h, io::empty()).unwrap();
            let bytes = b.into_inner().unwrap();
            let dest = tmp.path().join(format!("d{}", name.len()));
            std::fs::create_dir_all(&dest).unwrap();
            assert!(
                unpack(bytes.as_slice(), &dest).is_err(),
                "{name} was unpacked"
            );
            assert!(!tmp.path().join("escape").exists());
        }
    }

    #[test]
    fn pax_records_and_times_parse_back() {
        for (k, v) in [("mtime", "1.000000001"), ("mtime", &"9".repeat(97))] {
            let r = pax_record(k, v);
            let s = String::from_utf8(r.clone()).unwrap();
            let (len, _) = s.split_once(' ').unwrap();
            assert_eq!(len.parse::<usize>().unwrap(), r.len(), "{s}");
        }
        assert_eq!(
            parse_mtime("1700000000.123456789"),
            Some((1_700_000_000, 123_456_789))
        );
        assert_eq!(parse_mtime("5.5"), Some((5, 500_000_000)));
        assert_eq!(parse_mtime("7"), Some((7, 0)));
        assert_eq!(parse_mtime("x.1"), None);
    }
}
