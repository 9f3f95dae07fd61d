//! Start-up recovery and graceful stop of the databases (issue 10: "server start-up recovery
//! restarts the always_on clusters and reconciles the store with what is on disk").
//!
//! For every row: a delete that was under way is finished; a database still `provisioning`
//! (the server died while making it) becomes `failed` with its pieces removed; every other
//! database gets its storage mounted (a host restart unmounts it), its port back (the same one
//! when free) and its cluster adopted when the postmaster outlived the server, started when it
//! is `always_on`, and `stopped` otherwise (it wakes on the next connection). Directories,
//! mounts and processes of clusters the store does not know are removed.

use super::{DatabaseState, Databases, LiveDb};
use pandastack_postgres::cluster::{self, StopMode};
use pandastack_postgres::{provision, storage};
use pandastack_store::DatabaseRow;
use std::collections::HashSet;
use std::sync::Arc;
use tracing::{info, warn};

impl Databases {
    /// Reconciles the store with the clusters on disk (see the module docs). Call once,
    /// after the host agent's recovery and before serving.
    ///
    /// # Errors
    /// Store errors.
    pub async fn recover(self: &Arc<Self>) -> Result<(), crate::error::ApiError> {
        if let Err(e) = storage::share_root(&self.pg.root).await {
            warn!(error = %e, "sharing the databases' mount point; sandboxes started meanwhile keep copies of database mounts");
        }
        let rows = self
            .host
            .store
            .host_databases(&self.host.cfg.host_name)
            .await?;
        let known: HashSet<String> = rows.iter().map(|r| r.id.clone()).collect();
        for row in rows {
            let db = Arc::new(LiveDb::new(row.clone(), self.dirs(&row.id)));
            if row.deleted_at.is_some()
                || DatabaseState::parse(&row.status) == DatabaseState::Deleted
            {
                info!(database_id = %row.id, "finishing the delete of a database");
                self.teardown(&db).await;
                continue;
            }
            self.insert(db.clone());
            if let Err(e) = self.recover_one(&db, &row).await {
                warn!(database_id = %row.id, error = %e, "recovering a database");
            }
        }
        self.sync_ports().await?;
        self.remove_strays(&known).await;
        Ok(())
    }

    async fn recover_one(
        self: &Arc<Self>,
        db: &Arc<LiveDb>,
        row: &DatabaseRow,
    ) -> Result<(), crate::error::ApiError> {
        match DatabaseState::parse(&row.status) {
            DatabaseState::Provisioning => {
                warn!(database_id = %row.id, "provisioning was interrupted; removing what it made");
                cluster::stop(&db.dirs, StopMode::Immediate).await;
                let _ = provision::destroy(&db.dirs).await;
                db.row().error = Some("provisioning was interrupted by a server restart".into());
                return self.set_state(db, DatabaseState::Failed, "recovery").await;
            }
            DatabaseState::Failed | DatabaseState::Deleted => return Ok(()),
            DatabaseState::Running | DatabaseState::Stopped => {}
        }
        if let Err(e) = db.dirs.storage().mount().await {
            tracing::error!(database_id = %row.id, error = %e, "mounting a database's storage");
            db.row().error = Some("its storage could not be mounted".into());
            return self.set_state(db, DatabaseState::Failed, "recovery").await;
        }
        let port = self.bind(db).await?;
        if row.port.is_some_and(|p| p != port) {
            warn!(database_id = %row.id, old = ?row.port, new = port, "a database's port was taken; it has a new one");
        }
        let alive = cluster::running(&db.dirs).is_some();
        let state = DatabaseState::parse(&row.status);
        let _exclusive = db.lifecycle.write().await;
        match (state, alive) {
            (DatabaseState::Running, true) => {
                info!(database_id = %row.id, "re-adopted a running database");
            }
            (DatabaseState::Stopped, true) => {
                self.set_state(db, DatabaseState::Running, "recovery")
                    .await?;
            }
            (DatabaseState::Running, false) => {
                self.set_state(db, DatabaseState::Stopped, "recovery")
                    .await?;
            }
            _ => {}
        }
        if row.always_on && !alive {
            self.start_locked(db, "always_on").await?;
        }
        Ok(())
    }

    /// Removes cluster directories (and their mounts, processes) that no row names.
    async fn remove_strays(&self, known: &HashSet<String>) {
        let root = self.pg.root.clone();
        let Ok(entries) = std::fs::read_dir(&root) else {
            return;
        };
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == "template" || known.contains(&name) || uuid::Uuid::parse_str(&name).is_err()
            {
                continue;
            }
            warn!(database_id = %name, "removing a cluster no database row names");
            if let Err(err) = provision::destroy(&self.dirs(&name)).await {
                warn!(database_id = %name, error = %err, "removing a stray cluster");
            }
        }
    }

    /// Graceful stop of the server: provisioning and clones finish, ports close, every
    /// running cluster is shut down cleanly (`stopped`, cause `shutdown`) and its storage
    /// unmounted. The next start starts the `always_on` ones again.
    pub async fn shutdown(&self) {
        self.tasks.close();
        self.tasks.wait().await;
        for db in self.all() {
            db.close_binding();
            let _exclusive = db.lifecycle.write().await;
            if let Err(e) = self.stop_locked(&db, "shutdown").await {
                warn!(database_id = %db.id, error = %e, "stopping a database");
            }
            if let Err(e) = db.dirs.storage().unmount().await {
                warn!(database_id = %db.id, error = %e, "unmounting a database's storage");
            }
        }
        let _ = self.sync_ports().await;
        let _ = std::fs::remove_dir_all(&self.pg.socket_root);
        storage::unshare_root(&self.pg.root).await;
    }
}
