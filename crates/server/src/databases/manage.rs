//! Changing a database: new credentials, `always_on`, a larger storage, delete (contract
//! §2.12, issue 10).

use super::{DatabaseState, Databases, LiveDb};
use crate::error::ApiError;
use pandastack_api::UpdateDatabase;
use pandastack_postgres::admin::Admin;
use pandastack_postgres::cluster::{self, StopMode};
use pandastack_postgres::secret::{generate_password, scram_verifier};
use pandastack_postgres::{provision, PgError};
use pandastack_store::now_ms;
use std::sync::Arc;
use tracing::{info, warn};

impl Databases {
    /// `POST .../reset-credentials`: a new owner password; the owner's open sessions are
    /// ended, so only the new `connection_url` works from now on. Starts a stopped cluster.
    ///
    /// # Errors
    /// As [`Databases::ensure_running`]; 500 when the cluster refuses the change (the old
    /// password then still works).
    pub async fn reset_credentials(&self, db: &Arc<LiveDb>) -> Result<(), ApiError> {
        self.ensure_running(db, "api").await?;
        let _shared = db.lifecycle.read().await;
        let row = db.snapshot();
        let superuser = self
            .sealer
            .open(&row.superuser_password_sealed)
            .map_err(|e| ApiError::internal("database secret", e))?;
        let password = generate_password();
        let sealed = self
            .sealer
            .seal(&password)
            .map_err(|e| ApiError::internal("sealing a password", e))?;
        let ended = async {
            let admin = Admin::connect(&db.dirs.socket_dir, &superuser).await?;
            let ended = admin
                .rotate_password(&row.username, &scram_verifier(&password))
                .await?;
            // The terminated backends send their clients a FATAL on the way out: let it
            // through (up to 1 s) before the splices are cut.
            for _ in 0..20 {
                if admin.sessions_of(&row.username).await? == 0 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Ok::<_, pandastack_postgres::PgError>(ended)
        }
        .await
        .map_err(|e| ApiError::internal("resetting database credentials", e))?;
        // A session that was still authenticating is invisible to pg_stat_activity and may
        // already hold the old verifier: end every connection admitted before the new
        // password, at the front end.
        db.end_sessions();
        db.row().password_sealed = sealed;
        self.save(db).await?;
        db.touch();
        info!(database_id = %db.id, sessions_ended = ended, "database credentials reset");
        Ok(())
    }

    /// `PATCH /v1/databases/{id}`: `always_on` (true starts a stopped cluster and keeps it
    /// up) and a larger `storage_mb` (the cluster stops for the second the filesystem takes to
    /// grow, then runs again if it ran).
    ///
    /// # Errors
    /// 400 for a smaller or out-of-range `storage_mb`; 409 while provisioning or failed; 507
    /// for a growth while the host disk is below its reserve; 503 while the storage is still
    /// mounted in another mount namespace.
    pub async fn update(&self, db: &Arc<LiveDb>, req: UpdateDatabase) -> Result<(), ApiError> {
        match db.state() {
            DatabaseState::Running | DatabaseState::Stopped => {}
            s => {
                return Err(ApiError::Conflict(format!(
                    "database {} is {s}; it cannot be changed now",
                    db.id
                )))
            }
        }
        if let Some(mb) = req.storage_mb {
            let current = db.row().storage_mb;
            let mb = super::create::check_storage(Some(mb), current)?;
            if mb < current {
                return Err(ApiError::BadRequest(format!(
                    "storage_mb cannot shrink: the database has {current} MiB"
                )));
            }
            if mb > current {
                // Growing writes little, but lets the database fill more of a host disk
                // that is already short.
                self.check_disk("database storage growth", 0)?;
                self.grow(db, mb).await?;
            }
        }
        if let Some(on) = req.always_on {
            db.row().always_on = on;
            self.save(db).await?;
            if on {
                self.ensure_running(db, "always_on").await?;
            }
        }
        db.touch();
        Ok(())
    }

    async fn grow(&self, db: &LiveDb, mb: u64) -> Result<(), ApiError> {
        let _exclusive = db.lifecycle.write().await;
        let was_running = db.state() == DatabaseState::Running;
        if was_running {
            self.stop_locked(db, "resize").await?;
        }
        let storage = db.dirs.storage();
        let grown = async {
            storage.unmount().await?;
            let g = storage.grow(mb).await;
            storage.mount().await?;
            g
        }
        .await;
        if let Err(e) = grown {
            tracing::error!(database_id = %db.id, error = %e, "growing a database's storage");
            if was_running {
                let _ = self.start_locked(db, "resize").await;
            }
            return Err(match e {
                PgError::InUse => ApiError::Unavailable(format!(
                    "the storage of database {} is busy; try again in a minute",
                    db.id
                )),
                _ => {
                    ApiError::Internal(format!("the storage of database {} could not grow", db.id))
                }
            });
        }
        db.row().storage_mb = mb;
        self.save(db).await?;
        info!(database_id = %db.id, storage_mb = mb, "database storage grown");
        if was_running {
            self.start_locked(db, "resize").await?;
        }
        Ok(())
    }

    /// `DELETE /v1/databases/{id}`: irreversible. The port closes first (nothing new
    /// connects, open connections end), then the cluster, its storage, its directories and
    /// the row go. A crash half-way is finished by the next start's recovery (the row says
    /// `deleted_at`).
    ///
    /// # Errors
    /// Store errors.
    pub async fn delete(&self, db: &Arc<LiveDb>) -> Result<(), ApiError> {
        db.close_binding();
        if let Err(e) = self.sync_ports().await {
            warn!(database_id = %db.id, error = %e, "closing a deleted database's port");
        }
        db.row().deleted_at = Some(now_ms());
        self.save(db).await?;
        // Waits for provisioning, a clone from it, a start or a stop in progress.
        let _exclusive = db.lifecycle.write().await;
        if db.state() == DatabaseState::Deleted {
            return Ok(());
        }
        self.set_state(db, DatabaseState::Deleted, "api").await?;
        self.remove(&db.id);
        self.teardown(db).await;
        Ok(())
    }

    /// Removes everything of a deleted database and then its row; on failure (a busy mount)
    /// the row stays and the next start retries.
    pub(super) async fn teardown(&self, db: &LiveDb) {
        let started = std::time::Instant::now();
        cluster::stop(&db.dirs, StopMode::Immediate).await;
        match provision::destroy(&db.dirs).await {
            Ok(()) => {
                if let Err(e) = self.host.store.remove_database(&db.id).await {
                    warn!(database_id = %db.id, error = %e, "removing a deleted database's row");
                }
                crate::metrics::observe("database_delete", started);
            }
            Err(e) => {
                warn!(database_id = %db.id, error = %e, "removing a database; the next start retries")
            }
        }
    }
}
