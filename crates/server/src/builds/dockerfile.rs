//! Running a Dockerfile build: the parent template's rootfs copied (`cp -a`, reflinked where
//! the filesystem can), then each step in order: `ENV`/`ARG`/`USER` change the build state,
//! `WORKDIR` and `COPY`/`ADD` change the rootfs on the host through `InRoot` (no sandbox runs
//! then), `RUN` runs in a build sandbox on it ([`super::sandbox`]). The directory that results
//! is the new template's rootfs: the parent's files plus what the steps changed.

use super::job::BuildError;
use super::log::BuildLog;
use super::publish::{self, Built};
use super::sandbox::{self, RunCommand};
use super::{parent, BuildsConfig};
use crate::host::Host;
use pandastack_templates::custom::context::Context;
use pandastack_templates::custom::copy::{self, CopyPlan};
use pandastack_templates::custom::dockerfile::{Dockerfile, Instruction, Step};
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
    // Host-side steps never write into an existing file (they replace it), so without a RUN
    // the parent's files can be shared by hard links; a RUN may write files in place.
    let link = !steps
        .iter()
        .any(|s| matches!(s.instruction, Instruction::Run(_)));
    b.log.line(&format!(
        "{} the rootfs of {} ({} MiB)",
        if link { "Linking" } else { "Copying" },
        parent.name,
        parent.size_bytes / (1024 * 1024)
    ));
    copy_rootfs(&parent.rootfs, &rootfs, link).await?;

    let mut state = BuildState::new(&parent.runtime);
    for g in &b.parsed.global_args {
        if let Instruction::Arg(raw) = &g.instruction {
            state.global_arg(raw).map_err(|e| at(g, e))?;
        }
    }
    let mut warned_user = false;
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
                in_rootfs(&rootfs, move |root| {
                    root.mkdir_all(&dir, 0o755, Some((0, 0)))
                        .map(|_| ())
                        .map_err(|e| format!("cannot create {dir}: {e}"))
                })
                .await
                .map_err(|e| at(step, e))?;
            }
            Instruction::Copy(c) => {
                let (sources, dest) = state.copy_paths(&c.args).map_err(|e| at(step, e))?;
                let chown = match &c.chown {
                    Some(raw) => Some(state.expand(raw).map_err(|e| at(step, e))?),
                    None => None,
                };
                let (chmod, add, ctx) = (c.chmod, c.add, b.context.clone());
                let copied = in_rootfs(&rootfs, move |root| {
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
                        },
                    )
                })
                .await
                .map_err(|e| at(step, e))?;
                b.log.line(&format!(
                    " ---> copied {} files ({} bytes)",
                    copied.files, copied.bytes
                ));
            }
            Instruction::Run(cmd) => {
                in_rootfs(&rootfs, |root| {
                    root.create_file(TMP_MARKER, 0o644, Some((0, 0)))
                        .map(|_| ())
                        .map_err(|e| format!("cannot prepare /tmp: {e}"))
                })
                .await
                .map_err(|e| at(step, e))?;
                let user_spec = state.current_user().map(str::to_owned);
                let user = match user_spec {
                    Some(spec) => Some(
                        in_rootfs(&rootfs, move |root| users::resolve(root, &spec))
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
                    &rootfs,
                    &b.resources,
                    RunCommand {
                        cmd: run_command_line(cmd, user.as_ref()),
                        env,
                        cwd: state.cwd(),
                        timeout: b.cfg.run_timeout,
                        line: step.line,
                        log: b.log,
                    },
                )
                .await?;
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
    in_rootfs(&rootfs, |root| {
        root.remove_file(TMP_MARKER)
            .map_err(|e| format!("cannot clean /tmp: {e}"))
    })
    .await
    .map_err(BuildError)?;
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

/// `cp -a --reflink=auto parent rootfs` (hard links, owners, modes, xattrs and symlinks kept),
/// or with `link` `cp -al` (new directories, files shared with the parent by hard links).
async fn copy_rootfs(from: &Path, to: &Path, link: bool) -> Result<(), BuildError> {
    let mut cp = tokio::process::Command::new("cp");
    if link {
        cp.arg("-al");
    } else {
        cp.arg("-a").arg("--reflink=auto");
    }
    let out = cp
        .arg(from)
        .arg(to)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| BuildError::internal("copying the parent rootfs", e))?;
    if !out.status.success() {
        return Err(BuildError::internal(
            "copying the parent rootfs",
            String::from_utf8_lossy(&out.stderr),
        ));
    }
    Ok(())
}
