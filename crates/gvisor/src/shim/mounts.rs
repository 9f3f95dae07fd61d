//! The mount namespace a sandbox's runsc lives in: `/proc/sys/net` hidden (a workaround of
//! this runsc) and the copies of other instances' disks and volumes dropped, both in the forked
//! child before exec (nothing here may allocate there).

use std::io;
use std::path::Path;

/// In the child before exec: a mount namespace of its own (a slave of the host's, so unmounts
/// there reach it) whose `/proc/sys/net` is an empty tmpfs.
pub(super) fn hide_proc_sys_net() -> io::Result<()> {
    let check = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    // SAFETY: plain system calls with NUL-terminated static strings or null pointers.
    unsafe {
        check(libc::unshare(libc::CLONE_NEWNS))?;
        check(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            // Slave, not private: unmounts on the host (a database's storage, issue 10)
            // reach this copy too, so it does not keep their filesystems alive.
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        ))?;
        check(libc::mount(
            c"tmpfs".as_ptr(),
            c"/proc/sys/net".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"size=4k,mode=555".as_ptr().cast(),
        ))
    }
}

/// The disks of other instances (`<instances>/<id>/disk`, instance_disk.rs) as seen from a new
/// mount namespace. The namespace starts with a private copy of every mount of the host, and
/// the runsc process that lives in it for the instance's lifetime would keep other instances'
/// disks mounted (and their loop devices attached, their images' space held) long after their
/// own destroy unmounted them. The copies are unmounted right after `unshare`, from the
/// namespace's own mount table, so a disk mounted meanwhile is not missed.
///
/// Volumes (volumes.rs) are dropped likewise: other instances' staging directories (with the
/// volumes bound in them) and the host mounts of volume images. They live under a shared mount,
/// so this namespace's copies are slaves that an unmount on the host removes anyway; dropping
/// them keeps the namespace to what its instance uses. First the copy of the volume root itself
/// is made private, so stagings and host mounts made later do not propagate in either. The
/// instance's own staging directory stays, a slave of the host's (its own mount, unaffected by
/// its parent's propagation): runsc binds it at `/mnt`, and volumes bound into it later reach
/// the sandbox through it.
pub(super) struct ForeignDisks {
    /// `<instances dir>/`, escaped as in `/proc/self/mountinfo`.
    prefix: Vec<u8>,
    /// This instance's own disk, escaped likewise (kept).
    own: Vec<u8>,
    /// Volumes, when the instance has a staging directory: `<mounts>/sandbox/`,
    /// `<mounts>/volume/` and its own staging directory, escaped.
    volumes: Option<VolumeMounts>,
}

/// The escaped paths of [`ForeignDisks::volumes`], and the volume root as a C string.
struct VolumeMounts {
    root: std::ffi::CString,
    stagings: Vec<u8>,
    images: Vec<u8>,
    own: Vec<u8>,
}

impl ForeignDisks {
    pub(super) fn of(exit_file: &Path, volume_staging: Option<&Path>) -> Self {
        use std::os::unix::ffi::OsStrExt;
        let dir = exit_file.parent().unwrap_or(Path::new("/"));
        let instances = dir.parent().unwrap_or(Path::new("/"));
        let escape = |p: &Path| {
            let mut out = Vec::new();
            for &b in p.as_os_str().as_bytes() {
                match b {
                    b' ' | b'\t' | b'\n' | b'\\' => {
                        out.extend_from_slice(format!("\\{b:03o}").as_bytes())
                    }
                    _ => out.push(b),
                }
            }
            out
        };
        let mut prefix = escape(instances);
        prefix.push(b'/');
        let volumes = volume_staging.and_then(|own| {
            let stagings = own.parent()?;
            let root = stagings.parent()?;
            let with_slash = |p: &Path| {
                let mut v = escape(p);
                v.push(b'/');
                v
            };
            Some(VolumeMounts {
                root: std::ffi::CString::new(root.as_os_str().as_bytes()).ok()?,
                stagings: with_slash(stagings),
                images: with_slash(&root.join("volume")),
                own: escape(own),
            })
        });
        ForeignDisks {
            prefix,
            own: escape(&dir.join("disk")),
            volumes,
        }
    }

    /// Whether the escaped mount point `m` is another instance's disk or volume staging
    /// directory, or a volume's host mount (the volumes bound in this instance's own staging
    /// directory are separate mounts there, which stay).
    fn is_foreign(&self, m: &[u8]) -> bool {
        let disk = m.starts_with(&self.prefix)
            && m.ends_with(b"/disk")
            && m != self.own.as_slice()
            && !m[self.prefix.len()..m.len() - b"/disk".len()].contains(&b'/');
        disk || self.volumes.as_ref().is_some_and(|v| {
            let own = m == v.own.as_slice()
                || (m.starts_with(&v.own) && m.get(v.own.len()) == Some(&b'/'));
            let staging = m.starts_with(&v.stagings)
                && !m[v.stagings.len()..].contains(&b'/')
                && m.len() > v.stagings.len();
            let image = m.starts_with(&v.images)
                && !m[v.images.len()..].contains(&b'/')
                && m.len() > v.images.len();
            !own && (staging || image)
        })
    }

    /// In the child after `unshare`: lazily unmounts every foreign disk of this namespace.
    /// Allocates nothing (it runs between fork and exec). Best effort: a disk it cannot read
    /// or unmount stays, as before. Passes repeat while one unmounted something, because the
    /// mount table changes under the reader.
    pub(super) fn drop_copies(&self) {
        if let Some(v) = &self.volumes {
            // SAFETY: `root` is a NUL-terminated path made before the fork; the other pointers
            // are null, which mount(2) accepts for a propagation change.
            unsafe {
                libc::mount(
                    std::ptr::null(),
                    v.root.as_ptr(),
                    std::ptr::null(),
                    libc::MS_PRIVATE,
                    std::ptr::null(),
                );
            }
        }
        for _ in 0..8 {
            if self.one_pass() == 0 {
                return;
            }
        }
    }

    fn one_pass(&self) -> usize {
        // SAFETY: a static NUL-terminated path; the fd is closed below.
        let fd = unsafe {
            libc::open(
                c"/proc/self/mountinfo".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return 0;
        }
        let mut buf = [0u8; 4096];
        let mut line = [0u8; 4096];
        let (mut len, mut overlong, mut dropped) = (0usize, false, 0usize);
        loop {
            // SAFETY: `buf` is writable for its whole length.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            for &b in &buf[..n as usize] {
                if b != b'\n' {
                    if len < line.len() {
                        line[len] = b;
                        len += 1;
                    } else {
                        overlong = true;
                    }
                    continue;
                }
                if !overlong {
                    let mount_point = line[..len].split(|&c| c == b' ').nth(4);
                    if let Some(m) = mount_point.filter(|m| self.is_foreign(m)) {
                        if unmount_escaped(m) {
                            dropped += 1;
                        }
                    }
                }
                (len, overlong) = (0, false);
            }
        }
        // SAFETY: `fd` was opened above and is closed once.
        unsafe { libc::close(fd) };
        dropped
    }
}

/// `umount2(MNT_DETACH)` of a mount point escaped as in mountinfo (`\ooo`), unescaped into a
/// stack buffer. Allocates nothing.
fn unmount_escaped(m: &[u8]) -> bool {
    let mut path = [0u8; 4097];
    let (mut i, mut o) = (0, 0);
    while i < m.len() && o < path.len() - 1 {
        if m[i] == b'\\' && i + 3 < m.len() && m[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            path[o] = (m[i + 1] - b'0') * 64 + (m[i + 2] - b'0') * 8 + (m[i + 3] - b'0');
            i += 4;
        } else {
            path[o] = m[i];
            i += 1;
        }
        o += 1;
    }
    path[o] = 0;
    // SAFETY: `path` is NUL-terminated within its length.
    unsafe { libc::umount2(path.as_ptr().cast(), libc::MNT_DETACH) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_other_instances_disks_are_foreign() {
        let d = ForeignDisks::of(Path::new("/data/my dir/instances/ps-a/exit"), None);
        assert_eq!(d.prefix, b"/data/my\\040dir/instances/".to_vec());
        assert!(d.is_foreign(b"/data/my\\040dir/instances/ps-b/disk"));
        assert!(!d.is_foreign(b"/data/my\\040dir/instances/ps-a/disk"));
        assert!(!d.is_foreign(b"/data/my\\040dir/instances/ps-b/disk/x/disk"));
        assert!(!d.is_foreign(b"/data/other/instances/ps-b/disk"));
        assert!(!d.is_foreign(b"/run/netns/ps-b"));
        assert!(!d.is_foreign(b"/data/my\\040dir/mounts/sandbox/ps-b"));
    }

    #[test]
    fn other_instances_volumes_are_foreign_and_own_ones_kept() {
        let d = ForeignDisks::of(
            Path::new("/data/instances/ps-a/exit"),
            Some(Path::new("/data/mounts/sandbox/ps-a")),
        );
        assert!(d.is_foreign(b"/data/instances/ps-b/disk"));
        assert!(!d.is_foreign(b"/data/mounts/sandbox/ps-a"));
        assert!(!d.is_foreign(b"/data/mounts/sandbox/ps-a/work"));
        assert!(d.is_foreign(b"/data/mounts/sandbox/ps-b"));
        assert!(d.is_foreign(b"/data/mounts/sandbox/ps-ab"));
        // Below another staging: goes with it (a lazy unmount takes the subtree).
        assert!(!d.is_foreign(b"/data/mounts/sandbox/ps-b/work"));
        assert!(d.is_foreign(b"/data/mounts/volume/vol-1"));
        assert!(!d.is_foreign(b"/data/mounts"), "the shared root stays");
        assert!(!d.is_foreign(b"/data/mounts/sandbox/"));
        assert!(!d.is_foreign(b"/data/other/volume/vol-1"));
    }
}
