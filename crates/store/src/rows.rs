//! Row types. Times are Unix milliseconds unless a name says otherwise.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A workspace: the unit of isolation between tenants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRow {
    pub id: String,
    pub name: String,
    pub created_at: i64,
}

/// An API key. Only the SHA-256 of the secret is stored; `prefix` is the public handle
/// (`pds_` plus 8 characters) shown in listings and used to revoke.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyRow {
    pub prefix: String,
    pub workspace_id: String,
    pub label: String,
    pub hash: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// A sandbox as stored. `status` is the state machine's state name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxRow {
    pub id: String,
    pub workspace_id: String,
    pub template: String,
    pub template_generation: i64,
    pub status: String,
    pub cpu: u32,
    pub memory_mb: u32,
    pub metadata: BTreeMap<String, String>,
    /// Environment injected into every exec and kernel. Never shown in listings or logs.
    pub envs: BTreeMap<String, String>,
    pub ttl_seconds: i64,
    pub persistent: bool,
    pub created_at: i64,
    /// Last API activity; the TTL counts from here.
    pub last_active_at: i64,
    /// Current engine instance, when one runs.
    pub instance_id: Option<String>,
    pub instance_dir: Option<String>,
    pub rootfs: String,
    pub guest_dir: String,
    pub boot_ms: Option<i64>,
    /// `cold`, `snapshot`, `fork` or `wake`.
    pub boot_mode: String,
    pub from_snapshot: Option<String>,
    /// Checkpoint image of a hibernated sandbox.
    pub hibernate_image: Option<String>,
    pub deleted_at: Option<i64>,
    /// The sandbox's egress policy (the engine's `NetworkPolicy` as JSON), applied to every
    /// instance it gets; `None`: no network.
    pub network: Option<serde_json::Value>,
    /// Host-reachable address of the current instance (issue 7), when it has a network.
    pub guest_ip: Option<String>,
    /// Size of the sandbox's disk, MiB (issue 8); `None`: a sandbox made before disks existed
    /// (its instances keep that layout).
    #[serde(default)]
    pub disk_mb: Option<u32>,
    /// Name of the host the sandbox lives on (issue 12); its requests are served there.
    pub host: String,
    /// Volumes the sandbox holds (issue 9), kept while it is hibernated and cleared when it
    /// is deleted or fails.
    #[serde(default)]
    pub volumes: Vec<SandboxVolume>,
}

/// A volume: a named ext4 image of a workspace (`<data_dir>/volumes/<id>.ext4`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRow {
    /// `vol-` and 32 hex digits.
    pub id: String,
    pub workspace_id: String,
    /// Unique within the workspace.
    pub name: String,
    /// Provisioned size, MiB.
    pub size_mb: u32,
    pub created_at: i64,
    /// Name of the host whose disk holds the image (issue 12): sandboxes that attach the
    /// volume are made there.
    pub host: String,
}

/// A volume as a sandbox or snapshot holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxVolume {
    pub volume_id: String,
    /// The volume's name (its directory `/mnt/{name}`), as it was attached.
    pub name: String,
    pub read_only: bool,
}

/// A code context: a REST handle bound to one kernel in a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextRow {
    pub id: String,
    pub sandbox_id: String,
    pub kernel_id: String,
    pub language: String,
    pub created_at: i64,
    pub closed_at: Option<i64>,
}

/// A snapshot: a checkpoint image of a sandbox plus what is needed to restore it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotRow {
    pub id: String,
    pub workspace_id: String,
    pub sandbox_id: String,
    pub template: String,
    pub template_generation: i64,
    pub cpu: u32,
    pub memory_mb: u32,
    pub rootfs: String,
    pub guest_dir: String,
    pub image_dir: String,
    pub size_bytes: i64,
    /// Kernels live at capture time: `[{kernel_id, language, last_used_ms}]` as JSON.
    pub kernels: serde_json::Value,
    pub created_at: i64,
    /// Disk size of the captured sandbox, MiB; restores get the same (`None`: taken before
    /// disks existed, restored in that layout).
    #[serde(default)]
    pub disk_mb: Option<u32>,
    /// Name of the host whose disk holds the image (issue 12).
    pub host: String,
    /// Volumes the sandbox held at capture time: a restore attaches them again (their content
    /// is not in the image).
    #[serde(default)]
    pub volumes: Vec<SandboxVolume>,
}

/// One lifecycle transition of a sandbox or a database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRow {
    pub seq: i64,
    pub workspace_id: String,
    /// What changed: [`EventRow::SANDBOX`] or [`EventRow::DATABASE`].
    pub subject: String,
    /// The sandbox's or the database's id (the column keeps its first name).
    pub sandbox_id: String,
    pub from_state: String,
    pub to_state: String,
    pub cause: String,
    pub at: i64,
}

/// A lifecycle operation in progress that writes a checkpoint image (snapshot, hibernate,
/// fork), recorded before it starts and removed when it is complete, so start-up recovery can
/// finish or roll back one a crash interrupted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationRow {
    /// The snapshot id, `hibernate-<sandbox id>`, or the fork tree id.
    pub id: String,
    /// `snapshot`, `hibernate` or `fork`.
    pub kind: String,
    /// The sandbox captured.
    pub sandbox_id: String,
    /// The temporary image directory being written.
    pub image_dir: String,
    /// What recovery needs to finish the operation (for a snapshot: its row), as JSON.
    pub detail: serde_json::Value,
    pub started_at: i64,
    /// Name of the host running it (only that host's start-up recovery finishes it).
    pub host: String,
}

/// A template build (contract §2.8 TemplateBuild). `status` is `queued`, `running`, `done` or
/// `failed`; times are Unix ms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateBuildRow {
    /// `bld-` + 32 hex digits.
    pub id: String,
    pub workspace_id: String,
    /// Template name (per workspace).
    pub name: String,
    /// `dockerfile` or `rootfs_tar`.
    pub kind: String,
    pub status: String,
    /// Why it failed (with the failing command's output for a `RUN`).
    pub error: Option<String>,
    pub cpu: u32,
    pub memory_mb: u32,
    /// Disk size asked for, MiB.
    pub size_mb: u32,
    /// Size of the finished rootfs, bytes.
    pub bytes: Option<i64>,
    /// The template build it produced or reused (`<hash>-g<generation>`).
    pub build_id: Option<String>,
    pub generation: Option<i64>,
    /// True when an unchanged rebuild reused the current build.
    pub cache_hit: bool,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    /// Name of the host that runs the build (issue 12): only its recovery may fail it.
    pub host: String,
}

impl EventRow {
    /// `subject` of a sandbox transition.
    pub const SANDBOX: &'static str = "sandbox";
    /// `subject` of a database transition.
    pub const DATABASE: &'static str = "database";
}

/// A database (issue 10): one PostgreSQL cluster. `status` is the database state machine's
/// state name. Passwords are sealed (`pandastack_postgres::secret::Sealer`), never plain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseRow {
    pub id: String,
    pub workspace_id: String,
    pub label: Option<String>,
    pub status: String,
    /// RAM tier (`1g`, `4g`, `16g`).
    pub size: String,
    pub cpu: u32,
    pub storage_mb: u64,
    pub always_on: bool,
    /// The front end's TCP port, once provisioned.
    pub port: Option<u16>,
    /// Database and owner role inside the cluster.
    pub database: String,
    pub username: String,
    pub password_sealed: String,
    pub superuser_password_sealed: String,
    pub cloned_from: Option<String>,
    /// Why it failed (safe to show the owner).
    pub error: Option<String>,
    pub created_at: i64,
    /// Last connection or API use (the idle stop counts from here).
    pub last_active_at: i64,
    /// Set when a delete began; the row goes once everything is removed.
    pub deleted_at: Option<i64>,
    /// Name of the host whose disk and processes hold the cluster (issue 12): its API
    /// requests are served there and only its recovery reconciles it.
    pub host: String,
}
