//! [`Live`]: the host agent's handle on one sandbox.

use crate::error::ApiError;
use crate::guest::GuestConn;
use pandastack_store::{now_ms, SandboxRow};
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::{Mutex, RwLock};

/// How long a request waits for a guest connection to come up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request whose guest channel closed waits for the verdict on the sandbox (died
/// or not) before it answers 503: a few [`super::health::DEATH_POLL`]s.
pub const CHANNEL_LOST_WAIT: Duration = Duration::from_millis(1000);

/// One sandbox known to this host.
pub struct Live {
    pub id: String,
    pub workspace_id: String,
    /// The sandbox's row, written through to the store on every state change.
    pub row: Mutex<SandboxRow>,
    /// The current connection. Held only to read or swap it, never across a connect.
    conn: Mutex<Option<GuestConn>>,
    /// Held while (re)connecting, so concurrent requests make one connection; health probes
    /// only try it and never wait on it.
    connecting: Mutex<()>,
    /// Requests in flight that count as activity for the TTL (an exec, a code run, a file or
    /// exec stream), see [`Live::activity`].
    active: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Requests (exec, files, kernels) hold it shared; lifecycle operations (pause, snapshot,
    /// hibernate, delete) hold it exclusively, so they never cut a request in half.
    pub gate: std::sync::Arc<RwLock<()>>,
    /// What the sandbox's commands and kernels printed.
    pub log: super::logs::SandboxLog,
    /// The guest's silence to health probes (health.rs).
    pub(super) silence: std::sync::Mutex<super::health::Silence>,
    /// Set while a health probe of this sandbox runs: one at a time (health.rs).
    pub(super) probing: std::sync::atomic::AtomicBool,
    /// Why the sandbox failed (or is being failed right now), as this process saw it: what
    /// requests to it answer (issue 8: "409 `sandbox failed: out of memory` at once").
    failure: std::sync::Mutex<Option<String>>,
    /// Last CPU sample: (cpu ns, unix ms) and the CPU use between the last two, in percent x100.
    cpu_sample: std::sync::Mutex<(u64, i64, u64)>,
    /// What the memory watch last found of the instance it names: `(instance id, near)`
    /// (`super::memory_watch`).
    memory_near: std::sync::Mutex<Option<(String, bool)>>,
}

impl Live {
    /// Wraps a row.
    pub fn new(row: SandboxRow) -> Self {
        Live {
            id: row.id.clone(),
            workspace_id: row.workspace_id.clone(),
            row: Mutex::new(row),
            conn: Mutex::new(None),
            connecting: Mutex::new(()),
            active: Default::default(),
            gate: std::sync::Arc::new(RwLock::new(())),
            silence: Default::default(),
            probing: Default::default(),
            failure: Default::default(),
            cpu_sample: Default::default(),
            log: Default::default(),
            memory_near: Default::default(),
        }
    }

    /// Whether the memory watch found instance `iid` near its limit; None when it has not
    /// looked at that instance yet.
    pub fn memory_near(&self, iid: &str) -> Option<bool> {
        self.memory_near
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .filter(|(i, _)| i == iid)
            .map(|(_, near)| *near)
    }

    /// Forgets the finding on instance `iid` (its guest was not told): found again next round.
    pub fn forget_memory_near(&self, iid: &str) {
        let mut m = self.memory_near.lock().unwrap_or_else(|e| e.into_inner());
        if m.as_ref().is_some_and(|(i, _)| i == iid) {
            *m = None;
        }
    }

    /// Records what the memory watch found of instance `iid`; returns the previous finding
    /// for it (None: none yet).
    pub fn set_memory_near(&self, iid: &str, near: bool) -> Option<bool> {
        let mut m = self.memory_near.lock().unwrap_or_else(|e| e.into_inner());
        let before = m.as_ref().filter(|(i, _)| i == iid).map(|(_, n)| *n);
        *m = Some((iid.to_string(), near));
        before
    }

    /// The guest connection of the current instance, connecting (and handshaking) if needed.
    ///
    /// # Errors
    /// 503 "connection refused" when the sandbox has no running instance or its guest does
    /// not answer within 10 s.
    pub async fn guest(&self) -> Result<GuestConn, ApiError> {
        if let Some(c) = self.current_conn().await {
            return Ok(c);
        }
        let _connecting = self.connecting.lock().await;
        self.connect(CONNECT_TIMEOUT).await
    }

    /// The connection for a health probe: the current one, or a new one made within
    /// `timeout`. None when a request is connecting right now (the probe then skips this
    /// round rather than queue behind it).
    ///
    /// # Errors
    /// As [`Live::guest`], after at most `timeout`.
    pub async fn probe_conn(&self, timeout: Duration) -> Result<Option<GuestConn>, ApiError> {
        if let Some(c) = self.current_conn().await {
            return Ok(Some(c));
        }
        let Ok(_connecting) = self.connecting.try_lock() else {
            return Ok(None);
        };
        self.connect(timeout).await.map(Some)
    }

    async fn current_conn(&self) -> Option<GuestConn> {
        self.conn
            .lock()
            .await
            .as_ref()
            .filter(|c| c.is_alive())
            .cloned()
    }

    /// Connects to the current instance's socket; the caller holds `connecting`.
    async fn connect(&self, timeout: Duration) -> Result<GuestConn, ApiError> {
        if let Some(c) = self.current_conn().await {
            return Ok(c);
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
        let c = GuestConn::connect(&socket, timeout).await?;
        *self.conn.lock().await = Some(c.clone());
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

    /// Marks a request as in flight until the returned guard is dropped: while any is, the
    /// sandbox is active and neither the TTL nor the idle hibernation takes it (seed 003: the
    /// TTL is "refreshed by any API activity"; a running command is activity, issue 8). The
    /// TTL counts again from the moment the last one ends.
    pub fn activity(self: &std::sync::Arc<Self>) -> Activity {
        self.active
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Activity { live: self.clone() }
    }

    /// True while a request holds an [`Activity`].
    pub fn is_active(&self) -> bool {
        self.active.load(std::sync::atomic::Ordering::SeqCst) > 0
    }

    pub fn gate_arc(&self) -> std::sync::Arc<RwLock<()>> {
        self.gate.clone()
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

    /// Why the sandbox failed, if this process knows (see [`Live::set_failure`]).
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records why the sandbox failed (`None`: it did not after all).
    pub fn set_failure(&self, cause: Option<String>) {
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = cause;
    }

    /// The error for a request whose guest channel closed before it finished (`what`: "exec",
    /// "code run", "download", ...). A sandbox that was deleted or failed meanwhile says so
    /// (409: the command was killed, retrying cannot help), with the cause when known (an
    /// instance that died is noticed within [`super::health::DEATH_POLL`], so this waits up
    /// to [`CHANNEL_LOST_WAIT`] for the verdict); otherwise the channel dropped and the 503
    /// carries "connection refused" so the SDKs' warm-up retry applies (contract §1.4).
    pub async fn channel_lost(&self, what: &str) -> ApiError {
        let deadline = tokio::time::Instant::now() + CHANNEL_LOST_WAIT;
        loop {
            let status = self.row.lock().await.status.clone();
            let failure = self.failure();
            match (status.as_str(), failure) {
                ("deleted", _) => {
                    return ApiError::Conflict(format!(
                        "sandbox {} was deleted while the {what} was running; it was killed",
                        self.id
                    ))
                }
                (_, Some(cause)) => {
                    return ApiError::Conflict(format!(
                        "sandbox {} failed while the {what} was running ({cause}); it was killed",
                        self.id
                    ))
                }
                ("failed", None) => {
                    return ApiError::Conflict(format!(
                        "sandbox {} failed while the {what} was running; it was killed",
                        self.id
                    ))
                }
                _ if tokio::time::Instant::now() >= deadline => {
                    return ApiError::Unavailable(format!(
                        "guest channel closed during {what}: connection refused"
                    ))
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// A copy of the row.
    pub async fn snapshot_row(&self) -> SandboxRow {
        self.row.lock().await.clone()
    }
}

/// An in-flight request (see [`Live::activity`]).
pub struct Activity {
    live: std::sync::Arc<Live>,
}

impl Drop for Activity {
    fn drop(&mut self) {
        // The TTL is refreshed before the count drops, so the sweeper never sees an idle gap.
        use std::sync::atomic::Ordering;
        if let Ok(mut row) = self.live.row.try_lock() {
            row.last_active_at = now_ms();
            drop(row);
            self.live.active.fetch_sub(1, Ordering::SeqCst);
        } else {
            let live = self.live.clone();
            tokio::spawn(async move {
                live.touch().await;
                live.active.fetch_sub(1, Ordering::SeqCst);
            });
        }
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
