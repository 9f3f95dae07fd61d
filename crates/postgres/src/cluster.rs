//! One cluster's files and its postmaster: start, find (adopt after a server restart), stop.
//!
//! ```text
//! <root>/<id>/storage.img   sparse ext4 image (storage_mb), mounted at <root>/<id>/mnt
//! <root>/<id>/mnt/pgdata/   the data directory (0700, postgres); pg_wal -> <root>/<id>/wal
//! <root>/<id>/wal/          the WAL, on the host's disk (bounded by max_wal_size)
//! <root>/<id>/mnt/postgres.log  the postmaster's stderr, on the storage (issue 23 finding 3)
//! <socket_root>/<id>/       the unix socket (0700): the only way in
//! ```
//!
//! The postmaster is started directly (not through `pg_ctl`, whose readiness poll costs up to
//! 100 ms) in its own session, as the postgres user, inside its cgroup, and is ready when
//! `postmaster.pid` says so. It outlives the server: a restarted server finds it through
//! `postmaster.pid` and checks that the pid is still this cluster's postmaster.

use crate::cgroup::ClusterCgroup;
use crate::os_user::OsUser;
use crate::storage::DiskImage;
use crate::{PgConfig, PgError, Tier};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// How long a start may take (crash recovery of a cluster that was killed included).
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a fast shutdown may take before it becomes an immediate one.
const FAST_STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// A log larger than this is emptied (at the next start, and by [`trim_log`]), bytes.
pub const MAX_LOG_BYTES: u64 = 16 * 1024 * 1024;
/// `max_wal_size`: the WAL lives outside the size-limited storage and this bounds it.
pub const MAX_WAL_SIZE: &str = "512MB";

/// The paths of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDirs {
    /// The database id (also the cluster's `cluster_name`, in its processes' titles).
    pub id: String,
    /// `<root>/<id>`.
    pub dir: PathBuf,
    /// The data directory.
    pub data: PathBuf,
    /// The WAL directory (`pg_wal` links here).
    pub wal: PathBuf,
    /// The postmaster's log. It lives on the cluster's own storage, so what a tenant makes
    /// postgres log (`RAISE WARNING`, failing statements) takes its storage, not the host's
    /// disk (issue 23 finding 3); [`trim_log`] keeps it small.
    pub log: PathBuf,
    /// `<socket_root>/<id>`: the unix socket's directory.
    pub socket_dir: PathBuf,
}

impl ClusterDirs {
    /// The paths of the cluster of database `id` (layout in the module docs).
    pub fn new(cfg: &PgConfig, id: &str) -> Self {
        let dir = cfg.root.join(id);
        ClusterDirs {
            id: id.to_string(),
            data: dir.join("mnt").join("pgdata"),
            wal: dir.join("wal"),
            log: dir.join("mnt").join("postgres.log"),
            socket_dir: cfg.socket_root.join(id),
            dir,
        }
    }

    /// Its storage: `storage.img` mounted at `mnt`.
    pub fn storage(&self) -> DiskImage {
        DiskImage::new(self.dir.join("storage.img"), self.dir.join("mnt"))
    }

    /// Bytes the cluster takes on the host's disk: the blocks allocated to the (sparse) image
    /// and to the WAL, not `storage_mb`. A copy of the cluster (a clone) writes about this much.
    pub fn host_bytes(&self) -> u64 {
        allocated_bytes(&self.dir.join("storage.img")) + allocated_bytes(&self.wal)
    }
}

/// Bytes allocated on disk (`st_blocks` × 512) to a file, or to the files of a directory
/// tree; 0 for what does not exist.
fn allocated_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !m.is_dir() {
        return m.blocks() * 512;
    }
    std::fs::read_dir(path)
        .map(|entries| entries.flatten().map(|e| allocated_bytes(&e.path())).sum())
        .unwrap_or(0)
}

/// How a cluster runs: its tier, CPU quota and durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSpec {
    pub tier: Tier,
    /// Whole CPUs (cgroup quota).
    pub cpus: u32,
    pub fsync: bool,
}

/// A running postmaster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Postmaster {
    pub pid: i32,
}

impl Postmaster {
    /// True while the process lives and is still a postmaster of `data` (a recycled pid is
    /// not mistaken for it; a zombie counts as gone).
    pub fn alive(&self, data: &Path) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap_or_default();
        let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
        if matches!(state, None | Some('Z') | Some('X')) {
            return false;
        }
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", self.pid)).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let data = data.as_os_str().as_encoded_bytes();
        args.first().is_some_and(|a| a.ends_with(b"postgres"))
            && args.windows(2).any(|w| w[0] == b"-D" && w[1] == data)
    }
}

/// The cluster's running postmaster, if there is one (from `postmaster.pid`).
pub fn running(dirs: &ClusterDirs) -> Option<Postmaster> {
    let text = std::fs::read_to_string(dirs.data.join("postmaster.pid")).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    let pm = Postmaster { pid };
    pm.alive(&dirs.data).then_some(pm)
}

/// True when `postmaster.pid` says the server accepts connections.
fn ready(data: &Path) -> bool {
    std::fs::read_to_string(data.join("postmaster.pid"))
        .ok()
        .and_then(|t| t.lines().nth(7).map(|s| s.trim() == "ready"))
        .unwrap_or(false)
}

/// The command-line settings of a cluster (everything that is not in the template's files).
fn settings(cfg: &PgConfig, dirs: &ClusterDirs, spec: &RunSpec) -> Vec<(&'static str, String)> {
    let on = |b: bool| if b { "on" } else { "off" }.to_string();
    let mut s = vec![
        ("listen_addresses", String::new()),
        (
            "unix_socket_directories",
            dirs.socket_dir.display().to_string(),
        ),
        ("unix_socket_permissions", "0700".into()),
        ("port", "5432".into()),
        ("cluster_name", dirs.id.clone()),
        ("fsync", on(spec.fsync && cfg.fsync)),
        ("synchronous_commit", "on".into()),
        ("full_page_writes", "on".into()),
        ("max_wal_size", MAX_WAL_SIZE.into()),
        ("min_wal_size", "64MB".into()),
        ("huge_pages", "off".into()),
        ("logging_collector", "off".into()),
        ("password_encryption", "scram-sha-256".into()),
    ];
    s.extend(spec.tier.settings());
    s
}

/// Starts the postmaster and waits until it accepts connections.
///
/// # Errors
/// [`PgError::Start`] with the log's last lines when it exits or is not ready within
/// [`START_TIMEOUT`]; I/O errors preparing its socket directory, log or cgroup. On error no
/// process of the cluster is left.
pub async fn start(
    cfg: &PgConfig,
    dirs: &ClusterDirs,
    spec: &RunSpec,
) -> Result<Postmaster, PgError> {
    let user = OsUser::lookup(&cfg.os_user)?;
    let postgres = cfg.bin_dir.join("postgres");
    if !postgres.exists() {
        return Err(PgError::NotInstalled);
    }
    kill_orphans(dirs).await;
    user.make_dir(&dirs.socket_dir, 0o700)?;
    // Before the log moved onto the storage (issue 23 finding 3) it was here.
    let _ = std::fs::remove_file(dirs.dir.join("postgres.log"));
    let log = open_log(&dirs.log, &user)?;
    let cgroup = ClusterCgroup::for_new(&dirs.id);
    cgroup.create(spec.tier.memory_mb(), spec.cpus)?;
    let join = cgroup.join_fds()?;
    let mut cmd = tokio::process::Command::new(&postgres);
    cmd.arg("-D").arg(&dirs.data);
    for (k, v) in settings(cfg, dirs, spec) {
        cmd.arg("-c").arg(format!("{k}={v}"));
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .uid(user.uid)
        .gid(user.gid)
        .kill_on_drop(false);
    let raw_fds: Vec<i32> = join.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe system calls (setsid, write) on memory it does not allocate.
    unsafe {
        cmd.pre_exec(move || {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            for fd in &raw_fds {
                // SAFETY: `fd` is a cgroup.procs descriptor the parent opened for this child;
                // it stays open until after the spawn.
                let fd = std::os::fd::BorrowedFd::borrow_raw(*fd);
                nix::unistd::write(fd, b"0").map_err(std::io::Error::from)?;
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| PgError::Start(format!("spawn: {e}")))?;
    drop(join);
    let pid = child.id().unwrap_or_default() as i32;
    let data = dirs.data.clone();
    let outcome = loop {
        if ready(&data) {
            break Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            break Err(format!(
                "postgres exited ({status}): {}",
                log_tail(&dirs.log)
            ));
        }
        if started.elapsed() > START_TIMEOUT {
            break Err(format!("not ready after {} s", START_TIMEOUT.as_secs()));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    if let Err(why) = outcome {
        let _ = child.start_kill();
        let _ = child.wait().await;
        cgroup.kill_all();
        cgroup.remove();
        return Err(PgError::Start(why));
    }
    // Reap it whenever it exits (a stop, a crash), so no zombie is left behind.
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    info!(database_id = %dirs.id, pid, ms = started.elapsed().as_millis() as u64, "postgres started");
    Ok(Postmaster { pid })
}

/// How to stop a postmaster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// SIGINT: sessions are ended, a shutdown checkpoint is written (idle stop, delete of a
    /// database about to be copied).
    Fast,
    /// SIGQUIT: everything exits at once; the next start recovers from the WAL (delete).
    Immediate,
}

/// Stops the cluster's postmaster (if it runs) and every process left in its cgroup, then
/// removes the cgroup. A fast stop that takes longer than 30 s becomes an immediate one.
pub async fn stop(dirs: &ClusterDirs, mode: StopMode) {
    let data = dirs.data.clone();
    if let Some(pm) = running(dirs) {
        let cgroup = ClusterCgroup::of_pid(pm.pid);
        let signal = |s| {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pm.pid), s);
        };
        use nix::sys::signal::Signal;
        signal(match mode {
            StopMode::Fast => Signal::SIGINT,
            StopMode::Immediate => Signal::SIGQUIT,
        });
        let started = Instant::now();
        let mut escalated = mode == StopMode::Immediate;
        while pm.alive(&data) {
            let waited = started.elapsed();
            if !escalated && waited > FAST_STOP_TIMEOUT {
                warn!(database_id = %dirs.id, "fast shutdown is slow; stopping immediately");
                signal(Signal::SIGQUIT);
                escalated = true;
            }
            if waited > FAST_STOP_TIMEOUT + Duration::from_secs(10) {
                signal(Signal::SIGKILL);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        debug!(database_id = %dirs.id, ms = started.elapsed().as_millis() as u64, "postgres stopped");
        if let Some(cg) = cgroup {
            drain(&cg).await;
        }
    }
    let cg = ClusterCgroup::for_new(&dirs.id);
    drain(&cg).await;
    kill_orphans(dirs).await;
}

/// Kills what is left in `cg` and removes it.
async fn drain(cg: &ClusterCgroup) {
    for _ in 0..200 {
        if cg.pids().is_empty() {
            break;
        }
        cg.kill_all();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cg.remove();
}

/// Kills processes of this cluster that outlived their postmaster (a `kill -9` of it leaves
/// its backends running, and a new postmaster refuses to start while they hold the old shared
/// memory). They are found by the title PostgreSQL gives them: `postgres: <cluster_name>: `.
async fn kill_orphans(dirs: &ClusterDirs) {
    if running(dirs).is_some() {
        return;
    }
    let title = format!("postgres: {}: ", dirs.id);
    for _ in 0..100 {
        let pids = processes_titled(&title);
        if pids.is_empty() {
            return;
        }
        for pid in &pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn processes_titled(title: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(title.as_bytes()))
        })
        .collect()
}

/// Every process of the cluster: postmaster, backends and orphans (for leak checks).
pub fn processes(dirs: &ClusterDirs) -> Vec<i32> {
    let mut out = processes_titled(&format!("postgres: {}: ", dirs.id));
    if let Some(pm) = running(dirs) {
        out.push(pm.pid);
    }
    out
}

fn open_log(path: &Path, user: &OsUser) -> std::io::Result<std::fs::File> {
    let too_big = std::fs::metadata(path).is_ok_and(|m| m.len() > MAX_LOG_BYTES);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(!too_big)
        .write(true)
        .truncate(too_big)
        .open(path)?;
    user.chown(path)?;
    let _ = writeln!(f, "--- pandastack: starting postgres");
    Ok(f)
}

/// Empties the cluster's log when it has grown past [`MAX_LOG_BYTES`] while running (the
/// postmaster appends, so it goes on writing at the new end) and leaves a note saying so.
/// Returns whether it did. Cheap (one `stat`) when the log is small: meant to be called
/// periodically (the server's database sweep, every second).
///
/// # Errors
/// I/O errors truncating the log (a missing log is not one).
pub fn trim_log(dirs: &ClusterDirs) -> std::io::Result<bool> {
    let len = match std::fs::metadata(&dirs.log) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if len <= MAX_LOG_BYTES {
        return Ok(false);
    }
    let mut f = std::fs::OpenOptions::new().append(true).open(&dirs.log)?;
    f.set_len(0)?;
    writeln!(f, "--- pandastack: log emptied at {len} bytes")?;
    Ok(true)
}

/// The last lines of the log (for the server's log when a start fails).
pub fn log_tail(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut bytes = Vec::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
        let _ = f.take(64 * 1024).read_to_end(&mut bytes);
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs_in(dir: &Path) -> ClusterDirs {
        ClusterDirs {
            id: "db-test".into(),
            dir: dir.to_path_buf(),
            data: dir.join("mnt/pgdata"),
            wal: dir.join("wal"),
            log: dir.join("mnt/postgres.log"),
            socket_dir: dir.join("sock"),
        }
    }

    #[test]
    fn a_log_past_its_limit_is_emptied_and_its_writer_goes_on_at_the_start() {
        let dir = std::env::temp_dir().join(format!("pg-log-{}", std::process::id()));
        let dirs = dirs_in(&dir);
        std::fs::create_dir_all(dir.join("mnt")).unwrap();
        assert!(!trim_log(&dirs).unwrap(), "no log yet");
        // The postmaster's stderr: an append-mode descriptor held across the trim.
        let mut postmaster = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&dirs.log)
            .unwrap();
        postmaster
            .write_all(&vec![b'w'; MAX_LOG_BYTES as usize])
            .unwrap();
        assert!(!trim_log(&dirs).unwrap(), "at the limit it stays");
        postmaster.write_all(b"WARNING: one more\n").unwrap();
        assert!(trim_log(&dirs).unwrap());
        postmaster.write_all(b"LOG: after\n").unwrap();
        let text = std::fs::read_to_string(&dirs.log).unwrap();
        assert!(text.starts_with("--- pandastack: log emptied at"), "{text}");
        assert!(text.ends_with("LOG: after\n") && text.len() < 100, "{text}");
        assert_eq!(log_tail(&dirs.log), text.trim_end().replace('\n', " | "));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
