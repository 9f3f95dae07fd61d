//! The control-plane store: workspaces, API keys, sandboxes, code contexts, snapshots,
//! volumes, databases, lifecycle events, the intent records of operations in progress and
//! template builds.
//!
//! Two backends behind one API (issue 12): an embedded SQLite file (WAL mode; the default, one
//! host) and PostgreSQL (`--store postgres://...`, shared by every host of a cluster). Both run
//! through `sqlx`'s `Any` driver with the same queries (`$N` placeholders, `ON CONFLICT`,
//! `RETURNING`: the SQL both dialects accept); only the schema migrations differ per backend
//! ([`migrations`]). Booleans and `u32`s are stored as 64-bit integers in both, so every row
//! decodes the same way.
//!
//! The store is the source of truth across server restarts: on start the server re-adopts every
//! sandbox row that is not deleted. Methods are async; on SQLite each is a sub-millisecond local
//! call, on PostgreSQL one round trip.

mod cluster;
mod databases;
mod events;
pub mod images;
mod migrations;
mod operations;
mod rows;
mod sandboxes;
mod settings;
mod snapshots;
mod template_builds;
mod volumes;
mod workspace_admin;
mod workspaces;

pub use cluster::HostRow;
pub use images::ImageRow;
pub use rows::*;
pub use workspace_admin::Holdings;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};
use std::path::Path;
use std::time::Duration;

/// Errors of the store. `NotFound` carries what was looked up.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0} already exists")]
    Conflict(String),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("stored json: {0}")]
    Json(#[from] serde_json::Error),
}

/// Which database a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Handle to the database. Cheap to share behind an `Arc`.
///
/// On a SQLite file, statements that write go through [`Store::writes`], a pool of one
/// connection, and reads through a pool of [`SQLITE_READERS`]: SQLite admits one writer at a
/// time, and several connections that wait for its lock each wait in SQLite's busy handler,
/// whose budget ([`SQLITE_BUSY_TIMEOUT_MS`]) counts the sleeps it asks for, not wall time. On
/// a starved host those sleeps overrun, and one write waited 28-54 s behind others (issue 23
/// finding 11). One writer connection queues writes in order in the pool instead, where the
/// wait is bounded by [`WRITE_QUEUE_TIMEOUT`]. PostgreSQL has one pool for both.
pub struct Store {
    pool: AnyPool,
    writer: AnyPool,
    backend: Backend,
}

/// Read connections of a SQLite store (its writes have one connection of their own).
pub const SQLITE_READERS: u32 = 4;

/// How long one SQLite connection retries a statement while another process holds the
/// database's write lock, ms (SQLite's `busy_timeout`).
pub const SQLITE_BUSY_TIMEOUT_MS: u32 = 5000;

/// How long a write waits for the writer connection of a SQLite store before it fails with
/// [`StoreError::Db`] (`PoolTimedOut`).
pub const WRITE_QUEUE_TIMEOUT: Duration = Duration::from_secs(60);

impl Store {
    /// Opens the SQLite database at `path` (created if needed) and applies pending migrations.
    ///
    /// # Errors
    /// [`StoreError::Db`] when the file cannot be opened or a migration fails.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        let url = format!("sqlite://{}?mode=rwc", path.display());
        Self::connect(&url).await
    }

    /// Opens the store at `url`: `sqlite://PATH?mode=rwc`, `sqlite::memory:`, or
    /// `postgres://USER[:PASSWORD]@HOST:PORT/DB`; applies pending migrations (on PostgreSQL
    /// under an advisory lock, so several servers starting at once migrate once).
    ///
    /// # Errors
    /// [`StoreError::Db`] when the database cannot be reached or a migration fails.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            Backend::Sqlite
        };
        let memory = url.contains(":memory:");
        let pool = pool_options(
            backend,
            memory,
            match (backend, memory) {
                // One connection holds an in-memory database; a second would see another.
                (_, true) => 1,
                (Backend::Sqlite, false) => SQLITE_READERS,
                (Backend::Postgres, false) => 16,
            },
        )
        .connect(url)
        .await?;
        let writer = if backend == Backend::Sqlite && !memory {
            pool_options(backend, false, 1)
                .acquire_timeout(WRITE_QUEUE_TIMEOUT)
                .connect(url)
                .await?
        } else {
            pool.clone()
        };
        let store = Store {
            pool,
            writer,
            backend,
        };
        migrations::apply(&store).await?;
        Ok(store)
    }

    /// An in-memory SQLite database, for tests.
    ///
    /// # Errors
    /// As [`Store::connect`].
    pub async fn open_in_memory() -> Result<Self, StoreError> {
        Self::connect("sqlite::memory:").await
    }

    /// The backend this store runs on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The connection pool for reads (and for the backend-specific parts: migrations,
    /// PostgreSQL's LISTEN/NOTIFY).
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The connection pool for statements that write (see [`Store`]): one connection on a
    /// SQLite file, the shared pool otherwise.
    pub fn writes(&self) -> &AnyPool {
        &self.writer
    }

    /// The database's clock, Unix ms: the one clock every host of a cluster agrees on (leases
    /// are timed by it, issue 12).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn db_now_ms(&self) -> Result<i64, StoreError> {
        let sql = format!("SELECT {}", now_sql(self.backend));
        Ok(sqlx::query(&sql).fetch_one(&self.pool).await?.try_get(0)?)
    }
}

/// Pool options for `backend` with `max` connections: SQLite connections get WAL, foreign
/// keys and the busy timeout; an in-memory database keeps its one connection forever.
fn pool_options(backend: Backend, memory: bool, max: u32) -> AnyPoolOptions {
    let mut opts = AnyPoolOptions::new()
        .acquire_timeout(Duration::from_secs(10))
        .max_connections(max);
    if backend == Backend::Sqlite {
        opts = opts.after_connect(|conn, _| {
            Box::pin(async move {
                for pragma in [
                    "PRAGMA journal_mode = WAL".to_string(),
                    "PRAGMA synchronous = NORMAL".to_string(),
                    "PRAGMA foreign_keys = ON".to_string(),
                    format!("PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}"),
                ] {
                    sqlx::query(&pragma).execute(&mut *conn).await?;
                }
                Ok(())
            })
        });
    }
    if memory {
        opts = opts
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None);
    }
    opts
}

/// SQL for the database's clock in Unix ms (an expression, for use inside statements).
pub(crate) fn now_sql(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        Backend::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
    }
}

/// `INSERT INTO {table} ({cols}) VALUES ($1, ...) ON CONFLICT (id) DO UPDATE SET` every column
/// but the first (the `id` key): the whole-row upsert both SQL dialects accept. `cols` is a
/// comma-separated list starting with `id`; binds follow its order.
pub(crate) fn upsert_sql(table: &str, cols: &str) -> String {
    let names: Vec<&str> = cols.split(',').map(str::trim).collect();
    let params: Vec<String> = (1..=names.len()).map(|i| format!("${i}")).collect();
    let updates: Vec<String> = names[1..]
        .iter()
        .map(|c| format!("{c} = excluded.{c}"))
        .collect();
    format!(
        "INSERT INTO {table} ({cols}) VALUES ({}) ON CONFLICT (id) DO UPDATE SET {}",
        params.join(", "),
        updates.join(", ")
    )
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Column readers shared by the row decoders (every integer is stored as 64 bits).
pub(crate) trait Col {
    fn text(&self, i: usize) -> Result<String, sqlx::Error>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error>;
    fn int(&self, i: usize) -> Result<i64, sqlx::Error>;
    fn opt_int(&self, i: usize) -> Result<Option<i64>, sqlx::Error>;
    fn uint(&self, i: usize) -> Result<u32, sqlx::Error>;
    fn opt_uint(&self, i: usize) -> Result<Option<u32>, sqlx::Error>;
    fn flag(&self, i: usize) -> Result<bool, sqlx::Error>;
    fn json<T: serde::de::DeserializeOwned>(&self, i: usize) -> Result<T, sqlx::Error>;
}

impl Col for AnyRow {
    fn text(&self, i: usize) -> Result<String, sqlx::Error> {
        self.try_get(i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error> {
        self.try_get(i)
    }
    fn int(&self, i: usize) -> Result<i64, sqlx::Error> {
        self.try_get(i)
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, sqlx::Error> {
        self.try_get(i)
    }
    fn uint(&self, i: usize) -> Result<u32, sqlx::Error> {
        let v: i64 = self.try_get(i)?;
        u32::try_from(v).map_err(|e| sqlx::Error::ColumnDecode {
            index: i.to_string(),
            source: Box::new(e),
        })
    }
    fn opt_uint(&self, i: usize) -> Result<Option<u32>, sqlx::Error> {
        let v: Option<i64> = self.try_get(i)?;
        v.map(|v| {
            u32::try_from(v).map_err(|e| sqlx::Error::ColumnDecode {
                index: i.to_string(),
                source: Box::new(e),
            })
        })
        .transpose()
    }
    fn flag(&self, i: usize) -> Result<bool, sqlx::Error> {
        Ok(self.try_get::<i64, _>(i)? != 0)
    }
    fn json<T: serde::de::DeserializeOwned>(&self, i: usize) -> Result<T, sqlx::Error> {
        let text: String = self.try_get(i)?;
        serde_json::from_str(&text).map_err(|e| sqlx::Error::ColumnDecode {
            index: i.to_string(),
            source: Box::new(e),
        })
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Store tests run on SQLite in memory, and also on PostgreSQL when
    //! `PANDASTACK_TEST_POSTGRES_URL` names a database the test may wipe (scripts/test.sh starts
    //! a throwaway cluster and sets it; it is then required: `PANDASTACK_REQUIRE_POSTGRES=1`).

    use super::{SandboxRow, Store, WorkspaceRow};
    use std::collections::BTreeMap;

    /// A running sandbox row of workspace `ws` on host `h`.
    pub fn sandbox_row(id: &str, ws: &str) -> SandboxRow {
        SandboxRow {
            id: id.into(),
            workspace_id: ws.into(),
            template: "base".into(),
            template_generation: 1,
            status: "running".into(),
            cpu: 1,
            memory_mb: 512,
            metadata: BTreeMap::from([("job".into(), "demo".into())]),
            envs: BTreeMap::new(),
            ttl_seconds: 3600,
            persistent: false,
            created_at: 1,
            last_active_at: 1,
            instance_id: Some("ps-1".into()),
            instance_dir: None,
            rootfs: "/r".into(),
            guest_dir: "/g".into(),
            boot_ms: Some(5),
            boot_mode: "cold".into(),
            from_snapshot: None,
            hibernate_image: None,
            deleted_at: None,
            network: Some(serde_json::json!({"internet": true})),
            guest_ip: Some("10.201.0.6".into()),
            disk_mb: Some(1024),
            host: "h".into(),
            volumes: vec![super::SandboxVolume {
                volume_id: "vol-1".into(),
                name: "work".into(),
                read_only: false,
            }],
        }
    }

    /// Inserts a workspace `ws` (for rows that reference one).
    pub async fn workspace(s: &Store, ws: &str) {
        let w = WorkspaceRow {
            id: ws.into(),
            name: ws.into(),
            created_at: 0,
        };
        s.insert_workspace(&w).await.expect("workspace");
    }

    /// The stores to run a test against: SQLite, plus PostgreSQL when configured.
    pub async fn stores() -> Vec<Store> {
        let mut out = vec![Store::open_in_memory().await.expect("sqlite in memory")];
        match std::env::var("PANDASTACK_TEST_POSTGRES_URL") {
            Ok(url) if !url.is_empty() => out.push(fresh_postgres(&url).await),
            _ if std::env::var("PANDASTACK_REQUIRE_POSTGRES").as_deref() == Ok("1") => {
                panic!("PANDASTACK_TEST_POSTGRES_URL is not set")
            }
            _ => println!("SKIPPED: PostgreSQL half (PANDASTACK_TEST_POSTGRES_URL not set)"),
        }
        out
    }

    /// A new, empty database on the test cluster, migrated.
    async fn fresh_postgres(url: &str) -> Store {
        sqlx::any::install_default_drivers();
        let name = format!("store_test_{}", uuid_hex());
        let admin = sqlx::AnyPool::connect(url).await.expect("test postgres");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .expect("create test database");
        let base = url.rsplit_once('/').map_or(url, |(b, _)| b);
        Store::connect(&format!("{base}/{name}"))
            .await
            .expect("migrated test database")
    }

    fn uuid_hex() -> String {
        use std::time::{SystemTime, UNIX_EPOCH};
        let n = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        format!("{:x}{:x}", n, std::process::id())
    }
}
