//! Starting and stopping clusters: wake (on connect, `POST .../wake`, `always_on`), the idle
//! stop, and the watch that notices a cluster that died (issue 10: "a database with no
//! connections for N minutes is stopped cleanly and woken by the next connection or wake";
//! `always_on` keeps it up).

use super::{DatabaseState, Databases, LiveDb};
use crate::error::ApiError;
use pandastack_postgres::cluster::{self, StopMode};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, warn};

/// How often the idle stop and the crash watch look at every database.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

impl Databases {
    /// Makes sure `db`'s cluster runs, starting it when it is stopped (or was found dead).
    /// Returns once it accepts connections.
    ///
    /// # Errors
    /// 409 while provisioning or when failed; 404 once deleted; 503 with `Retry-After: 10`
    /// when its memory does not fit the host now ([`quota`](super::quota)); 500 when it does
    /// not start.
    pub async fn ensure_running(&self, db: &Arc<LiveDb>, cause: &str) -> Result<(), ApiError> {
        {
            let _shared = db.lifecycle.read().await;
            if db.state() == DatabaseState::Running && cluster::running(&db.dirs).is_some() {
                return Ok(());
            }
        }
        let _exclusive = db.lifecycle.write().await;
        self.start_locked(db, cause).await
    }

    /// Starts `db`'s cluster unless it runs; the caller holds `db.lifecycle` exclusively.
    ///
    /// # Errors
    /// As [`Databases::ensure_running`].
    pub(super) async fn start_locked(&self, db: &LiveDb, cause: &str) -> Result<(), ApiError> {
        match db.state() {
            DatabaseState::Running if cluster::running(&db.dirs).is_some() => return Ok(()),
            DatabaseState::Running => {
                warn!(database_id = %db.id, "the cluster's postmaster is gone; restarting it");
                self.set_state(db, DatabaseState::Stopped, "crashed")
                    .await?;
            }
            DatabaseState::Stopped => {}
            DatabaseState::Provisioning => {
                return Err(ApiError::Conflict(format!(
                    "database {} is still being provisioned",
                    db.id
                )))
            }
            DatabaseState::Failed => {
                let why = db.row().error.clone().unwrap_or_default();
                return Err(ApiError::Conflict(format!(
                    "database {} failed: {why}",
                    db.id
                )));
            }
            DatabaseState::Deleted => {
                return Err(ApiError::NotFound(format!("database {} not found", db.id)))
            }
        }
        let spec = self.run_spec(&db.snapshot());
        // Held until the state says `running` (which counts it) or the start failed.
        let _memory = self
            .admit_memory(&format!("database {} ({})", db.id, spec.tier), spec.tier)
            .await?;
        let started = std::time::Instant::now();
        let up = async {
            db.dirs.storage().mount().await?;
            cluster::start(&self.pg, &db.dirs, &spec).await
        }
        .await;
        if let Err(e) = up {
            tracing::error!(database_id = %db.id, error = %e, "starting a database");
            return Err(ApiError::Internal(format!(
                "database {} could not be started",
                db.id
            )));
        }
        crate::metrics::observe("database_start", started);
        db.touch();
        self.set_state(db, DatabaseState::Running, cause).await
    }

    /// Stops `db`'s cluster cleanly (a fast shutdown) if it runs; the caller holds
    /// `db.lifecycle` exclusively.
    ///
    /// # Errors
    /// Store errors.
    pub(super) async fn stop_locked(&self, db: &LiveDb, cause: &str) -> Result<(), ApiError> {
        if db.state() != DatabaseState::Running {
            return Ok(());
        }
        let started = std::time::Instant::now();
        cluster::stop(&db.dirs, StopMode::Fast).await;
        crate::metrics::observe("database_stop", started);
        self.set_state(db, DatabaseState::Stopped, cause).await
    }

    /// Every second: stops running databases idle past `--database-idle-stop-seconds`
    /// (unless `always_on`), notices clusters that died, starts dead `always_on` ones again,
    /// and empties postgres logs grown past 16 MiB.
    pub fn spawn_sweeper(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(dbs) = me.upgrade() else { return };
                for db in dbs.all() {
                    dbs.sweep_one(&db).await;
                }
            }
        });
    }

    async fn sweep_one(&self, db: &Arc<LiveDb>) {
        if db.state() != DatabaseState::Running {
            return;
        }
        // What a tenant makes postgres log stays small (issue 23 finding 3).
        match cluster::trim_log(&db.dirs) {
            Ok(true) => debug!(database_id = %db.id, "postgres.log emptied"),
            Ok(false) => {}
            Err(e) => debug!(database_id = %db.id, error = %e, "postgres.log trim"),
        }
        // Never wait: a lifecycle operation or a connection's start has it.
        let Ok(_exclusive) = db.lifecycle.try_write() else {
            return;
        };
        let always_on = db.row().always_on;
        let outcome = if cluster::running(&db.dirs).is_none() {
            warn!(database_id = %db.id, "a database's cluster died");
            match self.set_state(db, DatabaseState::Stopped, "crashed").await {
                Ok(()) if always_on => self.start_locked(db, "always_on").await,
                other => other,
            }
        } else if !always_on
            && db.connections() == 0
            && db.idle_ms() >= (self.settings.idle_stop_seconds * 1000) as i64
        {
            self.stop_locked(db, "idle").await
        } else {
            Ok(())
        };
        if let Err(e) = outcome {
            warn!(database_id = %db.id, error = %e, "database sweep");
        }
    }
}
