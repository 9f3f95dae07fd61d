//! Running a Dockerfile build. With `RUN` steps the steps work on an overlay of the parent
//! template's rootfs (nothing copied up front), flattened into the new rootfs at the end
//! (hard links to the parent's files plus what the steps changed, `custom/flatten.rs`);
//! without one the new rootfs is hard links to the parent's files from the start. Each step in
//! order: `ENV`/`ARG`/`USER` change the build state, `WORKDIR` and `COPY`/`ADD` change the tree
//! on the host through `InRoot` (no sandbox runs then; they replace files, never write into
//! one, so shared inodes stay untouched), `RUN` runs in a build sandbox on it
//! ([`super::sandbox`]).
//!
//! What the steps may write is bounded by the template's `size_mb` (issue 23 finding 5): with
//! `RUN` the overlay's upper layer is on a build disk of that size ([`super::build_disk`]), so
//! a step gets ENOSPC past it; without one, `COPY`/`ADD` count their bytes against it. A step
//! that fails for want of room says so, naming `size_mb`.

use super::build_disk::BuildDisk;
use super::job::BuildError;
use super::log::BuildLog;
use super::publish::{self, Built};
use super::sandbox::{self, RunCommand};
use super::{parent, BuildsConfig};
use crate::host::Host;
use pandastack_templates::custom::context::Context;
use pandastack_templates::custom::copy::{self, CopyPlan};
use pandastack_templates::custom::dockerfile::{Dockerfile, Instruction, Step};
use pandastack_templates::custom::flatten;
use pandastack_templates::custom::in_root::InRoot;
use pandastack_templates::custom::state::{run_command_line, BuildState};
use pandastack_templates::custom::users;
use pandastack_templates::{build_hash, CustomMeta, Resources, Source, TemplateKind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file that keeps the rootfs's `/tmp` non-empty while the build runs: gVisor mounts a
/// fresh tmpfs over an empty `/tmp`, which would make files one `RUN` leaves there vanish
/// before the next (Docker keeps them). Removed before the template is published.
const TMP_MARKER: &str = "/tmp/.pandastack-build";

/// What the build works on.
pub struct DockerfileBuild<'a> {
    pub workspace_id: &'a str,
    pub name: &'a str,
    pub resources: Resources,
    pub text: &'a str,
    pub parsed: &'a Dockerfile,
    pub context: Arc<Context>,
    pub log: &'a BuildLog,
    pub cfg: &'a BuildsConfig,
}

/// The parent template and cache key of a Dockerfile build, as they are now.
///
/// # Errors
/// A bad `FROM` (unknown image, bad substitution).
pub fn plan(
    host: &Host,
    workspace_id: &str,
    parsed: &Dockerfile,
    text: &str,
    context: &Context,
    resources: &Resources,
) -> Result<(pandastack_templates::TemplateInfo, String), BuildError> {
    let mut pre = BuildState::default();
    for g in &parsed.global_args {
        if let Instruction::Arg(raw) = &g.instruction {
            pre.global_arg(raw).map_err(|e| at(g, e))?;
        }
    }
    let Instruction::From(raw) = &parsed.from.instruction else {
        return Err(BuildError("Dockerfile: no FROM instruction".into()));
    };
    let image = pre.from_image(raw).map_err(|e| at(&parsed.from, e))?;
    let parent = parent::resolve(host, workspace_id, &image)
        .map_err(|e| BuildError(format!("Dockerfile line {}: {e}", parsed.from.line)))?;
    let hash = build_hash(
        &Source::Dockerfile {
            text,
            context_digest: &context.digest(),
            parent: &parent::identity(&parent),
        },
        resources,
    );
    Ok((parent, hash))
}

/// Runs the build and publishes the template.
///
/// # Errors
/// [`BuildError`] naming the step that failed; nothing of the build is left on disk.
pub async fn run(host: &Arc<Host>, b: DockerfileBuild<'_>) -> Result<Built, BuildError> {
    let (parent, hash) = plan(
        host,
        b.workspace_id,
        b.parsed,
        b.text,
        &b.context,
        &b.resources,
    )?;
    let steps = &b.parsed.steps;
    b.log.line(&format!(
        "Building template {} from a Dockerfile: FROM {} (build {}), {} steps",
        b.name,
        parent.name,
        parent.build_id,
        steps.len()
    ));
    let slot = match publish::begin(host, b.workspace_id, b.name, &hash, b.log).await? {
        publish::Begun::Cached(info) => return Ok(Built::cached(info)),
        publish::Begun::New(slot) => slot,
    };
    let rootfs = slot.rootfs();
    let has_run = steps
        .iter()
        .any(|s| matches!(s.instruction, Instruction::Run(_)));
    // Without a RUN, host-side steps only (they replace files, never write into one): the new
    // rootfs starts as hard links to the parent's files. With one, the steps work on an
    // overlay of the parent, flattened at the end (`custom/flatten.rs`).
    let overlay = if has_run {
        b.log.line(&format!(
            "Mounting an overlay of the rootfs of {} for the RUN steps",
            parent.name
        ));
        host.check_disk_reserve("template build", u64::from(b.resources.disk_mb) << 20)
            .map_err(|e| BuildError(e.to_string()))?;
        Some(Overlay::mount(&parent.rootfs, slot.work_dir(), b.resources.disk_mb).await?)
    } else {
        b.log
            .line(&format!("Linking the rootfs of {}", parent.name));
        link_rootfs(&parent.rootfs, &rootfs).await?;
        None
    };
    let tree = overlay
        .as_ref()
        .map_or_else(|| rootfs.clone(), |o| o.merged.clone());

    let mut state = BuildState::new(&parent.runtime);
    for g in &b.parsed.global_args {
        if let Instruction::Arg(raw) = &g.instruction {
            state.global_arg(raw).map_err(|e| at(g, e))?;
        }
    }
    let mut warned_user = false;
    // Without a build disk, what COPY/ADD wrote so far (they are all a build without RUN
    // writes), bytes.
    let mut copied_bytes = 0u64;
    let size_bytes = u64::from(b.resources.disk_mb) << 20;
    let explain = |e: BuildError| match &overlay {
        Some(o) => o.disk.explain(e),
        None => e,
    };
    for (i, step) in steps.iter().enumerate() {
        b.log
            .line(&format!("Step {}/{} : {}", i + 1, steps.len(), step.text));
        match &step.instruction {
            Instruction::Env(raw) => {
                state.env(raw).map_err(|e| at(step, e))?;
            }
            Instruction::Arg(raw) => state.arg(raw).map_err(|e| at(step, e))?,
            Instruction::User(raw) => {
                state.user(raw).map_err(|e| at(step, e))?;
                if !warned_user {
                    warned_user = true;
                    b.log.line(
                        "note: USER applies to the RUN steps after it; sandboxes of the template run their commands as root",
                    );
                }
            }
            Instruction::Workdir(raw) => {
                let dir = state.workdir(raw).map_err(|e| at(step, e))?;
                in_rootfs(&tree, move |root| {
                    root.mkdir_all(&dir, 0o755, Some((0, 0)))
                        .map(|_| ())
                        .map_err(|e| format!("cannot create {dir}: {e}"))
                })
                .await
                .map_err(|e| explain(at(step, e)))?;
            }
            Instruction::Copy(c) => {
                let (sources, dest) = state.copy_paths(&c.args).map_err(|e| at(step, e))?;
                let chown = match &c.chown {
                    Some(raw) => Some(state.expand(raw).map_err(|e| at(step, e))?),
                    None => None,
                };
                let (chmod, add, ctx) = (c.chmod, c.add, b.context.clone());
                let max_bytes = match &overlay {
                    Some(o) => o.disk.free_bytes(),
                    None => size_bytes.saturating_sub(copied_bytes),
                };
                let copied = in_rootfs(&tree, move |root| {
                    let owner = match chown {
                        Some(spec) => Some(users::resolve(root, &spec)?.owner()),
                        None => None,
                    };
                    copy::copy(
                        root,
                        &ctx,
                        &CopyPlan {
                            sources: &sources,
                            dest: &dest,
                            owner,
                            chmod,
                            add,
                            max_bytes,
                        },
                    )
                })
                .await
                .map_err(|e| explain(at(step, e)))?;
                copied_bytes += copied.bytes;
                b.log.line(&format!(
                    " ---> copied {} files ({} bytes)",
                    copied.files, copied.bytes
                ));
            }
            Instruction::Run(cmd) => {
                in_rootfs(&tree, |root| {
                    root.create_file(TMP_MARKER, 0o644, Some((0, 0)))
                        .map(|_| ())
                        .map_err(|e| format!("cannot prepare /tmp: {e}"))
                })
                .await
                .map_err(|e| explain(at(step, e)))?;
                let user_spec = state.current_user().map(str::to_owned);
                let user = match user_spec {
                    Some(spec) => Some(
                        in_rootfs(&tree, move |root| users::resolve(root, &spec))
                            .await
                            .map_err(|e| at(step, e))?,
                    ),
                    None => None,
                };
                let mut env = state.run_env();
                if let Some(home) = user.as_ref().filter(|u| !u.is_root()).and_then(|u| u.home.clone()) {
                    env.entry("HOME".into()).or_insert(home);
                }
                let started = std::time::Instant::now();
                sandbox::run(
                    host,
                    b.workspace_id,
                    &tree,
                    &b.resources,
                    RunCommand {
                        cmd: run_command_line(cmd, user.as_ref()),
                        env,
                        cwd: state.cwd(),
                        timeout: b.cfg.run_timeout,
                        line: step.line,
                        log: b.log,
                        may_write: overlay.as_ref().map_or(0, |o| o.disk.free_bytes()),
                    },
                )
                .await
                .map_err(explain)?;
                b.log.line(&format!(
                    " ---> done in {:.1} s",
                    started.elapsed().as_secs_f64()
                ));
            }
            Instruction::Ignored(keyword) => b.log.line(&format!(
                "note: {keyword} is ignored: a sandbox runs the PandaStack guest, start programs with exec"
            )),
            Instruction::From(_) => {
                return Err(at(step, "a second FROM: multi-stage builds are not supported".into()))
            }
        }
    }
    in_rootfs(&tree, |root| {
        root.remove_file(TMP_MARKER)
            .map_err(|e| format!("cannot clean /tmp: {e}"))
    })
    .await
    .map_err(BuildError)?;
    if let Some(overlay) = overlay {
        b.log
            .line("Flattening the changes onto a linked copy of the parent's rootfs");
        overlay.flatten(&parent.rootfs, &rootfs).await?;
    }
    let meta = CustomMeta {
        kind: TemplateKind::Dockerfile,
        description: format!("built from a Dockerfile FROM {}", parent.name),
        base: Some(parent.name.clone()),
        resources: b.resources,
        probes: Default::default(),
        runtime: state.runtime(),
    };
    publish::complete(host, b.workspace_id, slot, meta, b.log, b.cfg).await
}

/// A step's error with its line number.
fn at(step: &Step, message: String) -> BuildError {
    BuildError(format!("Dockerfile line {}: {message}", step.line))
}

/// Runs `f` on the rootfs on a blocking thread.
async fn in_rootfs<T: Send + 'static>(
    rootfs: &Path,
    f: impl FnOnce(&InRoot) -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let rootfs: PathBuf = rootfs.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let root = InRoot::open(&rootfs).map_err(|e| format!("cannot open the rootfs: {e}"))?;
        f(&root)
    })
    .await
    .map_err(|e| format!("build step panicked: {e}"))?
}

/// `cp -al parent rootfs`: new directories, every file shared with the parent by a hard link
/// (owners, modes and symlinks kept).
async fn link_rootfs(from: &Path, to: &Path) -> Result<(), BuildError> {
    let out = tokio::process::Command::new("cp")
        .arg("-al")
        .arg(from)
        .arg(to)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| BuildError::internal("linking the parent rootfs", e))?;
    if !out.status.success() {
        return Err(BuildError::internal(
            "linking the parent rootfs",
            String::from_utf8_lossy(&out.stderr),
        ));
    }
    Ok(())
}

/// The overlay a build with `RUN` steps works on: `upper/` over the parent's rootfs, mounted
/// at `<work>/merged`, with `upper/` and the overlay's scratch directory on the build's own
/// disk of `size_mb` MiB. Unmounted when dropped (the disk after it: fields drop after
/// `drop`), so no error path leaves it mounted (a crash does: start-up unmounts it).
struct Overlay {
    upper: PathBuf,
    work: PathBuf,
    merged: PathBuf,
    mounted: bool,
    disk: BuildDisk,
}

impl Overlay {
    async fn mount(lower: &Path, work_dir: &Path, size_mb: u32) -> Result<Overlay, BuildError> {
        let disk = BuildDisk::create(work_dir, size_mb).await?;
        let mut o = Overlay {
            upper: disk.path().join("upper"),
            work: disk.path().join("overlay-work"),
            merged: work_dir.join("merged"),
            mounted: false,
            disk,
        };
        let (lower, ov) = (
            lower.to_path_buf(),
            (o.upper.clone(), o.work.clone(), o.merged.clone()),
        );
        tokio::task::spawn_blocking(move || {
            for d in [&ov.0, &ov.1, &ov.2] {
                std::fs::create_dir(d)?;
            }
            flatten::mount(&lower, &ov.0, &ov.1, &ov.2)
        })
        .await
        .map_err(|e| BuildError::internal("mounting the build overlay", e))?
        .map_err(|e| BuildError::internal("mounting the build overlay", e))?;
        o.mounted = true;
        Ok(o)
    }

    /// Unmounts, links the parent's files into `rootfs` and applies what the steps changed;
    /// the overlay's directories are gone afterwards.
    async fn flatten(mut self, lower: &Path, rootfs: &Path) -> Result<(), BuildError> {
        flatten::unmount(&self.merged)
            .map_err(|e| BuildError::internal("unmounting the build overlay", e))?;
        self.mounted = false;
        link_rootfs(lower, rootfs).await?;
        let (upper, rootfs_owned) = (self.upper.clone(), rootfs.to_path_buf());
        let applied = tokio::task::spawn_blocking(move || {
            let root = InRoot::open(&rootfs_owned)?;
            flatten::apply_upper(&upper, &root)
        })
        .await
        .map_err(|e| BuildError::internal("flattening the build", e))?
        .map_err(|e| BuildError::internal("flattening the build", e))?;
        tracing::debug!(
            moved = applied.moved,
            removed = applied.removed,
            "build flattened"
        );
        // The upper layer goes with the build disk when `self` drops.
        if let Err(e) = std::fs::remove_dir(&self.merged) {
            return Err(BuildError::internal("removing the build overlay", e));
        }
        Ok(())
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        if self.mounted {
            if let Err(e) = flatten::unmount(&self.merged) {
                tracing::warn!(error = %e, "unmounting a build overlay");
            }
        }
    }
}
