//! The end of every user build: the rootfs finished (mount points, runtime file, probes) and
//! measured, the size checked against the limits, the build made complete but not current,
//! its template snapshot taken from the final path (issue 13 "Template snapshot": creates take
//! the fast path from the first one), then published; the builds it replaced are collected
//! once no sandbox uses them. A failure anywhere removes the new build and its snapshot and
//! leaves the previous generation current.

use super::job::BuildError;
use super::log::BuildLog;
use super::BuildsConfig;
use crate::host::Host;
use pandastack_templates::custom::finish;
use pandastack_templates::custom::in_root::InRoot;
use pandastack_templates::{BuildSlot, CustomMeta, TemplateInfo};
use std::sync::Arc;

/// A published build.
#[derive(Debug, Clone)]
pub struct Built {
    pub info: TemplateInfo,
    /// True when nothing changed and the current build was kept.
    pub cache_hit: bool,
}

impl Built {
    /// The current build, reused.
    pub fn cached(info: TemplateInfo) -> Self {
        Built {
            info,
            cache_hit: true,
        }
    }
}

/// A build slot, or the current build when it was made from the same inputs.
pub enum Begun {
    Cached(TemplateInfo),
    New(BuildSlot),
}

/// Takes the template's build slot (waiting for another build of the same name) and checks
/// the cache under its lock; a new slot has its work directory created.
///
/// # Errors
/// Store errors.
pub async fn begin(
    host: &Host,
    workspace_id: &str,
    name: &str,
    hash: &str,
    log: &BuildLog,
) -> Result<Begun, BuildError> {
    let store = host.workspace_templates(workspace_id);
    let (name_owned, hash_owned) = (name.to_owned(), hash.to_owned());
    let waited = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = waited.clone();
    let slot = tokio::task::spawn_blocking(move || {
        store.begin_build(&name_owned, &hash_owned, || {
            flag.store(true, std::sync::atomic::Ordering::SeqCst)
        })
    })
    .await
    .map_err(|e| BuildError::internal("taking the template lock", e))?
    .map_err(|e| BuildError::internal("taking the template lock", e))?;
    if waited.load(std::sync::atomic::Ordering::SeqCst) {
        log.line(&format!("waited for another build of template {name}"));
    }
    let current = slot
        .current()
        .map_err(|e| BuildError::internal("reading the current template", e))?;
    if let Some(t) = current.filter(|t| t.hash == hash && t.rootfs.is_dir()) {
        log.line(&format!(
            "Nothing changed: template {name} is up to date (generation {}, build {})",
            t.generation, t.build_id
        ));
        return Ok(Begun::Cached(t));
    }
    slot.create_work_dir()
        .map_err(|e| BuildError::internal("creating the build directory", e))?;
    Ok(Begun::New(slot))
}

/// Finishes, snapshots and publishes the rootfs in `slot`.
///
/// # Errors
/// Over a size limit or the workspace's storage quota, or the template snapshot failed.
pub async fn complete(
    host: &Arc<Host>,
    workspace_id: &str,
    slot: BuildSlot,
    mut meta: CustomMeta,
    log: &BuildLog,
    cfg: &BuildsConfig,
) -> Result<Built, BuildError> {
    let rootfs = slot.rootfs();
    let runtime = meta.runtime.clone();
    let (probes, size) = tokio::task::spawn_blocking(move || {
        let root = InRoot::open(&rootfs)?;
        let probes = finish::finish(&root, &runtime)?;
        let size = pandastack_templates::rootfs_size(&rootfs)?;
        Ok::<_, std::io::Error>((probes, size))
    })
    .await
    .map_err(|e| BuildError::internal("finishing the rootfs", e))?
    .map_err(|e| BuildError::internal("finishing the rootfs", e))?;
    meta.probes = probes;
    log.line(&format!(
        "Rootfs: {} MiB{}",
        size / (1024 * 1024),
        if probes.python {
            ""
        } else {
            " (no python3: code contexts will not work, exec and files will)"
        }
    ));
    if size > cfg.max_rootfs_bytes {
        return Err(BuildError(format!(
            "the rootfs is {} MiB, over the limit of {} MiB per template",
            size / (1024 * 1024),
            cfg.max_rootfs_bytes / (1024 * 1024)
        )));
    }
    let used = host.template_bytes(workspace_id);
    if used + size > cfg.max_workspace_bytes {
        return Err(BuildError(format!(
            "template storage quota exceeded: this build needs {} MiB and {} MiB of {} MiB are used; delete a template first",
            size.div_ceil(1024 * 1024),
            used / (1024 * 1024),
            cfg.max_workspace_bytes / (1024 * 1024)
        )));
    }
    let finished = slot
        .finish_custom(size, meta)
        .map_err(|e| BuildError::internal("storing the build", e))?;
    log.line("Taking the template snapshot (boot, warm up, checkpoint)");
    let admitted = super::sandbox::admitted(
        host,
        workspace_id,
        finished.info().memory_mb,
        0,
        "the template snapshot",
        log,
    )
    .await;
    let admitted = match admitted {
        Ok(a) => a,
        Err(e) => {
            finished.discard();
            return Err(e);
        }
    };
    let started = std::time::Instant::now();
    let imaged = host.build_template_image(finished.info()).await;
    drop(admitted);
    if let Err(e) = imaged {
        host.forget_template_image(finished.info()).await;
        finished.discard();
        return Err(BuildError(format!("the template snapshot failed: {e}")));
    }
    log.line(&format!(
        "Template snapshot ready in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    let info = finished
        .publish()
        .map_err(|e| BuildError::internal("publishing the build", e))?;
    host.collect_template_builds_later(workspace_id);
    Ok(Built {
        info,
        cache_hit: false,
    })
}
