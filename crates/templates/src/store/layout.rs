//! Where things live under the store root, and the `current` pointer.
//!
//! ```text
//! <root>/<name>/.lock                   flock(2) target, serialises bakes and removals
//! <root>/<name>/current                 "<build id>\n" of the current build
//! <root>/<name>/.generation             highest generation ever published (survives a delete)
//! <root>/<name>/<hash>-g<gen>/rootfs/   a finished build, never modified
//! <root>/<name>/<hash>-g<gen>/meta.json
//! <root>/<name>/<hash>-g<gen>.log       mmdebstrap log of that bake (kept on failure)
//! <root>/<name>/<hash>-g<gen>.partial/  a bake in progress (removed on failure)
//! <root>/.cache/wheels/<name==ver>/     host-downloaded wheels
//! ```

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// File naming the current build inside a template directory.
pub(crate) const CURRENT: &str = "current";
/// Lock file inside a template directory.
pub(crate) const LOCK: &str = ".lock";
/// File holding the highest generation published, so a deleted and re-made template never
/// hands out a generation an old snapshot could match.
pub(crate) const GENERATION: &str = ".generation";
/// Metadata file inside a build directory.
pub(crate) const META: &str = "meta.json";
/// Suffix of a build directory being baked.
pub(crate) const PARTIAL: &str = ".partial";
/// Suffix of a build directory being removed.
pub(crate) const DELETING: &str = ".deleting";

/// `<hash>-g<generation>`.
pub(crate) fn build_id(hash: &str, generation: u64) -> String {
    format!("{hash}-g{generation}")
}

/// The generation of a finished build's directory name, `None` for anything
/// else (partial builds, logs, the lock, `current`).
pub(crate) fn parse_build_id(id: &str) -> Option<u64> {
    let (hash, generation) = id.rsplit_once("-g")?;
    let hex = hash.len() == 64 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let digits = !generation.is_empty() && generation.bytes().all(|b| b.is_ascii_digit());
    if hex && digits {
        generation.parse().ok()
    } else {
        None
    }
}

/// Build id named by `<template_dir>/current`, `None` if there is none yet.
pub(crate) fn read_current(template_dir: &Path) -> io::Result<Option<String>> {
    match fs::read_to_string(template_dir.join(CURRENT)) {
        Ok(s) => Ok(Some(s.trim().to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Points `current` at `build_id`; readers see the old or the new id, never a
/// torn file (write to a temporary, fsync, rename over).
pub(crate) fn write_current(template_dir: &Path, build_id: &str) -> io::Result<()> {
    write_atomic(
        &template_dir.join(CURRENT),
        format!("{build_id}\n").as_bytes(),
    )
}

/// Replaces `path` with `bytes` via `<path>.tmp` and rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)
}

/// Highest generation among the finished builds in `template_dir` and its `.generation` file
/// (0 if none).
pub(crate) fn max_generation(template_dir: &Path) -> io::Result<u64> {
    let mut max = published_generation(template_dir)?;
    for entry in fs::read_dir(template_dir)? {
        let name = entry?.file_name();
        if let Some(generation) = name.to_str().and_then(parse_build_id) {
            max = max.max(generation);
        }
    }
    Ok(max)
}

/// The generation recorded by the last publish or retire in `template_dir` (0 if none).
pub(crate) fn published_generation(template_dir: &Path) -> io::Result<u64> {
    match fs::read_to_string(template_dir.join(GENERATION)) {
        Ok(s) => Ok(s.trim().parse().unwrap_or(0)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
    }
}

/// Records `generation` as the highest one published in `template_dir`.
pub(crate) fn write_generation(template_dir: &Path, generation: u64) -> io::Result<()> {
    let max = max_generation(template_dir)?.max(generation);
    write_atomic(
        &template_dir.join(GENERATION),
        format!("{max}\n").as_bytes(),
    )
}

/// Removes `current`: the template has no current build any more (it was deleted).
pub(crate) fn clear_current(template_dir: &Path) -> io::Result<()> {
    match fs::remove_file(template_dir.join(CURRENT)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Removes directories of bakes or removals that a crash interrupted.
pub(crate) fn remove_stale(template_dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(template_dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if (name.ends_with(PARTIAL) || name.ends_with(DELETING)) && entry.file_type()?.is_dir() {
            tracing::warn!(dir = %name, "removing interrupted template build");
            remove_tree(&entry.path())?;
        }
    }
    Ok(())
}

/// `remove_dir_all`, but refuses if anything is mounted at or below `dir`: a
/// bootstrap killed mid-way could leave `/proc` or bind-mounted device nodes in
/// the chroot, and deleting through those would damage the host.
pub(crate) fn remove_tree(dir: &Path) -> io::Result<()> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")?;
    if let Some(mount) = mounts_below(&mountinfo, dir).next() {
        tracing::error!(dir = %dir.display(), mount = %mount.display(), "mount point inside a template build");
        return Err(io::Error::other(
            "refusing to delete a build with a mount point inside",
        ));
    }
    fs::remove_dir_all(dir)
}

/// Mount points (field 5 of mountinfo, octal escapes decoded) at or below `dir`.
fn mounts_below<'a>(mountinfo: &'a str, dir: &'a Path) -> impl Iterator<Item = PathBuf> + 'a {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_mountinfo(field)))
        .filter(move |mount| mount.starts_with(dir))
}

/// Decodes the `\ooo` escapes the kernel uses for space, tab, newline and `\\`.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_ids_round_trip_and_reject_other_names() {
        let hash = "ab".repeat(32);
        assert_eq!(parse_build_id(&build_id(&hash, 7)), Some(7));
        assert_eq!(
            parse_build_id(&format!("{}.partial", build_id(&hash, 7))),
            None
        );
        assert_eq!(parse_build_id("current"), None);
        assert_eq!(parse_build_id(&format!("{hash}-g")), None);
        assert_eq!(parse_build_id(&format!("{}-g1", "AB".repeat(32))), None);
    }

    #[test]
    fn mounts_below_finds_escaped_mount_points() {
        let info = "22 27 0:21 / /proc rw - proc proc rw\n\
                    90 27 0:50 / /srv/t/base/x.partial/rootfs/dev\\040x rw - tmpfs t rw\n";
        let dir = Path::new("/srv/t/base/x.partial");
        let found: Vec<_> = mounts_below(info, dir).collect();
        assert_eq!(found, [PathBuf::from("/srv/t/base/x.partial/rootfs/dev x")]);
        assert_eq!(mounts_below(info, Path::new("/srv/t/base/y")).count(), 0);
    }

    #[test]
    fn remove_tree_deletes_unmounted_dirs() {
        let tmp = crate::testutil::TempDir::new("remove");
        let dir = tmp.path().join("a.partial");
        fs::create_dir_all(dir.join("rootfs/usr")).unwrap();
        remove_tree(&dir).unwrap();
        assert!(!dir.exists());
    }
}
