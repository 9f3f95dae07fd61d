//! Baking: cache check, build into `<id>.partial`, verify, measure, publish.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::layout::{self, META};
use super::TemplateStore;
use crate::builtin::builtin;
use crate::error::{BakeError, BakeStep};
use crate::meta::{tree_size, MetaFile, TemplateInfo};
use crate::recipe::Recipe;

impl TemplateStore {
    /// Bakes the built-in template `name`; see [`bake`](Self::bake).
    ///
    /// # Errors
    /// [`BakeError::UnknownTemplate`] if `name` is not built in, else as `bake`.
    pub fn bake_builtin(
        &self,
        name: &str,
        force: bool,
        progress: &mut dyn FnMut(&str),
    ) -> Result<TemplateInfo, BakeError> {
        let recipe = builtin(name).ok_or_else(|| BakeError::UnknownTemplate(name.to_owned()))?;
        self.bake(&recipe, force, progress)
    }

    /// Makes sure the current build of `recipe.name` was built from `recipe`
    /// and returns it.
    ///
    /// Cache hit (current build has `recipe.hash()` and `force` is false):
    /// returns at once, after refreshing cpu, memory and description in its
    /// meta.json. Otherwise builds a new generation in `<id>.partial`, verifies
    /// it, renames it into place and switches `current`; older builds stay on
    /// disk for running sandboxes until [`remove_build`](Self::remove_build).
    /// Every builder log line is passed to `progress` and appended to
    /// `<root>/<name>/<id>.log`. Blocks while another bake of the same name runs.
    ///
    /// # Errors
    /// [`BakeError`] naming the failed step; the partial build is removed first.
    pub fn bake(
        &self,
        recipe: &Recipe,
        force: bool,
        progress: &mut dyn FnMut(&str),
    ) -> Result<TemplateInfo, BakeError> {
        recipe.validate()?;
        let name = recipe.name.as_str();
        let hash = recipe.hash();
        let slot = self
            .begin_build(name, &hash, || {
                progress(&format!("I: waiting for another bake of template {name}"));
            })
            .map_err(|e| match e {
                crate::StoreError::Io { source, .. } => BakeError::Io {
                    step: BakeStep::Lock,
                    source,
                },
                other => BakeError::Store(other),
            })?;
        if !force {
            if let Some(info) = self.cache_hit(recipe, &hash)? {
                progress(&format!(
                    "I: template {name} is up to date (build {})",
                    info.build_id
                ));
                return Ok(info);
            }
        }

        let generation = slot.generation();
        let build_id = slot.build_id().to_owned();
        slot.create_work_dir()
            .map_err(BakeError::io(BakeStep::Prepare))?;

        let started = Instant::now();
        tracing::info!(template = name, build_id, force, "baking template");
        let log_path = slot.template_dir().join(format!("{build_id}.log"));
        let result = self
            .build_partial(recipe, generation, slot.work_dir(), &log_path, progress)
            .and_then(|meta| {
                slot.finish(meta)
                    .and_then(|finished| finished.publish())
                    .map_err(|e| match e {
                        crate::StoreError::Io { source, .. } => BakeError::Io {
                            step: BakeStep::Publish,
                            source,
                        },
                        other => BakeError::Store(other),
                    })
            });
        match result {
            Ok(info) => {
                tracing::info!(
                    template = name,
                    build_id,
                    generation,
                    size_bytes = info.size_bytes,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "template baked"
                );
                Ok(info)
            }
            Err(err) => {
                // The slot (dropped with the closure) removed the partial build.
                tracing::warn!(template = name, build_id, error = %err, "template bake failed");
                Err(err)
            }
        }
    }

    /// The current build if it was built from `hash` and its rootfs is present.
    fn cache_hit(&self, recipe: &Recipe, hash: &str) -> Result<Option<TemplateInfo>, BakeError> {
        let Some(current) = self.get(&recipe.name)? else {
            return Ok(None);
        };
        if current.hash != hash || !current.rootfs.is_dir() {
            return Ok(None);
        }
        let build_dir = self.template_dir(&recipe.name).join(&current.build_id);
        let mut meta = self.read_meta(&recipe.name, &current.build_id)?;
        if meta.refresh_from(recipe) {
            write_meta(&build_dir, &meta).map_err(BakeError::io(BakeStep::Publish))?;
        }
        Ok(Some(meta.into_info(
            current.build_id,
            &build_dir,
            true,
            self.workspace.clone(),
        )))
    }

    /// Runs the builder and verifier in `partial`, measures the rootfs and drops scratch
    /// files; returns the metadata to publish.
    fn build_partial(
        &self,
        recipe: &Recipe,
        generation: u64,
        partial: &Path,
        log_path: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<MetaFile, BakeError> {
        let mut log_file = fs::File::create(log_path).map_err(BakeError::io(BakeStep::Prepare))?;
        let mut log = |line: &str| {
            // The log file is a diagnostic copy; a full disk shows up in the build anyway.
            let _ = writeln!(log_file, "{line}");
            progress(line);
        };
        let rootfs = partial.join("rootfs");
        self.builder.build(recipe, partial, &rootfs, &mut log)?;
        self.builder.verify(recipe, &rootfs, &mut log)?;
        log("I: measuring rootfs size");
        let size_bytes = tree_size(&rootfs).map_err(BakeError::io(BakeStep::Measure))?;
        remove_scratch(partial).map_err(BakeError::io(BakeStep::Publish))?;
        Ok(MetaFile::new(recipe, generation, size_bytes, unix_now()))
    }
}

/// Removes everything in a partial build except `rootfs` (staged wheels etc.).
fn remove_scratch(partial: &Path) -> std::io::Result<()> {
    for entry in fs::read_dir(partial)? {
        let entry = entry?;
        if entry.file_name() == "rootfs" {
            continue;
        }
        if entry.file_type()?.is_dir() {
            fs::remove_dir_all(entry.path())?;
        } else {
            fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

fn write_meta(build_dir: &Path, meta: &MetaFile) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(meta).map_err(std::io::Error::other)?;
    layout::write_atomic(&build_dir.join(META), &json)
}

/// Seconds since the Unix epoch (0 if the clock is before 1970).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
