//! Wire types of the PandaStack REST API under `/v1`, exactly as the published SDKs send and
//! read them (`shared/spec/sdk-wire-contract.md`, cited below as "contract §N"). Defined once and
//! used by the server, the CLI and the tests.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod account;
mod databases;
pub mod de;
mod events;
mod fork;
mod repl;
#[cfg(feature = "openapi")]
mod schema;
mod snapshots;
mod stream;
mod volumes;

pub use account::{Me, SandboxMetrics};
pub use databases::{
    CloneDatabase, CreateDatabase, Database, DatabaseAccepted, DatabaseConnection, DatabaseEvent,
    DatabaseList, DatabaseWake, UpdateDatabase,
};
pub use events::Event;
pub use fork::{ForkRequest, ForkTreeRequest, PromoteRequest, Promotion};
pub use repl::{KernelInfo, ReplKernel, ReplSession, ReplSessions};
pub use snapshots::{Snapshot, SnapshotList};
pub use stream::{ExecChunk, ExecExit, LogLine, StreamError};
pub use volumes::{
    CreateVolume, ForkVolumes, ResizeVolume, SandboxVolume, Volume, VolumeAttachment,
};

/// `POST /v1/sandboxes` body (contract §2.1 "Create body"). Unknown keys are rejected so that a
/// typo is a 400 naming the field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// Template name (1-63 of `a-z`, `0-9`, `-`, not starting with `-`). Ignored with
    /// `from_snapshot` (the snapshot decides; contract §2.1).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$"))]
    pub template: Option<String>,
    /// Seconds until the sandbox is killed, refreshed by any API activity. Default 3600.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 2592000))]
    #[serde(deserialize_with = "crate::de::opt_int")]
    pub ttl_seconds: Option<i64>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::metadata_map))]
    pub metadata: Option<BTreeMap<String, String>>,
    /// True: ignore the TTL; the idle sweeper hibernates instead (seed 003).
    #[serde(default)]
    pub persistent: Option<bool>,
    /// Snapshot id (`snap-...`) to restore into the new sandbox.
    #[serde(default)]
    pub from_snapshot: Option<String>,
    /// Volumes of the workspace to attach, each at `/mnt/{name}`: `[{"name", "read_only"}]`
    /// (contract §2.1; Py always sends `read_only`, TS only when given). With
    /// `from_snapshot` the snapshot's volumes are attached too.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 0))]
    pub volumes: Option<Vec<VolumeMount>>,
    /// Environment for every exec and kernel of the sandbox. Never echoed back.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(schema_with = schema::env_map))]
    pub envs: Option<BTreeMap<String, String>>,
    /// False: no egress at all (the E2B name). Default: the server's `--sandbox-egress`.
    /// REST only: the published SDKs send neither this nor `network` (issue 7).
    #[serde(default)]
    pub allow_internet_access: Option<bool>,
    /// Per-sandbox egress lists.
    #[serde(default)]
    pub network: Option<SandboxNetwork>,
    /// Whole CPUs. Sizes come from the template (seed 000): a value other than the template's
    /// is a 400; with `from_snapshot` the snapshot's sizes win and it is ignored. The SDKs no
    /// longer send it (contract §2.1).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u32>, minimum = 1))]
    pub cpu: Option<serde_json::Value>,
    /// MiB; as `cpu`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u32>, minimum = 1))]
    pub memory_mb: Option<serde_json::Value>,
    /// Size of the sandbox's disk (its writable root and `/tmp`), MiB; writes past it fail
    /// with ENOSPC inside the sandbox. Default: the server's `--default-disk-mb` (10240).
    /// With `from_snapshot` the snapshot's size wins. At least 256; above the server's
    /// `--max-disk-mb` a 400 naming `disk_mb`.
    #[serde(default, deserialize_with = "crate::de::opt_int")]
    #[cfg_attr(feature = "openapi", schema(minimum = 256))]
    pub disk_mb: Option<u32>,
    /// Placement hint (issue 12): the name of the host to create on, instead of the
    /// scheduler's choice. REST only (operators, tests); 400 for an unknown host, 503 when it
    /// is down, draining or full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// Egress lists of a sandbox (issue 7). Entries are `A.B.C.D`, `A.B.C.D/N`, `A.B.C.D:PORT` or
/// `A.B.C.D/N:PORT`. `allow_out` wins over `deny_out` and opens even the private ranges blocked
/// by default (10/8, 172.16/12, 192.168/16, link-local), but never the host or another sandbox:
/// an entry overlapping the server's sandbox network, `10.0.2.0/24` or an address of the host
/// is a 400 naming it (issue 23 findings 1 and 2; the operator opens a host service with
/// `--allow-host-service`). Without internet access the resolver is closed too.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SandboxNetwork {
    #[serde(default)]
    pub allow_out: Option<Vec<String>>,
    #[serde(default)]
    pub deny_out: Option<Vec<String>>,
}

/// One volume in a create body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct VolumeMount {
    pub name: String,
    /// Mount it read-only (writes fail with EROFS); several sandboxes may hold a volume
    /// read-only at once while none holds it read-write.
    #[serde(default)]
    pub read_only: bool,
}

/// A sandbox as the API returns it (contract §7 "Sandbox JSON").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Sandbox {
    /// UUID.
    pub id: String,
    pub template: String,
    /// `creating`, `running`, `paused`, `hibernated`, `failed` or `deleted`.
    pub status: String,
    /// Whole CPUs.
    pub cpu: u32,
    /// MiB.
    pub memory_mb: u32,
    pub metadata: BTreeMap<String, String>,
    /// Host-reachable address of the sandbox's current instance (unique on its host; a wake
    /// gives a new one). Inside, every sandbox is `10.0.2.100`. Null without a network or
    /// while hibernated.
    pub guest_ip: Option<String>,
    /// Whether public destinations are reachable; null without a network.
    pub allow_internet_access: Option<bool>,
    /// The sandbox's egress lists (normalized); null without a network.
    pub network: Option<SandboxNetwork>,
    /// Time from request to the guest answering, ms.
    pub boot_ms: Option<i64>,
    /// `cold`, `snapshot` (template or user snapshot), `fork` or `wake`.
    pub boot_mode: String,
    /// RFC 3339.
    pub created_at: String,
    pub persistent: bool,
    pub ttl_seconds: i64,
    pub from_snapshot: Option<String>,
    /// Size of the sandbox's disk, MiB (an extra key; null for sandboxes made before disks).
    #[serde(default)]
    pub disk_mb: Option<u32>,
    /// Name of the host the sandbox lives on (issue 12); any host answers for it. Empty from
    /// a server that does not send it (before issue 12); this server always sends it.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub host: String,
    /// Volumes the sandbox holds (kept while it is hibernated).
    #[serde(default)]
    pub volumes: Vec<SandboxVolume>,
}

/// `POST .../exec` and `.../exec/stream` body (contract §2.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// The command line: not blank, no NUL.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[^\\x00]*[^ \\t\\n\\r\\x0b\\x0c\\x00][^\\x00]*$")
    )]
    pub cmd: String,
    /// Kill the command's process group after this many seconds (at most 30 days). Default
    /// 300; 0 = no limit.
    #[serde(default, deserialize_with = "crate::de::opt_int")]
    #[cfg_attr(feature = "openapi", schema(maximum = 2592000))]
    pub timeout_seconds: Option<u64>,
    /// Extra environment for this command.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(schema_with = schema::env_map))]
    pub env: Option<BTreeMap<String, String>>,
    /// Working directory; default `/workspace`. No NUL.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[^\\x00]*$"))]
    pub cwd: Option<String>,
    /// Stream only: keep the command running when the client disconnects.
    #[serde(default)]
    pub background: Option<bool>,
}

/// `POST .../exec` reply (contract §4 ExecResult). Output that is not UTF-8 is decoded lossily.
/// A command killed at its timeout is not an ExecResult but a 504 (contract §7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecResult {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
    pub duration_ms: u64,
    /// True when stdout or stderr went past the server's cap for a non-streaming exec (16 MiB
    /// per stream) and the rest was dropped; large output belongs to `exec/stream` or a file.
    /// An extra key: the SDKs ignore it (contract §4).
    #[serde(default)]
    pub truncated: bool,
}

/// `POST .../repl/sessions` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateContext {
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^([Pp][Yy]([Tt][Hh][Oo][Nn]3?)?)$")
    )]
    pub language: Option<String>,
    /// Accepted for E2B-style clients: working directory of the kernel (ignored when adopting).
    #[serde(default)]
    pub cwd: Option<String>,
}

/// A code context (contract §2.2: the SDKs read only `id`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CodeContext {
    pub id: String,
    pub language: String,
    /// The kernel behind the context.
    pub kernel_id: String,
    /// True when the context adopted a kernel that was live in a restored or forked sandbox.
    pub adopted: bool,
}

/// `POST .../repl/sessions/{ctx}/run` body (contract §2.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunCode {
    pub code: String,
    /// Interrupt the run after this many ms (at most 30 days); the kernel keeps its state.
    /// Default: no limit.
    #[serde(default, deserialize_with = "crate::de::opt_int")]
    #[cfg_attr(feature = "openapi", schema(maximum = 2592000000_u64))]
    pub timeout_ms: Option<u64>,
}

/// A kernel run's result (contract §4 Execution). `exit` and `exit_code` carry the same value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Execution {
    /// MIME bundles with string values; images base64, `application/json` a JSON string.
    pub results: Vec<BTreeMap<String, String>>,
    pub stdout: String,
    pub stderr: String,
    pub error: Option<String>,
    pub exit: i32,
    pub exit_code: i32,
    pub duration_ms: u64,
}

/// A file or directory (contract §2.4 FileInfo).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileInfo {
    pub name: String,
    pub path: String,
    pub is_dir: bool,
    /// Bytes.
    pub size: u64,
    /// Permission bits in octal, e.g. `"0644"`.
    pub mode: String,
    /// Unix seconds.
    pub mtime: i64,
}

/// `GET .../fs/dir` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DirListing {
    pub path: String,
    pub entries: Vec<FileInfo>,
}

/// `PUT .../fs` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WriteResult {
    pub path: String,
    /// Bytes written.
    pub bytes: u64,
}

/// `GET/PATCH .../lifecycle` (contract §2.2; seed 003).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Lifecycle {
    pub ttl_seconds: i64,
    pub persistent: bool,
    /// Seconds since the last API activity on the sandbox.
    pub idle_seconds: i64,
}

/// `PATCH .../lifecycle` body: only the keys given change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LifecyclePatch {
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 2592000))]
    #[serde(deserialize_with = "crate::de::opt_int")]
    pub ttl_seconds: Option<i64>,
    #[serde(default)]
    pub persistent: Option<bool>,
}

/// A template (contract §2.8 Template keys): a built-in (`is_global`, no `workspace`) or one a
/// workspace built (`workspace` = its id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Template {
    pub name: String,
    pub generation: i64,
    /// Apparent size of the rootfs, bytes.
    pub size_bytes: u64,
    pub cpu: u32,
    pub memory_mb: u32,
    pub is_global: bool,
    pub description: String,
    /// Hash of the current build's inputs (recipe, or Dockerfile + context + parent).
    pub hash: String,
    /// Unix seconds of the bake or build.
    pub built_at: i64,
    /// Owning workspace id; `null` for the built-ins.
    #[serde(default)]
    pub workspace: Option<String>,
    /// `builtin`, `dockerfile` or `rootfs_tar`.
    #[serde(default)]
    pub kind: String,
    /// Template a Dockerfile build started `FROM`.
    #[serde(default)]
    pub base: Option<String>,
    /// Disk size asked for at build time, MiB (user templates).
    #[serde(default)]
    pub size_mb: Option<u32>,
    /// False when the template has no python3 (code contexts need it).
    #[serde(default)]
    pub python: bool,
}

/// A template build (contract §2.8 TemplateBuild keys, plus what the build produced).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TemplateBuild {
    /// `bld-` + 32 hex digits.
    pub id: String,
    /// Template name.
    pub name: String,
    /// `queued`, `running`, `done` or `failed` (the SDKs wait for the last two).
    pub status: String,
    /// Why the build failed; a failing `RUN` includes the end of its output.
    pub error: Option<String>,
    /// RFC 3339, when the build started running.
    pub started_at: Option<String>,
    /// RFC 3339, when it ended.
    pub ended_at: Option<String>,
    /// Disk size asked for, MiB.
    pub size_mb: u32,
    /// Size of the finished rootfs, bytes.
    pub bytes: Option<u64>,
    /// Always null: this server builds from Dockerfiles and tars, not registry images.
    pub image_ref: Option<String>,
    /// RFC 3339, when the build was submitted.
    pub created_at: String,
    pub cpu: u32,
    pub memory_mb: u32,
    /// `dockerfile` or `rootfs_tar`.
    pub kind: String,
    /// Generation of the template this build made (or reused, on a cache hit).
    pub generation: Option<i64>,
    /// True when nothing changed and the current build was reused.
    pub cache_hit: bool,
}

/// `POST /v1/me/tokens` body (contract §2.9).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateToken {
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 200))]
    pub label: Option<String>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 3650))]
    #[serde(deserialize_with = "crate::de::opt_int")]
    pub expires_in_days: Option<i64>,
}

/// A token; `token` (the secret) is present only in the create reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Token {
    pub prefix: String,
    pub name: String,
    pub label: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub token: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    pub expires_at: Option<String>,
}

/// `GET .../ports` reply (contract §2.2: the SDKs read `ports[].port`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Ports {
    pub ports: Vec<Port>,
}

/// A TCP port listening inside a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Port {
    pub port: u16,
    pub listening: bool,
    /// Address it is bound to inside (`0.0.0.0`: every address; `127.0.0.1`: loopback only,
    /// which the proxy cannot reach).
    pub address: String,
    /// Path of the authenticated reverse proxy to it.
    pub proxy_url: String,
}

/// `POST .../preview-token` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PreviewTokenRequest {
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 65535))]
    #[serde(deserialize_with = "crate::de::int")]
    pub port: u16,
    /// Lifetime of the token, seconds (default 3600, at most 7 days).
    #[serde(default, deserialize_with = "crate::de::opt_int")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 604800))]
    pub ttl_seconds: Option<u64>,
}

/// `POST .../preview-token` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PreviewToken {
    /// A URL a browser can open as is (the token in it becomes a cookie).
    pub url: String,
    pub token: String,
    /// RFC 3339.
    pub expires_at: String,
}

/// Every error reply: `{"error": "<message>"}` (contract §7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: String,
}

impl Execution {
    /// The `text/plain` of the first result that has one (contract §4 `Execution.text`): `"6"`
    /// for a cell ending in the expression `total` (seed 000 §1).
    pub fn text(&self) -> Option<&str> {
        self.results
            .iter()
            .find_map(|r| r.get("text/plain"))
            .map(String::as_str)
    }

    /// The base64 `image/png` of the first result (contract §4 `Execution.png`; seed 004).
    pub fn png(&self) -> Option<&str> {
        self.results
            .first()
            .and_then(|r| r.get("image/png"))
            .map(String::as_str)
    }

    /// The `text/html` of the first result that has one (a DataFrame's table, seed 004).
    pub fn html(&self) -> Option<&str> {
        self.results
            .iter()
            .find_map(|r| r.get("text/html"))
            .map(String::as_str)
    }
}
