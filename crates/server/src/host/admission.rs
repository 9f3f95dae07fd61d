//! Capacity control (issue 8): what this host takes on, and what one workspace may hold.
//!
//! - **Host admission**: every operation that starts an instance (create, restore, fork, wake)
//!   asks [`Host::admit`] first. It counts the instances that hold memory (running and paused
//!   sandboxes, warm-pool instances, and the starts admitted but not finished) against
//!   `max_sandboxes` and their committed memory (each instance's memory limit) against the
//!   memory budget; past either the answer is 503 with `Retry-After`, which the Python SDK
//!   retries on creates (contract §1.4). The admitted start holds its share until it ends.
//!   The databases' clusters commit memory in the same budget (issue 23 finding 7): their
//!   memory limits count through [`MemoryCommitment`], and a database start asks
//!   [`Host::admit_memory`].
//! - **Workspace quotas**: the sandboxes a workspace keeps (any state but deleted and failed)
//!   and the bytes of its snapshots; past either the answer is 429 naming the quota, without
//!   `Retry-After` (waiting does not lift a quota).
//! - **Host disk reserve**: when the data dir's filesystem would keep less free space than the
//!   reserve (a share of the filesystem, capped), operations that write to it (create, fork,
//!   snapshot, hibernate) answer 507.

use super::Host;
use crate::error::ApiError;
use crate::state::SandboxState;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Seconds a client is told to wait before retrying a create refused for capacity.
pub const RETRY_AFTER_S: u64 = 2;

/// The limits of this host (server flags).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Instances holding memory at once (`--max-sandboxes`).
    pub max_sandboxes: usize,
    /// Memory limits of those instances added up, MiB (`--memory-overcommit` × host memory).
    pub max_memory_mb: u64,
    /// Sandboxes one workspace keeps (`--workspace-max-sandboxes`).
    pub workspace_max_sandboxes: usize,
    /// Snapshot bytes one workspace keeps (`--workspace-max-snapshot-gb`).
    pub workspace_max_snapshot_bytes: u64,
    /// Share of the data dir's filesystem kept free, percent (`--disk-reserve-percent`)...
    pub disk_reserve_percent: f64,
    /// ...but never more than this many bytes (`--disk-reserve-max-gb`): on a large disk a
    /// percentage keeps back far more than the store and logs need.
    pub disk_reserve_max_bytes: u64,
}

/// Memory this host holds for something other than sandboxes, counted in the sandboxes'
/// budget (issue 23 finding 7: the databases' clusters).
pub trait MemoryCommitment: Send + Sync {
    /// The memory limits of what runs now, MiB.
    fn committed_mb(&self) -> u64;
}

/// Starts admitted and not yet finished: (instances, MiB).
#[derive(Debug, Default)]
pub struct Reserved {
    inner: Mutex<(usize, u64)>,
    /// Serialises admissions, so two of them never both take the last room.
    admitting: tokio::sync::Mutex<()>,
    /// The databases' memory ([`Host::count_memory_of`]); weak, so it ends with them.
    others: OnceLock<Weak<dyn MemoryCommitment>>,
}

/// An admitted start: its share of the host stays reserved until this is dropped (by then the
/// instance is running and counted as such, or it failed).
#[must_use]
pub struct Admitted {
    reserved: Arc<Reserved>,
    count: usize,
    memory_mb: u64,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut r = self
            .reserved
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        r.0 = r.0.saturating_sub(self.count);
        r.1 = r.1.saturating_sub(self.memory_mb);
    }
}

/// The memory an instance of a `memory_mb` sandbox commits on the host, MiB: its cgroup limit.
pub fn committed_mb(memory_mb: u32) -> u64 {
    u64::from(memory_mb)
}

/// Free and total bytes of the filesystem holding `path`.
fn disk_space(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` points to writable memory of the size
    // statvfs fills; it is read only after statvfs reported success.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it initialised the struct.
    let st = unsafe { st.assume_init() };
    // statvfs fields are u64 on x86-64 Linux.
    let frag = st.f_frsize;
    Ok((st.f_bavail * frag, st.f_blocks * frag))
}

/// This host's memory, MiB (`MemTotal` of `/proc/meminfo`): the base of the memory budget
/// (`--memory-overcommit`) and the databases' default budget (`--database-memory-gb`).
///
/// # Errors
/// `/proc/meminfo` cannot be read or has no `MemTotal`.
pub fn host_memory_mb() -> std::io::Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib / 1024)
        .ok_or_else(|| std::io::Error::other("no MemTotal in /proc/meminfo"))
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

impl Host {
    /// Admits `count` new instances of `memory_mb` each for `workspace_id`, reserving their
    /// share of the host until the returned [`Admitted`] is dropped. A wake passes
    /// `new_sandboxes: false` (the sandbox already counts toward its workspace).
    ///
    /// # Errors
    /// 429 when the workspace is at its sandbox quota (counted over every host of a cluster);
    /// 503 with `Retry-After` when the host is at its sandbox count or memory budget; store
    /// errors.
    pub async fn admit(
        &self,
        workspace_id: &str,
        memory_mb: u32,
        count: usize,
        new_sandboxes: bool,
    ) -> Result<Admitted, ApiError> {
        let limits = &self.cfg.limits;
        let _one_at_a_time = self.reserved.admitting.lock().await;
        let (mut instances, mut committed, mut kept) = (0usize, 0u64, 0usize);
        for live in self.all() {
            let r = live.row.lock().await;
            let state = SandboxState::parse(&r.status);
            if matches!(state, SandboxState::Running | SandboxState::Paused) {
                instances += 1;
                committed += committed_mb(r.memory_mb);
            }
            if r.workspace_id == workspace_id
                && !matches!(state, SandboxState::Deleted | SandboxState::Failed)
            {
                kept += 1;
            }
        }
        let (pooled, pooled_mb) = self.pool_commitment();
        let (starting, starting_mb) = *self
            .reserved
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        instances += pooled + starting;
        committed += pooled_mb + starting_mb + self.others_mb();
        if new_sandboxes && self.cfg.cluster {
            // The quota is the workspace's across the cluster: the other hosts' sandboxes are
            // in the shared store (issue 12).
            let stored = self.store.quota_sandboxes(workspace_id).await?;
            kept = kept.max(usize::try_from(stored).unwrap_or(usize::MAX));
        }
        if new_sandboxes && kept + count > limits.workspace_max_sandboxes {
            return Err(ApiError::TooManyRequests {
                message: format!(
                    "workspace quota: at most {} sandboxes (this workspace has {kept}); delete some first",
                    limits.workspace_max_sandboxes
                ),
                retry_after_s: None,
            });
        }
        if instances + count > limits.max_sandboxes {
            return Err(ApiError::Busy {
                message: format!(
                    "host at capacity: {instances} of {} sandboxes running; retry later",
                    limits.max_sandboxes
                ),
                retry_after_s: RETRY_AFTER_S,
            });
        }
        let asked = committed_mb(memory_mb) * count as u64;
        if committed + asked > limits.max_memory_mb {
            return Err(ApiError::Busy {
                message: format!(
                    "host at capacity: {committed} of {} MiB of memory committed (sandboxes and databases), {asked} MiB asked; retry later",
                    limits.max_memory_mb
                ),
                retry_after_s: RETRY_AFTER_S,
            });
        }
        Ok(self.reserve(count, asked))
    }

    /// Holds `count` instances and `memory_mb` MiB as starting until the result is dropped;
    /// the caller holds `reserved.admitting`.
    fn reserve(&self, count: usize, memory_mb: u64) -> Admitted {
        let mut r = self
            .reserved
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        r.0 += count;
        r.1 += memory_mb;
        Admitted {
            reserved: self.reserved.clone(),
            count,
            memory_mb,
        }
    }

    /// Counts `other`'s memory in every admission, [`Host::has_room_for`] and [`Host::load`]
    /// from now on (issue 23 finding 7: the databases register themselves once at start).
    pub fn count_memory_of(&self, other: Weak<dyn MemoryCommitment>) {
        if self.reserved.others.set(other).is_err() {
            tracing::warn!("a second memory commitment was not registered");
        }
    }

    /// MiB committed by what registered through [`Host::count_memory_of`].
    fn others_mb(&self) -> u64 {
        self.reserved
            .others
            .get()
            .and_then(Weak::upgrade)
            .map_or(0, |o| o.committed_mb())
    }

    /// Instances holding memory and their committed MiB now: running and paused sandboxes,
    /// warm-pool instances, starts admitted and not finished, and the databases (no instances).
    async fn commitment(&self) -> (usize, u64) {
        let (mut instances, mut committed) = self.pool_commitment();
        for live in self.all() {
            let r = live.row.lock().await;
            if matches!(
                SandboxState::parse(&r.status),
                SandboxState::Running | SandboxState::Paused
            ) {
                instances += 1;
                committed += committed_mb(r.memory_mb);
            }
        }
        let (starting, starting_mb) = *self
            .reserved
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        (
            instances + starting,
            committed + starting_mb + self.others_mb(),
        )
    }

    /// Admits `memory_mb` MiB that no sandbox holds (a database's cluster, issue 23 finding 7)
    /// against the sandboxes' memory budget, reserving it until the returned [`Admitted`] is
    /// dropped (by then it counts through [`MemoryCommitment`], or its start failed). `what`
    /// names it in the refusal (`a new 1g database`).
    ///
    /// # Errors
    /// 503 with `Retry-After: retry_after_s` when it does not fit.
    pub async fn admit_memory(
        &self,
        what: &str,
        memory_mb: u64,
        retry_after_s: u64,
    ) -> Result<Admitted, ApiError> {
        let _one_at_a_time = self.reserved.admitting.lock().await;
        let (_, committed) = self.commitment().await;
        let max = self.cfg.limits.max_memory_mb;
        if committed + memory_mb > max {
            return Err(ApiError::Busy {
                message: format!(
                    "host at capacity: {what} needs {memory_mb} MiB of memory and {committed} of {max} MiB are committed (sandboxes and databases); retry later"
                ),
                retry_after_s,
            });
        }
        Ok(self.reserve(0, memory_mb))
    }

    /// True when one more instance of `memory_mb` fits the host (for the warm pool, which
    /// never takes the last room from creates).
    pub(super) async fn has_room_for(&self, memory_mb: u32) -> bool {
        let limits = &self.cfg.limits;
        let (instances, committed) = self.commitment().await;
        instances < limits.max_sandboxes
            && committed + committed_mb(memory_mb) <= limits.max_memory_mb
    }

    /// Refuses a snapshot when the workspace's snapshots already hold its quota of bytes.
    ///
    /// # Errors
    /// 429 naming the quota.
    pub async fn check_snapshot_quota(&self, workspace_id: &str) -> Result<(), ApiError> {
        let used = self.store.snapshot_bytes(workspace_id).await?;
        let quota = self.cfg.limits.workspace_max_snapshot_bytes;
        if used >= quota {
            return Err(ApiError::TooManyRequests {
                message: format!(
                    "workspace quota: snapshots hold {:.1} GiB of at most {:.1} GiB; delete some first",
                    gib(used),
                    gib(quota)
                ),
                retry_after_s: None,
            });
        }
        Ok(())
    }

    /// Bytes of a `total`-byte data-dir filesystem kept free (`--disk-reserve-percent`, capped
    /// by `--disk-reserve-max-gb`).
    fn disk_reserve_bytes(&self, total: u64) -> u64 {
        let limits = &self.cfg.limits;
        ((total as f64 * limits.disk_reserve_percent / 100.0) as u64)
            .min(limits.disk_reserve_max_bytes)
    }

    /// Refuses an operation (`what`: "create", "snapshot", ...) that would write about
    /// `need_bytes` when the data dir's filesystem would keep less than the reserve free.
    ///
    /// # Errors
    /// 507 saying how much is free and how much is kept back.
    pub fn check_disk_reserve(&self, what: &str, need_bytes: u64) -> Result<(), ApiError> {
        let (free, total) =
            disk_space(&self.cfg.data_dir).map_err(|e| ApiError::internal("disk space", e))?;
        let reserve = self.disk_reserve_bytes(total);
        if free.saturating_sub(need_bytes) < reserve {
            return Err(ApiError::InsufficientStorage(format!(
                "host storage low: {what} refused ({:.1} GiB free, {:.1} GiB kept in reserve)",
                gib(free),
                gib(reserve)
            )));
        }
        Ok(())
    }
}

/// What this host holds and can take (issue 12: reported in every heartbeat, read by the
/// scheduler of every host).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct HostLoad {
    /// Instances holding memory: running and paused sandboxes, warm-pool instances and starts
    /// admitted but not finished.
    pub sandboxes: usize,
    /// `--max-sandboxes`.
    pub max_sandboxes: usize,
    /// Memory limits of those instances and of the running databases added up, MiB.
    pub committed_mb: u64,
    /// The memory budget, MiB (`--memory-overcommit` × host memory).
    pub max_memory_mb: u64,
    /// Free bytes of the data dir's filesystem above the disk reserve.
    pub disk_free_bytes: u64,
    /// Templates baked here, by name, with the warm-pool instances each has now.
    pub templates: std::collections::BTreeMap<String, usize>,
}

impl Host {
    /// This host's [`HostLoad`] now.
    pub async fn load(&self) -> HostLoad {
        let (sandboxes, committed_mb) = self.commitment().await;
        let pools: std::collections::HashMap<String, usize> = self
            .pool_sizes()
            .into_iter()
            .map(|(name, ready, _)| (name, ready))
            .collect();
        let templates = self
            .templates
            .list()
            .unwrap_or_default()
            .into_iter()
            .map(|t| {
                let pooled = pools.get(&t.name).copied().unwrap_or(0);
                (t.name, pooled)
            })
            .collect();
        let disk_free_bytes = disk_space(&self.cfg.data_dir)
            .map(|(free, total)| free.saturating_sub(self.disk_reserve_bytes(total)))
            .unwrap_or(0);
        HostLoad {
            sandboxes,
            max_sandboxes: self.cfg.limits.max_sandboxes,
            committed_mb,
            max_memory_mb: self.cfg.limits.max_memory_mb,
            disk_free_bytes,
            templates,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_memory_is_plausible() {
        let mb = host_memory_mb().unwrap();
        assert!((64..1 << 30).contains(&mb), "{mb} MiB");
    }

    #[test]
    fn disk_space_of_the_temp_dir_is_plausible() {
        let (free, total) = disk_space(&std::env::temp_dir()).unwrap();
        assert!(total > 0 && free <= total, "{free} of {total}");
    }
}
