//! Errors of this crate. Messages say what failed without repeating the cause
//! (the `source()` chain carries it) and name no host paths, so the server can
//! pass `to_string()` to API clients.

use std::fmt;
use std::io;

/// A recipe that cannot be baked as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecipeError {
    /// Name is not 1-63 chars of `[a-z0-9-]` starting with a letter or digit.
    #[error("invalid template name {0:?}")]
    Name(String),
    /// Not a Debian package name (policy 5.6.1).
    #[error("invalid package name {0:?}")]
    Package(String),
    /// Not a pinned `name==version` wheel.
    #[error("invalid wheel {0:?}: expected name==version")]
    Wheel(String),
    /// Wheels need `python3-pip` in the package list to be installed.
    #[error("recipe installs wheels but not python3-pip")]
    WheelsWithoutPip,
    /// A CA certificate file name is not `NAME.crt` of safe characters.
    #[error("invalid CA certificate file name {0:?}")]
    CaCertificate(String),
}

/// The step of a bake that failed; shown in [`BakeError`] messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BakeStep {
    /// Taking the per-template lock file.
    Lock,
    /// Creating the work directory and log, removing stale partial builds.
    Prepare,
    /// Downloading pinned wheels on the host (`pip download`).
    FetchWheels,
    /// Running mmdebstrap.
    Bootstrap,
    /// Checking the rootfs in a chroot (python3 imports, /bin/bash).
    Verify,
    /// Walking the rootfs to compute its size.
    Measure,
    /// Writing meta.json, renaming the build into place, switching `current`.
    Publish,
}

impl fmt::Display for BakeStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BakeStep::Lock => "lock",
            BakeStep::Prepare => "prepare",
            BakeStep::FetchWheels => "fetch wheels",
            BakeStep::Bootstrap => "bootstrap",
            BakeStep::Verify => "verify",
            BakeStep::Measure => "measure",
            BakeStep::Publish => "publish",
        })
    }
}

/// Why [`TemplateStore::bake`](crate::TemplateStore::bake) failed. The partial
/// build has been removed by the time this is returned.
#[derive(Debug, thiserror::Error)]
pub enum BakeError {
    /// No built-in recipe has this name.
    #[error("template {0} not found")]
    UnknownTemplate(String),
    /// The recipe did not validate.
    #[error("invalid recipe")]
    InvalidRecipe(#[from] RecipeError),
    /// A file system operation of `step` failed.
    #[error("{step} failed")]
    Io {
        /// Step that was running.
        step: BakeStep,
        /// Underlying error.
        #[source]
        source: io::Error,
    },
    /// A program could not be started.
    #[error("{step} failed: cannot run {program}")]
    Spawn {
        /// Step that was running.
        step: BakeStep,
        /// Program name (`mmdebstrap`, `chroot`, `python3`).
        program: String,
        /// Underlying error.
        #[source]
        source: io::Error,
    },
    /// A program exited unsuccessfully.
    #[error("{step} failed: {program} exited with {status}")]
    Command {
        /// Step that was running.
        step: BakeStep,
        /// Program name (`mmdebstrap`, `chroot`, `python3`).
        program: String,
        /// Exit status as text (`exit status: 1`, `signal: 9`).
        status: String,
        /// Last lines of its output (at most 20), for the server log.
        log_tail: Vec<String>,
    },
    /// Reading the existing builds failed.
    #[error("cannot read existing builds")]
    Store(#[from] StoreError),
}

impl BakeError {
    /// Wraps an I/O error of `step`.
    pub(crate) fn io(step: BakeStep) -> impl FnOnce(io::Error) -> BakeError {
        move |source| BakeError::Io { step, source }
    }
}

/// Why reading or changing the template store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The template name is not valid.
    #[error("invalid template name")]
    Name(#[from] RecipeError),
    /// A file of the store could not be read or written; `what` names it
    /// relative to the store (`base/current`).
    #[error("cannot access {what}")]
    Io {
        /// Store-relative description of the file.
        what: String,
        /// Underlying error.
        #[source]
        source: io::Error,
    },
    /// meta.json of a build is not valid JSON of the expected shape.
    #[error("meta.json of build {build} is invalid")]
    Meta {
        /// `<name>/<build id>`.
        build: String,
        /// Underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// The build does not exist.
    #[error("build {build_id} of template {name} not found")]
    BuildNotFound {
        /// Template name.
        name: String,
        /// Build id (`<hash>-g<generation>`).
        build_id: String,
    },
    /// The current build of a template cannot be removed.
    #[error("build {build_id} is the current build of template {name}")]
    CurrentBuild {
        /// Template name.
        name: String,
        /// Build id (`<hash>-g<generation>`).
        build_id: String,
    },
}

impl StoreError {
    /// Wraps an I/O error on the store file described by `what`.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> StoreError {
        let what = what.into();
        move |source| StoreError::Io { what, source }
    }
}
