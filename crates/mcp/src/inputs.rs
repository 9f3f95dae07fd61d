//! The arguments of each tool. Their doc comments become the descriptions in the JSON schemas
//! MCP clients show to the model; unknown arguments are refused so that a typo is a clear error.

use rmcp::schemars::{self, JsonSchema};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `create_sandbox`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// Template: `code-interpreter` (Python 3 with pandas, numpy, matplotlib, plotly; the
    /// default) or `base` (Debian with bash, python3, curl, git).
    #[serde(default)]
    pub template: Option<String>,
    /// Seconds without any activity after which the sandbox is killed (default 3600, at most
    /// 30 days). Every call refreshes it.
    #[serde(default)]
    pub ttl_seconds: Option<i64>,
    /// Labels stored with the sandbox and shown by list_sandboxes.
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    /// True: never killed by the TTL; hibernated (memory saved to disk) after 5 idle minutes.
    #[serde(default)]
    pub persistent: Option<bool>,
    /// False: no internet from the sandbox (default: the server's policy, usually allowed).
    #[serde(default)]
    pub allow_internet_access: Option<bool>,
    /// Volumes (from create_volume) to mount at `/mnt/{name}`: a read-write volume is held by
    /// one sandbox at a time; read-only ones may be shared.
    #[serde(default)]
    pub volumes: Option<Vec<AttachVolume>>,
}

/// A volume `create_sandbox` mounts.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttachVolume {
    /// The volume's name.
    pub name: String,
    /// Mount it read-only (default false).
    #[serde(default)]
    pub read_only: bool,
}

/// `preview_url`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewUrl {
    /// The sandbox id.
    pub sandbox_id: String,
    /// A TCP port a server listens on in the sandbox (on 0.0.0.0), 1 to 65535.
    pub port: u16,
    /// How long the URL works, seconds (default 3600, at most 7 days).
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
}

/// Tools that take only a sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxId {
    /// The sandbox id (a UUID, from create_sandbox or list_sandboxes).
    pub sandbox_id: String,
}

/// Tools without arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Nothing {}

/// `run_code`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCode {
    /// The sandbox id.
    pub sandbox_id: String,
    /// Python code. Runs in the sandbox's persistent kernel: variables, imports and loaded data
    /// stay for the next call. The value of the last expression is returned (a DataFrame as a
    /// table, a matplotlib figure as a PNG image).
    pub code: String,
    /// Interrupt the cell after this many seconds (default 300); the kernel keeps its state.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

/// `exec`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Exec {
    /// The sandbox id.
    pub sandbox_id: String,
    /// A shell command line (bash syntax), run in a fresh process.
    pub command: String,
    /// Kill the command after this many seconds (default 300).
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// Working directory (default `/workspace`).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
}

/// `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFile {
    /// The sandbox id.
    pub sandbox_id: String,
    /// Absolute path in the sandbox, e.g. `/workspace/result.csv`.
    pub path: String,
}

/// How `write_file`'s content is encoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// The content is the text itself (written as UTF-8).
    #[default]
    Utf8,
    /// The content is base64 of the bytes.
    Base64,
}

/// `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFile {
    /// The sandbox id.
    pub sandbox_id: String,
    /// Absolute path in the sandbox; parent directories are created; an existing file is
    /// replaced atomically.
    pub path: String,
    /// The file's content (see `encoding`).
    pub content: String,
    /// `utf8` (default) or `base64`.
    #[serde(default)]
    pub encoding: Encoding,
}

/// `list_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFiles {
    /// The sandbox id.
    pub sandbox_id: String,
    /// Absolute directory path (default `/workspace`).
    #[serde(default)]
    pub path: Option<String>,
}

/// `restore`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Restore {
    /// The snapshot id (`snap-...`, from the snapshot tool).
    pub snapshot_id: String,
    /// TTL of the new sandbox in seconds (default 3600).
    #[serde(default)]
    pub ttl_seconds: Option<i64>,
}

/// `fork`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fork {
    /// The sandbox to copy; it keeps running.
    pub sandbox_id: String,
    /// Number of copies, 1 to 16 (default 1).
    #[serde(default)]
    pub count: Option<usize>,
    /// Labels of every copy.
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// `create_database`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateDatabase {
    /// What it is for, e.g. `agent-memory`; also names the database inside (`agent_memory`).
    #[serde(default)]
    pub label: Option<String>,
    /// RAM tier: `1g` (default), `4g` or `16g`.
    #[serde(default)]
    pub size: Option<String>,
    /// True: never stopped when idle (by default it stops after 10 idle minutes and the next
    /// connection starts it again).
    #[serde(default)]
    pub always_on: Option<bool>,
}

/// `create_volume`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    /// Name, unique in the workspace: letters, digits, `.`, `_` and `-`, at most 64.
    pub name: String,
    /// Size in MiB (64 to 65536); it can grow later, never shrink.
    pub size_mb: u64,
}

/// Tools that take only a volume.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VolumeName {
    /// The volume's name (from create_volume or list_volumes).
    pub name: String,
}

/// Tools that take only a database.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DatabaseId {
    /// The database id (a UUID, from create_database or list_databases).
    pub database_id: String,
}
