//! [`Live`]: the host agent's handle on one sandbox.

use crate::error::ApiError;
use crate::guest::GuestConn;
use pandastack_store::{now_ms, SandboxRow};
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::{Mutex, RwLock};

/// How long a request waits for a guest connection to come up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One sandbox known to this host.
pub struct Live {
    pub id: String,
    pub workspace_id: String,
    /// The sandbox's row, written through to the store on every state change.
    pub row: Mutex<SandboxRow>,
    conn: Mutex<Option<GuestConn>>,
    /// Requests (exec, files, kernels) hold it shared; lifecycle operations (pause, snapshot,
    /// hibernate, delete) hold it exclusively, so they never cut a request in half.
    pub gate: std::sync::Arc<RwLock<()>>,
    /// What the sandbox's commands and kernels printed.
    pub log: super::logs::SandboxLog,
    /// Consecutive failed health probes.
    failed_probes: std::sync::atomic::AtomicU32,
    /// Last CPU sample: (cpu ns, unix ms) and the CPU use between the last two, in percent x100.
    cpu_sample: std::sync::Mutex<(u64, i64, u64)>,
}

impl Live {
    /// Wraps a row.
    pub fn new(row: SandboxRow) -> Self {
        Live {
            id: row.id.clone(),
            workspace_id: row.workspace_id.clone(),
            row: Mutex::new(row),
            conn: Mutex::new(None),
            gate: std::sync::Arc::new(RwLock::new(())),
            failed_probes: Default::default(),
            cpu_sample: Default::default(),
            log: Default::default(),
        }
    }

    /// The guest connection of the current instance, connecting (and handshaking) if needed.
    ///
    /// # Errors
    /// 503 "connection refused" when the sandbox has no running instance or its guest does
    /// not answer.
    pub async fn guest(&self) -> Result<GuestConn, ApiError> {
        let mut conn = self.conn.lock().await;
        if let Some(c) = conn.as_ref() {
            if c.is_alive() {
                return Ok(c.clone());
            }
        }
        let socket = {
            let row = self.row.lock().await;
            row.instance_dir
                .as_ref()
                .map(|d| PathBuf::from(d).join("guest.sock"))
        };
        let socket = socket.ok_or_else(|| {
            ApiError::Unavailable("guest channel: connect: connection refused (no instance)".into())
        })?;
        let c = GuestConn::connect(&socket, CONNECT_TIMEOUT).await?;
        *conn = Some(c.clone());
        Ok(c)
    }

    /// Installs an already handshaken connection (after boot).
    pub async fn set_conn(&self, c: GuestConn) {
        *self.conn.lock().await = Some(c);
    }

    /// Drops the connection (before the instance goes away).
    pub async fn drop_conn(&self) {
        *self.conn.lock().await = None;
    }

    /// Records API activity: the TTL counts from now.
    pub async fn touch(&self) {
        self.row.lock().await.last_active_at = now_ms();
    }

    pub fn gate_arc(&self) -> std::sync::Arc<RwLock<()>> {
        self.gate.clone()
    }

    /// Records a health probe; returns the number of consecutive failures.
    pub fn record_probe(&self, ok: bool) -> u32 {
        use std::sync::atomic::Ordering;
        if ok {
            self.failed_probes.store(0, Ordering::SeqCst);
            0
        } else {
            self.failed_probes.fetch_add(1, Ordering::SeqCst) + 1
        }
    }

    /// Records a cumulative CPU time sample (ns) taken now.
    pub fn record_cpu(&self, cpu_ns: u64) {
        let now = now_ms();
        let mut s = self.cpu_sample.lock().unwrap_or_else(|e| e.into_inner());
        let (prev_ns, prev_ms, _) = *s;
        let pct100 = if prev_ms > 0 && now > prev_ms && cpu_ns >= prev_ns {
            (cpu_ns - prev_ns) * 10_000 / ((now - prev_ms) as u64 * 1_000_000)
        } else {
            0
        };
        *s = (cpu_ns, now, pct100);
    }

    /// CPU use over the last health interval, percent of one CPU.
    pub fn cpu_percent(&self) -> f64 {
        self.cpu_sample.lock().unwrap_or_else(|e| e.into_inner()).2 as f64 / 100.0
    }

    /// A copy of the row.
    pub async fn snapshot_row(&self) -> SandboxRow {
        self.row.lock().await.clone()
    }
}

/// A sandbox ready to serve a request: its guest connection, with the lifecycle gate held
/// shared for as long as this lives.
pub struct Ready {
    pub conn: GuestConn,
    pub envs: std::collections::BTreeMap<String, String>,
    _gate: tokio::sync::OwnedRwLockReadGuard<()>,
}

impl Ready {
    /// Bundles a connection with a held gate.
    pub fn new(
        conn: GuestConn,
        envs: std::collections::BTreeMap<String, String>,
        gate: tokio::sync::OwnedRwLockReadGuard<()>,
    ) -> Self {
        Ready {
            conn,
            envs,
            _gate: gate,
        }
    }
}
