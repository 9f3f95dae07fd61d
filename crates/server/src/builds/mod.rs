//! Template builds (issue 13; contract §2.8, §3.3): `POST /v1/templates/build` with a
//! Dockerfile (and its context) or a rootfs tar becomes a build row (`queued`), a log file and
//! a job; build workers (one by default: builds are heavy on a small host) take jobs from
//! [`queue`]: round-robin across workspaces, FIFO within one, at most `max_queued` queued per
//! workspace (429 past it), and a newer build of a template name supersedes that workspace's
//! queued older one (which ends `failed`, its `error` naming the newer build; issue 23
//! finding 6).
//!
//! # How a build runs
//! 1. At submit the Dockerfile is parsed and its `FROM` resolved; a parse error or an unknown
//!    base fails the build at once (202 with `status: failed`, the line named in `error`). The
//!    cache key ([`pandastack_templates::build_hash`]: parent build, Dockerfile, context,
//!    resources; or the tar's sha256) is compared with the template's current build: equal
//!    means `done` at once (`cache_hit`), no worker involved.
//! 2. The worker takes the template's build slot (its lock and next generation) and runs the
//!    steps ([`dockerfile`]) on an overlay of the parent's rootfs (or a hard-linked copy when
//!    there is no `RUN`; a tar is unpacked into `<id>.partial/rootfs`): `RUN` in a fresh build
//!    sandbox each ([`sandbox`]), `COPY`/`WORKDIR` on the host through `InRoot`. The overlay's
//!    changes are then flattened onto hard links of the parent's files.
//! 3. [`publish`]: finish the rootfs, check size and quota, make the build complete (not
//!    current), take its template snapshot, publish, collect the builds no sandbox uses.
//!
//! Every line goes to the build's log ([`log`]), which `GET .../logs?follow=1` streams as it
//! grows. A server restart fails the builds that were queued or running; start-up removes
//! their partial directories and the sandboxes they used are destroyed as orphans.

mod build_disk;
mod dockerfile;
mod enqueue;
pub mod job;
pub mod log;
mod parent;
mod publish;
pub mod queue;
mod rootfs;
mod sandbox;

use crate::error::ApiError;
use crate::host::Host;
use job::{BuildError, Job, JobSource, Submission, SubmittedSource};
use log::BuildLog;
use pandastack_store::{now_ms, TemplateBuildRow};
use queue::BuildQueue;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tracing::{info, warn};

/// Directory under the data dir with one directory per build (`input/`, `build.log`).
pub const BUILDS_DIR: &str = "template-builds";

/// Limits and quotas of template builds.
#[derive(Debug, Clone)]
pub struct BuildsConfig {
    /// Templates one workspace may have (429 past it; issue 13 "Quotas").
    pub max_templates: usize,
    /// Bytes of template rootfs one workspace may hold, old builds still in use included.
    pub max_workspace_bytes: u64,
    /// Largest rootfs one build may produce, bytes.
    pub max_rootfs_bytes: u64,
    /// Largest rootfs tar upload, bytes (413 past it).
    pub max_upload_bytes: u64,
    /// Largest Dockerfile context (all files), bytes (413 past it; the SDKs document 50 MB).
    pub max_context_bytes: u64,
    /// How long one `RUN` may take.
    pub run_timeout: Duration,
    /// Builds run at once.
    pub concurrency: usize,
    /// Finished build records kept per workspace (older ones and their logs are removed).
    pub keep_builds: usize,
    /// Builds one workspace may have queued, running ones not counted (429 past it; the
    /// `--max-queued-builds` flag, issue 23 finding 6).
    pub max_queued: usize,
}

impl Default for BuildsConfig {
    fn default() -> Self {
        BuildsConfig {
            max_templates: 20,
            max_workspace_bytes: 20 << 30,
            max_rootfs_bytes: 10 << 30,
            max_upload_bytes: 4 << 30,
            max_context_bytes: 50 << 20,
            run_timeout: Duration::from_secs(30 * 60),
            concurrency: 1,
            keep_builds: 100,
            max_queued: 5,
        }
    }
}

/// The build queue and the logs of builds not finished yet. Owned by [`Host`].
pub struct Builds {
    pub cfg: BuildsConfig,
    queue: BuildQueue,
    /// Held from the queue check to the push, so concurrent submits cannot pass the cap.
    submitting: tokio::sync::Mutex<()>,
    live: Mutex<HashMap<String, Arc<BuildLog>>>,
}

impl Builds {
    /// An empty queue with `cfg`.
    pub fn new(cfg: BuildsConfig) -> Self {
        Builds {
            cfg,
            queue: BuildQueue::default(),
            submitting: tokio::sync::Mutex::new(()),
            live: Mutex::default(),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<BuildLog>>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Host {
    /// `<data_dir>/template-builds`.
    pub fn builds_dir(&self) -> PathBuf {
        self.cfg.data_dir.join(BUILDS_DIR)
    }

    /// A new build id (`bld-` + 32 hex digits) and its directory (created).
    ///
    /// # Errors
    /// 500 when the directory cannot be created.
    pub fn new_build_dir(&self) -> Result<(String, PathBuf), ApiError> {
        let id = format!("bld-{}", uuid::Uuid::new_v4().simple());
        let dir = self.builds_dir().join(&id);
        std::fs::create_dir_all(dir.join("input"))
            .map_err(|e| ApiError::internal("build directory", e))?;
        Ok((id, dir))
    }

    /// Checks the workspace's template quotas before a build of `name` is accepted.
    ///
    /// # Errors
    /// 429 naming the quota: too many templates (counting queued builds of new names), or
    /// the storage quota used up.
    pub async fn check_build_quota(&self, workspace_id: &str, name: &str) -> Result<(), ApiError> {
        let cfg = &self.builds.cfg;
        let mut names: HashSet<String> = self
            .workspace_templates(workspace_id)
            .list()
            .map_err(|e| ApiError::internal("template list", e))?
            .into_iter()
            .map(|t| t.name)
            .collect();
        names.extend(
            self.store
                .unfinished_template_builds(None)
                .await?
                .into_iter()
                .filter(|b| b.workspace_id == workspace_id)
                .map(|b| b.name),
        );
        if !names.contains(name) && names.len() >= cfg.max_templates {
            return Err(ApiError::TooManyRequests {
                message: format!(
                    "template quota: this workspace has {} of {} templates (builds in progress included); delete one first",
                    names.len(),
                    cfg.max_templates
                ),
                retry_after_s: None,
            });
        }
        let used = self.template_bytes(workspace_id);
        if used >= cfg.max_workspace_bytes {
            return Err(ApiError::TooManyRequests {
                message: format!(
                    "template storage quota: {} MiB of {} MiB used; delete a template first",
                    used / (1024 * 1024),
                    cfg.max_workspace_bytes / (1024 * 1024)
                ),
                retry_after_s: None,
            });
        }
        Ok(())
    }

    /// Accepts a build: failed at once (bad Dockerfile), done at once (nothing changed), or
    /// queued. The input files in the build's directory are the worker's from here on.
    ///
    /// # Errors
    /// 500 on store errors (the build directory is removed).
    pub async fn submit_build(
        self: &Arc<Self>,
        sub: Submission,
    ) -> Result<TemplateBuildRow, ApiError> {
        let dir = self.builds_dir().join(&sub.id);
        let result = self.try_submit(sub).await;
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        result
    }

    async fn try_submit(self: &Arc<Self>, sub: Submission) -> Result<TemplateBuildRow, ApiError> {
        let dir = self.builds_dir().join(&sub.id);
        let log = Arc::new(
            BuildLog::create(&dir.join(log::LOG_FILE))
                .map_err(|e| ApiError::internal("build log", e))?,
        );
        for note in &sub.notes {
            log.line(note);
        }
        let mut row = TemplateBuildRow {
            id: sub.id.clone(),
            workspace_id: sub.workspace_id.clone(),
            name: sub.name.clone(),
            kind: sub.source.kind().into(),
            status: "queued".into(),
            error: None,
            cpu: sub.resources.cpu,
            memory_mb: sub.resources.memory_mb,
            size_mb: sub.resources.disk_mb,
            bytes: None,
            build_id: None,
            generation: None,
            cache_hit: false,
            created_at: now_ms(),
            started_at: None,
            ended_at: None,
            host: self.cfg.host_name.clone(),
        };
        let (source, hash) = match sub.source {
            SubmittedSource::Dockerfile { text, context } => {
                let parsed = match pandastack_templates::custom::dockerfile::parse(&text) {
                    Ok(p) => p,
                    Err(e) => return self.fail_at_submit(row, &log, e.to_string()).await,
                };
                let hash = match dockerfile::plan(
                    self,
                    &sub.workspace_id,
                    &parsed,
                    &text,
                    &context,
                    &sub.resources,
                ) {
                    Ok((_, hash)) => hash,
                    Err(e) => return self.fail_at_submit(row, &log, e.0).await,
                };
                let source = JobSource::Dockerfile {
                    text,
                    parsed: Arc::new(parsed),
                    context: Arc::new(context),
                };
                (source, hash)
            }
            SubmittedSource::RootfsTar { path, sha256, .. } => {
                let hash = rootfs::hash(&sha256, &sub.resources);
                (JobSource::RootfsTar { path, sha256 }, hash)
            }
        };
        if let Some(current) = self.find_template(&sub.workspace_id, &sub.name)? {
            if current.hash == hash && current.rootfs.is_dir() {
                log.line(&format!(
                    "Nothing changed: template {} is up to date (generation {}, build {})",
                    current.name, current.generation, current.build_id
                ));
                let now = now_ms();
                row.status = "done".into();
                row.cache_hit = true;
                row.bytes = Some(current.size_bytes as i64);
                row.build_id = Some(current.build_id.clone());
                row.generation = Some(current.generation as i64);
                row.started_at = Some(now);
                row.ended_at = Some(now);
                self.store.put_template_build(&row).await?;
                let _ = std::fs::remove_dir_all(dir.join("input"));
                self.ensure_template_image(current);
                info!(build = %row.id, template = %row.name, "template build: cache hit");
                return Ok(row);
            }
        }
        let job = Job {
            id: row.id.clone(),
            workspace_id: sub.workspace_id,
            name: sub.name,
            resources: sub.resources,
            source,
        };
        self.enqueue(row, job, log).await
    }

    async fn fail_at_submit(
        &self,
        mut row: TemplateBuildRow,
        log: &BuildLog,
        error: String,
    ) -> Result<TemplateBuildRow, ApiError> {
        log.line(&format!("error: {error}"));
        let now = now_ms();
        row.status = "failed".into();
        row.error = Some(error);
        row.started_at = Some(now);
        row.ended_at = Some(now);
        self.store.put_template_build(&row).await?;
        let _ = std::fs::remove_dir_all(self.builds_dir().join(&row.id).join("input"));
        Ok(row)
    }

    /// The follow channel of build `id` while it is queued or running (the line count; closed
    /// when it ends); `None` once it has ended.
    pub fn build_log_watch(&self, id: &str) -> Option<watch::Receiver<u64>> {
        self.builds.live().get(id).map(|l| l.subscribe())
    }

    /// Starts the build workers.
    pub fn spawn_build_workers(self: &Arc<Self>) {
        for _ in 0..self.builds.cfg.concurrency.max(1) {
            let host = self.clone();
            tokio::spawn(async move {
                loop {
                    let job = host.builds.queue.pop().await;
                    host.run_job(job).await;
                }
            });
        }
    }

    async fn run_job(self: &Arc<Self>, job: Job) {
        let Some(log) = self.builds.live().get(&job.id).cloned() else {
            warn!(build = %job.id, "template build without a log; skipped");
            return;
        };
        let mut row = match self.store.template_build(&job.workspace_id, &job.id).await {
            Ok(Some(r)) => r,
            _ => {
                warn!(build = %job.id, "template build row missing; skipped");
                self.builds.live().remove(&job.id);
                return;
            }
        };
        row.status = "running".into();
        row.started_at = Some(now_ms());
        if let Err(e) = self.store.put_template_build(&row).await {
            warn!(build = %job.id, error = %e, "template build: cannot record running");
        }
        info!(build = %job.id, template = %job.name, workspace_id = %job.workspace_id, "template build started");
        let started = std::time::Instant::now();
        let cfg = self.builds.cfg.clone();
        let result = match &job.source {
            JobSource::Dockerfile {
                text,
                parsed,
                context,
            } => {
                dockerfile::run(
                    self,
                    dockerfile::DockerfileBuild {
                        workspace_id: &job.workspace_id,
                        name: &job.name,
                        resources: job.resources,
                        text,
                        parsed,
                        context: context.clone(),
                        log: &log,
                        cfg: &cfg,
                    },
                )
                .await
            }
            JobSource::RootfsTar { path, sha256 } => {
                rootfs::run(
                    self,
                    rootfs::TarBuild {
                        workspace_id: &job.workspace_id,
                        name: &job.name,
                        resources: job.resources,
                        tar: path,
                        sha256,
                        log: &log,
                        cfg: &cfg,
                    },
                )
                .await
            }
        };
        self.finish_job(&job, &mut row, &log, result, started.elapsed())
            .await;
        self.builds.live().remove(&job.id);
        let _ = std::fs::remove_dir_all(self.builds_dir().join(&job.id).join("input"));
        self.prune_builds(&job.workspace_id).await;
    }

    async fn finish_job(
        &self,
        job: &Job,
        row: &mut TemplateBuildRow,
        log: &BuildLog,
        result: Result<publish::Built, BuildError>,
        took: Duration,
    ) {
        match result {
            Ok(built) => {
                row.status = "done".into();
                row.cache_hit = built.cache_hit;
                row.bytes = Some(built.info.size_bytes as i64);
                row.build_id = Some(built.info.build_id.clone());
                row.generation = Some(built.info.generation as i64);
                log.line(&format!(
                    "Template {} is ready: generation {}, {} MiB, built in {:.1} s",
                    job.name,
                    built.info.generation,
                    built.info.size_bytes / (1024 * 1024),
                    took.as_secs_f64()
                ));
                info!(build = %job.id, template = %job.name, generation = built.info.generation, ms = took.as_millis() as u64, "template build done");
            }
            Err(e) => {
                row.status = "failed".into();
                row.error = Some(e.0.clone());
                log.line(&format!("error: {e}"));
                info!(build = %job.id, template = %job.name, error = %e, "template build failed");
            }
        }
        row.ended_at = Some(now_ms());
        if let Err(e) = self.store.put_template_build(row).await {
            warn!(build = %job.id, error = %e, "template build: cannot record the result");
        }
    }

    /// Removes the oldest finished build records of a workspace beyond the ones kept, with
    /// their logs.
    async fn prune_builds(&self, workspace_id: &str) {
        match self
            .store
            .prune_template_builds(workspace_id, self.builds.cfg.keep_builds)
            .await
        {
            Ok(ids) => {
                for id in ids {
                    let _ = std::fs::remove_dir_all(self.builds_dir().join(id));
                }
            }
            Err(e) => warn!(workspace_id, error = %e, "pruning template builds"),
        }
    }

    /// Start-up: builds a previous process left queued or running are failed (their inputs
    /// and partial rootfs removed, their overlays and build disks unmounted; their build
    /// sandboxes are orphans the engine sweep destroys), and template builds no sandbox uses
    /// are collected.
    pub async fn recover_builds(&self) {
        match self
            .store
            .unfinished_template_builds(Some(&self.cfg.host_name))
            .await
        {
            Ok(rows) => {
                for mut row in rows {
                    row.status = "failed".into();
                    row.error =
                        Some("the server restarted during the build; submit it again".into());
                    row.ended_at = Some(now_ms());
                    if let Err(e) = self.store.put_template_build(&row).await {
                        warn!(build = %row.id, error = %e, "failing an interrupted build");
                    }
                    let _ = std::fs::remove_dir_all(self.builds_dir().join(&row.id).join("input"));
                    warn!(build = %row.id, template = %row.name, "template build interrupted by a restart");
                }
            }
            Err(e) => warn!(error = %e, "reading unfinished template builds"),
        }
        // Overlays of builds a crash interrupted are still mounted: unmount them first (their
        // partial directories cannot be removed while they are).
        let stores = self
            .cfg
            .data_dir
            .join(crate::host::catalog::USER_TEMPLATES_DIR);
        match pandastack_templates::custom::flatten::unmount_below(&stores) {
            Ok(0) => {}
            Ok(n) => warn!(
                mounts = n,
                "unmounted overlays of interrupted template builds"
            ),
            Err(e) => warn!(error = %e, "unmounting overlays of interrupted template builds"),
        }
        // Their build disks' loop devices go with the last unmount (autoclear); one a crash
        // left attached but unmounted is detached here (issue 23 finding 5).
        for dev in pandastack_gvisor::disk::collect_stale(&stores).1 {
            if let Err(e) = pandastack_gvisor::disk::detach(&dev) {
                warn!(device = %dev.display(), error = %e, "detaching a build disk's loop device");
            }
        }
        for ws in self.template_workspaces() {
            if let Err(e) = self.workspace_templates(&ws).remove_interrupted() {
                warn!(workspace_id = %ws, error = %e, "removing interrupted template builds");
            }
            self.collect_template_builds(&ws, true).await;
        }
    }
}
