//! The steps every new build goes through, for bakes and user builds alike: a [`BuildSlot`]
//! (template lock held, stale partial builds removed, next generation chosen), a rootfs made in
//! `<id>.partial/rootfs`, [`BuildSlot::finish`] (meta.json written, renamed to `<id>/`: whole,
//! but not yet current), then [`FinishedBuild::publish`] (`current` switched) or
//! [`FinishedBuild::discard`]. The lock is held from the slot until publish or discard, so a
//! user build can take its template snapshot from the final rootfs path before anyone can
//! create a sandbox from it. Dropping a slot or a finished build removes what it made.

use std::fs;
use std::path::{Path, PathBuf};

use super::layout::{self, LOCK, META, PARTIAL};
use super::lock::TemplateLock;
use super::TemplateStore;
use crate::error::StoreError;
use crate::meta::{CustomMeta, MetaFile, TemplateInfo};
use crate::recipe::validate_name;

/// A build of one template in progress (holds its lock).
#[derive(Debug)]
pub struct BuildSlot {
    lock: Option<TemplateLock>,
    store: TemplateStore,
    name: String,
    dir: PathBuf,
    hash: String,
    generation: u64,
    build_id: String,
    partial: PathBuf,
}

/// A complete build that is not current yet (holds the template's lock).
#[derive(Debug)]
pub struct FinishedBuild {
    lock: Option<TemplateLock>,
    dir: PathBuf,
    build_dir: PathBuf,
    generation: u64,
    info: TemplateInfo,
    settled: bool,
}

impl TemplateStore {
    /// Takes the lock of template `name` (calling `on_wait` once if another build holds it),
    /// removes partial builds a crash left, and reserves the next generation for a build from
    /// `hash`. Nothing is created until [`BuildSlot::create_work_dir`].
    ///
    /// # Errors
    /// [`StoreError`] for a bad name or I/O errors on the template directory.
    pub fn begin_build(
        &self,
        name: &str,
        hash: &str,
        on_wait: impl FnOnce(),
    ) -> Result<BuildSlot, StoreError> {
        validate_name(name)?;
        let dir = self.template_dir(name);
        let what = |file: &str| format!("{name}/{file}");
        fs::create_dir_all(&dir).map_err(StoreError::io(name.to_owned()))?;
        let lock =
            TemplateLock::acquire(&dir.join(LOCK), on_wait).map_err(StoreError::io(what(LOCK)))?;
        layout::remove_stale(&dir).map_err(StoreError::io(name.to_owned()))?;
        let generation = layout::max_generation(&dir).map_err(StoreError::io(name.to_owned()))? + 1;
        let build_id = layout::build_id(hash, generation);
        let partial = dir.join(format!("{build_id}{PARTIAL}"));
        Ok(BuildSlot {
            lock: Some(lock),
            store: self.clone(),
            name: name.to_owned(),
            dir,
            hash: hash.to_owned(),
            generation,
            build_id,
            partial,
        })
    }
}

impl BuildSlot {
    /// The current build of the template, read under the lock.
    ///
    /// # Errors
    /// As [`TemplateStore::get`].
    pub fn current(&self) -> Result<Option<TemplateInfo>, StoreError> {
        self.store.get(&self.name)
    }

    /// The generation this build will get.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// `<hash>-g<generation>`.
    pub fn build_id(&self) -> &str {
        &self.build_id
    }

    /// The hash the build was begun with.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The template's directory (`<root>/<name>`).
    pub fn template_dir(&self) -> &Path {
        &self.dir
    }

    /// `<id>.partial`: the build's private work directory.
    pub fn work_dir(&self) -> &Path {
        &self.partial
    }

    /// `<id>.partial/rootfs`: where the rootfs is made.
    pub fn rootfs(&self) -> PathBuf {
        self.partial.join("rootfs")
    }

    /// Creates the work directory (empty); the rootfs inside it is the builder's to create.
    ///
    /// # Errors
    /// I/O errors.
    pub fn create_work_dir(&self) -> std::io::Result<()> {
        fs::create_dir(&self.partial)
    }

    /// Finishes a user build whose rootfs (of `size_bytes`) is in place: see
    /// [`BuildSlot::finish`](Self::finish).
    ///
    /// # Errors
    /// I/O errors (the work directory is removed).
    pub fn finish_custom(
        self,
        size_bytes: u64,
        custom: CustomMeta,
    ) -> Result<FinishedBuild, StoreError> {
        let meta = MetaFile::custom(
            &self.name,
            &self.hash,
            self.generation,
            size_bytes,
            super::bake::unix_now(),
            custom,
        );
        self.finish(meta)
    }

    /// Writes `meta` and renames the work directory to `<id>/`: the build is complete and
    /// listed by [`TemplateStore::builds`], but not current.
    ///
    /// # Errors
    /// I/O errors (the work directory is removed).
    pub(crate) fn finish(mut self, meta: MetaFile) -> Result<FinishedBuild, StoreError> {
        let what = format!("{}/{}", self.name, self.build_id);
        let json = serde_json::to_vec_pretty(&meta)
            .map_err(|e| StoreError::io(what.clone())(std::io::Error::other(e)))?;
        layout::write_atomic(&self.partial.join(META), &json)
            .map_err(StoreError::io(what.clone()))?;
        let build_dir = self.dir.join(&self.build_id);
        fs::rename(&self.partial, &build_dir).map_err(StoreError::io(what))?;
        let info = meta.into_info(
            self.build_id.clone(),
            &build_dir,
            false,
            self.store.workspace.clone(),
        );
        Ok(FinishedBuild {
            lock: self.lock.take(),
            dir: self.dir.clone(),
            build_dir,
            generation: self.generation,
            info,
            settled: false,
        })
    }
}

impl Drop for BuildSlot {
    fn drop(&mut self) {
        if self.lock.is_some() && self.partial.exists() {
            if let Err(e) = layout::remove_tree(&self.partial) {
                tracing::warn!(template = %self.name, build_id = %self.build_id, error = %e, "cannot remove partial build");
            }
        }
    }
}

impl FinishedBuild {
    /// The build (with `current: false` until published).
    pub fn info(&self) -> &TemplateInfo {
        &self.info
    }

    /// Makes this build the template's current one and releases the lock.
    ///
    /// # Errors
    /// I/O errors switching `current` (the build stays on disk, not current).
    pub fn publish(mut self) -> Result<TemplateInfo, StoreError> {
        let what = format!("{}/current", self.info.name);
        layout::write_generation(&self.dir, self.generation)
            .map_err(StoreError::io(what.clone()))?;
        layout::write_current(&self.dir, &self.info.build_id).map_err(StoreError::io(what))?;
        self.settled = true;
        self.lock.take();
        let mut info = self.info.clone();
        info.current = true;
        Ok(info)
    }

    /// Removes the build (it was never current) and releases the lock.
    pub fn discard(mut self) {
        self.remove();
    }

    fn remove(&mut self) {
        if self.settled {
            return;
        }
        self.settled = true;
        if let Err(e) = layout::remove_tree(&self.build_dir) {
            tracing::warn!(template = %self.info.name, build_id = %self.info.build_id, error = %e, "cannot remove discarded build");
        }
        self.lock.take();
    }
}

impl Drop for FinishedBuild {
    fn drop(&mut self) {
        self.remove();
    }
}
