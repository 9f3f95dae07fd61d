//! Volumes of instances (issue 9): ext4 images mounted on the host and bound into sandboxes at
//! `/mnt/{name}`.
//!
//! gVisor has no ext4 (or any block device) inside the sandbox, so a volume is mounted on the
//! host (`mount -o loop`, [`crate::disk`]) and its directory is shared into the sandbox through
//! the gofer. runsc takes its mounts from `config.json` when a container is made, but volumes
//! must also reach containers made before anyone knew them: warm-pool instances (claimed by a
//! create) and restore targets (made in advance). So every instance gets the same one mount,
//! known from the start and hence in every checkpoint: its *staging directory*
//! `<root>/sandbox/<instance id>` bound at `/mnt` (`rbind`, `rslave`). Volumes are bound into
//! the staging directory on the host, before the container starts or while it runs, and mount
//! propagation carries them into the gofer's mount namespace, where the sandbox reaches them.
//!
//! Propagation needs a shared mount: `<root>` is bound onto itself and made shared when the
//! engine starts, so everything mounted below it is shared too; the copies that runsc's (and
//! the shim's) mount namespaces get are slaves, which receive new mounts and unmounts. That
//! also means unmounting a volume on the host really releases it: no other sandbox's mount
//! namespace keeps a private copy that would hold the filesystem open.
//!
//! The staging directory is a tiny tmpfs kept read-only (made writable only for the moment a
//! mount point is added), so a sandbox cannot write into `/mnt` itself: files there would
//! belong to no volume and would land on the host outside every quota.
//!
//! Each image is mounted once (`<root>/volume/<image file stem>`), read-write for its one
//! read-write user or read-only for any number of read-only ones, and unmounted (flushed and
//! closed) when its last instance releases it. Each instance records its volumes in
//! `<instance dir>/volumes.json`, so a restarted server rebuilds this state and finds what a
//! crash left.

use crate::disk::{self, DiskError};
use pandastack_engine::{InstanceId, VolumeMount, VolumeUsage};
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// File in an instance's directory listing its volumes.
const RECORD: &str = "volumes.json";
/// Options of a staging tmpfs: a few KiB and inodes (it only holds mount points).
const STAGING_DATA: &str = "size=64k,nr_inodes=256,mode=755";
/// Flags every staging mount keeps.
const STAGING_FLAGS: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
/// How long an attach waits for the last holder's lazily unmounted filesystem to close.
const RELEASE_WAIT: Duration = Duration::from_secs(10);
/// How long an unmount retries while the mount is busy before it detaches lazily.
const BUSY_RETRY: Duration = Duration::from_secs(2);

/// Errors of volume operations, for logs and engine errors (which name no host paths).
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("volume {0} is attached read-write to another sandbox")]
    InUse(String),
    #[error("volume {0} is attached read-only elsewhere; it cannot be attached read-write")]
    ReadOnlyElsewhere(String),
    #[error("volume {0} is still being closed by the sandbox that held it")]
    StillOpen(String),
    #[error("volume {0} is attached twice")]
    Duplicate(String),
    #[error("volume {name}: {source}")]
    Disk { name: String, source: DiskError },
    #[error("{what} of volume {name}: {source}")]
    Io {
        what: &'static str,
        name: String,
        source: io::Error,
    },
}

/// One image mounted on the host.
#[derive(Debug)]
struct HostMount {
    image: PathBuf,
    read_only: bool,
    users: HashSet<InstanceId>,
}

#[derive(Debug, Default)]
struct State {
    /// Host mounts by image key (file stem).
    images: HashMap<String, HostMount>,
    /// Volumes attached to each instance.
    instances: HashMap<InstanceId, Vec<VolumeMount>>,
}

/// The volume mounts of one engine, under one root directory (`<data_dir>/mounts`).
#[derive(Debug)]
pub struct Volumes {
    root: PathBuf,
    state: Mutex<State>,
}

fn key_of(image: &Path) -> String {
    image
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|e| io::Error::other(e.to_string()))
}

/// mount(2) with optional source, type and data.
fn sys_mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let source = source.map(cpath).transpose()?;
    let target = cpath(target)?;
    let fstype = fstype.map(CString::new).transpose()?;
    let data = data.map(CString::new).transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is either null or a NUL-terminated string that outlives the call;
    // mount(2) only reads them.
    let rc = unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Unmounts `target`: retried while busy for up to [`BUSY_RETRY`], then detached lazily (it
/// goes when its last user does). Not mounted is success.
fn sys_unmount(target: &Path) -> io::Result<()> {
    let c = cpath(target)?;
    let started = Instant::now();
    loop {
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINVAL | libc::ENOENT) => return Ok(()),
            Some(libc::EBUSY) if started.elapsed() < BUSY_RETRY => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Some(libc::EBUSY) => {
                warn!(path = %target.display(), "mount still busy; detaching it lazily");
                // SAFETY: as above.
                if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
                    return Ok(());
                }
                return Err(io::Error::last_os_error());
            }
            _ => return Err(e),
        }
    }
}

impl Volumes {
    /// The volume mounts under `root`, made a shared mount (bound onto itself first if it is
    /// not a mount point yet; a restarted server finds it so).
    ///
    /// # Errors
    /// I/O errors creating the directories or mounting.
    pub fn new(root: PathBuf) -> io::Result<Self> {
        std::fs::create_dir_all(root.join("sandbox"))?;
        std::fs::create_dir_all(root.join("volume"))?;
        if !disk::is_mounted(&root) {
            sys_mount(Some(&root), &root, None, libc::MS_BIND, None)?;
        }
        sys_mount(None, &root, None, libc::MS_SHARED, None)?;
        Ok(Volumes {
            root,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The staging directory of instance `id`, bound at `/mnt` in its sandbox.
    pub fn staging(&self, id: &str) -> PathBuf {
        self.root.join("sandbox").join(id)
    }

    fn host_mount_point(&self, image: &Path) -> PathBuf {
        self.root.join("volume").join(key_of(image))
    }

    /// Makes instance `id`'s staging directory with `volumes` attached, before its container
    /// starts (or before a restore into it). All or nothing.
    ///
    /// # Errors
    /// As [`Volumes::attach`]; the staging directory is removed again.
    pub fn prepare(
        &self,
        id: &str,
        dir: &Path,
        volumes: &[VolumeMount],
    ) -> Result<(), VolumeError> {
        let staging = self.staging(id);
        let io = |what, source| VolumeError::Io {
            what,
            name: "-".into(),
            source,
        };
        std::fs::create_dir_all(&staging).map_err(|e| io("staging directory", e))?;
        if !disk::is_mounted(&staging) {
            sys_mount(
                Some(Path::new("tmpfs")),
                &staging,
                Some("tmpfs"),
                STAGING_FLAGS | libc::MS_RDONLY,
                Some(STAGING_DATA),
            )
            .map_err(|e| io("staging mount", e))?;
            // Under the shared root it is shared already; said explicitly, since the volumes
            // bound into it later reach the sandbox only through propagation.
            sys_mount(None, &staging, None, libc::MS_SHARED, None)
                .map_err(|e| io("staging mount", e))?;
        }
        if volumes.is_empty() {
            return Ok(());
        }
        self.attach(id, dir, volumes).inspect_err(|_| {
            let _ = sys_unmount(&staging);
            let _ = std::fs::remove_dir(&staging);
        })
    }

    /// Attaches `volumes` to instance `id` (directory `dir`), which has its staging directory:
    /// each image is mounted on the host unless it already is (read-only, for another
    /// read-only user) and bound at `<staging>/<name>`. All or nothing.
    ///
    /// # Errors
    /// [`VolumeError::InUse`] / [`VolumeError::ReadOnlyElsewhere`] when another instance
    /// holds an image in a mode that excludes this one; mount errors.
    pub fn attach(&self, id: &str, dir: &Path, volumes: &[VolumeMount]) -> Result<(), VolumeError> {
        let mut st = self.state();
        let held = st.instances.get(id).cloned().unwrap_or_default();
        let mut names: HashSet<&str> = held.iter().map(|v| v.name.as_str()).collect();
        for v in volumes {
            if !names.insert(&v.name) {
                return Err(VolumeError::Duplicate(v.name.clone()));
            }
            if let Some(m) = st.images.get(&key_of(&v.image)) {
                if m.users.contains(id) {
                    return Err(VolumeError::Duplicate(v.name.clone()));
                }
                if !m.read_only {
                    return Err(VolumeError::InUse(v.name.clone()));
                }
                if !v.read_only {
                    return Err(VolumeError::ReadOnlyElsewhere(v.name.clone()));
                }
            }
        }
        let staging = self.staging(id);
        self.make_mount_points(&staging, volumes)?;
        let mut done: Vec<&VolumeMount> = Vec::new();
        for v in volumes {
            match self.attach_one(&mut st, id, &staging, v) {
                Ok(()) => done.push(v),
                Err(e) => {
                    for d in done {
                        self.detach_one(&mut st, id, &staging, d);
                    }
                    return Err(e);
                }
            }
        }
        let mut all = held;
        all.extend(volumes.iter().cloned());
        if let Err(source) = write_record(dir, &all) {
            for v in volumes {
                self.detach_one(&mut st, id, &staging, v);
            }
            return Err(VolumeError::Io {
                what: "recording volumes",
                name: "-".into(),
                source,
            });
        }
        st.instances.insert(id.to_string(), all);
        Ok(())
    }

    /// Adds a directory per volume to the read-only staging tmpfs (writable for that moment).
    fn make_mount_points(
        &self,
        staging: &Path,
        volumes: &[VolumeMount],
    ) -> Result<(), VolumeError> {
        let io = |name: &str, source| VolumeError::Io {
            what: "mount point",
            name: name.to_string(),
            source,
        };
        if volumes.iter().all(|v| staging.join(&v.name).is_dir()) {
            return Ok(());
        }
        sys_mount(None, staging, None, libc::MS_REMOUNT | STAGING_FLAGS, None)
            .map_err(|e| io("-", e))?;
        let made =
            volumes
                .iter()
                .try_for_each(|v| match std::fs::create_dir(staging.join(&v.name)) {
                    Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(io(&v.name, e)),
                    _ => Ok(()),
                });
        let sealed = sys_mount(
            None,
            staging,
            None,
            libc::MS_REMOUNT | libc::MS_RDONLY | STAGING_FLAGS,
            None,
        )
        .map_err(|e| io("-", e));
        made.and(sealed)
    }

    fn attach_one(
        &self,
        st: &mut State,
        id: &str,
        staging: &Path,
        v: &VolumeMount,
    ) -> Result<(), VolumeError> {
        let key = key_of(&v.image);
        let host = self.host_mount_point(&v.image);
        if !st.images.contains_key(&key) {
            let t = Instant::now();
            if !disk::wait_unlooped(&v.image, RELEASE_WAIT) {
                return Err(VolumeError::StillOpen(v.name.clone()));
            }
            disk::mount_volume(&v.image, &host, v.read_only).map_err(|source| {
                VolumeError::Disk {
                    name: v.name.clone(),
                    source,
                }
            })?;
            debug!(volume = %v.name, read_only = v.read_only, ms = t.elapsed().as_millis() as u64, "volume mounted");
            st.images.insert(
                key.clone(),
                HostMount {
                    image: v.image.clone(),
                    read_only: v.read_only,
                    users: HashSet::new(),
                },
            );
        }
        let target = staging.join(&v.name);
        if let Err(source) = sys_mount(Some(&host), &target, None, libc::MS_BIND, None) {
            self.drop_user(st, &key, id);
            return Err(VolumeError::Io {
                what: "bind",
                name: v.name.clone(),
                source,
            });
        }
        if let Some(m) = st.images.get_mut(&key) {
            m.users.insert(id.to_string());
        }
        Ok(())
    }

    /// Removes `v`'s bind from `id`'s staging directory and its use of the host mount.
    fn detach_one(&self, st: &mut State, id: &str, staging: &Path, v: &VolumeMount) {
        if let Err(e) = sys_unmount(&staging.join(&v.name)) {
            warn!(instance_id = id, volume = %v.name, error = %e, "unbinding volume");
        }
        self.drop_user(st, &key_of(&v.image), id);
    }

    /// Forgets `id` as a user of image `key`; the last user's going unmounts it (its writes
    /// reach the image file and the filesystem is closed cleanly).
    fn drop_user(&self, st: &mut State, key: &str, id: &str) {
        let Some(m) = st.images.get_mut(key) else {
            return;
        };
        m.users.remove(id);
        if !m.users.is_empty() {
            return;
        }
        let host = self.root.join("volume").join(key);
        let t = Instant::now();
        match disk::unmount(&host) {
            Ok(()) => {
                let _ = std::fs::remove_dir(&host);
                // A lazy unmount (a user was still dying) closes the image only later.
                if disk::wait_unlooped(&m.image, RELEASE_WAIT) {
                    debug!(image = %m.image.display(), ms = t.elapsed().as_millis() as u64, "volume unmounted");
                } else {
                    warn!(image = %m.image.display(), "volume unmounted but its image is still open");
                }
            }
            Err(e) => warn!(image = %m.image.display(), error = %e, "unmounting volume"),
        }
        st.images.remove(key);
    }

    /// True when instance `id` has volumes attached (known in memory, or recorded in `dir`).
    pub fn has_volumes(&self, id: &str, dir: &Path) -> bool {
        self.state()
            .instances
            .get(id)
            .is_some_and(|v| !v.is_empty())
            || read_record(dir).is_some_and(|v| !v.is_empty())
    }

    /// Detaches every volume of instance `id`, whose processes must be gone (else a busy
    /// mount is detached lazily and closes when they die). Idempotent.
    pub fn release(&self, id: &str, dir: &Path) {
        let mut st = self.state();
        let vols = st
            .instances
            .remove(id)
            .or_else(|| read_record(dir))
            .unwrap_or_default();
        let staging = self.staging(id);
        for v in &vols {
            self.detach_one(&mut st, id, &staging, v);
        }
        let _ = std::fs::remove_file(dir.join(RECORD));
        if !vols.is_empty() {
            info!(instance_id = id, count = vols.len(), "volumes released");
        }
    }

    /// Releases instance `id`'s volumes and removes its staging directory (at destroy).
    pub fn remove_instance(&self, id: &str, dir: &Path) {
        self.release(id, dir);
        let staging = self.staging(id);
        if let Err(e) = sys_unmount(&staging) {
            warn!(instance_id = id, error = %e, "unmounting staging directory");
        }
        let _ = std::fs::remove_dir(&staging);
    }

    /// True when `image` is mounted for some instance.
    pub fn is_attached(&self, image: &Path) -> bool {
        self.state().images.contains_key(&key_of(image))
    }

    /// Space of `image`'s filesystem: live (statvfs) while it is mounted, else from the
    /// superblock as it was closed.
    ///
    /// # Errors
    /// I/O errors.
    pub fn usage(&self, image: &Path) -> io::Result<VolumeUsage> {
        // Used is size minus free either way, so the filesystem's own metadata (the journal,
        // inode tables) counts the same whether the volume is mounted or not.
        let (free, size) = if self.is_attached(image) {
            let (used, total) = disk::usage(&self.host_mount_point(image))?;
            (total.saturating_sub(used), std::fs::metadata(image)?.len())
        } else {
            disk::image_space(image)?
        };
        Ok(VolumeUsage {
            used_bytes: size.saturating_sub(free),
            size_bytes: size,
        })
    }

    /// Start-up recovery: rebuilds the state of the instances that live on (`keep`: id and
    /// directory), mounting again what went missing, and unmounts everything else below the
    /// root (stagings and binds of dead instances, images nobody uses).
    pub fn recover(&self, keep: &[(InstanceId, PathBuf)]) {
        let mut wanted: HashSet<PathBuf> = HashSet::new();
        for (id, dir) in keep {
            let staging = self.staging(id);
            if !disk::is_mounted(&staging) {
                continue;
            }
            wanted.insert(staging.clone());
            let Some(vols) = read_record(dir) else {
                continue;
            };
            let mut st = self.state();
            for v in &vols {
                let key = key_of(&v.image);
                let host = self.host_mount_point(&v.image);
                if !disk::is_mounted(&host) {
                    if let Err(e) = disk::mount_volume(&v.image, &host, v.read_only) {
                        warn!(instance_id = %id, volume = %v.name, error = %e, "re-mounting volume");
                        continue;
                    }
                    info!(instance_id = %id, volume = %v.name, "volume mounted again");
                }
                let m = st.images.entry(key).or_insert_with(|| HostMount {
                    image: v.image.clone(),
                    read_only: v.read_only,
                    users: HashSet::new(),
                });
                m.users.insert(id.clone());
                let bind = staging.join(&v.name);
                if !disk::is_mounted(&bind) {
                    if let Err(e) = sys_mount(Some(&host), &bind, None, libc::MS_BIND, None) {
                        warn!(instance_id = %id, volume = %v.name, error = %e, "binding volume again");
                    }
                }
                wanted.insert(host);
                wanted.insert(bind);
            }
            st.instances.insert(id.clone(), vols);
        }
        let (mut mounts, _) = disk::collect_stale(&self.root);
        // Deepest first: binds before their staging directory.
        mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        for m in mounts.iter().filter(|m| !wanted.contains(*m)) {
            warn!(path = %m.display(), "unmounting a volume mount nobody holds");
            if let Err(e) = sys_unmount(m) {
                warn!(path = %m.display(), error = %e, "unmounting");
            }
        }
        for sub in ["sandbox", "volume"] {
            let Ok(dirs) = std::fs::read_dir(self.root.join(sub)) else {
                continue;
            };
            for d in dirs.filter_map(Result::ok) {
                if !wanted.contains(&d.path()) && !disk::is_mounted(&d.path()) {
                    let _ = std::fs::remove_dir_all(d.path());
                }
            }
        }
    }

    /// At a graceful stop with no instance left: unmounts the root's own bind.
    pub fn close(&self) {
        let (mounts, _) = disk::collect_stale(&self.root);
        if mounts.is_empty() {
            let _ = sys_unmount(&self.root);
        }
    }
}

fn write_record(dir: &Path, vols: &[VolumeMount]) -> io::Result<()> {
    let tmp = dir.join(format!("{RECORD}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec(vols).map_err(io::Error::other)?)?;
    std::fs::rename(&tmp, dir.join(RECORD))
}

fn read_record(dir: &Path) -> Option<Vec<VolumeMount>> {
    serde_json::from_slice(&std::fs::read(dir.join(RECORD)).ok()?).ok()
}
