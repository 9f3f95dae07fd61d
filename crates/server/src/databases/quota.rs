//! Limits of databases (issue 23 finding 7): how many one workspace keeps, how much of this
//! host's port pool it holds, and the memory the clusters commit.
//!
//! - **Count**: a workspace keeps at most `--workspace-max-databases` databases (in any state
//!   but failed and deleted; in a cluster, over every host). One more create or clone answers
//!   429 naming the quota, without `Retry-After` (waiting does not lift a quota).
//! - **Port share**: a database holds a port of `--database-ports` from its create to its
//!   delete (a stopped one too: its URL stays the same). A workspace may hold at most
//!   `--workspace-database-ports-percent` of this host's pool (at least one port); past it
//!   429. So one workspace cannot take every port and lock the others out.
//! - **Memory**: a database's memory limit (its `size` tier, the cgroup limit of its cluster)
//!   is committed while it is provisioning or running. It counts in the host's budget together
//!   with the sandboxes' ([`Host::admit_memory`], `--memory-overcommit`) and in the databases'
//!   own budget (`--database-memory-gb`, by default the host's memory: shared buffers and work
//!   memory stay in use, so database limits are not overcommitted). A create, a clone and
//!   every start (wake on connect, `POST .../wake`, `always_on`, a restart) are admitted first;
//!   one that does not fit answers 503 with `Retry-After: 10`, and a client whose connection
//!   would wake the database is refused with SQLSTATE 57P03 (`cannot_connect_now`) and the
//!   same message.
//!
//! [`Host::admit_memory`]: crate::host::Host::admit_memory

use super::{DatabaseState, Databases};
use crate::error::ApiError;
use crate::host::{Admitted, MemoryCommitment};
use pandastack_postgres::Tier;
use std::sync::{Arc, Mutex};

/// Seconds a client is told to wait after a database create or start refused for memory
/// (memory comes back when a sandbox ends or a database stops after its idle time).
pub const RETRY_AFTER_S: u64 = 10;

/// The limits of databases on this host (server flags; README "Limits").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseLimits {
    /// Databases one workspace keeps (`--workspace-max-databases`, default 10).
    pub workspace_max_databases: usize,
    /// Share of this host's database ports one workspace may hold, percent, 1 to 100
    /// (`--workspace-database-ports-percent`, default 25).
    pub workspace_ports_percent: u8,
    /// The memory limits of databases may add up to this, MiB (`--database-memory-gb`);
    /// `None`: this host's memory.
    pub memory_mb: Option<u64>,
}

/// What is being admitted now (one per server, in [`Databases`]).
#[derive(Debug)]
pub struct Quota {
    /// The databases' memory budget, MiB (`memory_mb` of [`DatabaseLimits`], resolved).
    pub memory_mb: u64,
    /// Held by a create or clone from its checks until its row counts, so two never both
    /// take the last database or port of a workspace.
    creating: tokio::sync::Mutex<()>,
    /// Serialises memory admissions, so two never both take the last room.
    admitting: tokio::sync::Mutex<()>,
    /// MiB of database starts admitted and not finished.
    starting_mb: Arc<Mutex<u64>>,
}

impl Quota {
    /// A quota with a database memory budget of `memory_mb` MiB.
    pub fn new(memory_mb: u64) -> Self {
        Quota {
            memory_mb,
            creating: tokio::sync::Mutex::new(()),
            admitting: tokio::sync::Mutex::new(()),
            starting_mb: Arc::default(),
        }
    }

    fn starting_mb(&self) -> u64 {
        *self.starting_mb.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The memory of a database admitted to start, reserved (on the host and in the databases'
/// budget) until this is dropped: by then its state (`provisioning`, `running`) counts it, or
/// its start failed.
#[must_use]
pub struct MemoryAdmitted {
    _host: Admitted,
    starting_mb: Arc<Mutex<u64>>,
    memory_mb: u64,
}

impl Drop for MemoryAdmitted {
    fn drop(&mut self) {
        let mut s = self.starting_mb.lock().unwrap_or_else(|e| e.into_inner());
        *s = s.saturating_sub(self.memory_mb);
    }
}

/// Ports one workspace may hold of a pool of `pool` ports at `percent`: rounded down, at
/// least one (a workspace can always have a database while the pool has room).
pub fn port_share(pool: usize, percent: u8) -> usize {
    (pool * usize::from(percent) / 100).max(1)
}

/// True when a state commits the database's memory (its cluster runs or is being made).
fn commits_memory(state: DatabaseState) -> bool {
    matches!(state, DatabaseState::Provisioning | DatabaseState::Running)
}

impl MemoryCommitment for Databases {
    fn committed_mb(&self) -> u64 {
        self.committed_mb()
    }
}

impl Databases {
    /// The memory limits of the databases provisioning or running now, MiB.
    pub fn committed_mb(&self) -> u64 {
        self.all()
            .iter()
            .map(|d| d.snapshot())
            .filter(|r| commits_memory(DatabaseState::parse(&r.status)))
            .map(|r| u64::from(Tier::parse(&r.size).unwrap_or(Tier::G1).memory_mb()))
            .sum()
    }

    /// Admits the memory of a `tier` database starting (`what` names it in a refusal: `a new
    /// 1g database`, `database <id> (1g)`), first in the databases' budget, then in the
    /// host's together with sandboxes.
    ///
    /// # Errors
    /// 503 with `Retry-After: 10` when it fits either budget not.
    pub(super) async fn admit_memory(
        &self,
        what: &str,
        tier: Tier,
    ) -> Result<MemoryAdmitted, ApiError> {
        let asked = u64::from(tier.memory_mb());
        let _one_at_a_time = self.quota.admitting.lock().await;
        let held = self.committed_mb() + self.quota.starting_mb();
        let budget = self.quota.memory_mb;
        if held + asked > budget {
            tracing::info!(
                held,
                asked,
                budget,
                "database memory budget full: {what} refused"
            );
            return Err(ApiError::Busy {
                message: format!(
                    "host at capacity: {what} needs {asked} MiB of memory and databases hold {held} of {budget} MiB; retry later"
                ),
                retry_after_s: RETRY_AFTER_S,
            });
        }
        let host = self.host.admit_memory(what, asked, RETRY_AFTER_S).await?;
        *self
            .quota
            .starting_mb
            .lock()
            .unwrap_or_else(|e| e.into_inner()) += asked;
        Ok(MemoryAdmitted {
            _host: host,
            starting_mb: self.quota.starting_mb.clone(),
            memory_mb: asked,
        })
    }

    /// Admits a new database (a create or a clone) of `workspace_id` with `tier`: the count
    /// quota, the port share, then its memory. Keep the returned guard until the new row is
    /// in place and bound (it keeps other creates out until then).
    ///
    /// # Errors
    /// 429 naming the quota (count or ports); 503 with `Retry-After: 10` for memory; store
    /// errors.
    pub(super) async fn admit_creation(
        &self,
        workspace_id: &str,
        tier: Tier,
    ) -> Result<(tokio::sync::MutexGuard<'_, ()>, MemoryAdmitted), ApiError> {
        let creating = self.quota.creating.lock().await;
        self.check_count(workspace_id).await?;
        self.check_port_share(workspace_id)?;
        let memory = self
            .admit_memory(&format!("a new {tier} database"), tier)
            .await?;
        Ok((creating, memory))
    }

    /// 429 when `workspace_id` keeps its quota of databases already.
    async fn check_count(&self, workspace_id: &str) -> Result<(), ApiError> {
        let kept =
            |state: DatabaseState| !matches!(state, DatabaseState::Failed | DatabaseState::Deleted);
        let mut count = self
            .all()
            .iter()
            .filter(|d| d.workspace_id == workspace_id && kept(d.state()))
            .count();
        if self.host.cfg.cluster {
            // Every host's databases are in the shared store (issue 12).
            let stored = self.host.store.databases_of(workspace_id).await?;
            let stored = stored
                .iter()
                .filter(|r| kept(DatabaseState::parse(&r.status)))
                .count();
            count = count.max(stored);
        }
        let max = self.settings.limits.workspace_max_databases;
        if count >= max {
            return Err(ApiError::TooManyRequests {
                message: format!(
                    "workspace quota: at most {max} databases (this workspace has {count}); delete some first"
                ),
                retry_after_s: None,
            });
        }
        Ok(())
    }

    /// 429 when `workspace_id`'s databases hold their share of this host's port pool.
    fn check_port_share(&self, workspace_id: &str) -> Result<(), ApiError> {
        let ports = &self.settings.ports;
        let pool = usize::from(*ports.end() - *ports.start()) + 1;
        let percent = self.settings.limits.workspace_ports_percent;
        let share = port_share(pool, percent);
        let held = self
            .all()
            .iter()
            .filter(|d| d.workspace_id == workspace_id && d.bound_port().is_some())
            .count();
        if held >= share {
            return Err(ApiError::TooManyRequests {
                message: format!(
                    "workspace quota: its databases hold {held} of this host's {pool} database ports, at most {percent}% ({share}) per workspace; delete some first"
                ),
                retry_after_s: None,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_port_share_rounds_down_but_is_never_zero() {
        assert_eq!(port_share(1000, 25), 250);
        assert_eq!(port_share(8, 25), 2);
        assert_eq!(port_share(4, 25), 1);
        assert_eq!(port_share(3, 25), 1);
        assert_eq!(port_share(1, 1), 1);
        assert_eq!(port_share(10, 100), 10);
    }

    #[test]
    fn only_provisioning_and_running_databases_commit_memory() {
        for (state, commits) in [
            (DatabaseState::Provisioning, true),
            (DatabaseState::Running, true),
            (DatabaseState::Stopped, false),
            (DatabaseState::Failed, false),
            (DatabaseState::Deleted, false),
        ] {
            assert_eq!(commits_memory(state), commits, "{state}");
        }
    }
}
