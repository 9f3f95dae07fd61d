//! Creating a sandbox: a row in `creating`, an engine boot, the guest handshake, `running`.
//! Any failure destroys what was started and leaves the row `failed` (never half-created).

use super::{Host, Live};
use crate::error::ApiError;
use crate::guest::GuestConn;
use crate::state::SandboxState;
use pandastack_engine::{instance_id_from, NetworkPolicy, SandboxSpec};
use pandastack_store::{now_ms, SandboxRow, SandboxVolume};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a fresh guest may take to answer its first handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);
/// First wait before [`Host::fail`] writes the `failed` state again after the store refused it.
const STORE_RETRY_FIRST: Duration = Duration::from_millis(500);
/// The longest wait between two such tries.
const STORE_RETRY_MAX: Duration = Duration::from_secs(5);

/// A validated create request.
#[derive(Debug, Clone)]
pub struct CreateSpec {
    pub workspace_id: String,
    pub template: String,
    pub ttl_seconds: i64,
    pub persistent: bool,
    pub metadata: BTreeMap<String, String>,
    pub envs: BTreeMap<String, String>,
    /// Egress policy of the sandbox's network; `None`: no network (networking off).
    pub network: Option<NetworkPolicy>,
    /// Disk size, MiB (validated; the server default when the request gave none). A restore
    /// or fork takes its source's instead.
    pub disk_mb: u32,
    /// Volumes to attach (resolved and validated; issue 9), each at `/mnt/{name}`.
    pub volumes: Vec<SandboxVolume>,
}

impl CreateSpec {
    /// A new row in `creating` for this request: template and generation, `(cpu, memory_mb)`
    /// and `(rootfs, guest_dir)` from its source (a template build or a snapshot), `(boot_mode,
    /// from_snapshot)`, and the host it is made on.
    pub(super) fn row(
        &self,
        template: &str,
        generation: i64,
        resources: (u32, u32),
        dirs: (String, String),
        (boot_mode, from_snapshot): (&str, Option<String>),
        host: &str,
    ) -> SandboxRow {
        let now = now_ms();
        SandboxRow {
            id: uuid::Uuid::new_v4().hyphenated().to_string(),
            workspace_id: self.workspace_id.clone(),
            template: template.to_string(),
            template_generation: generation,
            status: SandboxState::Creating.as_str().into(),
            cpu: resources.0,
            memory_mb: resources.1,
            metadata: self.metadata.clone(),
            envs: self.envs.clone(),
            ttl_seconds: self.ttl_seconds,
            persistent: self.persistent,
            created_at: now,
            last_active_at: now,
            instance_id: None,
            instance_dir: None,
            rootfs: dirs.0,
            guest_dir: dirs.1,
            boot_ms: None,
            boot_mode: boot_mode.into(),
            from_snapshot,
            hibernate_image: None,
            deleted_at: None,
            network: self
                .network
                .as_ref()
                .and_then(|p| serde_json::to_value(p).ok()),
            guest_ip: None,
            disk_mb: Some(self.disk_mb),
            host: host.to_string(),
            volumes: self.volumes.clone(),
        }
    }
}

impl Host {
    /// The current build of template `name` as workspace `workspace_id` sees it (a built-in
    /// or one of its own; see [`super::catalog`]).
    ///
    /// # Errors
    /// 400 naming the template and the ones that exist when it is unknown or malformed.
    pub fn template(
        &self,
        workspace_id: &str,
        name: &str,
    ) -> Result<pandastack_templates::TemplateInfo, ApiError> {
        if let Some(t) = self.find_template(workspace_id, name)? {
            return Ok(t);
        }
        let names: Vec<String> = self
            .visible_templates(workspace_id)
            .unwrap_or_default()
            .into_iter()
            .map(|t| t.name)
            .collect();
        let shown: String = name.chars().take(64).collect();
        Err(ApiError::BadRequest(format!(
            "template: unknown template '{shown}' (available: {})",
            names.join(", ")
        )))
    }

    /// Makes a new engine instance spec under `<data_dir>/instances/<instance id>`.
    pub fn instance_spec(
        &self,
        rootfs: &str,
        guest_dir: &str,
        cpu: u32,
        memory_mb: u32,
        network: Option<NetworkPolicy>,
        disk_mb: Option<u32>,
    ) -> SandboxSpec {
        let instance_id = instance_id_from(*uuid::Uuid::new_v4().as_bytes());
        SandboxSpec {
            dir: self.cfg.data_dir.join("instances").join(&instance_id),
            instance_id,
            rootfs: PathBuf::from(rootfs),
            guest_dir: PathBuf::from(guest_dir),
            cpu,
            memory_mb,
            hostname: "sandbox".into(),
            network,
            template_build: false,
            disk_mb,
            volumes: Vec::new(),
        }
    }

    /// A new instance's spec for sandbox row `r` (its rootfs, guest dir, resources, network
    /// policy and disk; no volumes): what [`Host::start_instance`] starts, and the restore
    /// target class a copy of `r` lands on.
    pub(super) fn spec_of_row(&self, r: &SandboxRow) -> SandboxSpec {
        self.instance_spec(
            &r.rootfs,
            &r.guest_dir,
            r.cpu,
            r.memory_mb,
            super::network::policy_of(r),
            r.disk_mb,
        )
    }

    /// Creates and boots a sandbox from a template (cold boot).
    ///
    /// # Errors
    /// 400 for an unknown template; 429 at the workspace's sandbox quota; 503 with
    /// `Retry-After` when the host is full; 507 when its disk is low (admission.rs); 500 when
    /// the boot fails (the row is left `failed` and everything started is destroyed).
    pub async fn create(self: &Arc<Self>, spec: CreateSpec) -> Result<Arc<Live>, ApiError> {
        let started = Instant::now();
        let tpl = self.template(&spec.workspace_id, &spec.template)?;
        self.check_disk_reserve("create", 0)?;
        let _admitted = self
            .admit(&spec.workspace_id, tpl.memory_mb, 1, true)
            .await?;
        if let Some(result) = self.create_from_template_image(&spec, &tpl, started).await {
            return result;
        }
        let row = spec.row(
            &tpl.name,
            tpl.generation as i64,
            (tpl.cpu, tpl.memory_mb),
            (
                tpl.rootfs.display().to_string(),
                self.cfg.guest_dir.display().to_string(),
            ),
            ("cold", None),
            &self.cfg.host_name,
        );
        self.hold_volumes(&row.id, &row.volumes).await?;
        if let Err(e) = self.store.put_sandbox(&row).await {
            self.unhold_volumes(&row.id);
            return Err(e.into());
        }
        let live = Arc::new(Live::new(row));
        self.insert(live.clone());
        match self.start_instance(&live, None).await {
            Ok(conn) => {
                live.set_conn(conn).await;
                live.row.lock().await.boot_ms = Some(started.elapsed().as_millis() as i64);
                self.set_state(&live, SandboxState::Running, "create")
                    .await?;
                Ok(live)
            }
            Err(e) => {
                self.fail(&live, "boot failed").await;
                Err(e)
            }
        }
    }

    /// Starts a new instance for `live` from its row (rootfs, guest dir, resources, network,
    /// volumes): a cold boot, or a restore of `image`. The row names the instance before the engine
    /// starts it (so a crash in between leaves an instance the next start can find) and gets
    /// its `guest_ip` once it runs.
    pub(super) async fn start_instance(
        &self,
        live: &Live,
        image: Option<&Path>,
    ) -> Result<GuestConn, ApiError> {
        let spec = {
            let r = live.row.lock().await;
            let mut spec = self.spec_of_row(&r);
            spec.volumes = self.volume_mounts(&r.volumes);
            spec
        };
        {
            let mut r = live.row.lock().await;
            r.instance_id = Some(spec.instance_id.clone());
            r.instance_dir = Some(spec.dir.display().to_string());
            r.guest_ip = None;
            self.store.put_sandbox(&r).await?;
        }
        let inst = match image {
            None => self.engine.boot(&spec).await,
            Some(image) => self.engine.restore(&spec, image).await,
        }
        .map_err(|e| {
            ApiError::internal(
                if image.is_some() {
                    "restore"
                } else {
                    "sandbox boot"
                },
                e,
            )
        })?;
        // A restore may have landed on a container made in advance: record the real one.
        if inst.instance_id != spec.instance_id {
            let mut r = live.row.lock().await;
            r.instance_id = Some(inst.instance_id.clone());
            r.instance_dir = Some(inst.dir.display().to_string());
            self.store.put_sandbox(&r).await?;
        }
        let conn = GuestConn::connect(&inst.guest_socket, HANDSHAKE_TIMEOUT)
            .await
            .map_err(|e| ApiError::internal("guest handshake", e))?;
        if let Some(n) = inst.network {
            let mut r = live.row.lock().await;
            r.guest_ip = Some(n.guest_ip.to_string());
            self.store.put_sandbox(&r).await?;
        }
        Ok(conn)
    }

    /// Marks a sandbox `failed` and releases its instance (the row stays, so the user sees why).
    /// The state changes first, so a request whose channel breaks as the instance goes already
    /// reads `failed` ([`Live::channel_lost`]).
    pub async fn fail(&self, live: &Arc<Live>, cause: &str) {
        live.set_failure(Some(cause.to_string()));
        live.drop_conn().await;
        // A failed sandbox gives up its volumes (issue 9).
        self.release_volumes(live).await;
        let (id, dir) = {
            let mut r = live.row.lock().await;
            r.guest_ip = None;
            (r.instance_id.take(), r.instance_dir.take())
        };
        // The store says `failed` (with its event) before the instance is destroyed, so it
        // never says `running` for a destroyed instance (issue 23 finding 11): a store that is
        // locked or unreachable is retried until it answers.
        let mut wait = STORE_RETRY_FIRST;
        loop {
            match self.set_state(live, SandboxState::Failed, cause).await {
                Ok(()) => break,
                Err(ApiError::Internal(e)) => {
                    tracing::warn!(sandbox_id = %live.id, error = %e, retry_in_ms = wait.as_millis() as u64, "marking sandbox failed: store write failed, retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(STORE_RETRY_MAX);
                }
                // Not a store failure (e.g. the sandbox is already failed or deleted).
                Err(e) => {
                    tracing::warn!(sandbox_id = %live.id, error = %e, "marking sandbox failed");
                    break;
                }
            }
        }
        if let (Some(id), Some(dir)) = (id, dir) {
            let _ = self.engine.destroy(&id, std::path::Path::new(&dir)).await;
        }
    }

    /// Fencing (seed 003): this host lost the lease of `live` (it expired while the host could
    /// not renew it, e.g. a partition or a stopped process) and so may no longer run it; another
    /// host may already have marked it failed. Collects the expired lease if no host has yet,
    /// takes the store's row as the truth, and destroys the local instance, so the sandbox never
    /// runs on two hosts.
    pub async fn fence(&self, live: &Arc<Live>) {
        if let Err(e) = self.store.expire_leases(100).await {
            tracing::warn!(error = %e, "collecting expired leases");
        }
        let stored = match self.store.sandbox(&live.id).await {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(sandbox_id = %live.id, error = %e, "reading a fenced sandbox");
                return;
            }
        };
        let lost = stored.host != self.cfg.host_name
            || !matches!(
                SandboxState::parse(&stored.status),
                SandboxState::Running | SandboxState::Paused
            );
        if !lost {
            return;
        }
        tracing::warn!(sandbox_id = %live.id, status = %stored.status, "lease lost: destroying the local instance");
        live.drop_conn().await;
        let (id, dir) = {
            let mut r = live.row.lock().await;
            let old = std::mem::replace(&mut *r, stored);
            (old.instance_id, old.instance_dir)
        };
        if let (Some(id), Some(dir)) = (id, dir) {
            self.destroy_instance_later(id, std::path::PathBuf::from(dir));
        }
        let deleted_or_moved = {
            let r = live.row.lock().await;
            r.host != self.cfg.host_name || r.status == SandboxState::Deleted.as_str()
        };
        if deleted_or_moved {
            self.remove(&live.id);
        }
    }
}
