//! Template snapshots (seed 003: "boot_mode = snapshot means the sandbox was restored from the
//! template's baked snapshot — the normal path for every create; cold means the template had
//! no snapshot yet").
//!
//! For each template build and guest daemon version the host keeps one checkpoint image under
//! `<data_dir>/template-images/<template key>/<build id>-<guest dir name>/` (the key is the
//! name, or `<name>@<workspace>` for a user template). It is made in the background the first
//! time a template is used (or at server start), and by a user template's build before the
//! build is published: a cold boot, a warm-up (templates with pandas and IPython get a kernel
//! that already imported pandas, numpy and matplotlib: ~1.3 s saved on every first cell; other
//! templates with IPython get a started kernel), then `runsc checkpoint`. Later creates restore
//! it (uncompressed, ~150-250 ms here) instead of booting cold.

use super::catalog::template_key;
use super::{Host, Live};
use crate::error::ApiError;
use crate::guest::GuestConn;
use pandastack_guest_protocol::{GuestMsg, HostMsg};
use pandastack_templates::TemplateInfo;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// Kernel id of the warmed kernel inside template images.
pub const TEMPLATE_KERNEL_PREFIX: &str = "k-template-";
/// The warm-up cell of templates that bake pandas.
const WARMUP_CODE: &str =
    "import pandas as pd\nimport numpy as np\nimport matplotlib\nimport matplotlib.pyplot as plt\n";

impl Host {
    pub(super) fn template_image_dir_of(&self, tpl: &TemplateInfo) -> PathBuf {
        self.template_image_dir(tpl)
    }

    fn template_image_dir(&self, tpl: &TemplateInfo) -> PathBuf {
        let guest = self
            .cfg
            .guest_dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        // An image restores only under the network mode it was taken in.
        let mode = if self.cfg.network.is_some() {
            "-net"
        } else {
            ""
        };
        // ... and only onto the instance layout it was taken with: the root overlay on a disk,
        // /tmp in it, a bounded /dev/shm, the volume staging directory at /mnt.
        let layout = self.engine.image_layout();
        self.cfg
            .data_dir
            .join("template-images")
            .join(template_key(tpl))
            .join(format!("{}-{guest}{mode}-{layout}", tpl.build_id))
    }

    /// Asks the engine to keep containers of `tpl`'s class made in advance, between
    /// `--restore-targets` and `--restore-targets-max` as restores ask: restores of its
    /// template image (pool refills, pool misses), of snapshots of its sandboxes, fork
    /// children and wakes land on one (issue 11).
    pub fn keep_restore_targets(&self, tpl: &TemplateInfo) {
        self.engine.keep_targets(
            self.target_class(tpl),
            self.cfg.restore_targets,
            self.cfg.restore_targets_max,
        );
    }

    /// The class of restore targets for sandboxes of `tpl` (what its images restore onto).
    pub(crate) fn target_class(&self, tpl: &TemplateInfo) -> pandastack_engine::TargetClass {
        pandastack_engine::TargetClass {
            rootfs: tpl.rootfs.clone(),
            guest_dir: self.cfg.guest_dir.clone(),
            cpu: tpl.cpu,
            memory_mb: tpl.memory_mb,
            network: self.cfg.default_network_policy(),
            // Targets carry a disk of the template's size, made with them ahead of time.
            disk_mb: Some(self.disk_of(tpl)),
        }
    }

    /// The ready image of `tpl`, if one was made.
    pub fn ready_template_image(&self, tpl: &TemplateInfo) -> Option<PathBuf> {
        let dir = self.template_image_dir(tpl);
        dir.join("ready").exists().then_some(dir)
    }

    /// Starts building `tpl`'s image in the background unless it exists or is being built.
    pub fn ensure_template_image(self: &Arc<Self>, tpl: TemplateInfo) {
        if self.ready_template_image(&tpl).is_some() {
            return;
        }
        let key = self.template_image_dir(&tpl).display().to_string();
        if !self
            .building
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone())
        {
            return;
        }
        let host = self.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            match host.build_template_image(&tpl).await {
                Ok(()) => {
                    info!(template = %tpl.name, ms = started.elapsed().as_millis() as u64, "template snapshot ready");
                    host.keep_restore_targets(&tpl);
                    host.refill_pool(tpl.clone());
                }
                Err(e) => {
                    warn!(template = %tpl.name, error = %e, "template snapshot failed; creates boot cold")
                }
            }
            host.building
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
        });
    }

    /// Boots `tpl` once, warms it up and checkpoints it into its template image directory
    /// (replacing what was there). User builds call this before they publish.
    ///
    /// # Errors
    /// 500 naming the step that failed; nothing is left on disk or running.
    pub(crate) async fn build_template_image(&self, tpl: &TemplateInfo) -> Result<(), ApiError> {
        let dir = self.template_image_dir(tpl);
        let partial = dir.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        // Taken with a network (no egress: the warm-up needs none) when sandboxes get one, so
        // the image restores into networked instances.
        let spec = self.instance_spec(
            &tpl.rootfs.display().to_string(),
            &self.cfg.guest_dir.display().to_string(),
            tpl.cpu,
            tpl.memory_mb,
            self.cfg.network.map(|_| pandastack_engine::NetworkPolicy {
                internet: false,
                allow_out: Vec::new(),
                deny_out: Vec::new(),
            }),
            Some(self.disk_of(tpl)),
        );
        let inst = self
            .engine
            .boot(&spec)
            .await
            .map_err(|e| ApiError::internal("template boot", e))?;
        let result = async {
            let conn = GuestConn::connect(&inst.guest_socket, Duration::from_secs(20)).await?;
            if let Some(code) = warm_up(tpl) {
                warm_kernel(&conn, &tpl.name, code).await?;
            }
            self.engine
                .checkpoint(&spec.instance_id, &partial, false)
                .await
                .map_err(|e| ApiError::internal("template checkpoint", e))
        }
        .await;
        let _ = self.engine.destroy(&spec.instance_id, &spec.dir).await;
        if let Err(e) = result {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(e);
        }
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| ApiError::internal("template image dir", e))?;
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::write(partial.join("ready"), b"")
            .map_err(|e| ApiError::internal("template image", e))?;
        std::fs::rename(&partial, &dir).map_err(|e| ApiError::internal("template image", e))?;
        Ok(())
    }

    /// Creates a sandbox by restoring the template image; None when there is none yet (the
    /// caller boots cold and this schedules the image).
    pub(super) async fn create_from_template_image(
        self: &Arc<Self>,
        spec: &super::CreateSpec,
        tpl: &TemplateInfo,
        started: std::time::Instant,
    ) -> Option<Result<Arc<Live>, ApiError>> {
        if let Some(claimed) = self.create_from_pool(spec, tpl, started).await {
            return Some(claimed);
        }
        let Some(image) = self.ready_template_image(tpl) else {
            self.ensure_template_image(tpl.clone());
            return None;
        };
        let base = pandastack_store::SnapshotRow {
            id: format!("template-{}", template_key(tpl)),
            workspace_id: spec.workspace_id.clone(),
            sandbox_id: String::new(),
            template: tpl.name.clone(),
            template_generation: tpl.generation as i64,
            cpu: tpl.cpu,
            memory_mb: tpl.memory_mb,
            rootfs: tpl.rootfs.display().to_string(),
            guest_dir: self.cfg.guest_dir.display().to_string(),
            image_dir: image.display().to_string(),
            size_bytes: 0,
            kernels: serde_json::Value::Null,
            created_at: 0,
            // A template image restores into a disk of any size: the create's.
            disk_mb: Some(spec.disk_mb),
            host: self.cfg.host_name.clone(),
            volumes: Vec::new(),
        };
        match self
            .create_from_image(spec, &base, &image, "snapshot")
            .await
        {
            Ok(live) => Some(Ok(live)),
            Err(e) => {
                // A broken image must not break every create: drop it (it is rebuilt in the
                // background) and let the caller boot cold.
                warn!(template = %tpl.name, error = %e, "template snapshot restore failed; discarding it");
                let _ = std::fs::remove_dir_all(&image);
                None
            }
        }
    }
}

/// The warm-up of a template snapshot: the pandas cell for templates with pandas and IPython
/// (the built-in code-interpreter, and user templates built on it), an idle started kernel
/// (`""`) for other templates with IPython, nothing for the rest.
fn warm_up(tpl: &TemplateInfo) -> Option<&'static str> {
    let pandas = tpl.packages.iter().any(|p| p == "python3-pandas")
        || tpl.probes.is_some_and(|p| p.pandas && p.ipython);
    if pandas {
        Some(WARMUP_CODE)
    } else if tpl.probes.is_some_and(|p| p.ipython) {
        Some("")
    } else {
        None
    }
}

async fn warm_kernel(conn: &GuestConn, template: &str, code: &str) -> Result<(), ApiError> {
    let kernel_id = format!("{TEMPLATE_KERNEL_PREFIX}{template}");
    let start = HostMsg::KernelStart {
        id: conn.new_id(),
        kernel_id: kernel_id.clone(),
        language: "python".into(),
        env: Default::default(),
    };
    match conn.call(start).await? {
        (GuestMsg::KernelStarted { .. }, _) => {}
        (other, _) => {
            return Err(ApiError::internal(
                "template kernel start",
                format!("{other:?}"),
            ))
        }
    }
    if code.is_empty() {
        return Ok(());
    }
    let run = HostMsg::KernelRun {
        id: conn.new_id(),
        kernel_id,
        code: code.into(),
        timeout_ms: Some(120_000),
    };
    match conn.call(run).await? {
        (GuestMsg::KernelResult { execution, .. }, _) if execution.error.is_none() => Ok(()),
        (other, _) => Err(ApiError::internal("template warm-up", format!("{other:?}"))),
    }
}

/// Removes template images of builds or guest versions that are no longer current.
pub fn prune_template_images(data_dir: &Path, keep: &[PathBuf]) {
    let root = data_dir.join("template-images");
    let Ok(templates) = std::fs::read_dir(&root) else {
        return;
    };
    for t in templates.filter_map(Result::ok) {
        let Ok(images) = std::fs::read_dir(t.path()) else {
            continue;
        };
        for img in images.filter_map(Result::ok) {
            if !keep.contains(&img.path()) {
                let _ = std::fs::remove_dir_all(img.path());
            }
        }
    }
}
