//! `meta.json` of a build and the [`TemplateInfo`] the store hands out.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use pandastack_guest_protocol::TemplateRuntime;
use serde::{Deserialize, Serialize};

use crate::custom::finish::Probes;
use crate::custom::{Resources, TemplateKind};
use crate::recipe::Recipe;

/// One build of a template, as read from its `meta.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateInfo {
    /// Template name (`base`).
    pub name: String,
    /// Directory name of the build under `<root>/<name>/`: `<hash>-g<generation>`.
    pub build_id: String,
    /// 1 for the first build of `name`, +1 for every bake that made a new current build.
    pub generation: u64,
    /// [`Recipe::hash`] of the recipe it was built from.
    pub hash: String,
    /// The rootfs directory; share it read-only, never write to it.
    pub rootfs: PathBuf,
    /// Apparent size of the rootfs in bytes (regular files and symlinks, hard
    /// links counted once), measured at bake time.
    pub size_bytes: u64,
    /// Default vCPUs for sandboxes of this template.
    pub cpu: u32,
    /// Default memory for sandboxes of this template, in MiB.
    pub memory_mb: u32,
    /// When the build finished, in seconds since the Unix epoch.
    pub built_at: u64,
    /// One-line description from the recipe.
    pub description: String,
    /// Debian packages the recipe asked for (not their dependencies).
    pub packages: Vec<String>,
    /// Pinned wheels the recipe installed (`name==version`).
    pub pip_wheels: Vec<String>,
    /// Whether this build is what `<root>/<name>/current` points at.
    pub current: bool,
    /// Workspace that owns the template; `None` for the built-ins (global).
    pub workspace: Option<String>,
    /// How the rootfs was made.
    pub kind: TemplateKind,
    /// Template a Dockerfile build started `FROM` (its name), if any.
    pub base: Option<String>,
    /// Disk of the template's sandboxes, MiB: `size_mb` of the build (user templates; `None`
    /// for the built-ins, whose sandboxes get the server default).
    pub disk_mb: Option<u32>,
    /// What the rootfs contains (user templates; the built-ins are known to have everything).
    pub probes: Option<Probes>,
    /// `ENV` and `WORKDIR` the template's sandboxes start with (also in the rootfs).
    pub runtime: TemplateRuntime,
}

impl TemplateInfo {
    /// False only when the template is known to have no python3 (a rootfs tar without it):
    /// code contexts cannot start there.
    pub fn has_python(&self) -> bool {
        self.probes.is_none_or(|p| p.python)
    }
}

/// On-disk shape of `meta.json`; the rootfs path and `current` are derived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MetaFile {
    pub name: String,
    pub hash: String,
    pub generation: u64,
    pub size_bytes: u64,
    pub built_at: u64,
    pub cpu: u32,
    pub memory_mb: u32,
    pub description: String,
    pub packages: Vec<String>,
    #[serde(default)]
    pub pip_wheels: Vec<String>,
    #[serde(default)]
    pub kind: TemplateKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes: Option<Probes>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub runtime: TemplateRuntime,
}

fn is_default(rt: &TemplateRuntime) -> bool {
    *rt == TemplateRuntime::default()
}

/// What a user build records about itself (see [`MetaFile::custom`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomMeta {
    pub kind: TemplateKind,
    pub description: String,
    pub base: Option<String>,
    pub resources: Resources,
    pub probes: Probes,
    pub runtime: TemplateRuntime,
}

impl MetaFile {
    /// Metadata for a new build of `recipe`.
    pub fn new(recipe: &Recipe, generation: u64, size_bytes: u64, built_at: u64) -> Self {
        Self {
            name: recipe.name.clone(),
            hash: recipe.hash(),
            generation,
            size_bytes,
            built_at,
            cpu: recipe.cpu,
            memory_mb: recipe.memory_mb,
            description: recipe.description.clone(),
            packages: recipe.packages.clone(),
            pip_wheels: recipe.pip_wheels.clone(),
            kind: TemplateKind::Builtin,
            base: None,
            disk_mb: None,
            probes: None,
            runtime: TemplateRuntime::default(),
        }
    }

    /// Metadata for a new user build of template `name` from `hash`.
    pub fn custom(
        name: &str,
        hash: &str,
        generation: u64,
        size_bytes: u64,
        built_at: u64,
        custom: CustomMeta,
    ) -> Self {
        Self {
            name: name.to_owned(),
            hash: hash.to_owned(),
            generation,
            size_bytes,
            built_at,
            cpu: custom.resources.cpu,
            memory_mb: custom.resources.memory_mb,
            description: custom.description,
            packages: Vec::new(),
            pip_wheels: Vec::new(),
            kind: custom.kind,
            base: custom.base,
            disk_mb: Some(custom.resources.disk_mb),
            probes: Some(custom.probes),
            runtime: custom.runtime,
        }
    }

    /// Copies the fields that do not affect the rootfs (resources, description)
    /// from `recipe`; returns whether anything changed.
    pub fn refresh_from(&mut self, recipe: &Recipe) -> bool {
        let before = self.clone();
        self.cpu = recipe.cpu;
        self.memory_mb = recipe.memory_mb;
        self.description.clone_from(&recipe.description);
        *self != before
    }

    /// The public view of this build, whose directory is `build_dir`, in the store of
    /// `workspace` (`None`: the built-ins).
    pub fn into_info(
        self,
        build_id: String,
        build_dir: &Path,
        current: bool,
        workspace: Option<String>,
    ) -> TemplateInfo {
        TemplateInfo {
            name: self.name,
            build_id,
            generation: self.generation,
            hash: self.hash,
            rootfs: build_dir.join("rootfs"),
            size_bytes: self.size_bytes,
            cpu: self.cpu,
            memory_mb: self.memory_mb,
            built_at: self.built_at,
            description: self.description,
            packages: self.packages,
            pip_wheels: self.pip_wheels,
            current,
            workspace,
            kind: self.kind,
            base: self.base,
            disk_mb: self.disk_mb,
            probes: self.probes,
            runtime: self.runtime,
        }
    }
}

/// Apparent size in bytes of the tree at `root`, not following symlinks and
/// counting each hard-linked inode once.
pub(crate) fn tree_size(root: &Path) -> io::Result<u64> {
    let mut seen = HashSet::new();
    let mut total = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let meta = entry.metadata()?; // DirEntry::metadata does not follow symlinks.
            let kind = meta.file_type();
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() || kind.is_symlink() {
                if meta.nlink() > 1 && !seen.insert((meta.dev(), meta.ino())) {
                    continue;
                }
                total += meta.len();
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn tree_size_counts_hard_links_once_and_skips_symlink_targets() {
        let tmp = TempDir::new("size");
        let root = tmp.path();
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("a/b/f"), vec![0u8; 1000]).unwrap();
        fs::hard_link(root.join("a/b/f"), root.join("a/g")).unwrap();
        std::os::unix::fs::symlink("/usr", root.join("usr")).unwrap();
        assert_eq!(tree_size(root).unwrap(), 1000 + "/usr".len() as u64);
    }
}
