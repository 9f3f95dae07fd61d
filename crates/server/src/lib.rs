//! The PandaStack server: the REST API (`api`), the host agent that drives sandboxes on this
//! host (`host`), the guest protocol client (`guest`) and the store.
//!
//! # Life of a request
//! `POST /v1/sandboxes/{id}/exec` -> [`auth::Caller`] resolves the bearer key to a workspace ->
//! the handler asks the host agent for the sandbox (404 across workspaces) -> `Live::ready`
//! waits out any lifecycle operation, checks the state is `running` and returns the guest
//! connection -> an `Exec` frame goes through the shim socket to the guest daemon inside
//! gVisor -> output frames come back and are collected (or streamed as SSE) -> `ExecResult`.

pub mod api;
pub mod auth;
pub mod builds;
pub mod cluster;
pub mod databases;
pub mod datadir_lock;
pub mod error;
pub mod extract;
pub mod guest;
pub mod host;
pub mod metrics;
pub mod net_settings;
pub mod objects;
pub mod previews;
pub mod ratelimit;
pub mod relay;
pub mod serve;
pub mod state;

use axum::Router;
use host::{Host, HostConfig, NetworkDefaults};
pub use net_settings::NetworkSettings;
use pandastack_engine::Engine;
use pandastack_store::Store;
use pandastack_templates::TemplateStore;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tracing::info;

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState {
    pub host: Arc<Host>,
    /// The databases (issue 10).
    pub databases: Arc<databases::Databases>,
    /// The MCP endpoint served at `/mcp` (`api::mcp`).
    pub mcp: api::mcp::Endpoint,
    /// How port previews are served and authenticated.
    pub previews: Arc<previews::Previews>,
    /// Requests per second per workspace (issue 8).
    pub rate_limit: Arc<ratelimit::WorkspaceRateLimit>,
    /// This host in the cluster (issue 12).
    pub cluster: Arc<cluster::Cluster>,
}

/// The whole HTTP application; tests call it directly.
pub fn app(state: AppState) -> Router {
    let (v1, _) = utoipa_axum::router::OpenApiRouter::new()
        .nest("/v1", api::openapi::v1())
        .split_for_parts();
    v1.nest_service("/mcp", api::mcp::service(state.clone()))
        .route("/health", axum::routing::get(|| async { "ok" }))
        .route(
            "/metrics",
            axum::routing::get(api::metrics::prometheus_text),
        )
        .fallback(|| async { error::ApiError::NotFound("no such endpoint".into()) })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            cluster::forward::route,
        ))
        .layer(axum::middleware::from_fn(api::metrics::track))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            api::proxy::preview_hosts,
        ))
        .layer(axum::middleware::from_fn(to_completion))
        .with_state(state)
}

/// Runs every request that changes something (any method but GET, HEAD and OPTIONS) as its own
/// task until its handler answers, so a client that disconnects while the request is still being
/// authenticated or parsed cannot cancel it half-way (issue 8: a DELETE given up by its client
/// must still delete). The response body (a stream) is still dropped with the connection.
async fn to_completion(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::Method;
    use axum::response::IntoResponse;
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    match tokio::spawn(next.run(req)).await {
        Ok(resp) => resp,
        Err(e) => error::ApiError::internal("request task", e).into_response(),
    }
}

/// Settings of `pandastack server`.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// `--store`: a PostgreSQL URL shared by the hosts of a cluster; `None`: SQLite in the data
    /// dir (issue 12).
    pub store: Option<String>,
    /// `--host-name`: this host's name in the store (default: the machine's hostname).
    pub host_name: Option<String>,
    /// `--advertise-url`: how the other hosts reach this one (default: `http://` + the listen
    /// address, loopback for an unspecified one).
    pub advertise_url: Option<String>,
    /// `PANDASTACK_NODE_TOKEN`: the secret of host-to-host requests (default: one the first
    /// host stores in the shared store).
    pub node_token: Option<String>,
    /// The guest daemon binary and kernel driver to install into sandboxes.
    pub guest_bin: PathBuf,
    pub kernel_py: PathBuf,
    pub runsc: PathBuf,
    pub platform: String,
    /// Idle seconds before a persistent sandbox is hibernated.
    pub idle_hibernate_seconds: i64,
    /// `--health-fail-after-seconds`: see [`HostConfig::health_fail_after_seconds`].
    pub health_fail_after_seconds: u64,
    /// Pre-restored sandboxes per template (warm pool); 0 disables it.
    pub pool_size: usize,
    /// The most a template's pool grows to under bursts (`--pool-max`).
    pub pool_max: usize,
    /// Containers made in advance per template for restores (`--restore-targets`).
    pub restore_targets: usize,
    /// The most a template's restore targets grow to under bursts (`--restore-targets-max`).
    pub restore_targets_max: usize,
    /// How to start a shim: this binary plus `shim`.
    pub shim_command: Vec<String>,
    /// MCP tool calls allowed per second per workspace (bursts of twice that); 0: no limit.
    pub mcp_calls_per_second: f64,
    /// Serve `GET /metrics` without an API key (default: any valid key is needed).
    pub public_metrics: bool,
    /// Sandbox networking.
    pub network: NetworkSettings,
    /// Limits and quotas of user template builds.
    pub builds: builds::BuildsConfig,
    /// Capacity and quotas (issue 8).
    pub capacity: CapacitySettings,
    /// Sandbox disks (issue 8).
    pub disks: DiskSettings,
    /// Databases (issue 10).
    pub databases: databases::DatabaseSettings,
    /// Volume quotas (issue 9).
    pub volume_limits: host::VolumeLimits,
    /// `--object-store` / `PANDASTACK_OBJECT_STORE`: `s3://BUCKET` or `file:///DIR` for
    /// snapshot and hibernation images shared by the hosts (issue 12 point 6); `None`: images
    /// stay on the host that took them.
    pub object_store: Option<String>,
}

/// Disk settings of `pandastack server` (issue 8; README "Limits").
#[derive(Debug, Clone)]
pub struct DiskSettings {
    /// `--default-disk-mb`: disk of a sandbox whose create gives no `disk_mb`.
    pub default_disk_mb: u32,
    /// `--max-disk-mb`: largest `disk_mb` a create may ask for.
    pub max_disk_mb: u32,
    /// `--spare-disks`: disks of the default size formatted ahead of time.
    pub spare_disks: usize,
}

/// Capacity settings of `pandastack server` (issue 8; README "Limits").
#[derive(Debug, Clone)]
pub struct CapacitySettings {
    /// `--max-sandboxes`: instances holding memory at once on this host.
    pub max_sandboxes: usize,
    /// `--memory-overcommit`: the memory limits of running sandboxes may add up to this many
    /// times the host's memory (idle sandboxes use a small part of their limit).
    pub memory_overcommit: f64,
    /// `--workspace-max-sandboxes`.
    pub workspace_max_sandboxes: usize,
    /// `--workspace-max-snapshot-gb`.
    pub workspace_max_snapshot_gb: f64,
    /// `--disk-reserve-percent`: share of the data dir's filesystem kept free...
    pub disk_reserve_percent: f64,
    /// `--disk-reserve-max-gb`: ...at most this much.
    pub disk_reserve_max_gb: f64,
    /// `--rate-limit`: requests per second per workspace (bursts of twice that); 0: none.
    pub requests_per_second: u32,
}

impl CapacitySettings {
    /// The host's limits: the memory budget is `memory_overcommit` × this host's memory.
    ///
    /// # Errors
    /// [`StartError::Config`] for a value out of range or an unreadable `/proc/meminfo`.
    fn limits(&self) -> Result<host::Limits, StartError> {
        let overcommit_ok = self.memory_overcommit.is_finite() && self.memory_overcommit > 0.0;
        if !overcommit_ok || !(0.0..100.0).contains(&self.disk_reserve_percent) {
            return Err(StartError::Config(
                "--memory-overcommit must be > 0 and --disk-reserve-percent in [0, 100)".into(),
            ));
        }
        let total_mb = host::host_memory_mb()?;
        Ok(host::Limits {
            max_sandboxes: self.max_sandboxes,
            max_memory_mb: (total_mb as f64 * self.memory_overcommit) as u64,
            workspace_max_sandboxes: self.workspace_max_sandboxes,
            workspace_max_snapshot_bytes: (self.workspace_max_snapshot_gb * (1u64 << 30) as f64)
                as u64,
            disk_reserve_percent: self.disk_reserve_percent,
            disk_reserve_max_bytes: (self.disk_reserve_max_gb * (1u64 << 30) as f64) as u64,
        })
    }
}

/// Errors that stop the server from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("data dir: {0}")]
    Io(#[from] std::io::Error),
    #[error("store: {0}")]
    Store(#[from] pandastack_store::StoreError),
    #[error("engine: {0}")]
    Engine(#[from] pandastack_engine::EngineError),
    #[error("recovery: {0}")]
    Recover(String),
    #[error("{0}")]
    Locked(#[from] datadir_lock::LockError),
    #[error("{0}")]
    Config(String),
}

/// Takes the data-dir lock ([`datadir_lock`]), opens the store, creates the first workspace
/// and admin key on a fresh data dir (printing
/// the two `export` lines a user needs and writing them to `<data_dir>/admin.env`, mode 0600),
/// recovers sandboxes, starts the sweepers and serves until the process ends.
///
/// # Errors
/// [`StartError`] when anything needed to serve is missing; [`StartError::Locked`] when another
/// server holds the data dir.
pub async fn run(cfg: ServerConfig) -> Result<(), StartError> {
    std::fs::create_dir_all(&cfg.data_dir)?;
    // Before the store, recovery or the port: a second server on this data dir touches nothing.
    let _lock = datadir_lock::DataDirLock::acquire(&cfg.data_dir)?;
    let store = Arc::new(open_store(&cfg.data_dir, cfg.store.as_deref()).await?);
    let cluster_cfg = cluster_config(&cfg, &store).await?;
    if !cluster_cfg.shared {
        // One host on SQLite: the store is wholly this host's, whatever its name was.
        store.claim_all(&cluster_cfg.host_name).await?;
    }
    bootstrap(&store, &cfg, &cluster_cfg.host_name).await?;
    let guest_dir = host::install_guest_dir(&cfg.data_dir, &cfg.guest_bin, &cfg.kernel_py)?;
    let network = net_settings::network_config(&cfg)?;
    let gvisor = pandastack_gvisor::GvisorEngine::new(pandastack_gvisor::GvisorConfig {
        runsc: cfg.runsc.clone(),
        state_root: cfg.data_dir.join("runsc"),
        platform: cfg.platform.clone(),
        shim_command: cfg.shim_command.clone(),
        network,
        instances_dir: cfg.data_dir.join("instances"),
        disks: Some(pandastack_gvisor::DiskConfig {
            spares_dir: cfg.data_dir.join("disks"),
            spare_mb: cfg.disks.default_disk_mb,
            stock: cfg.disks.spare_disks,
        }),
        mounts_dir: cfg.data_dir.join("mounts"),
        volumes_dir: cfg.data_dir.join("volumes"),
    })?;
    let sandbox_net = gvisor
        .networks()
        .map(|n| (n.layout().base, n.layout().prefix));
    let engine: Arc<dyn Engine> = Arc::new(gvisor);
    let secret = store
        .setting_or_insert(previews::SECRET_SETTING, || {
            hex::encode(rand::random::<[u8; 32]>())
        })
        .await?;
    let previews = Arc::new(previews::Previews::new(
        cfg.network.preview_host_suffix.clone(),
        cfg.network.public_previews,
        hex::decode(secret).unwrap_or_default(),
    ));
    let templates = Arc::new(TemplateStore::new(cfg.data_dir.join("templates")));
    let host = Host::new(
        store,
        engine,
        templates,
        HostConfig {
            data_dir: cfg.data_dir.clone(),
            guest_dir,
            default_ttl_seconds: 3600,
            pool_size: cfg.pool_size,
            pool_max: cfg.pool_max,
            restore_targets: cfg.restore_targets,
            restore_targets_max: cfg.restore_targets_max,
            scratch_dir: scratch_dir(&cfg.data_dir),
            idle_hibernate_seconds: cfg.idle_hibernate_seconds,
            health_fail_after_seconds: cfg.health_fail_after_seconds,
            public_metrics: cfg.public_metrics,
            network: cfg.network.enabled.then_some(NetworkDefaults {
                internet: cfg.network.internet_default,
                sandbox_net,
            }),
            limits: cfg.capacity.limits()?,
            builds: cfg.builds.clone(),
            default_disk_mb: cfg.disks.default_disk_mb,
            max_disk_mb: cfg.disks.max_disk_mb,
            host_name: cluster_cfg.host_name.clone(),
            cluster: cluster_cfg.shared,
            volume_limits: cfg.volume_limits.clone(),
            objects: cfg
                .object_store
                .as_deref()
                .map(objects::Objects::open)
                .transpose()
                .map_err(|e| StartError::Config(e.to_string()))?,
        },
    );
    let cluster = cluster::Cluster::new(cluster_cfg, host.store.clone());
    host.recover()
        .await
        .map_err(|e| StartError::Recover(e.to_string()))?;
    host.recover_builds().await;
    host.spawn_build_workers();
    let dbs = databases::Databases::new(host.clone(), cfg.databases.clone())
        .await
        .map_err(StartError::Recover)?;
    dbs.recover()
        .await
        .map_err(|e| StartError::Recover(format!("databases: {e}")))?;
    dbs.spawn_sweeper();
    dbs.prepare_template();
    host.spawn_sweepers();
    host.spawn_health_monitor();
    host.spawn_death_watch();
    host.spawn_memory_watch();
    host.prepare_template_images();
    cluster.start(&host, cfg.store.clone()).await?;
    let listener = tokio::net::TcpListener::bind(cfg.listen).await?;
    let mcp = api::mcp::Endpoint::new(listener.local_addr()?, cfg.mcp_calls_per_second)
        .map_err(|e| StartError::Recover(format!("mcp endpoint: {e}")))?;
    info!(listen = %cfg.listen, data_dir = %cfg.data_dir.display(), "pandastack server listening");
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopping = stop.clone();
    let mut serve = tokio::spawn(serve::serve(
        listener,
        app(AppState {
            host: host.clone(),
            databases: dbs.clone(),
            mcp,
            previews,
            rate_limit: Arc::new(ratelimit::WorkspaceRateLimit::new(
                cfg.capacity.requests_per_second,
            )),
            cluster,
        }),
        async move { stopping.notified().await },
    ));
    tokio::select! {
        done = &mut serve => {
            done.map_err(|e| StartError::Recover(format!("server task: {e}")))??;
            return Ok(());
        }
        _ = stop_signal() => {}
    }
    // Requests in flight get a few seconds; open streams (events, logs) are cut after that.
    info!("stopping: sandboxes keep running; removing the warm pool");
    stop.notify_one();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), &mut serve).await;
    dbs.shutdown().await;
    host.shutdown().await;
    // The RAM scratch dir holds fork captures only while a fork runs; none does now. Removed
    // only when empty (`remove_dir`), so nothing a late fork wrote is lost.
    if let Some(scratch) = scratch_dir(&cfg.data_dir) {
        let _ = std::fs::remove_dir(scratch.join("forks"));
        let _ = std::fs::remove_dir(scratch);
    }
    Ok(())
}

/// Resolves at SIGTERM or SIGINT.
async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// This server's RAM-backed scratch dir, `/dev/shm/pandastack-<tag>` (the tag of
/// [`data_dir_tag`]), when the host has `/dev/shm`.
fn scratch_dir(data_dir: &std::path::Path) -> Option<PathBuf> {
    let shm = std::path::Path::new("/dev/shm");
    shm.is_dir()
        .then(|| shm.join(format!("pandastack-{}", data_dir_tag(data_dir))))
}

/// 6 hex digits naming a data dir: the first 3 bytes of the SHA-256 of its canonical path.
/// Everything a server makes outside its data dir carries it.
pub fn data_dir_tag(data_dir: &std::path::Path) -> String {
    let canonical = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let digest = {
        use sha2::Digest;
        sha2::Sha256::digest(canonical.display().to_string().as_bytes())
    };
    hex::encode(&digest[..3])
}

/// This host's identity: its name, advertise URL and the cluster's node token.
async fn cluster_config(
    cfg: &ServerConfig,
    store: &Store,
) -> Result<cluster::ClusterConfig, StartError> {
    let host_name = match &cfg.host_name {
        Some(n) => n.clone(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into()),
    };
    if host_name.is_empty()
        || host_name.len() > 63
        || !host_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err(StartError::Config(format!(
            "--host-name: '{host_name}' must be 1-63 letters, digits, '-', '.' or '_'"
        )));
    }
    let advertise_url = match &cfg.advertise_url {
        Some(u) if u.starts_with("http://") => u.trim_end_matches('/').to_string(),
        Some(u) => {
            return Err(StartError::Config(format!(
                "--advertise-url: '{u}' must be http://HOST:PORT"
            )))
        }
        None => {
            let mut addr = cfg.listen;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            format!("http://{addr}")
        }
    };
    let node_token = match &cfg.node_token {
        Some(t) if !t.is_empty() => t.clone(),
        _ => {
            store
                .setting_or_insert(cluster::NODE_TOKEN_SETTING, || {
                    hex::encode(rand::random::<[u8; 32]>())
                })
                .await?
        }
    };
    Ok(cluster::ClusterConfig {
        host_name,
        advertise_url,
        node_token,
        shared: store.backend() == pandastack_store::Backend::Postgres,
    })
}

/// Creates the first workspace and its admin key on an empty store. With several hosts
/// starting on one empty store, the first to claim the bootstrap does it (the others find the
/// workspace, or the claim, and skip).
async fn bootstrap(store: &Store, cfg: &ServerConfig, host_name: &str) -> Result<(), StartError> {
    if store.count_workspaces().await? > 0 {
        return Ok(());
    }
    let claimed = store
        .setting_or_insert("bootstrapped_by", || host_name.to_string())
        .await?;
    if claimed != host_name {
        return Ok(());
    }
    let (ws, key) = auth::create_workspace(store, "default").await?;
    let lines = format!(
        "export PANDASTACK_API=http://{}\nexport PANDASTACK_API_KEY={key}\n",
        cfg.listen
    );
    let path = cfg.data_dir.join("admin.env");
    std::fs::write(&path, &lines)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    info!(workspace_id = %ws, "created the first workspace and its admin key");
    println!(
        "First start: created workspace {ws}. Use it with:\n{lines}(also saved to {})",
        path.display()
    );
    Ok(())
}

/// Opens the store: the PostgreSQL database at `url` when given (`--store`, issue 12), else the
/// SQLite file `<data_dir>/store.db`.
///
/// # Errors
/// I/O errors creating the data dir; store errors.
pub async fn open_store(
    data_dir: &std::path::Path,
    url: Option<&str>,
) -> Result<Store, StartError> {
    std::fs::create_dir_all(data_dir)?;
    Ok(match url {
        Some(url) => Store::connect(url).await?,
        None => Store::open(&data_dir.join("store.db")).await?,
    })
}
