//! What a build is made from once its request was accepted, and how a build fails.

use pandastack_templates::custom::context::Context;
use pandastack_templates::custom::dockerfile::Dockerfile;
use pandastack_templates::Resources;
use std::path::PathBuf;
use std::sync::Arc;

/// An accepted build request (the API layer parsed and stored the upload).
#[derive(Debug, Clone)]
pub struct Submission {
    /// `bld-` + 32 hex digits, chosen before the upload so the files can be stored under it.
    pub id: String,
    pub workspace_id: String,
    /// Template name (validated; not a built-in).
    pub name: String,
    pub resources: Resources,
    pub source: SubmittedSource,
    /// Notes for the top of the build log (ignored fields).
    pub notes: Vec<String>,
}

/// The two kinds of build (contract §2.8).
#[derive(Debug, Clone)]
pub enum SubmittedSource {
    /// `build_from_dockerfile`: the Dockerfile text and its context files.
    Dockerfile { text: String, context: Context },
    /// `build(rootfs_tar=...)`: the stored upload, with its sha256 and size in bytes.
    RootfsTar {
        path: PathBuf,
        sha256: String,
        size: u64,
    },
}

impl SubmittedSource {
    /// `dockerfile` or `rootfs_tar` (the `kind` of the build row).
    pub fn kind(&self) -> &'static str {
        match self {
            SubmittedSource::Dockerfile { .. } => "dockerfile",
            SubmittedSource::RootfsTar { .. } => "rootfs_tar",
        }
    }
}

/// A queued build, as the worker runs it.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: String,
    pub workspace_id: String,
    pub name: String,
    pub resources: Resources,
    pub source: JobSource,
}

/// A build source, parsed.
#[derive(Debug, Clone)]
pub enum JobSource {
    Dockerfile {
        text: String,
        parsed: Arc<Dockerfile>,
        context: Arc<Context>,
    },
    RootfsTar {
        path: PathBuf,
        sha256: String,
    },
}

/// Why a build failed: the message goes to the build's `error` and the end of its log. It is
/// written for the user (line numbers, the failing command's output) and names no host path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError(pub String);

impl BuildError {
    /// A failure of our own machinery: the detail (which may name host paths) goes to the
    /// server log only; the user gets what failed.
    pub fn internal(what: &str, detail: impl std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "template build: {what} failed");
        BuildError(format!("{what} failed (server error; see the server log)"))
    }
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for BuildError {
    fn from(s: String) -> Self {
        BuildError(s)
    }
}
