//! Reading builds, and removing old ones (the server's gc decides which).

use std::fs;
use std::io;

use super::layout::{self, DELETING, LOCK, META};
use super::lock::TemplateLock;
use super::TemplateStore;
use crate::error::StoreError;
use crate::meta::{MetaFile, TemplateInfo};
use crate::recipe::validate_name;

impl TemplateStore {
    /// The current build of template `name`, `None` if it was never baked here.
    ///
    /// # Errors
    /// [`StoreError`] if `name` is invalid, `current` names a missing build, or
    /// a file cannot be read or parsed.
    pub fn get(&self, name: &str) -> Result<Option<TemplateInfo>, StoreError> {
        validate_name(name)?;
        let dir = self.template_dir(name);
        let Some(build_id) =
            layout::read_current(&dir).map_err(StoreError::io(format!("{name}/current")))?
        else {
            return Ok(None);
        };
        let meta = self.read_meta(name, &build_id)?;
        Ok(Some(meta.into_info(
            build_id.clone(),
            &dir.join(&build_id),
            true,
            self.workspace.clone(),
        )))
    }

    /// The current build of every template baked here, sorted by name.
    ///
    /// # Errors
    /// [`StoreError`] if the root or any template's files cannot be read.
    pub fn list(&self) -> Result<Vec<TemplateInfo>, StoreError> {
        let mut out = Vec::new();
        for name in self.names()? {
            out.extend(self.get(&name)?);
        }
        Ok(out)
    }

    /// Every finished build of template `name` (current and old), oldest
    /// generation first; `current` marks the one `get` returns. The server
    /// removes old ones no sandbox uses with [`remove_build`](Self::remove_build).
    ///
    /// # Errors
    /// [`StoreError`] if `name` is invalid or a build's files cannot be read.
    pub fn builds(&self, name: &str) -> Result<Vec<TemplateInfo>, StoreError> {
        validate_name(name)?;
        let dir = self.template_dir(name);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StoreError::io(name.to_owned())(e)),
        };
        let current =
            layout::read_current(&dir).map_err(StoreError::io(format!("{name}/current")))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(StoreError::io(name.to_owned()))?;
            let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if layout::parse_build_id(&id).is_none() || !entry.path().is_dir() {
                continue;
            }
            let meta = self.read_meta(name, &id)?;
            let is_current = current.as_deref() == Some(id.as_str());
            out.push(meta.into_info(id, &entry.path(), is_current, self.workspace.clone()));
        }
        out.sort_by_key(|b| b.generation);
        Ok(out)
    }

    /// Deletes build `build_id` of template `name` and its log. The caller must
    /// know no sandbox still uses its rootfs. The directory is first renamed to
    /// `<id>.deleting`, so a crash mid-way never leaves a half build that looks whole.
    ///
    /// # Errors
    /// [`StoreError::CurrentBuild`] for the current build,
    /// [`StoreError::BuildNotFound`] if it does not exist, else I/O errors.
    pub fn remove_build(&self, name: &str, build_id: &str) -> Result<(), StoreError> {
        validate_name(name)?;
        let dir = self.template_dir(name);
        let not_found = || StoreError::BuildNotFound {
            name: name.to_owned(),
            build_id: build_id.to_owned(),
        };
        if layout::parse_build_id(build_id).is_none() || !dir.join(build_id).is_dir() {
            return Err(not_found());
        }
        let _lock = TemplateLock::acquire(&dir.join(LOCK), || {})
            .map_err(StoreError::io(format!("{name}/{LOCK}")))?;
        let current =
            layout::read_current(&dir).map_err(StoreError::io(format!("{name}/current")))?;
        if current.as_deref() == Some(build_id) {
            return Err(StoreError::CurrentBuild {
                name: name.to_owned(),
                build_id: build_id.to_owned(),
            });
        }
        let doomed = dir.join(format!("{build_id}{DELETING}"));
        let what = format!("{name}/{build_id}");
        fs::rename(dir.join(build_id), &doomed).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => not_found(),
            _ => StoreError::io(what.clone())(e),
        })?;
        layout::remove_tree(&doomed).map_err(StoreError::io(what.clone()))?;
        match fs::remove_file(dir.join(format!("{build_id}.log"))) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(StoreError::io(what)(e)),
            _ => Ok(()),
        }
    }

    /// Deletes template `name` as users see it: it has no current build any more, so lists and
    /// creates no longer find it. Its builds stay on disk for the sandboxes that still run on
    /// them, until [`remove_build`](Self::remove_build); its generation count is kept, so a
    /// template made again under the same name continues it and old snapshots stay refused.
    /// Returns the build that was current.
    ///
    /// # Errors
    /// [`StoreError`] for a bad name or I/O errors.
    pub fn retire(&self, name: &str) -> Result<Option<TemplateInfo>, StoreError> {
        validate_name(name)?;
        let dir = self.template_dir(name);
        if !dir.is_dir() {
            return Ok(None);
        }
        let _lock = TemplateLock::acquire(&dir.join(LOCK), || {})
            .map_err(StoreError::io(format!("{name}/{LOCK}")))?;
        let Some(current) = self.get(name)? else {
            return Ok(None);
        };
        layout::write_generation(&dir, current.generation)
            .map_err(StoreError::io(format!("{name}/.generation")))?;
        layout::clear_current(&dir).map_err(StoreError::io(format!("{name}/current")))?;
        Ok(Some(current))
    }

    /// Removes the partial builds and half-done removals a crash left in every template here
    /// (start-up of the only process that builds into this store).
    ///
    /// # Errors
    /// [`StoreError`] when a directory cannot be read or removed.
    pub fn remove_interrupted(&self) -> Result<(), StoreError> {
        for name in self.names()? {
            layout::remove_stale(&self.template_dir(&name))
                .map_err(StoreError::io(name.clone()))?;
        }
        Ok(())
    }

    /// The highest generation template `name` ever published (0 if none): a complete build
    /// of a higher generation is one still being published (or one a crash left unpublished).
    ///
    /// # Errors
    /// [`StoreError`] for a bad name or an unreadable file.
    pub fn published_generation(&self, name: &str) -> Result<u64, StoreError> {
        validate_name(name)?;
        layout::published_generation(&self.template_dir(name))
            .map_err(StoreError::io(format!("{name}/.generation")))
    }

    /// Names of the templates with a directory here, current or not (retired ones whose
    /// builds are still on disk included), sorted.
    ///
    /// # Errors
    /// [`StoreError`] if the root cannot be read.
    pub fn names(&self) -> Result<Vec<String>, StoreError> {
        let entries = match fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StoreError::io("template root")(e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(StoreError::io("template root"))?;
            if let Some(name) = entry.file_name().to_str() {
                // Skips `.cache` and anything else that is not a template.
                if validate_name(name).is_ok() && entry.path().is_dir() {
                    names.push(name.to_owned());
                }
            }
        }
        names.sort();
        Ok(names)
    }

    /// Parses `<root>/<name>/<build_id>/meta.json`.
    pub(super) fn read_meta(&self, name: &str, build_id: &str) -> Result<MetaFile, StoreError> {
        let build = format!("{name}/{build_id}");
        let path = self.template_dir(name).join(build_id).join(META);
        let bytes = fs::read(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => StoreError::BuildNotFound {
                name: name.to_owned(),
                build_id: build_id.to_owned(),
            },
            _ => StoreError::io(format!("{build}/{META}"))(e),
        })?;
        serde_json::from_slice(&bytes).map_err(|source| StoreError::Meta { build, source })
    }
}
