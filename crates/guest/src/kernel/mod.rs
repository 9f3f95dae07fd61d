//! Kernels: long-lived Python interpreters (`kernel.py` beside this binary) that keep state
//! between runs.
//!
//! Each kernel is a `python3 -u kernel.py` process in its own process group, spoken to with
//! JSON lines over its stdin/stdout ([`wire`]). [`start`] launches it and waits for its ready
//! line; a per-kernel worker thread ([`worker`]) takes runs from a FIFO queue one at a time and
//! enforces their timeouts (SIGINT, then SIGKILL if the kernel does not answer).

mod process;
mod run;
mod start;
mod stop;
pub mod wire;
mod worker;

pub use run::run;
pub use start::start;
pub use stop::stop;

use pandastack_guest_protocol::{KernelInfo, RequestId};
use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// One run waiting in a kernel's queue.
pub struct Job {
    pub id: RequestId,
    pub code: String,
    pub timeout_ms: Option<u64>,
}

/// Liveness and use of a kernel; shared with its reaper callback.
#[derive(Debug, Default)]
pub struct Status {
    /// Why the kernel is gone (died, killed, stopped); None while it lives.
    pub dead: Option<String>,
    /// Unix ms of the last run's end, or of the start.
    pub last_used_ms: u64,
}

/// A started kernel.
pub struct Kernel {
    pub kernel_id: String,
    pub language: String,
    pub pid: u32,
    /// When its process was started (kills of an older process of the same pid do not count).
    pub started: std::time::Instant,
    jobs: Mutex<Option<Sender<Job>>>,
    status: Arc<Mutex<Status>>,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
}

impl Kernel {
    /// Why the kernel is gone, or None while it lives.
    pub fn dead(&self) -> Option<String> {
        lock(&self.status).dead.clone()
    }

    /// Records that the kernel is gone (the first reason wins) and returns the reason.
    pub fn mark_dead(&self, reason: String) -> String {
        lock(&self.status).dead.get_or_insert(reason).clone()
    }

    /// Marks the kernel used now.
    pub fn touch(&self) {
        lock(&self.status).last_used_ms = now_ms();
    }

    /// The last line the kernel wrote to stderr, for error messages.
    pub fn last_stderr_line(&self) -> String {
        process::last_line(&lock(&self.stderr_tail))
    }
}

/// The kernels of this sandbox by id. Dead kernels stay until stopped, so their runs answer
/// `Error{Kernel}` rather than `NotFound`.
#[derive(Default)]
pub struct Kernels {
    table: Mutex<HashMap<String, Arc<Kernel>>>,
}

impl Kernels {
    /// The kernel named `kernel_id`, dead or alive.
    pub fn get(&self, kernel_id: &str) -> Option<Arc<Kernel>> {
        lock(&self.table).get(kernel_id).cloned()
    }

    /// Adds `kernel` unless a live kernel has its id. Returns false when one does.
    pub fn insert_if_free(&self, kernel: Arc<Kernel>) -> bool {
        let mut table = lock(&self.table);
        if table
            .get(&kernel.kernel_id)
            .is_some_and(|k| k.dead().is_none())
        {
            return false;
        }
        table.insert(kernel.kernel_id.clone(), kernel);
        true
    }

    /// Removes and returns the kernel named `kernel_id`.
    pub fn remove(&self, kernel_id: &str) -> Option<Arc<Kernel>> {
        lock(&self.table).remove(kernel_id)
    }

    /// The live kernels, sorted by id.
    pub fn list(&self) -> Vec<KernelInfo> {
        let mut live: Vec<KernelInfo> = lock(&self.table)
            .values()
            .filter_map(|k| {
                let status = lock(&k.status);
                status.dead.is_none().then(|| KernelInfo {
                    kernel_id: k.kernel_id.clone(),
                    language: k.language.clone(),
                    pid: k.pid,
                    last_used_ms: status.last_used_ms,
                })
            })
            .collect();
        live.sort_by(|a, b| a.kernel_id.cmp(&b.kernel_id));
        live
    }
}

/// Locks `m`, surviving a poisoned lock.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Unix time, ms.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
