//! The messages. `HostMsg` flows host -> guest, `GuestMsg` guest -> host. Both are JSON objects
//! tagged by `"type"` (snake_case). Bodies (raw bytes) ride in the frame, never in the JSON.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Request id chosen by the host; replies and stream items carry the same id.
pub type RequestId = u64;

/// Feature name: the guest honours [`HostMsg::FileRead`]'s `window` and [`HostMsg::FileReadAck`].
pub const FEATURE_READ_WINDOW: &str = "read_window";

/// A message from the host to the guest daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HostMsg {
    /// First frame of every connection. Answered by [`GuestMsg::HelloOk`] or a version error.
    Hello { id: RequestId, version: u32 },
    /// Liveness probe, answered by [`GuestMsg::Pong`]. With `memory_lease_ms` the host also
    /// says it watches the sandbox's memory from outside for that long (the guard may stop
    /// looking; 0: the use is high, look now and on your own). Older guests ignore the field.
    Ping {
        id: RequestId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory_lease_ms: Option<u64>,
    },
    /// Runs a command line. A line without shell syntax is spawned directly (faster); any other
    /// line runs under `/bin/bash -c` (or `/bin/sh -c` where bash is missing). The process gets
    /// its own process group; at `timeout_ms` the whole group is killed (SIGKILL).
    /// Output arrives as [`GuestMsg::Output`] frames (body = raw bytes), then one
    /// [`GuestMsg::Exited`].
    Exec {
        id: RequestId,
        cmd: String,
        /// Extra environment on top of the guest's default (`PATH`, `HOME`, ...).
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Working directory; the guest's default (`/workspace` if it exists, else `/`) when absent.
        #[serde(default)]
        cwd: Option<String>,
        /// Kill the process group after this many milliseconds. None = no limit.
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
    /// Bytes for an exec's stdin (body). An empty body closes stdin.
    ExecStdin { id: RequestId },
    /// Kills the process group of exec `id` (SIGKILL) if it is still running.
    ExecKill { id: RequestId },
    /// Reads a file: answered by [`GuestMsg::FileChunk`] frames then [`GuestMsg::FileEnd`].
    /// With `window` (a guest whose `HelloOk` lists [`FEATURE_READ_WINDOW`]) the guest keeps at
    /// most that many chunks unacknowledged ([`HostMsg::FileReadAck`]), so a slow reader holds
    /// up its own download only, never the connection. [`HostMsg::FileAbort`] ends the read.
    FileRead {
        id: RequestId,
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<u32>,
    },
    /// The host consumed one chunk of read `id` (see [`HostMsg::FileRead`]'s `window`). No reply.
    FileReadAck { id: RequestId },
    /// Starts an atomic write of `path` (temp file beside it, renamed on [`HostMsg::FileEnd`]).
    /// Missing parent directories are created. Chunks follow as [`HostMsg::FileChunk`].
    FileWrite { id: RequestId, path: String },
    /// A chunk of the file being written by request `id` (body = bytes).
    FileChunk { id: RequestId },
    /// The write `id` is complete: fsync-free rename into place, answered by
    /// [`GuestMsg::FileWritten`].
    FileEnd { id: RequestId },
    /// Abandons write `id` and removes its temp file, or stops read `id`.
    FileAbort { id: RequestId },
    /// Lists a directory: answered by [`GuestMsg::DirList`].
    ListDir { id: RequestId, path: String },
    /// Stats a path (symlinks not followed): answered by [`GuestMsg::Stat`].
    Stat { id: RequestId, path: String },
    /// Removes a file, or a directory with everything in it. Answered by [`GuestMsg::Done`].
    Remove { id: RequestId, path: String },
    /// Creates a directory and its parents. Answered by [`GuestMsg::Done`].
    MakeDir { id: RequestId, path: String },
    /// Starts a kernel (a long-lived interpreter) named `kernel_id` (chosen by the host).
    /// Answered by [`GuestMsg::KernelStarted`] once the kernel accepts code.
    KernelStart {
        id: RequestId,
        kernel_id: String,
        /// Only `"python"` in protocol v1.
        language: String,
        #[serde(default)]
        env: BTreeMap<String, String>,
    },
    /// Runs code in a kernel. At `timeout_ms` the kernel is interrupted (SIGINT ->
    /// KeyboardInterrupt) and keeps its state. Answered by [`GuestMsg::KernelResult`].
    KernelRun {
        id: RequestId,
        kernel_id: String,
        code: String,
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
    /// Stops a kernel. Answered by [`GuestMsg::Done`].
    KernelStop { id: RequestId, kernel_id: String },
    /// Lists live kernels. Answered by [`GuestMsg::Kernels`].
    KernelList { id: RequestId },
}

impl HostMsg {
    /// The request id this message belongs to.
    pub fn id(&self) -> RequestId {
        use HostMsg::*;
        match self {
            Hello { id, .. }
            | Ping { id, .. }
            | Exec { id, .. }
            | ExecStdin { id }
            | ExecKill { id }
            | FileRead { id, .. }
            | FileReadAck { id }
            | FileWrite { id, .. }
            | FileChunk { id }
            | FileEnd { id }
            | FileAbort { id }
            | ListDir { id, .. }
            | Stat { id, .. }
            | Remove { id, .. }
            | MakeDir { id, .. }
            | KernelStart { id, .. }
            | KernelRun { id, .. }
            | KernelStop { id, .. }
            | KernelList { id } => *id,
        }
    }
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// Error categories; the host maps them to HTTP statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Path, kernel or exec id does not exist (HTTP 404).
    NotFound,
    /// The request is malformed or not allowed, e.g. reading a directory as a file (HTTP 400).
    Invalid,
    /// The protocol version is not spoken by this guest.
    Version,
    /// An operating-system error inside the sandbox (HTTP 500).
    Io,
    /// A kernel died or could not start (HTTP 500).
    Kernel,
    /// The path may not be changed: a read-only filesystem or no permission (HTTP 403).
    Denied,
    /// The sandbox's disk is full (its quota is used up; HTTP 507).
    NoSpace,
    /// The kernel was killed by the guest's memory guard: the sandbox ran out of memory
    /// (issue 8 point 3). The message names the process and the sizes.
    OutOfMemory,
}

/// A process the guest's memory guard killed because the sandbox's memory use reached its
/// limit (issue 8 point 3: one process dies, not the whole sandbox). Reported once, in the
/// next [`GuestMsg::Pong`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomKill {
    /// Its pid inside the sandbox.
    pub pid: u32,
    /// Its command name (`/proc/<pid>/comm`, at most 15 bytes).
    pub name: String,
    /// Processes killed: 1, or more when the guard killed `pid`'s whole process group (many
    /// small processes, such as a fork loop).
    pub processes: u32,
    /// Their resident memory when killed, bytes (pages shared between them counted in each).
    pub rss_bytes: u64,
    /// The sandbox's memory use (`MemTotal - MemAvailable` of its /proc/meminfo) then, bytes.
    pub used_bytes: u64,
    /// The sandbox's memory limit (its `MemTotal`: the create's `memory_mb`), bytes.
    pub limit_bytes: u64,
    /// When, Unix ms.
    pub at_ms: u64,
}

impl OomKill {
    /// `killed <name> (pid N, X MiB resident) when the sandbox used Y of its Z MiB` (or
    /// `killed <name> (pid N) and K more processes of its group (X MiB resident together) ...`):
    /// the text of an exec's stderr note and of the sandbox event's cause.
    pub fn describe(&self) -> String {
        let who = if self.processes > 1 {
            format!(
                "{} (pid {}) and {} more processes of its group ({} MiB resident together)",
                self.name,
                self.pid,
                self.processes - 1,
                self.rss_bytes >> 20
            )
        } else {
            format!(
                "{} (pid {}, {} MiB resident)",
                self.name,
                self.pid,
                self.rss_bytes >> 20
            )
        };
        format!(
            "killed {who} when the sandbox used {} of its {} MiB",
            self.used_bytes >> 20,
            self.limit_bytes >> 20
        )
    }
}

/// One directory entry or stat result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Base name.
    pub name: String,
    /// Absolute path inside the sandbox.
    pub path: String,
    pub is_dir: bool,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits and file type as `st_mode`, e.g. 33188 for a 0644 regular file.
    pub mode: u32,
    /// Modification time, Unix seconds.
    pub mtime: i64,
    pub is_symlink: bool,
}

/// The result of one kernel run. Mirrors the wire contract's Execution (§4).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Execution {
    /// Rich results in order: MIME bundles (`{"text/plain": ..., "text/html": ..., "image/png":
    /// base64}`), one per `display()` call, figure, or the cell's last expression value.
    pub results: Vec<BTreeMap<String, String>>,
    pub stdout: String,
    pub stderr: String,
    /// Formatted traceback when the cell raised (or was interrupted), else None.
    pub error: Option<String>,
    /// 0 on success, 1 when the cell raised.
    pub exit_code: i32,
    /// Wall time of the run inside the kernel, ms.
    pub duration_ms: u64,
    /// True when the run was interrupted because `timeout_ms` passed.
    #[serde(default)]
    pub timed_out: bool,
}

/// A live kernel, as listed by [`HostMsg::KernelList`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelInfo {
    pub kernel_id: String,
    pub language: String,
    pub pid: u32,
    /// Unix ms of the last run's end (or of start).
    pub last_used_ms: u64,
}

/// A message from the guest daemon to the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GuestMsg {
    HelloOk {
        id: RequestId,
        version: u32,
        guest_version: String,
        /// Optional capabilities added within this protocol version (e.g.
        /// [`FEATURE_READ_WINDOW`]); a host uses one only when the guest lists it, so hosts and
        /// guests of different builds keep talking.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        features: Vec<String>,
    },
    /// The answer to a [`HostMsg::Ping`], with the processes the memory guard killed since
    /// the previous `Pong` (each reported once; empty and left out of the JSON when none).
    Pong {
        id: RequestId,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        oom_kills: Vec<OomKill>,
    },
    /// A chunk of an exec's output (body = raw bytes, possibly not UTF-8).
    Output {
        id: RequestId,
        stream: OutputStream,
    },
    /// An exec finished. `exit_code` is the exit status, or 128 + signal when killed by one;
    /// `timed_out` says the guest killed it at `timeout_ms`.
    Exited {
        id: RequestId,
        exit_code: i32,
        timed_out: bool,
        duration_ms: u64,
    },
    /// A chunk of a file being read (body = bytes).
    FileChunk {
        id: RequestId,
    },
    /// The file read `id` is complete.
    FileEnd {
        id: RequestId,
    },
    /// The write `id` was renamed into place; `bytes` were written.
    FileWritten {
        id: RequestId,
        bytes: u64,
    },
    DirList {
        id: RequestId,
        entries: Vec<FileEntry>,
    },
    Stat {
        id: RequestId,
        entry: FileEntry,
    },
    /// The request succeeded with nothing to return.
    Done {
        id: RequestId,
    },
    KernelStarted {
        id: RequestId,
        kernel_id: String,
        pid: u32,
    },
    KernelResult {
        id: RequestId,
        execution: Execution,
    },
    Kernels {
        id: RequestId,
        kernels: Vec<KernelInfo>,
    },
    /// Request `id` failed.
    Error {
        id: RequestId,
        code: ErrorCode,
        message: String,
    },
}

impl GuestMsg {
    /// The request id this message answers.
    pub fn id(&self) -> RequestId {
        use GuestMsg::*;
        match self {
            HelloOk { id, .. }
            | Pong { id, .. }
            | Output { id, .. }
            | Exited { id, .. }
            | FileChunk { id }
            | FileEnd { id }
            | FileWritten { id, .. }
            | DirList { id, .. }
            | Stat { id, .. }
            | Done { id }
            | KernelStarted { id, .. }
            | KernelResult { id, .. }
            | Kernels { id, .. }
            | Error { id, .. } => *id,
        }
    }

    /// True when this is the last message for its request id.
    pub fn is_final(&self) -> bool {
        !matches!(self, GuestMsg::Output { .. } | GuestMsg::FileChunk { .. })
    }
}
