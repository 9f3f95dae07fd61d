//! Which templates a workspace sees (issue 13 "Ownership"): the built-ins (`base`,
//! `code-interpreter`) are global, in `<data_dir>/templates`; the templates a workspace builds
//! are its own, in `<data_dir>/user-templates/<workspace id>/`, so names are per workspace and
//! another workspace's templates answer 404. Built-in names cannot be used for user templates,
//! so a name always resolves one way.
//!
//! Builds a template no longer uses (a rebuild made a new generation, or it was deleted) stay on
//! disk while a sandbox still runs on their rootfs (hibernated ones included) and are removed by
//! [`Host::collect_template_builds`] once none does; their template snapshots go with them.

use super::Host;
use crate::error::ApiError;
use pandastack_templates::{TemplateInfo, TemplateStore};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use tracing::{info, warn};

/// Directory under the data dir holding one template store per workspace.
pub const USER_TEMPLATES_DIR: &str = "user-templates";

/// The key that names a template on this host (template snapshot directory, warm pool): the
/// name for a built-in, `<name>@<workspace id>` for a user template (`@` is not allowed in
/// names, so keys never collide).
pub fn template_key(tpl: &TemplateInfo) -> String {
    match &tpl.workspace {
        None => tpl.name.clone(),
        Some(ws) => format!("{}@{ws}", tpl.name),
    }
}

/// True for the names of the built-in templates, which no workspace can build or delete.
pub fn is_builtin(name: &str) -> bool {
    pandastack_templates::builtin(name).is_some()
}

impl Host {
    /// The template store of workspace `workspace_id` (created on the first build).
    pub fn workspace_templates(&self, workspace_id: &str) -> TemplateStore {
        TemplateStore::for_workspace(
            self.cfg
                .data_dir
                .join(USER_TEMPLATES_DIR)
                .join(workspace_id),
            workspace_id,
        )
    }

    /// The current build of template `name` as workspace `workspace_id` sees it: a built-in,
    /// or one of its own; `None` when there is none (or the name is malformed).
    ///
    /// # Errors
    /// 500 when a store cannot be read.
    pub fn find_template(
        &self,
        workspace_id: &str,
        name: &str,
    ) -> Result<Option<TemplateInfo>, ApiError> {
        if pandastack_templates::validate_name(name).is_err() {
            return Ok(None);
        }
        let found = if is_builtin(name) {
            self.templates.get(name)
        } else {
            self.workspace_templates(workspace_id).get(name)
        };
        found.map_err(|e| ApiError::internal("template lookup", e))
    }

    /// The built-ins baked here, then the workspace's own templates, each sorted by name.
    ///
    /// # Errors
    /// 500 when a store cannot be read.
    pub fn visible_templates(&self, workspace_id: &str) -> Result<Vec<TemplateInfo>, ApiError> {
        let mut all = self
            .templates
            .list()
            .map_err(|e| ApiError::internal("template list", e))?;
        all.extend(
            self.workspace_templates(workspace_id)
                .list()
                .map_err(|e| ApiError::internal("template list", e))?,
        );
        Ok(all)
    }

    /// The disk of `tpl`'s sandboxes, MiB: a user template's `size_mb` (issue 13 "Size": creates
    /// from it, its warm pool and its restore targets get it), else `--default-disk-mb`.
    pub fn disk_of(&self, tpl: &TemplateInfo) -> u32 {
        tpl.disk_mb.unwrap_or(self.cfg.default_disk_mb)
    }

    /// Bytes of template rootfs workspace `workspace_id` holds: every build on disk, old ones
    /// kept for running sandboxes included (issue 13 "Quotas").
    pub fn template_bytes(&self, workspace_id: &str) -> u64 {
        let store = self.workspace_templates(workspace_id);
        store
            .names()
            .unwrap_or_default()
            .iter()
            .flat_map(|n| store.builds(n).unwrap_or_default())
            .map(|b| b.size_bytes)
            .sum()
    }

    /// Every workspace that has a template store here.
    pub(crate) fn template_workspaces(&self) -> Vec<String> {
        let Ok(dirs) = std::fs::read_dir(self.cfg.data_dir.join(USER_TEMPLATES_DIR)) else {
            return Vec::new();
        };
        let mut out: Vec<String> = dirs
            .filter_map(Result::ok)
            .filter(|d| d.path().is_dir())
            .filter_map(|d| d.file_name().to_str().map(str::to_owned))
            .collect();
        out.sort();
        out
    }

    /// The current build of every template on this host, built-in and user, for start-up
    /// (template snapshots to keep or make).
    pub(crate) fn all_current_templates(&self) -> Vec<TemplateInfo> {
        let mut all = self.templates.list().unwrap_or_default();
        for ws in self.template_workspaces() {
            match self.workspace_templates(&ws).list() {
                Ok(t) => all.extend(t),
                Err(e) => warn!(workspace_id = %ws, error = %e, "cannot list workspace templates"),
            }
        }
        all
    }

    /// Deletes user template `name` of `workspace_id`: it disappears from lists and creates at
    /// once; in the background its template snapshot and pooled sandboxes go, and its builds
    /// are removed as soon as no sandbox runs on them. Snapshots taken on it stop restoring
    /// (409).
    ///
    /// # Errors
    /// 404 when the workspace has no such template; 500 on store errors.
    pub async fn delete_template(
        self: &Arc<Self>,
        workspace_id: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        let store = self.workspace_templates(workspace_id);
        let owned = name.to_owned();
        // Takes the template's lock: off the async threads.
        let retired = tokio::task::spawn_blocking(move || store.retire(&owned))
            .await
            .map_err(|e| ApiError::internal("template delete", e))?
            .map_err(|e| ApiError::internal("template delete", e))?
            .ok_or_else(|| ApiError::NotFound(format!("template {name} not found")))?;
        info!(workspace_id, template = name, build_id = %retired.build_id, "template deleted");
        let host = self.clone();
        let ws = workspace_id.to_owned();
        self.teardowns.spawn(async move {
            host.forget_template_image(&retired).await;
            host.collect_template_builds(&ws, false).await;
        });
        Ok(())
    }

    /// [`Host::collect_template_builds`] in the background (a graceful stop waits for it).
    pub fn collect_template_builds_later(self: &Arc<Self>, workspace_id: &str) {
        let host = self.clone();
        let ws = workspace_id.to_owned();
        self.teardowns
            .spawn(async move { host.collect_template_builds(&ws, false).await });
    }

    /// Removes the builds of `workspace_id`'s templates that are not current and that no
    /// live sandbox runs on, with their template snapshots and pooled instances. A complete
    /// build newer than the last published generation is one being published (its template
    /// snapshot is being taken): it is left alone, except `at_start`, when no build runs and
    /// such a build is what a crash left.
    pub async fn collect_template_builds(&self, workspace_id: &str, at_start: bool) {
        let store = self.workspace_templates(workspace_id);
        let in_use: HashSet<String> = match self.store.live_sandboxes(Some(workspace_id)).await {
            Ok(rows) => rows.into_iter().map(|r| r.rootfs).collect(),
            Err(e) => {
                warn!(workspace_id, error = %e, "template gc: cannot read sandboxes");
                return;
            }
        };
        for name in store.names().unwrap_or_default() {
            let (Ok(builds), Ok(published)) =
                (store.builds(&name), store.published_generation(&name))
            else {
                continue;
            };
            let collectable =
                |b: &TemplateInfo| !b.current && (at_start || b.generation <= published);
            for build in builds.into_iter().filter(collectable) {
                if in_use.contains(&build.rootfs.display().to_string()) {
                    continue;
                }
                self.forget_template_image(&build).await;
                let (st, n, id) = (store.clone(), name.clone(), build.build_id.clone());
                let removed = tokio::task::spawn_blocking(move || st.remove_build(&n, &id))
                    .await
                    .unwrap_or_else(|e| {
                        Err(pandastack_templates::StoreError::Io {
                            what: "template gc".into(),
                            source: std::io::Error::other(e.to_string()),
                        })
                    });
                match removed {
                    Ok(()) => {
                        info!(workspace_id, template = %name, build_id = %build.build_id, "removed unused template build")
                    }
                    Err(e) => {
                        warn!(workspace_id, template = %name, build_id = %build.build_id, error = %e, "cannot remove template build")
                    }
                }
            }
        }
    }

    /// Template snapshot directories of `tpl`'s build (one per guest version).
    fn template_image_dirs_of_build(&self, tpl: &TemplateInfo) -> Vec<PathBuf> {
        let dir = self
            .cfg
            .data_dir
            .join("template-images")
            .join(template_key(tpl));
        let prefix = format!("{}-", tpl.build_id);
        std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Removes the template snapshots of `tpl`'s build and destroys its pooled instances
    /// (the image goes first, so a refill in flight cannot add one back) and its restore
    /// targets.
    pub(crate) async fn forget_template_image(&self, tpl: &TemplateInfo) {
        let dirs = self.template_image_dirs_of_build(tpl);
        for dir in &dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        self.drain_pool(&template_key(tpl), &dirs).await;
        // Restore targets made for this build's rootfs go too.
        self.engine.keep_targets(self.target_class(tpl), 0, 0);
    }
}
