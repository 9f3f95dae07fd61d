//! Unpacking a user's rootfs tar (plain or gzip, as `docker export` or `tar -C rootfs -c .`
//! makes it) into a template rootfs, refusing what no normal image has.
//!
//! Refused, with the entry named: absolute paths, `..` components (in names and hard-link
//! targets), device nodes outside `dev/` (those under `dev/` are skipped: the sandbox's `/dev`
//! is its own), setuid/setgid files outside the system binary directories, world-writable
//! setuid files, entry types other than files, directories, symlinks, hard links and FIFOs,
//! and more than the byte or entry limit. Ownership is kept as the numbers in the archive
//! (`--numeric-owner`), modes and file mtimes too. Every write goes through [`InRoot`], so a
//! symlink unpacked earlier (`etc -> /etc`) redirects nothing outside the rootfs.

use super::in_root::{self, InRoot};
use std::fmt;
use std::io::{self, BufRead, BufReader, Read};
use tar::EntryType;

/// Limits of one unpack.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest total of file bytes, bytes.
    pub max_bytes: u64,
    /// Largest number of entries.
    pub max_entries: u64,
    /// What `max_bytes` comes from, for the error (`"the template's size_mb"`).
    pub bytes_rule: &'static str,
}

/// What an unpack did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unpacked {
    pub entries: u64,
    pub bytes: u64,
    /// Device nodes under `dev/` that were left out.
    pub skipped_devices: u64,
}

/// Why an archive was refused or could not be unpacked. The message names the entry and never
/// a host path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarError(pub String);

impl fmt::Display for TarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TarError {}

/// Directories where setuid/setgid programs are normal (su, passwd, mount, ssh-keysign...).
const SETID_DIRS: &[&str] = &[
    "bin/",
    "sbin/",
    "usr/bin/",
    "usr/sbin/",
    "usr/lib/",
    "usr/libexec/",
];

/// Unpacks the tar (gzip-compressed or not, detected from its first bytes) read from `input`
/// into the tree `root`, under `base` (`""` for a whole rootfs, the destination directory for
/// `ADD archive.tar /dest`). `allow_dev_skip`: device nodes under `dev/` are skipped rather
/// than refused (whole rootfs tars).
///
/// # Errors
/// [`TarError`] naming the refused entry, or saying the archive is not a tar, is corrupt or is
/// over a limit. The caller removes the partial tree.
pub fn unpack(
    input: impl Read,
    root: &InRoot,
    base: &str,
    limits: Limits,
    allow_dev_skip: bool,
) -> Result<Unpacked, TarError> {
    let mut reader = BufReader::with_capacity(256 * 1024, input);
    let gz = reader
        .fill_buf()
        .map(|head| head.starts_with(&[0x1f, 0x8b]))
        .map_err(|e| TarError(format!("cannot read the archive: {e}")))?;
    let stream: Box<dyn Read> = if gz {
        Box::new(flate2::read::GzDecoder::new(reader))
    } else {
        Box::new(reader)
    };
    let mut archive = tar::Archive::new(stream);
    let mut done = Unpacked::default();
    let entries = archive
        .entries()
        .map_err(|e| TarError(format!("not a tar archive: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| TarError(format!("corrupt tar archive: {e}")))?;
        done.entries += 1;
        if done.entries > limits.max_entries {
            return Err(TarError(format!(
                "the archive has more than {} entries",
                limits.max_entries
            )));
        }
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(rel) = entry_path(&raw)? else {
            continue; // `./` itself
        };
        let header = entry.header();
        let kind = header.entry_type();
        // Empty numeric fields (some writers leave them blank) read as GNU tar reads them.
        let default_mode = if kind == EntryType::Directory {
            0o755
        } else {
            0o644
        };
        let mode = header.mode().unwrap_or(default_mode);
        let owner = (
            u32::try_from(header.uid().unwrap_or(0)).map_err(|_| bad(&raw, "uid"))?,
            u32::try_from(header.gid().unwrap_or(0)).map_err(|_| bad(&raw, "gid"))?,
        );
        let mtime = header.mtime().unwrap_or(0) as i64;
        check_setid(&rel, kind, mode)?;
        let target = join(base, &rel);
        let io_err = |e: io::Error| TarError(format!("cannot unpack {raw}: {e}"));
        match kind {
            EntryType::Directory => match root.kind(&target).map_err(io_err)? {
                Some(in_root::Kind::Dir) => root
                    .set_dir_attrs(&target, mode, Some(owner))
                    .map_err(io_err)?,
                _ => {
                    root.mkdir_all(&target, mode, Some(owner)).map_err(io_err)?;
                }
            },
            EntryType::Regular | EntryType::Continuous => {
                let size = entry.size();
                done.bytes += size;
                if done.bytes > limits.max_bytes {
                    return Err(TarError(format!(
                        "the archive unpacks to more than {} MiB ({})",
                        limits.max_bytes / (1024 * 1024),
                        limits.bytes_rule
                    )));
                }
                let mut file = root
                    .create_file(&target, mode, Some(owner))
                    .map_err(io_err)?;
                io::copy(&mut entry, &mut file).map_err(io_err)?;
                in_root::set_mtime(&file, mtime).map_err(io_err)?;
            }
            EntryType::Symlink => {
                let link = link_name(&entry, &raw)?;
                root.symlink(&target, &link, Some(owner)).map_err(io_err)?;
            }
            EntryType::Link => {
                let link = link_name(&entry, &raw)?;
                let source = entry_path(&link)?
                    .ok_or_else(|| TarError(format!("{raw}: hard link to the root")))?;
                root.hard_link(&target, &join(base, &source))
                    .map_err(io_err)?;
            }
            EntryType::Fifo => root.fifo(&target, mode, Some(owner)).map_err(io_err)?,
            EntryType::Char | EntryType::Block => {
                if allow_dev_skip && (rel == "dev" || rel.starts_with("dev/")) {
                    done.skipped_devices += 1;
                } else {
                    return Err(TarError(format!(
                        "{raw}: device nodes are not allowed in a template"
                    )));
                }
            }
            // pax and GNU long-name headers are consumed by the tar reader itself.
            EntryType::XHeader
            | EntryType::XGlobalHeader
            | EntryType::GNULongName
            | EntryType::GNULongLink => {}
            other => {
                return Err(TarError(format!(
                    "{raw}: entries of type {other:?} are not supported"
                )))
            }
        }
    }
    Ok(done)
}

fn bad(raw: &str, field: &str) -> TarError {
    TarError(format!("{raw}: bad {field} in the tar header"))
}

/// The entry's normalised relative path; `None` for the archive root (`./`).
fn entry_path(raw: &str) -> Result<Option<String>, TarError> {
    if raw.starts_with('/') {
        return Err(TarError(format!("{raw}: absolute paths are not allowed")));
    }
    let parts: Vec<&str> = raw
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(TarError(format!("{raw}: '..' is not allowed in a path")));
    }
    if raw.contains('\0') {
        return Err(TarError(format!("{raw:?}: NUL in a path")));
    }
    Ok((!parts.is_empty()).then(|| parts.join("/")))
}

fn link_name<R: Read>(entry: &tar::Entry<'_, R>, raw: &str) -> Result<String, TarError> {
    let link = entry
        .link_name_bytes()
        .ok_or_else(|| TarError(format!("{raw}: link without a target")))?;
    let link = String::from_utf8_lossy(&link).into_owned();
    if link.is_empty() || link.contains('\0') {
        return Err(TarError(format!("{raw}: bad link target")));
    }
    Ok(link)
}

/// setuid/setgid bits are refused outside the system binary directories, and on
/// world-writable files anywhere. Setgid directories (`/var/mail`) are normal.
fn check_setid(rel: &str, kind: EntryType, mode: u32) -> Result<(), TarError> {
    let setid = mode & 0o6000 != 0;
    if !setid || kind == EntryType::Directory {
        return Ok(());
    }
    if mode & 0o002 != 0 {
        return Err(TarError(format!(
            "{rel}: a world-writable setuid/setgid file is not allowed"
        )));
    }
    if !SETID_DIRS.iter().any(|d| rel.starts_with(d)) {
        return Err(TarError(format!(
            "{rel}: setuid/setgid files are only allowed in /bin, /sbin, /usr/bin, /usr/sbin, /usr/lib and /usr/libexec"
        )));
    }
    Ok(())
}

fn join(base: &str, rel: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.is_empty() {
        rel.to_string()
    } else {
        format!("{base}/{rel}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use std::os::unix::fs::MetadataExt;

    const LIMITS: Limits = Limits {
        max_bytes: 1 << 20,
        max_entries: 100,
        bytes_rule: "the test's limit",
    };

    /// A tar built by hand: (path, type, mode, data / link target).
    fn tar_of(entries: &[(&str, EntryType, u32, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, mode, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(*mode);
            h.set_uid(1000);
            h.set_gid(1000);
            h.set_mtime(1_700_000_000);
            // set_path refuses `..` and absolute paths: write the name bytes directly.
            let name = h.as_old_mut().name.as_mut();
            name[..path.len()].copy_from_slice(path.as_bytes());
            match kind {
                EntryType::Symlink | EntryType::Link => {
                    h.set_link_name(data).unwrap();
                    h.set_size(0);
                    h.set_cksum();
                    b.append(&h, io::empty()).unwrap();
                }
                _ => {
                    h.set_size(data.len() as u64);
                    h.set_cksum();
                    b.append(&h, data.as_bytes()).unwrap();
                }
            }
        }
        b.into_inner().unwrap()
    }

    fn unpack_into(tmp: &TempDir, bytes: &[u8]) -> Result<Unpacked, TarError> {
        let dir = tmp.path().join("rootfs");
        std::fs::create_dir_all(&dir).unwrap();
        let root = InRoot::open(&dir).unwrap();
        unpack(bytes, &root, "", LIMITS, true)
    }

    #[test]
    fn a_normal_rootfs_unpacks_with_numeric_owners() {
        let tmp = TempDir::new("tar-ok");
        let t = tar_of(&[
            ("./", EntryType::Directory, 0o755, ""),
            ("usr/bin/", EntryType::Directory, 0o755, ""),
            ("usr/bin/hello", EntryType::Regular, 0o755, "#!/bin/sh\n"),
            ("usr/bin/su", EntryType::Regular, 0o4755, "x"),
            ("bin", EntryType::Symlink, 0o777, "usr/bin"),
            ("etc-elsewhere/", EntryType::Directory, 0o755, ""),
            ("etc", EntryType::Symlink, 0o777, "/etc-elsewhere"),
            (
                "etc/passwd",
                EntryType::Regular,
                0o644,
                "root:x:0:0::/root:/bin/sh\n",
            ),
            ("usr/bin/hi", EntryType::Link, 0o755, "usr/bin/hello"),
            ("dev/null", EntryType::Char, 0o666, ""),
            ("var/mail/", EntryType::Directory, 0o2775, ""),
        ]);
        let done = unpack_into(&tmp, &t).expect("unpacks");
        assert_eq!(done.skipped_devices, 1);
        let r = tmp.path().join("rootfs");
        let m = std::fs::metadata(r.join("usr/bin/hello")).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o7777, m.mtime()),
            (1000, 1000, 0o755, 1_700_000_000)
        );
        assert_eq!(
            std::fs::metadata(r.join("usr/bin/su")).unwrap().mode() & 0o7777,
            0o4755
        );
        assert_eq!(std::fs::metadata(r.join("usr/bin/hi")).unwrap().nlink(), 2);
        // The file behind the absolute symlink landed inside the rootfs.
        assert!(r.join("etc-elsewhere/passwd").is_file());
        assert!(!std::path::Path::new("/etc-elsewhere").exists());
    }

    #[test]
    fn malicious_entries_are_refused() {
        for (entries, word) in [
            (
                vec![("../etc/passwd", EntryType::Regular, 0o644, "x")],
                "'..'",
            ),
            (
                vec![("/etc/passwd", EntryType::Regular, 0o644, "x")],
                "absolute",
            ),
            (vec![("evil/sda", EntryType::Block, 0o660, "")], "device"),
            (
                vec![("tmp/rootme", EntryType::Regular, 0o4755, "x")],
                "setuid",
            ),
            (
                vec![("usr/bin/w", EntryType::Regular, 0o4777, "x")],
                "world-writable",
            ),
            (
                vec![("a", EntryType::Link, 0o644, "../../etc/shadow")],
                "'..'",
            ),
        ] {
            let tmp = TempDir::new("tar-bad");
            let e = unpack_into(&tmp, &tar_of(&entries)).expect_err("refused");
            assert!(e.0.contains(word), "{e} should mention {word}");
        }
    }

    #[test]
    fn gzip_garbage_and_limits() {
        use std::io::Write;
        let tmp = TempDir::new("tar-gz");
        let t = tar_of(&[("f", EntryType::Regular, 0o644, "data")]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&t).unwrap();
        let done = unpack_into(&tmp, &gz.finish().unwrap()).expect("gzip unpacks");
        assert_eq!(done.bytes, 4);
        let tmp = TempDir::new("tar-junk");
        assert!(unpack_into(&tmp, &[b'x'; 2048]).is_err());
        let tmp = TempDir::new("tar-big");
        let big = "x".repeat(2 << 20);
        let e = unpack_into(&tmp, &tar_of(&[("f", EntryType::Regular, 0o644, &big)]));
        assert!(e.unwrap_err().0.contains("more than"));
    }
}
