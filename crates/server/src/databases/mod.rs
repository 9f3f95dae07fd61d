//! Databases (issue 10): PostgreSQL clusters that sandboxes reach with a scoped credential.
//!
//! # How a database runs and is reached
//! Each database is its own cluster (`pandastack-postgres`): a copy of a template cluster on
//! its own size-limited storage, run by the `postgres` user in a cgroup sized by its tier. The
//! cluster listens on a unix socket only. The server listens on the database's TCP port on
//! `127.0.0.1` and, with sandbox networking, on `10.0.2.2` — the gateway address every sandbox
//! has, which the engine puts on the host's loopback and opens to sandboxes for exactly the
//! database ports ([`pandastack_engine::Engine::set_host_service_ports`]). So one connection
//! URL works inside every sandbox and on the host. A connection is admitted
//! ([`admission`]) only from the host itself or from a sandbox of the database's workspace
//! (its source address is its `guest_ip`); then a stopped cluster is started and the TCP
//! stream is spliced to the socket. With no connection for `--database-idle-stop-seconds`, a
//! database that is not `always_on` is stopped cleanly ([`power`]).
//!
//! Lifecycle: [`create`] (new and clone), [`manage`] (credentials, update, delete),
//! [`recover`] (start-up reconciliation and graceful stop). States: [`state`]. Limits (count,
//! port share, memory admission with the sandboxes'): [`quota`].

pub mod admission;
pub mod create;
pub mod live;
pub mod manage;
pub mod power;
pub mod quota;
pub mod recover;
pub mod state;

pub use live::LiveDb;
pub use state::{transition, DatabaseState};

use crate::error::ApiError;
use crate::host::Host;
use pandastack_postgres::cluster::{ClusterDirs, RunSpec};
use pandastack_postgres::frontend::FrontEnd;
use pandastack_postgres::secret::Sealer;
use pandastack_postgres::template::Template;
use pandastack_postgres::{PgConfig, PgError, Tier};
use pandastack_store::{now_ms, DatabaseRow, EventRow};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tracing::info;

/// Settings of databases on this server (`pandastack server --database-*`).
#[derive(Debug, Clone)]
pub struct DatabaseSettings {
    /// Seconds without a connection before a database that is not `always_on` is stopped
    /// (issue 10: "N minutes (flag, default 10)").
    pub idle_stop_seconds: u64,
    /// TCP ports the front end gives databases.
    pub ports: RangeInclusive<u16>,
    /// `fsync` of the clusters (off only in tests).
    pub fsync: bool,
    /// PostgreSQL's programs (`postgres`, `initdb`, `pg_basebackup`).
    pub postgres_bin: PathBuf,
    /// Count, port share and memory of databases (issue 23 finding 7).
    pub limits: quota::DatabaseLimits,
}

/// The failover answer of every database: one host has no standby.
pub const NO_FAILOVER: &str =
    "failover is not available: this server runs each database on one host, with no standby";

/// The databases of this server. Shared as `Arc<Databases>`.
pub struct Databases {
    pub host: Arc<Host>,
    pub settings: DatabaseSettings,
    pg: PgConfig,
    sealer: Sealer,
    frontend: FrontEnd,
    /// What connection URLs name as the host: the sandboxes' gateway, or loopback.
    url_host: Ipv4Addr,
    live: Mutex<HashMap<String, Arc<LiveDb>>>,
    template: tokio::sync::Mutex<Option<Template>>,
    /// Serializes updates of the engine's host service ports.
    ports_lock: tokio::sync::Mutex<()>,
    /// Provisioning and clone tasks (a graceful stop waits for them).
    tasks: tokio_util::task::TaskTracker,
    /// `postgresql-<major>`, the `template` field of every database.
    engine_name: String,
    /// Admissions in progress and the memory budget ([`quota`]).
    quota: quota::Quota,
}

impl Databases {
    /// Sets up databases for `host`: the key that seals passwords (`<data_dir>/database.key`),
    /// the front end's addresses (loopback, and the host service address when sandboxes have
    /// a network), the memory budget; counts the databases' memory in `host`'s admissions.
    /// Call [`Databases::recover`] before serving.
    ///
    /// # Errors
    /// The key file cannot be read or made; the engine refuses the host service address;
    /// `/proc/meminfo` cannot be read (no `--database-memory-gb`).
    pub async fn new(host: Arc<Host>, settings: DatabaseSettings) -> Result<Arc<Self>, String> {
        let data_dir = host.cfg.data_dir.clone();
        let sealer = Sealer::load_or_create(&data_dir.join("database.key"))
            .map_err(|e| format!("database key: {e}"))?;
        let service_addr = host
            .engine
            .host_service_addr()
            .await
            .map_err(|e| format!("database front end: {e}"))?;
        let mut addrs = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
        if let Some(a) = service_addr {
            addrs.insert(0, IpAddr::V4(a));
        }
        let tag = crate::data_dir_tag(&data_dir);
        let pg = PgConfig {
            bin_dir: settings.postgres_bin.clone(),
            root: data_dir.join("databases"),
            socket_root: PathBuf::from(format!("/run/pandastack/pg-{tag}")),
            fsync: settings.fsync,
            os_user: "postgres".into(),
        };
        let engine_name = settings
            .postgres_bin
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|v| v.to_str())
            .filter(|v| v.chars().all(|c| c.is_ascii_digit()))
            .map(|v| format!("postgresql-{v}"))
            .unwrap_or_else(|| "postgresql".into());
        let memory_mb = match settings.limits.memory_mb {
            Some(mb) => mb,
            None => crate::host::host_memory_mb().map_err(|e| format!("host memory: {e}"))?,
        };
        let dbs = Arc::new(Databases {
            frontend: FrontEnd::new(addrs, settings.ports.clone()),
            url_host: service_addr.unwrap_or(Ipv4Addr::LOCALHOST),
            host,
            settings,
            pg,
            sealer,
            live: Mutex::default(),
            template: tokio::sync::Mutex::new(None),
            ports_lock: tokio::sync::Mutex::new(()),
            tasks: tokio_util::task::TaskTracker::new(),
            engine_name,
            quota: quota::Quota::new(memory_mb),
        });
        let weak = Arc::downgrade(&dbs);
        let commitment: std::sync::Weak<dyn crate::host::MemoryCommitment> = weak;
        dbs.host.count_memory_of(commitment);
        Ok(dbs)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<LiveDb>>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The database `id` of workspace `workspace_id`.
    ///
    /// # Errors
    /// 404 when it does not exist or belongs to another workspace (the same answer, so ids
    /// of other workspaces cannot be probed).
    pub fn get(&self, workspace_id: &str, id: &str) -> Result<Arc<LiveDb>, ApiError> {
        match self.map().get(id) {
            Some(d) if d.workspace_id == workspace_id => Ok(d.clone()),
            _ => Err(ApiError::NotFound(format!("database {id} not found"))),
        }
    }

    /// The database `id` of any workspace.
    pub fn get_any(&self, id: &str) -> Option<Arc<LiveDb>> {
        self.map().get(id).cloned()
    }

    /// Every live database, oldest first.
    pub fn all(&self) -> Vec<Arc<LiveDb>> {
        let mut all: Vec<Arc<LiveDb>> = self.map().values().cloned().collect();
        all.sort_by_key(|d| (d.row().created_at, d.id.clone()));
        all
    }

    fn insert(&self, db: Arc<LiveDb>) {
        self.map().insert(db.id.clone(), db);
    }

    fn remove(&self, id: &str) {
        self.map().remove(id);
    }

    /// The paths of database `id`'s cluster.
    pub fn dirs(&self, id: &str) -> ClusterDirs {
        ClusterDirs::new(&self.pg, id)
    }

    /// How `row`'s cluster runs.
    fn run_spec(&self, row: &DatabaseRow) -> RunSpec {
        RunSpec {
            tier: Tier::parse(&row.size).unwrap_or(Tier::G1),
            cpus: row.cpu,
            fsync: self.settings.fsync,
        }
    }

    /// The template, made on first use (one at a time).
    async fn template(&self) -> Result<Template, PgError> {
        let mut t = self.template.lock().await;
        if let Some(t) = t.as_ref() {
            return Ok(t.clone());
        }
        let made = pandastack_postgres::template::ensure(&self.pg).await?;
        *t = Some(made.clone());
        Ok(made)
    }

    /// Makes the template in the background at start, so the first create does not wait
    /// for `initdb` (nothing happens when PostgreSQL is not installed).
    pub fn prepare_template(self: &Arc<Self>) {
        if !self.settings.postgres_bin.join("postgres").exists() {
            info!("postgresql is not installed: databases are not available on this server");
            return;
        }
        if self.pg.check_access().is_err() {
            return;
        }
        let me = self.clone();
        self.tasks.spawn(async move {
            if let Err(e) = me.template().await {
                tracing::warn!(error = %e, "making the database template");
            }
        });
    }

    /// Writes `db`'s row to the store.
    ///
    /// # Errors
    /// Store errors.
    async fn save(&self, db: &LiveDb) -> Result<(), ApiError> {
        let row = db.snapshot();
        Ok(self.host.store.put_database(&row).await?)
    }

    /// Moves `db` to state `to`, persisting the row and recording an event (on `/v1/events`).
    ///
    /// # Errors
    /// 409 when the transition is not allowed; store errors.
    pub async fn set_state(
        &self,
        db: &LiveDb,
        to: DatabaseState,
        cause: &str,
    ) -> Result<(), ApiError> {
        let (from, row) = {
            let mut row = db.row();
            let from = DatabaseState::parse(&row.status);
            transition(from, to)?;
            row.status = to.as_str().to_string();
            (from, row.clone())
        };
        self.host.store.put_database(&row).await?;
        let ev = self
            .host
            .store
            .insert_subject_event(
                EventRow::DATABASE,
                &row.workspace_id,
                &row.id,
                from.as_str(),
                to.as_str(),
                cause,
                now_ms(),
            )
            .await?;
        info!(database_id = %row.id, from = %from, to = %to, cause, "database state");
        // With several hosts the cluster's event relay broadcasts every event (crate::cluster).
        if !self.host.cfg.cluster {
            let _ = self.host.events.send(ev);
        }
        Ok(())
    }

    /// Tells the engine the ports every sandbox may reach: those of every bound database.
    ///
    /// # Errors
    /// 500 when the host firewall refuses them.
    async fn sync_ports(&self) -> Result<(), ApiError> {
        let _l = self.ports_lock.lock().await;
        let mut ports: Vec<u16> = self.all().iter().filter_map(|d| d.bound_port()).collect();
        ports.sort_unstable();
        self.host
            .engine
            .set_host_service_ports(&ports)
            .await
            .map_err(|e| ApiError::internal("database ports", e))
    }

    /// Opens `db`'s port on the front end (its previous port if still free), records it in
    /// the row and opens it to sandboxes.
    ///
    /// # Errors
    /// 503 when no port is free; store and firewall errors.
    async fn bind(self: &Arc<Self>, db: &Arc<LiveDb>) -> Result<u16, ApiError> {
        let preferred = db.row().port;
        let gate = Arc::new(admission::Gate(Arc::downgrade(self)));
        let b = self
            .frontend
            .bind(&db.id, preferred, gate)
            .await
            .map_err(|e| ApiError::Busy {
                message: format!("no database port is free: {e}"),
                retry_after_s: 10,
            })?;
        let port = b.port;
        db.set_binding(b);
        db.row().port = Some(port);
        self.save(db).await?;
        self.sync_ports().await?;
        Ok(port)
    }

    /// The wire form of `db`; `secrets`: with `password` and `connection_url` (never in
    /// listings, issue 10).
    pub fn wire(&self, db: &LiveDb, secrets: bool) -> pandastack_api::Database {
        let row = db.snapshot();
        let state = DatabaseState::parse(&row.status);
        let tier = Tier::parse(&row.size).unwrap_or(Tier::G1);
        let ready = matches!(state, DatabaseState::Running | DatabaseState::Stopped);
        let password = (secrets && ready)
            .then(|| self.sealer.open(&row.password_sealed).ok())
            .flatten();
        let connection_url = match (&password, row.port) {
            (Some(pw), Some(port)) => Some(format!(
                "postgres://{}:{pw}@{}:{port}/{}",
                row.username, self.url_host, row.database
            )),
            _ => None,
        };
        pandastack_api::Database {
            id: row.id.clone(),
            label: row.label.clone(),
            status: row.status.clone(),
            template: self.engine_name.clone(),
            connection_url,
            host: self.url_host.to_string(),
            port: row.port,
            database: row.database.clone(),
            username: row.username.clone(),
            password,
            size: row.size.clone(),
            memory_mb: tier.memory_mb(),
            cpu: row.cpu,
            storage_mb: row.storage_mb,
            storage_used_bytes: db.dirs.storage().usage().map(|(used, _)| used),
            always_on: row.always_on,
            created_at: row.created_at / 1000,
            cloned_from: row.cloned_from.clone(),
            error: row.error.clone(),
            connections: db.connections(),
            failover_available: false,
            failover_reason: NO_FAILOVER.into(),
        }
    }
}
