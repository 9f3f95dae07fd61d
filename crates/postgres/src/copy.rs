//! Copying a cluster's directory tree: files, directories and symlinks with their modes and
//! owners (a data directory must stay `0700` and the postgres user's). Used for the template
//! copy of every new database and for a clone of a stopped (cleanly shut down, so consistent)
//! cluster.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// Copies the tree at `from` to `to` (which must not exist yet, or be an empty directory).
/// Symlinks are copied as links, except those named in `skip_links` (relative to `from`),
/// which the caller re-creates. `fsync`: every file is synced before returning, so the copy
/// survives a host crash as the original would.
///
/// # Errors
/// The first I/O error; the partial copy is left for the caller to remove.
pub fn tree(from: &Path, to: &Path, skip_links: &[&str], fsync: bool) -> io::Result<u64> {
    let mut bytes = 0;
    copy_dir(from, to, from, skip_links, fsync, &mut bytes)?;
    Ok(bytes)
}

fn copy_dir(
    from: &Path,
    to: &Path,
    root: &Path,
    skip: &[&str],
    fsync: bool,
    bytes: &mut u64,
) -> io::Result<()> {
    let meta = fs::metadata(from)?;
    if !to.exists() {
        fs::create_dir(to)?;
    }
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            let rel = src.strip_prefix(root).unwrap_or(&src);
            if !skip.iter().any(|s| Path::new(s) == rel) {
                std::os::unix::fs::symlink(fs::read_link(&src)?, &dst)?;
                let m = fs::symlink_metadata(&src)?;
                std::os::unix::fs::lchown(&dst, Some(m.uid()), Some(m.gid()))?;
            }
        } else if kind.is_dir() {
            copy_dir(&src, &dst, root, skip, fsync, bytes)?;
        } else if kind.is_file() {
            *bytes += fs::copy(&src, &dst)?;
            let m = entry.metadata()?;
            std::os::unix::fs::chown(&dst, Some(m.uid()), Some(m.gid()))?;
            if fsync {
                fs::File::open(&dst)?.sync_all()?;
            }
        }
        // Sockets and fifos are not part of a data directory.
    }
    fs::set_permissions(to, fs::Permissions::from_mode(meta.mode() & 0o7777))?;
    std::os::unix::fs::chown(to, Some(meta.uid()), Some(meta.gid()))?;
    if fsync {
        fs::File::open(to)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_modes_links_and_skips_named_links() {
        let base = std::env::temp_dir().join(format!("ps-copy-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let src = base.join("src");
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::write(src.join("sub/f"), b"hello").unwrap();
        fs::set_permissions(src.join("sub/f"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(&src, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink("/nowhere", src.join("keep")).unwrap();
        std::os::unix::fs::symlink("/elsewhere", src.join("pg_wal")).unwrap();
        let dst = base.join("dst");
        let n = tree(&src, &dst, &["pg_wal"], true).unwrap();
        assert_eq!(n, 5);
        assert_eq!(fs::read(dst.join("sub/f")).unwrap(), b"hello");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dst.join("sub/f")), 0o600);
        assert_eq!(mode(&dst), 0o700);
        assert_eq!(
            fs::read_link(dst.join("keep")).unwrap(),
            Path::new("/nowhere")
        );
        assert!(fs::symlink_metadata(dst.join("pg_wal")).is_err());
        fs::remove_dir_all(&base).unwrap();
    }
}
