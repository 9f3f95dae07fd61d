//! [`LiveDb`]: the server's handle on one database.

use super::state::DatabaseState;
use pandastack_postgres::cluster::ClusterDirs;
use pandastack_postgres::frontend::Binding;
use pandastack_store::{now_ms, DatabaseRow};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;

/// One database known to this server.
pub struct LiveDb {
    pub id: String,
    pub workspace_id: String,
    pub dirs: ClusterDirs,
    /// The row, written through to the store on every change. Never held across an await.
    row: Mutex<DatabaseRow>,
    /// Connections take it shared while they check the cluster runs; start, stop, grow,
    /// provisioning and delete take it exclusively; a clone holds its source's shared (so the
    /// source is neither stopped nor deleted under it). The idle stop only ever tries it.
    pub lifecycle: Arc<RwLock<()>>,
    /// Connections spliced through the front end right now.
    connections: AtomicU64,
    /// Last connection opened or closed, or API use (Unix ms): the idle stop counts from here.
    last_active_ms: AtomicI64,
    /// The front end's listeners of this database's port.
    binding: Mutex<Option<Binding>>,
    /// Held by every spliced connection; [`LiveDb::end_sessions`] cancels it.
    sessions: Mutex<CancellationToken>,
}

impl LiveDb {
    /// Wraps a row.
    pub fn new(row: DatabaseRow, dirs: ClusterDirs) -> Self {
        LiveDb {
            id: row.id.clone(),
            workspace_id: row.workspace_id.clone(),
            dirs,
            last_active_ms: AtomicI64::new(now_ms()),
            row: Mutex::new(row),
            lifecycle: Arc::new(RwLock::new(())),
            connections: AtomicU64::new(0),
            binding: Mutex::new(None),
            sessions: Mutex::new(CancellationToken::new()),
        }
    }

    /// The row, locked (for reading or changing a field; persist through
    /// `Databases::save`).
    pub fn row(&self) -> MutexGuard<'_, DatabaseRow> {
        self.row.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of the row.
    pub fn snapshot(&self) -> DatabaseRow {
        self.row().clone()
    }

    /// The current state.
    pub fn state(&self) -> DatabaseState {
        DatabaseState::parse(&self.row().status)
    }

    /// Records use now (the idle stop counts from the last use).
    pub fn touch(&self) {
        self.last_active_ms.store(now_ms(), Ordering::SeqCst);
    }

    /// Milliseconds since the last use.
    pub fn idle_ms(&self) -> i64 {
        now_ms() - self.last_active_ms.load(Ordering::SeqCst)
    }

    /// Open connections.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }

    /// Counts a connection until the guard drops.
    pub fn connection(self: &Arc<Self>) -> ConnectionGuard {
        self.connections.fetch_add(1, Ordering::SeqCst);
        self.touch();
        ConnectionGuard { db: self.clone() }
    }

    /// The token a connection admitted now holds.
    pub fn session_token(&self) -> CancellationToken {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Ends every connection admitted so far (the listeners stay); later ones are not
    /// affected.
    pub fn end_sessions(&self) {
        let old = std::mem::take(&mut *self.sessions.lock().unwrap_or_else(|e| e.into_inner()));
        old.cancel();
    }

    /// Keeps `b` as this database's listeners (replacing and closing any previous ones).
    pub fn set_binding(&self, b: Binding) {
        *self.binding.lock().unwrap_or_else(|e| e.into_inner()) = Some(b);
    }

    /// Closes the listeners and every connection through them.
    pub fn close_binding(&self) {
        if let Some(b) = self
            .binding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            b.close();
        }
    }

    /// The bound port, while listening.
    pub fn bound_port(&self) -> Option<u16> {
        self.binding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|b| b.port)
    }
}

/// One open connection (see [`LiveDb::connection`]).
pub struct ConnectionGuard {
    db: Arc<LiveDb>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        // Touch first, so the idle stop never sees zero connections and an old timestamp.
        self.db.touch();
        self.db.connections.fetch_sub(1, Ordering::SeqCst);
    }
}
