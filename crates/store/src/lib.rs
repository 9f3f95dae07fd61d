//! The control-plane store: workspaces, API keys, sandboxes, code contexts, snapshots,
//! databases, lifecycle events, the intent records of operations in progress and template
//! builds, in an embedded SQLite database (WAL mode) with numbered migrations.
//!
//! The store is the source of truth across server restarts: on start the server re-adopts every
//! sandbox row that is not deleted. All methods are synchronous and short (sub-millisecond on a
//! local file); callers on async runtimes call them directly.

mod databases;
mod migrations;
mod operations;
mod rows;
mod sandboxes;
mod settings;
mod template_builds;
mod workspaces;

pub use rows::*;

use rusqlite::Connection;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// Errors of the store. `NotFound` carries what was looked up.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0} already exists")]
    Conflict(String),
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("stored json: {0}")]
    Json(#[from] serde_json::Error),
}

/// Handle to the database. Cheap to share behind an `Arc`.
pub struct Store {
    conn: Mutex<Connection>,
}

impl Store {
    /// Opens (creating if needed) the database at `path` and applies pending migrations.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] when the file cannot be opened or a migration fails.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open(path)?;
        Self::init(conn)
    }

    /// An in-memory database, for tests.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_in_memory() -> Result<Self, StoreError> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(mut conn: Connection) -> Result<Self, StoreError> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrations::apply(&mut conn)?;
        Ok(Store {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
