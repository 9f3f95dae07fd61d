//! The host agent: owns the sandboxes running on this host. It boots, adopts and destroys
//! engine instances, keeps each sandbox's guest connection, records every state change (store
//! row + event), and runs the background sweepers (TTL).

mod admission;
pub mod catalog;
mod create;
mod fork;
mod guest_dir;
mod health;
mod hibernate;
pub mod host_addresses;
pub mod images;
mod live;
pub mod logs;
pub mod memory_watch;
pub mod network;
mod operations;
mod pause;
mod pool;
pub mod pressure;
mod ready;
mod recover;
pub mod shared_builds;
mod snapshot;
mod sweeper;
mod template_image;
pub mod volume_moves;
pub mod volumes;

pub use admission::{host_memory_mb, Admitted, HostLoad, Limits, MemoryCommitment, RETRY_AFTER_S};
pub use create::CreateSpec;
pub use fork::{ForkTransfer, Promotion, MAX_FORK_COUNT};
pub use guest_dir::install_guest_dir;
pub use live::{Activity, Live};
pub use operations::partial_dir as partial_path;
pub use template_image::TEMPLATE_KERNEL_PREFIX;
pub use volumes::VolumeLimits;

use crate::error::ApiError;
use crate::state::{transition, SandboxState};
use pandastack_engine::Engine;
use pandastack_store::{now_ms, EventRow, Store};
use pandastack_templates::TemplateStore;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;
use tracing::info;

/// Settings of the host agent.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Root of everything on disk (`store.db`, `templates/`, `instances/`, `snapshots/`, ...).
    pub data_dir: PathBuf,
    /// Content-addressed directory holding the guest daemon and kernel driver.
    pub guest_dir: PathBuf,
    /// TTL when a create gives none, seconds (seed 003: 3600).
    pub default_ttl_seconds: i64,
    /// Idle time after which a persistent sandbox is hibernated, seconds (seed 003: 300).
    pub idle_hibernate_seconds: i64,
    /// How long a running sandbox's guest may stay silent to health probes, seconds, counted
    /// only while the host is not starved, before it is failed (issue 23 finding 11; see
    /// `health.rs`).
    pub health_fail_after_seconds: u64,
    /// Pre-restored sandboxes kept per template at least (0 disables the warm pool).
    pub pool_size: usize,
    /// The most a template's pool grows to under bursts of creates.
    pub pool_max: usize,
    /// Containers made in advance per template for restores to land on, at least (0 with
    /// `restore_targets_max` 0: none).
    pub restore_targets: usize,
    /// The most a template's stock of restore targets grows to under bursts of restores.
    pub restore_targets_max: usize,
    /// A RAM-backed directory of this server for transient images (fork captures), e.g.
    /// `/dev/shm/pandastack-<tag>`; `None`: they go to the data dir.
    pub scratch_dir: Option<PathBuf>,
    /// Serve `GET /metrics` without an API key.
    pub public_metrics: bool,
    /// Sandbox networking (issue 7); `None`: sandboxes get loopback only.
    pub network: Option<NetworkDefaults>,
    /// Capacity of this host and workspace quotas (issue 8).
    pub limits: Limits,
    /// Limits and quotas of user template builds.
    pub builds: crate::builds::BuildsConfig,
    /// Disk size of a sandbox whose create gives none, MiB (`--default-disk-mb`).
    pub default_disk_mb: u32,
    /// Largest disk a create may ask for, MiB (`--max-disk-mb`).
    pub max_disk_mb: u32,
    /// This host's name in the store (`--host-name`, issue 12): the rows of the sandboxes,
    /// snapshots and operations it owns carry it.
    pub host_name: String,
    /// Whether the store is shared by several hosts (PostgreSQL, issue 12). Then running
    /// sandboxes hold leases (seed 003 "Lease semantics") and events reach this host's
    /// subscribers through the relay of `crate::cluster`. Off for one host on SQLite, where no
    /// other host could take a sandbox over.
    pub cluster: bool,
    /// Volume quotas and the disk reserve volumes keep (issue 9).
    pub volume_limits: VolumeLimits,
    /// `--object-store` (issue 12 point 6): where snapshot and hibernation images are
    /// uploaded for other hosts; `None`: images stay on the host that took them.
    pub objects: Option<Arc<crate::objects::Objects>>,
}

/// How long a lease lasts after its last renewal, ms (seed 003: expiring 30 s after the last
/// renewal; hosts renew every 10 s).
pub const LEASE_TTL_MS: i64 = 30_000;

/// Server-wide defaults of sandbox networking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkDefaults {
    /// Whether a sandbox reaches public addresses when its create does not say
    /// (`--sandbox-egress allow|deny`).
    pub internet: bool,
    /// This server's sandbox network (address, prefix length), which no `allow_out` may name
    /// (issue 23 finding 1); `None` when the engine reports none.
    pub sandbox_net: Option<(std::net::Ipv4Addr, u8)>,
}

impl HostConfig {
    /// The policy of a sandbox whose create says nothing about its network.
    pub fn default_network_policy(&self) -> Option<pandastack_engine::NetworkPolicy> {
        self.network.map(|d| pandastack_engine::NetworkPolicy {
            internet: d.internet,
            allow_out: Vec::new(),
            deny_out: Vec::new(),
        })
    }
}

/// The host agent. Shared as `Arc<Host>`.
pub struct Host {
    pub store: Arc<Store>,
    pub engine: Arc<dyn Engine>,
    pub templates: Arc<TemplateStore>,
    pub cfg: HostConfig,
    live: Mutex<HashMap<String, Arc<Live>>>,
    pool: pool::Pool,
    /// Template images being built (their directories).
    building: Mutex<std::collections::HashSet<String>>,
    /// Every lifecycle event, as it is recorded (for `/v1/events` subscribers).
    pub events: broadcast::Sender<EventRow>,
    /// Teardowns running in the background (a graceful stop waits for them).
    teardowns: tokio_util::task::TaskTracker,
    /// Starts admitted and not yet finished (admission.rs).
    reserved: Arc<admission::Reserved>,
    /// The template build queue.
    pub builds: crate::builds::Builds,
    /// Which sandboxes hold which volumes (issue 9).
    volume_holds: volumes::Holds,
    /// Rootfs manifest digests of template builds, by rootfs path (images.rs).
    manifests: Mutex<HashMap<PathBuf, String>>,
    /// Template builds published to and fetched from the object store (shared_builds.rs).
    shared_builds: shared_builds::SharedBuilds,
    /// Whether the host is starved right now (pressure.rs), for the health monitor.
    pub pressure: Arc<pressure::Pressure>,
}

impl Host {
    /// Creates the host agent. Call [`Host::recover`] before serving.
    pub fn new(
        store: Arc<Store>,
        engine: Arc<dyn Engine>,
        templates: Arc<TemplateStore>,
        cfg: HostConfig,
    ) -> Arc<Self> {
        let (events, _) = broadcast::channel(1024);
        let builds = crate::builds::Builds::new(cfg.builds.clone());
        Arc::new(Host {
            store,
            engine,
            templates,
            cfg,
            live: Mutex::default(),
            pool: pool::Pool::default(),
            building: Mutex::default(),
            events,
            teardowns: tokio_util::task::TaskTracker::new(),
            reserved: Arc::default(),
            builds,
            volume_holds: volumes::Holds::default(),
            manifests: Mutex::default(),
            shared_builds: shared_builds::SharedBuilds::default(),
            pressure: Arc::default(),
        })
    }

    /// Destroys an engine instance in the background (runsc takes ~2 s to tear a sandbox
    /// down, notes pitfall 6); a graceful stop waits for these.
    pub fn destroy_instance_later(&self, instance_id: String, dir: PathBuf) {
        let engine = self.engine.clone();
        self.teardowns.spawn(async move {
            if let Err(e) = engine.destroy(&instance_id, &dir).await {
                tracing::warn!(instance_id = %instance_id, error = %e, "destroying instance");
            }
        });
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Live>>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sandbox `id` of workspace `workspace_id`.
    ///
    /// # Errors
    /// 404 when it does not exist, is deleted, or belongs to another workspace (the same
    /// answer in all three cases, so ids of other workspaces cannot be probed).
    pub fn get(&self, workspace_id: &str, id: &str) -> Result<Arc<Live>, ApiError> {
        match self.map().get(id) {
            Some(l) if l.workspace_id == workspace_id => Ok(l.clone()),
            _ => Err(ApiError::NotFound(format!("sandbox {id} not found"))),
        }
    }

    /// The sandbox `id` of any workspace (for preview requests, authorized by a token bound to
    /// the sandbox id).
    pub fn get_any(&self, id: &str) -> Option<Arc<Live>> {
        self.map().get(id).cloned()
    }

    /// Prunes template images of builds that are no longer current, and schedules the images
    /// and warm pools of the built-ins (at start; user templates get theirs at build time, and
    /// their pool on first use).
    pub fn prepare_template_images(self: &Arc<Self>) {
        let all = self.all_current_templates();
        let keep: Vec<PathBuf> = all.iter().map(|t| self.template_image_dir_of(t)).collect();
        template_image::prune_template_images(&self.cfg.data_dir, &keep);
        for t in all.into_iter().filter(|t| t.workspace.is_none()) {
            if self.ready_template_image(&t).is_some() {
                self.keep_restore_targets(&t);
                self.refill_pool(t);
            } else {
                self.ensure_template_image(t);
            }
        }
    }

    /// All live sandboxes (any workspace), for sweepers and metrics.
    pub fn all(&self) -> Vec<Arc<Live>> {
        self.map().values().cloned().collect()
    }

    fn insert(&self, live: Arc<Live>) {
        self.map().insert(live.id.clone(), live);
    }

    fn remove(&self, id: &str) {
        self.map().remove(id);
    }

    /// Moves `live` to state `to`, persisting the row and recording an event.
    ///
    /// # Errors
    /// 409 when the transition is not allowed; store errors.
    pub async fn set_state(
        &self,
        live: &Live,
        to: SandboxState,
        cause: &str,
    ) -> Result<(), ApiError> {
        let mut row = live.row.lock().await;
        let from = SandboxState::parse(&row.status);
        transition(from, to)?;
        // The lease is taken before the state says running (the lease renewer reads states
        // under this lock: a running sandbox always has one), and dropped after it does not.
        let holds = |s: SandboxState| matches!(s, SandboxState::Running | SandboxState::Paused);
        if self.cfg.cluster && holds(to) && !holds(from) {
            self.store
                .acquire_lease(&row.id, &self.cfg.host_name, LEASE_TTL_MS)
                .await?;
        }
        // The row changes only once the store has it and its event (one transaction, issue
        // 23 finding 11), so a failed write leaves both as they were and may be retried.
        let mut next = row.clone();
        next.status = to.as_str().to_string();
        if to == SandboxState::Deleted {
            next.deleted_at = Some(now_ms());
        }
        let ev = self
            .store
            .put_sandbox_with_event(&next, from.as_str(), to.as_str(), cause, now_ms())
            .await?;
        *row = next;
        if self.cfg.cluster && holds(from) && !holds(to) {
            self.store
                .release_lease(&row.id, &self.cfg.host_name)
                .await?;
        }
        info!(sandbox_id = %row.id, from = %from, to = %to, cause, "sandbox state");
        // With several hosts the event relay (crate::cluster) broadcasts every host's events,
        // this one's included, in the store's order.
        if !self.cfg.cluster {
            let _ = self.events.send(ev);
        }
        Ok(())
    }

    /// Kills a sandbox and releases everything it held (instance, hibernation image, row
    /// state `deleted`). Idempotent for a sandbox already being deleted.
    ///
    /// # Errors
    /// Store errors; engine errors are logged (the row is deleted regardless, the instance
    /// directory is retried by the orphan sweep at the next start).
    pub async fn destroy(&self, live: &Arc<Live>, cause: &str) -> Result<(), ApiError> {
        // Each wait is timed: a kill must never wait on a client's stream (issue 8 point 5),
        // and one that does names the step it waited on.
        let _gate = timed(&live.id, "lifecycle gate", live.gate.write()).await;
        let (instance, dir, image) = {
            let row = timed(&live.id, "row lock", live.row.lock()).await;
            if row.status == SandboxState::Deleted.as_str() {
                return Ok(());
            }
            (
                row.instance_id.clone(),
                row.instance_dir.clone(),
                row.hibernate_image.clone(),
            )
        };
        timed(&live.id, "guest connection lock", live.drop_conn()).await;
        timed(
            &live.id,
            "state change",
            self.set_state(live, SandboxState::Deleted, cause),
        )
        .await?;
        // Its volumes are free when this returns: the instance's processes are stopped and
        // the images closed first (the rest of the teardown is slow, and in the background).
        self.release_volumes(live).await;
        // A crash before the teardown finishes leaves an orphan the next start destroys.
        if let (Some(id), Some(dir)) = (instance, dir) {
            self.destroy_instance_later(id, PathBuf::from(dir));
        }
        if let Some(image) = image {
            self.teardowns
                .spawn_blocking(move || std::fs::remove_dir_all(image));
        }
        // Its uploaded hibernation image, if any (also of a sandbox of a host that is down).
        self.drop_image(&images::hibernate_image_id(&live.id)).await;
        self.remove(&live.id);
        drop(_gate);
        for child in self.unpromoted_children(&live.id).await {
            if let Err(e) = Box::pin(self.destroy(&child, "parent deleted")).await {
                tracing::warn!(sandbox_id = %child.id, error = %e, "destroying fork child");
            }
        }
        Ok(())
    }
}

/// Awaits `step` of sandbox `id`'s destroy and logs a warning naming it when it took 500 ms
/// or more (the kill path must not wait on clients, issue 8 point 5).
async fn timed<F: std::future::Future>(id: &str, step: &str, fut: F) -> F::Output {
    let since = std::time::Instant::now();
    let out = fut.await;
    let waited_ms = since.elapsed().as_millis();
    if waited_ms >= 500 {
        tracing::warn!(sandbox_id = %id, step, waited_ms, "destroy waited");
    }
    out
}
