//! The template store: cached, generation-numbered builds on disk.
//!
//! See the [crate docs](crate) for the cache rules and [`layout`] for the files.

mod bake;
mod layout;
mod lock;
mod pending;
mod read;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::builder::Builder;
use crate::mmdebstrap::MmdebstrapBuilder;

pub use pending::{BuildSlot, FinishedBuild};

/// Template builds under one root directory: `<data_dir>/templates` for the built-ins, or one
/// workspace's own root for the templates its users build ([`TemplateStore::for_workspace`]).
///
/// Cheap to clone; all methods block on disk I/O (and `bake` for minutes), so
/// async callers use `spawn_blocking`. Safe to use from several threads and
/// processes at once: bakes and removals of one template serialise on its lock
/// file; readers never need the lock.
#[derive(Clone)]
pub struct TemplateStore {
    root: PathBuf,
    builder: Arc<dyn Builder>,
    workspace: Option<String>,
}

impl std::fmt::Debug for TemplateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemplateStore")
            .field("root", &self.root)
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

impl TemplateStore {
    /// A store at `root` that bakes with [`MmdebstrapBuilder`], caching wheels
    /// in `<root>/.cache/wheels`. Nothing is created until the first bake.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let builder = MmdebstrapBuilder::new(root.join(".cache").join("wheels"));
        Self::with_builder(root, Arc::new(builder))
    }

    /// A store at `root` that bakes with `builder` (tests inject fakes here).
    pub fn with_builder(root: impl Into<PathBuf>, builder: Arc<dyn Builder>) -> Self {
        Self {
            root: root.into(),
            builder,
            workspace: None,
        }
    }

    /// The store of the templates workspace `workspace` built, at `root`: its builds come from
    /// [`TemplateStore::begin_build`] (there are no recipes to bake), and every
    /// [`TemplateInfo`](crate::TemplateInfo) it returns names the workspace.
    pub fn for_workspace(root: impl Into<PathBuf>, workspace: impl Into<String>) -> Self {
        let root = root.into();
        let builder = MmdebstrapBuilder::new(root.join(".cache").join("wheels"));
        Self {
            root,
            builder: Arc::new(builder),
            workspace: Some(workspace.into()),
        }
    }

    /// The owning workspace, `None` for the built-ins.
    pub fn workspace(&self) -> Option<&str> {
        self.workspace.as_deref()
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/<name>`; `name` must already be validated.
    fn template_dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}
