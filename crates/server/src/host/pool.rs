//! The warm pool: per template, sandboxes restored from the template image ahead of time, so a
//! create only has to claim one (a store write and an event: a few ms) instead of restoring
//! (~100-250 ms here). Pooled instances belong to no sandbox row, so after a crash the start-up
//! orphan sweep destroys them.
//!
//! The pool does not drain under bursts (issue 11): a claim starts refills at once, up to
//! [`PARALLEL_REFILLS`] restores at a time (landing on containers made in advance), and its size
//! follows demand ([`Bursts`]): the largest number of claims seen within any 5 s of the last
//! 5 minutes, between `--pool-size` and `--pool-max`. When demand goes, the sweeper trims the
//! pool back to `--pool-size`.
//!
//! The built-ins are pooled from server start; a user template from its first create. Pools are
//! keyed by [`template_key`], and an instance is only added while its template image exists,
//! so [`Host::drain_pool`] after removing an image leaves none behind.

use super::catalog::template_key;
use super::{CreateSpec, Host, Live};
use crate::error::ApiError;
use crate::guest::GuestConn;
use crate::state::SandboxState;
use pandastack_engine::SandboxSpec;

use pandastack_engine::demand::Bursts;
use pandastack_templates::TemplateInfo;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// Restores a template's pool refills run at once (the host has 2 cores here; more only
/// slows each one down).
pub const PARALLEL_REFILLS: usize = 2;

/// One pre-restored instance.
pub struct Pooled {
    spec: SandboxSpec,
    conn: GuestConn,
    network: Option<pandastack_engine::InstanceNetwork>,
    /// Template build and guest dir it was restored from.
    image: String,
}

/// Per-template bookkeeping of the pool.
#[derive(Default)]
struct TemplatePool {
    ready: Vec<Pooled>,
    /// Refill tasks running.
    workers: usize,
    /// Restores in flight.
    in_flight: usize,
    /// Recent claims (hits and misses).
    claims: Bursts,
}

/// Pooled instances by template key.
#[derive(Default)]
pub struct Pool {
    templates: Mutex<HashMap<String, TemplatePool>>,
    /// Set at shutdown: no more refills.
    closed: std::sync::atomic::AtomicBool,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, TemplatePool>> {
        self.templates.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Host {
    /// Pooled instances and the memory they commit, MiB (admission.rs counts them).
    pub(super) fn pool_commitment(&self) -> (usize, u64) {
        let pools = self.pool.lock();
        pools
            .values()
            .flat_map(|t| t.ready.iter())
            .fold((0, 0), |(n, mb), p| {
                (n + 1, mb + super::admission::committed_mb(p.spec.memory_mb))
            })
    }

    /// Claims a pooled instance of `tpl` for a new sandbox, if one is ready. The create's
    /// volumes are taken first (a 409 costs no instance) and attached to the claimed instance
    /// while it runs (issue 9).
    pub(super) async fn create_from_pool(
        self: &Arc<Self>,
        spec: &CreateSpec,
        tpl: &TemplateInfo,
        started: Instant,
    ) -> Option<Result<Arc<Live>, ApiError>> {
        // Pooled instances have the template's disk: a create asking for another size restores.
        if spec.disk_mb != self.disk_of(tpl) {
            return None;
        }
        let image = self.ready_template_image(tpl)?.display().to_string();
        let key = template_key(tpl);
        let mut row = spec.row(
            &tpl.name,
            tpl.generation as i64,
            (tpl.cpu, tpl.memory_mb),
            (
                tpl.rootfs.display().to_string(),
                self.cfg.guest_dir.display().to_string(),
            ),
            ("snapshot", None),
            &self.cfg.host_name,
        );
        if let Err(e) = self.hold_volumes(&row.id, &row.volumes).await {
            return Some(Err(e));
        }
        self.pool
            .lock()
            .entry(key.clone())
            .or_default()
            .claims
            .record(Instant::now());
        let pooled = loop {
            let candidate = self.pool.lock().get_mut(&key).and_then(|t| t.ready.pop());
            let Some(p) = candidate else { break None };
            if p.image == image && p.conn.is_alive() {
                break Some(p);
            }
            // Stale (template re-baked, guest upgraded) or dead: discard it.
            let _ = self.engine.destroy(&p.spec.instance_id, &p.spec.dir).await;
        };
        self.refill_pool(tpl.clone());
        crate::metrics::metrics()
            .pool_claims
            .with_label_values(&[
                // User template names would make the label set unbounded.
                if tpl.workspace.is_some() {
                    "custom"
                } else {
                    &tpl.name
                },
                if pooled.is_some() { "hit" } else { "miss" },
            ])
            .inc();
        let Some(p) = pooled else {
            self.unhold_volumes(&row.id);
            return None;
        };
        row.instance_id = Some(p.spec.instance_id.clone());
        row.instance_dir = Some(p.spec.dir.display().to_string());
        row.guest_ip = p.network.map(|n| n.guest_ip.to_string());
        if let Err(e) = self.ready_claimed(spec, &row, &p).await {
            let _ = self.engine.destroy(&p.spec.instance_id, &p.spec.dir).await;
            self.unhold_volumes(&row.id);
            return Some(Err(e));
        }
        row.boot_ms = Some(started.elapsed().as_millis() as i64);
        if let Err(e) = self.store.put_sandbox(&row).await {
            let _ = self.engine.destroy(&p.spec.instance_id, &p.spec.dir).await;
            self.unhold_volumes(&row.id);
            return Some(Err(e.into()));
        }
        let live = Arc::new(Live::new(row));
        live.set_conn(p.conn).await;
        self.insert(live.clone());
        Some(
            self.set_state(&live, SandboxState::Running, "create")
                .await
                .map(|()| live),
        )
    }

    /// Makes a claimed pooled instance the create's: its volumes attached and its egress
    /// policy (pooled instances run under the server's default one) set.
    async fn ready_claimed(
        &self,
        spec: &CreateSpec,
        row: &pandastack_store::SandboxRow,
        p: &Pooled,
    ) -> Result<(), ApiError> {
        if !row.volumes.is_empty() {
            self.engine
                .attach_volumes(
                    &p.spec.instance_id,
                    &p.spec.dir,
                    &self.volume_mounts(&row.volumes),
                )
                .await
                .map_err(|e| ApiError::internal("volume attach", e))?;
        }
        if let (Some(want), true) = (&spec.network, spec.network != p.spec.network) {
            self.engine
                .set_network_policy(&p.spec.instance_id, want)
                .await
                .map_err(|e| ApiError::internal("network policy", e))?;
        }
        Ok(())
    }

    /// How many instances `tpl`'s pool should hold now (see the module docs).
    fn pool_goal(&self, t: &mut TemplatePool) -> usize {
        if self.cfg.pool_size == 0 {
            return 0;
        }
        t.claims
            .goal(Instant::now(), self.cfg.pool_size, self.cfg.pool_max)
    }

    /// Tops up `tpl`'s pool to its goal in the background, with up to [`PARALLEL_REFILLS`]
    /// restores at once.
    pub fn refill_pool(self: &Arc<Self>, tpl: TemplateInfo) {
        if self.pool.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let spawn = {
            let mut pools = self.pool.lock();
            let t = pools.entry(template_key(&tpl)).or_default();
            let goal = self.pool_goal(t);
            let short = goal.saturating_sub(t.ready.len() + t.in_flight);
            let spawn = short.min(PARALLEL_REFILLS.saturating_sub(t.workers));
            t.workers += spawn;
            spawn
        };
        for _ in 0..spawn {
            let host = self.clone();
            let tpl = tpl.clone();
            tokio::spawn(async move { host.pool_worker(tpl).await });
        }
    }

    /// One refill worker: restores until the pool has its goal (counting restores in flight).
    async fn pool_worker(self: Arc<Self>, tpl: TemplateInfo) {
        let key = template_key(&tpl);
        loop {
            let go = {
                let mut pools = self.pool.lock();
                let t = pools.entry(key.clone()).or_default();
                let goal = self.pool_goal(t);
                let go = !self.pool.closed.load(std::sync::atomic::Ordering::SeqCst)
                    && t.ready.len() + t.in_flight < goal;
                if go {
                    t.in_flight += 1;
                } else {
                    t.workers -= 1;
                }
                go
            };
            if !go {
                return;
            }
            let restored = self.restore_for_pool(&tpl).await;
            let mut pools = self.pool.lock();
            let t = pools.entry(key.clone()).or_default();
            t.in_flight -= 1;
            match restored {
                // Added under the pool lock only while the image still exists: a template
                // deleted meanwhile removed it first, then drained the pool.
                Some(p) if std::path::Path::new(&p.image).join("ready").exists() => t.ready.push(p),
                Some(p) => {
                    t.workers -= 1;
                    drop(pools);
                    self.destroy_instance_later(p.spec.instance_id, p.spec.dir);
                    return;
                }
                None => {
                    t.workers -= 1;
                    return;
                }
            }
        }
    }

    /// Restores one instance of `tpl`'s template image for the pool.
    async fn restore_for_pool(&self, tpl: &TemplateInfo) -> Option<Pooled> {
        let image = self.ready_template_image(tpl)?;
        // The pool never takes the host's last room from creates (admission.rs).
        if !self.has_room_for(tpl.memory_mb).await {
            debug!(template = %tpl.name, "host at capacity: pool not refilled");
            return None;
        }
        let mut spec = self.instance_spec(
            &tpl.rootfs.display().to_string(),
            &self.cfg.guest_dir.display().to_string(),
            tpl.cpu,
            tpl.memory_mb,
            self.cfg.default_network_policy(),
            Some(self.disk_of(tpl)),
        );
        let inst = match self.engine.restore(&spec, &image).await {
            Ok(i) => i,
            Err(e) => {
                warn!(template = %tpl.name, error = %e, "pool restore failed");
                return None;
            }
        };
        // The restore may have landed on a container made in advance.
        spec.instance_id = inst.instance_id.clone();
        spec.dir = inst.dir.clone();
        match GuestConn::connect(&inst.guest_socket, Duration::from_secs(20)).await {
            Ok(conn) => {
                debug!(template = %tpl.name, instance_id = %spec.instance_id, "pooled instance ready");
                Some(Pooled {
                    spec,
                    conn,
                    network: inst.network,
                    image: image.display().to_string(),
                })
            }
            Err(e) => {
                warn!(template = %tpl.name, error = %e, "pooled instance did not answer");
                let _ = self.engine.destroy(&spec.instance_id, &spec.dir).await;
                None
            }
        }
    }

    /// Destroys (in the background) the pooled instances of template `key` restored from one
    /// of `images`.
    pub(crate) async fn drain_pool(&self, key: &str, images: &[std::path::PathBuf]) {
        let images: Vec<String> = images.iter().map(|p| p.display().to_string()).collect();
        let drained: Vec<Pooled> = {
            let mut pools = self.pool.lock();
            let Some(t) = pools.get_mut(key) else {
                return;
            };
            let (gone, kept) = std::mem::take(&mut t.ready)
                .into_iter()
                .partition(|p| images.contains(&p.image));
            t.ready = kept;
            gone
        };
        for p in drained {
            self.destroy_instance_later(p.spec.instance_id, p.spec.dir);
        }
    }

    /// Destroys pooled instances above each template's goal (a burst has passed). Called by the
    /// sweeper now and then.
    pub(super) async fn trim_pools(&self) {
        let surplus: Vec<Pooled> = {
            let mut pools = self.pool.lock();
            let mut out = Vec::new();
            for t in pools.values_mut() {
                let goal = self.pool_goal(t);
                while t.ready.len() > goal {
                    if let Some(p) = t.ready.pop() {
                        out.push(p);
                    }
                }
            }
            out
        };
        for p in surplus {
            self.destroy_instance_later(p.spec.instance_id, p.spec.dir);
        }
    }

    /// The warm pool's ready instances, for the memory watch: (instance id, memory MiB, guest
    /// connection).
    pub(super) fn pooled_guests(&self) -> Vec<(String, u32, GuestConn)> {
        self.pool
            .lock()
            .values()
            .flat_map(|t| {
                t.ready
                    .iter()
                    .map(|p| (p.spec.instance_id.clone(), p.spec.memory_mb, p.conn.clone()))
            })
            .collect()
    }

    /// Instances in each template's pool now, and restores in flight (for `/metrics`).
    pub fn pool_sizes(&self) -> Vec<(String, usize, usize)> {
        self.pool
            .lock()
            .iter()
            .map(|(name, t)| (name.clone(), t.ready.len(), t.in_flight))
            .collect()
    }
}

impl Host {
    /// Graceful stop: destroys the warm pool (waiting for refills in progress) and lets the
    /// engine drop what it made ahead of time. Sandboxes keep running; the next start
    /// re-adopts them.
    pub async fn shutdown(&self) {
        use std::sync::atomic::Ordering;
        self.pool.closed.store(true, Ordering::SeqCst);
        while self.pool.lock().values().any(|t| t.workers > 0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let pooled: Vec<Pooled> = self
            .pool
            .lock()
            .values_mut()
            .flat_map(|t| std::mem::take(&mut t.ready))
            .collect();
        futures::future::join_all(
            pooled
                .iter()
                .map(|p| self.engine.destroy(&p.spec.instance_id, &p.spec.dir)),
        )
        .await;
        self.teardowns.close();
        if tokio::time::timeout(Duration::from_secs(60), self.teardowns.wait())
            .await
            .is_err()
        {
            warn!("stopping: some instance teardowns did not finish within 60 s");
        }
        let mut remain = false;
        for live in self.all() {
            remain |= live.row.lock().await.instance_id.is_some();
        }
        self.engine.shutdown(remain).await;
    }
}
