//! `pandastack`: one binary for the server (`pandastack server`), the CLI (`pandastack sandbox
//! ...`), template bakes (`pandastack template bake NAME`) and the hidden per-sandbox `shim`.
//! It parses flags, calls the libraries and maps errors to exit codes.

mod admin;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

mod database_flags;
mod net_args;

#[derive(Parser)]
#[command(
    name = "pandastack",
    version,
    about = "Sandboxes for AI agents: server and CLI"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API server, scheduler, store and host agent on this host.
    Server(Box<ServerArgs>),
    /// Bake templates on this host (server-side; needs root and mmdebstrap).
    #[command(name = "template-bake", hide = true)]
    TemplateBakeLocal(BakeArgs),
    /// Administrative commands: workspaces and keys (on the data dir's store) and hosts of a
    /// cluster (through the API, with an operator key).
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Internal: the per-sandbox shim that holds the guest channel.
    #[command(hide = true)]
    Shim(ShimArgs),
    #[command(flatten)]
    Client(pandastack_cli::Command),
}

#[derive(Args)]
struct ServerArgs {
    /// Address to listen on.
    #[arg(long, env = "PANDASTACK_LISTEN", default_value = "127.0.0.1:7700")]
    listen: SocketAddr,
    /// Where the store, templates, instances and snapshots live.
    #[arg(
        long,
        env = "PANDASTACK_DATA_DIR",
        default_value = "/var/lib/pandastack"
    )]
    data_dir: PathBuf,
    /// The control-plane store: `postgres://USER[:PASSWORD]@HOST:PORT/DB` for a cluster of
    /// hosts sharing one database; default: SQLite in the data dir.
    #[arg(long, env = "PANDASTACK_STORE")]
    store: Option<String>,
    /// Object storage for snapshot and hibernation images, so any host of a cluster restores
    /// them (issue 12): `s3://BUCKET` (endpoint, region and keys from `AWS_ENDPOINT_URL`,
    /// `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`; `AWS_ALLOW_HTTP=true` for
    /// plain HTTP) or `file:///DIR` (a directory every host mounts); default: images stay on
    /// the host that took them.
    #[arg(long, env = "PANDASTACK_OBJECT_STORE")]
    object_store: Option<String>,
    /// This host's name in a cluster (issue 12); default: the machine's hostname.
    #[arg(long, env = "PANDASTACK_HOST_NAME")]
    host_name: Option<String>,
    /// How the other hosts of a cluster reach this host's API, `http://HOST:PORT`; default:
    /// `http://` + the listen address (loopback when that is unspecified).
    #[arg(long, env = "PANDASTACK_ADVERTISE_URL")]
    advertise_url: Option<String>,
    /// The static guest daemon (default: `pandastack-guest` beside this binary).
    #[arg(long, env = "PANDASTACK_GUEST_BIN")]
    guest_bin: Option<PathBuf>,
    /// The kernel driver (default: `kernel.py` beside the guest binary).
    #[arg(long, env = "PANDASTACK_KERNEL_PY")]
    kernel_py: Option<PathBuf>,
    /// The runsc binary.
    #[arg(long, env = "PANDASTACK_RUNSC", default_value = "runsc")]
    runsc: PathBuf,
    /// gVisor platform: ptrace (default; ~0 idle CPU here) or systrap.
    #[arg(long, env = "PANDASTACK_PLATFORM", default_value = "ptrace")]
    platform: String,
    /// Sandboxes restored ahead of time per template, so creates only claim one (0: off).
    #[arg(long, env = "PANDASTACK_POOL_SIZE", default_value_t = 2)]
    pool_size: usize,
    /// The most a template's warm pool grows to while creates come in bursts (it follows the
    /// largest number of creates within 5 s over the last 5 minutes).
    #[arg(long, env = "PANDASTACK_POOL_MAX", default_value_t = 8)]
    pool_max: usize,
    /// Containers made in advance per template, so restores (pool refills, snapshots, forks,
    /// wakes) skip making their container, at least (0: off unless bursts raise it).
    #[arg(long, env = "PANDASTACK_RESTORE_TARGETS", default_value_t = 2)]
    restore_targets: usize,
    /// The most a template's restore targets grow to while restores come in bursts (a fork
    /// tree of 8 makes the next one find 8; ~18 MiB of host memory each). Below
    /// `--restore-targets` it counts as that.
    #[arg(long, env = "PANDASTACK_RESTORE_TARGETS_MAX", default_value_t = 8)]
    restore_targets_max: usize,
    /// Idle seconds after which a persistent sandbox is hibernated (seed 003: 5 minutes).
    #[arg(long, env = "PANDASTACK_IDLE_HIBERNATE_SECONDS", default_value_t = 300)]
    idle_hibernate_seconds: i64,
    /// Seconds a running sandbox's guest may leave health probes unanswered, counted only
    /// while the host is not starved (CPU or IO pressure, a late event loop), before it is
    /// marked `failed` and its instance destroyed. An instance that is gone is failed at once.
    #[arg(long, env = "PANDASTACK_HEALTH_FAIL_AFTER_SECONDS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(5..))]
    health_fail_after_seconds: u64,
    /// MCP tool calls per second per workspace at `/mcp`, bursts of twice that (0: no limit).
    #[arg(long, env = "PANDASTACK_MCP_CALLS_PER_SECOND", default_value_t = pandastack_cli::commands::mcp::DEFAULT_CALLS_PER_SECOND)]
    mcp_calls_per_second: f64,
    /// Serve GET /metrics without an API key (by default any valid key is needed).
    #[arg(long, env = "PANDASTACK_PUBLIC_METRICS")]
    public_metrics: bool,
    #[command(flatten)]
    network: net_args::NetworkArgs,
    /// Sandboxes holding memory at once on this host; past it creates answer 503.
    #[arg(long, env = "PANDASTACK_MAX_SANDBOXES", default_value_t = 100)]
    max_sandboxes: usize,
    /// The memory limits of running sandboxes may add up to this many times the host's
    /// memory (idle sandboxes use a small part of theirs); past it creates answer 503.
    #[arg(long, env = "PANDASTACK_MEMORY_OVERCOMMIT", default_value_t = 2.0)]
    memory_overcommit: f64,
    /// Sandboxes one workspace may keep; past it creates answer 429.
    #[arg(
        long,
        env = "PANDASTACK_WORKSPACE_MAX_SANDBOXES",
        default_value_t = 100
    )]
    workspace_max_sandboxes: usize,
    /// GiB of snapshots one workspace may keep; past it snapshots answer 429.
    #[arg(
        long,
        env = "PANDASTACK_WORKSPACE_MAX_SNAPSHOT_GB",
        default_value_t = 50.0
    )]
    workspace_max_snapshot_gb: f64,
    /// Percent of the data dir's filesystem kept free; below it creates, forks, snapshots
    /// and hibernations answer 507.
    #[arg(long, env = "PANDASTACK_DISK_RESERVE_PERCENT", default_value_t = 10.0)]
    disk_reserve_percent: f64,
    /// The disk reserve is at most this many GiB (a percentage of a large disk keeps back far
    /// more than the store and logs need).
    #[arg(long, env = "PANDASTACK_DISK_RESERVE_MAX_GB", default_value_t = 4.0)]
    disk_reserve_max_gb: f64,
    /// Disk of a sandbox whose create gives no disk_mb, MiB: its writable root and /tmp; past it
    /// writes fail with ENOSPC inside the sandbox.
    #[arg(long, env = "PANDASTACK_DEFAULT_DISK_MB", default_value_t = 10240)]
    default_disk_mb: u32,
    /// Largest disk_mb a create may ask for, MiB.
    #[arg(long, env = "PANDASTACK_MAX_DISK_MB", default_value_t = 102400)]
    max_disk_mb: u32,
    /// Disks of the default size formatted ahead of time (restores and forks take one).
    #[arg(long, env = "PANDASTACK_SPARE_DISKS", default_value_t = 4)]
    spare_disks: usize,
    /// API requests per second per workspace, bursts of twice that; past it 429 (0: no limit).
    #[arg(long, env = "PANDASTACK_RATE_LIMIT", default_value_t = pandastack_server::ratelimit::DEFAULT_REQUESTS_PER_SECOND)]
    rate_limit: u32,
    /// Templates one workspace may build and keep (429 past it).
    #[arg(long, env = "PANDASTACK_MAX_TEMPLATES", default_value_t = 20)]
    max_templates: usize,
    /// Template storage one workspace may use, MiB (all its template rootfs builds on disk).
    #[arg(long, env = "PANDASTACK_MAX_TEMPLATE_STORAGE_MB", default_value_t = 20 * 1024)]
    max_template_storage_mb: u64,
    /// Template builds run at once (each RUN step is a sandbox; builds are CPU-heavy).
    #[arg(long, env = "PANDASTACK_BUILD_CONCURRENCY", default_value_t = 1)]
    build_concurrency: usize,
    #[command(flatten)]
    databases: database_flags::DatabaseFlags,
    /// Template builds one workspace may have queued (429 past it; issue 23 finding 6).
    #[arg(long, env = "PANDASTACK_MAX_QUEUED_BUILDS", default_value_t = 5)]
    max_queued_builds: usize,
    /// Volumes one workspace may have; past it volume creates answer 429.
    #[arg(long, env = "PANDASTACK_WORKSPACE_MAX_VOLUMES", default_value_t = 20)]
    workspace_max_volumes: usize,
    /// GiB one workspace's volumes may add up to (provisioned sizes); past it 429.
    #[arg(
        long,
        env = "PANDASTACK_WORKSPACE_MAX_VOLUME_GB",
        default_value_t = 100.0
    )]
    workspace_max_volume_gb: f64,
}

#[derive(Args)]
struct BakeArgs {
    /// Template names (`base`, `code-interpreter`); all built-ins when none are given.
    names: Vec<String>,
    #[arg(
        long,
        env = "PANDASTACK_DATA_DIR",
        default_value = "/var/lib/pandastack"
    )]
    data_dir: PathBuf,
    /// Build again even when the recipe is unchanged (bumps the generation).
    #[arg(long)]
    force: bool,
    /// The cluster's object store (`s3://BUCKET`, `file:///DIR`, as for `server`): a bake of
    /// the same recipe another host published there is fetched instead of baked (issue 12),
    /// so the hosts hold identical builds.
    #[arg(long, env = "PANDASTACK_OBJECT_STORE")]
    object_store: Option<String>,
}

#[derive(Args)]
struct ShimArgs {
    /// Serve the guest channel here; without it the shim only runs the command.
    #[arg(long)]
    socket: Option<PathBuf>,
    #[arg(long)]
    exit_file: PathBuf,
    /// Hide `/proc/sys/net` from runsc (the `--network=sandbox` workaround of this runsc).
    #[arg(long)]
    hide_proc_sys_net: bool,
    /// Two-stage mode (containers made ahead of time): where the second command arrives.
    #[arg(long)]
    control: Option<PathBuf>,
    /// Two-stage mode: written once the first command succeeded.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// The instance's volume staging directory (kept in its mount namespace; other
    /// instances' stagings and the volumes' host mounts are dropped).
    #[arg(long)]
    volume_staging: Option<PathBuf>,
    /// Log for all output, rate-limited and rotated (at most 8 MiB on disk).
    #[arg(long)]
    log: Option<PathBuf>,
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PANDASTACK_LOG")
        .unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Shim(a) => {
            let code = pandastack_gvisor::shim::run(&pandastack_gvisor::shim::ShimArgs {
                socket: a.socket,
                exit_file: a.exit_file,
                command: a.command,
                hide_proc_sys_net: a.hide_proc_sys_net,
                control: a.control,
                ready_file: a.ready_file,
                volume_staging: a.volume_staging,
                log: a.log,
            })
            .context("shim")?;
            std::process::exit(code);
        }
        Command::Server(a) => {
            init_logs();
            let exe = std::env::current_exe().context("locating this binary")?;
            let exe_dir = exe.parent().map(PathBuf::from).unwrap_or_default();
            let guest_bin = a
                .guest_bin
                .unwrap_or_else(|| exe_dir.join("pandastack-guest"));
            let kernel_py = a.kernel_py.unwrap_or_else(|| {
                guest_bin
                    .parent()
                    .map(|d| d.join("kernel.py"))
                    .unwrap_or_default()
            });
            let cfg = pandastack_server::ServerConfig {
                listen: a.listen,
                data_dir: a.data_dir,
                store: a.store,
                object_store: a.object_store,
                host_name: a.host_name,
                advertise_url: a.advertise_url,
                // An env var only: a secret must not show in `ps`.
                node_token: std::env::var("PANDASTACK_NODE_TOKEN").ok(),
                guest_bin,
                kernel_py,
                runsc: a.runsc,
                platform: a.platform,
                pool_size: a.pool_size,
                restore_targets: a.restore_targets,
                restore_targets_max: a.restore_targets_max,
                pool_max: a.pool_max,
                idle_hibernate_seconds: a.idle_hibernate_seconds,
                health_fail_after_seconds: a.health_fail_after_seconds,
                shim_command: vec![exe.display().to_string(), "shim".into()],
                mcp_calls_per_second: a.mcp_calls_per_second,
                public_metrics: a.public_metrics,
                network: a.network.settings(),
                disks: pandastack_server::DiskSettings {
                    default_disk_mb: a.default_disk_mb,
                    max_disk_mb: a.max_disk_mb,
                    spare_disks: a.spare_disks,
                },
                capacity: pandastack_server::CapacitySettings {
                    max_sandboxes: a.max_sandboxes,
                    memory_overcommit: a.memory_overcommit,
                    workspace_max_sandboxes: a.workspace_max_sandboxes,
                    workspace_max_snapshot_gb: a.workspace_max_snapshot_gb,
                    disk_reserve_percent: a.disk_reserve_percent,
                    disk_reserve_max_gb: a.disk_reserve_max_gb,
                    requests_per_second: a.rate_limit,
                },
                builds: pandastack_server::builds::BuildsConfig {
                    max_templates: a.max_templates,
                    max_workspace_bytes: a.max_template_storage_mb.saturating_mul(1024 * 1024),
                    concurrency: a.build_concurrency.max(1),
                    max_queued: a.max_queued_builds.max(1),
                    ..Default::default()
                },
                databases: a.databases.settings(),
                volume_limits: pandastack_server::host::VolumeLimits {
                    workspace_max_volumes: a.workspace_max_volumes,
                    workspace_max_volume_mb: (a.workspace_max_volume_gb * 1024.0) as u64,
                },
            };
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(pandastack_server::run(cfg)).context("server")?;
            Ok(())
        }
        Command::TemplateBakeLocal(a) => {
            init_logs();
            bake(a)
        }
        Command::Admin(cmd) => std::process::exit(admin::run(cmd)?),
        Command::Client(c) => std::process::exit(pandastack_cli::run(c)),
    }
}

fn bake(a: BakeArgs) -> Result<()> {
    let root = a.data_dir.join("templates");
    // Kept alive for the object-store calls of the fetching builder.
    let runtime = tokio::runtime::Runtime::new()?;
    let store = match &a.object_store {
        None => pandastack_templates::TemplateStore::new(root),
        Some(url) => {
            let objects = pandastack_server::objects::Objects::open(url)
                .with_context(|| format!("--object-store {url}"))?;
            let inner =
                pandastack_templates::MmdebstrapBuilder::new(root.join(".cache").join("wheels"));
            let builder = pandastack_server::host::shared_builds::FetchingBuilder {
                inner: std::sync::Arc::new(inner),
                objects,
                runtime: runtime.handle().clone(),
            };
            pandastack_templates::TemplateStore::with_builder(root, std::sync::Arc::new(builder))
        }
    };
    let names = if a.names.is_empty() {
        pandastack_templates::builtins()
            .into_iter()
            .map(|r| r.name)
            .collect()
    } else {
        a.names
    };
    for name in names {
        let started = std::time::Instant::now();
        let info = store
            .bake_builtin(&name, a.force, &mut |line: &str| {
                eprintln!("[{name}] {line}")
            })
            .with_context(|| format!("baking template {name}"))?;
        println!(
            "template {} generation {} ({} MiB) ready in {:.1} s",
            info.name,
            info.generation,
            info.size_bytes / (1024 * 1024),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
