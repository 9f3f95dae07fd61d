//! Running a rootfs tar build (contract §2.8 `build(rootfs_tar=...)`): the upload unpacked
//! into a new rootfs with the refusals of `rootfs_tar` (absolute paths, `..`, device nodes,
//! odd setuid files), then finished and published like a Dockerfile build. A rootfs without
//! python3 still serves exec and files; code contexts then answer that it has no Python.

use super::job::BuildError;
use super::log::BuildLog;
use super::publish::{self, Built};
use super::BuildsConfig;
use crate::host::Host;
use pandastack_templates::custom::in_root::InRoot;
use pandastack_templates::custom::rootfs_tar::{self, Limits};
use pandastack_templates::{build_hash, CustomMeta, Resources, Source, TemplateKind};
use std::path::Path;
use std::sync::Arc;

/// What the build works on.
pub struct TarBuild<'a> {
    pub workspace_id: &'a str,
    pub name: &'a str,
    pub resources: Resources,
    pub tar: &'a Path,
    pub sha256: &'a str,
    pub log: &'a BuildLog,
    pub cfg: &'a BuildsConfig,
}

/// The cache key of a tar build.
pub fn hash(sha256: &str, resources: &Resources) -> String {
    build_hash(&Source::RootfsTar { sha256 }, resources)
}

/// Unpacks, finishes and publishes.
///
/// The disk reserve must hold the template's `size_mb` (what the unpack may write).
///
/// # Errors
/// [`BuildError`] naming the refused entry, or as the publish step.
pub async fn run(host: &Arc<Host>, b: TarBuild<'_>) -> Result<Built, BuildError> {
    let hash = hash(b.sha256, &b.resources);
    b.log.line(&format!(
        "Building template {} from a rootfs tar (sha256 {})",
        b.name,
        &b.sha256[..b.sha256.len().min(16)]
    ));
    let slot = match publish::begin(host, b.workspace_id, b.name, &hash, b.log).await? {
        publish::Begun::Cached(info) => return Ok(Built::cached(info)),
        publish::Begun::New(slot) => slot,
    };
    let rootfs = slot.rootfs();
    let tar = b.tar.to_path_buf();
    // The unpacked files may take the template's size_mb (issue 23 finding 5), and never more
    // than a template may be; sizes come from the entries' headers, checked before writing.
    let size_bytes = u64::from(b.resources.disk_mb) << 20;
    let limits = Limits {
        max_bytes: size_bytes.min(b.cfg.max_rootfs_bytes),
        max_entries: 2_000_000,
        bytes_rule: if size_bytes <= b.cfg.max_rootfs_bytes {
            "the template's size_mb"
        } else {
            "the largest template this server builds"
        },
    };
    host.check_disk_reserve("template build", limits.max_bytes)
        .map_err(|e| BuildError(e.to_string()))?;
    let done = tokio::task::spawn_blocking(move || {
        std::fs::create_dir(&rootfs).map_err(|e| format!("cannot create the rootfs: {e}"))?;
        let root = InRoot::open(&rootfs).map_err(|e| format!("cannot open the rootfs: {e}"))?;
        let file = std::fs::File::open(&tar).map_err(|e| format!("cannot read the upload: {e}"))?;
        rootfs_tar::unpack(file, &root, "", limits, true).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| BuildError::internal("unpacking the rootfs", e))?
    .map_err(|e| BuildError(format!("rootfs tar refused: {e}")))?;
    b.log.line(&format!(
        "Unpacked {} entries ({} MiB){}",
        done.entries,
        done.bytes / (1024 * 1024),
        if done.skipped_devices > 0 {
            format!(
                "; left out {} device nodes under /dev (the sandbox has its own)",
                done.skipped_devices
            )
        } else {
            String::new()
        }
    ));
    let meta = CustomMeta {
        kind: TemplateKind::RootfsTar,
        description: "built from a rootfs tar".into(),
        base: None,
        resources: b.resources,
        probes: Default::default(),
        runtime: Default::default(),
    };
    publish::complete(host, b.workspace_id, slot, meta, b.log, b.cfg).await
}
