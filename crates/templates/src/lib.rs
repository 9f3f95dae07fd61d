//! # pandastack-templates
//!
//! Builds and caches the template root filesystems sandboxes boot from. A
//! sandbox shares its template's rootfs directory read-only (gVisor, with a
//! private overlay per sandbox), so a published rootfs is never changed again.
//!
//! ## Recipes
//!
//! A [`Recipe`] is a Debian bookworm `minbase` system plus packages and pinned
//! PyPI wheels, and the default resources of its sandboxes. The built-in ones
//! are `base` and `code-interpreter` ([`builtin`], [`builtins`]). Every rootfs
//! also gets `/workspace`, `/data`, `/home/panda`, an empty `/.pandastack`
//! (mount point of the guest daemon), `/tmp` mode 1777, hostname `sandbox` and
//! a minimal `/etc/hosts` (see `src/hooks/finish.sh`). `/etc/resolv.conf` is
//! the host's, copied by mmdebstrap; the runtime should provide its own.
//!
//! ## Cache
//!
//! [`Recipe::hash`] is a sha256 over everything that changes the rootfs bytes
//! (suite, variant, mirror, dpkg path filters, sorted packages, wheels, hook scripts,
//! [`RECIPE_FORMAT_VERSION`]). [`TemplateStore::bake`] returns the current build
//! at once when its hash matches and `force` is false; otherwise it builds a new
//! **generation** (1, 2, ... per template name; a forced re-bake of the same
//! hash also gets a new one) in `<root>/<name>/<hash>-g<gen>.partial`, verifies
//! it in a chroot, renames it into place and switches `<root>/<name>/current`.
//! Any failure removes the partial directory and leaves `current` as it was.
//!
//! Old builds are kept, because running sandboxes may still use their rootfs;
//! [`TemplateStore::builds`] lists them and [`TemplateStore::remove_build`]
//! deletes one (never the current one) once the server knows it is unused.
//! Resource changes (cpu, memory, description) are not in the hash: a bake
//! with only those changed is a cache hit that rewrites `meta.json`.
//!
//! ## User templates
//!
//! [`custom`] holds what user-built templates (Dockerfile or rootfs tar) need without a
//! sandbox; they are stored like bakes, one [`TemplateStore::for_workspace`] root per
//! workspace, published through [`TemplateStore::begin_build`].
//!
//! ## Building
//!
//! [`MmdebstrapBuilder`] runs `mmdebstrap --variant=minbase --mode=unshare` as
//! root (its mounts live in a private mount namespace, so a killed bake leaves
//! none behind; deleting a build refuses anyway if something is mounted inside
//! it). Documentation, man pages and translations are not installed
//! ([`DPKG_PATH_FILTERS`]), and mmdebstrap drops the apt lists and cache. pip in
//! the chroot cannot reach PyPI (TLS interception; the CA bundle is the
//! host's), so wheels are downloaded on the host (`pip download --platform
//! manylinux1_x86_64 --python-version 3.11`), cached in
//! `<root>/.cache/wheels/<name==ver>/` and installed offline by a customize
//! hook. Tests swap in their own [`Builder`]. All calls block; async callers
//! use `spawn_blocking`.

mod builder;
mod builtin;
mod command;
pub mod custom;
mod error;
mod meta;
mod mmdebstrap;
mod recipe;
mod store;
#[cfg(test)]
mod testutil;
pub mod transfer;
mod verify;
mod wheels;

pub use builder::Builder;
pub use builtin::{builtin, builtins, BASE, CODE_INTERPRETER};
pub use custom::{build_hash, Resources, Source, TemplateKind};
pub use error::{BakeError, BakeStep, RecipeError, StoreError};
pub use meta::{CustomMeta, TemplateInfo};
pub use mmdebstrap::MmdebstrapBuilder;
pub use recipe::{
    validate_name, CaCertificate, Recipe, ARCH, DPKG_PATH_FILTERS, FINISH_HOOK, MIRROR, MODE,
    RECIPE_FORMAT_VERSION, SUITE, VARIANT, WHEELS_HOOK, WHEEL_PLATFORM, WHEEL_PYTHON,
};
pub use store::{BuildSlot, FinishedBuild, TemplateStore};

/// Apparent size in bytes of the tree at `root` (regular files and symlinks, hard links
/// counted once, symlinks not followed), as recorded in a build's meta.json.
///
/// # Errors
/// I/O errors walking the tree.
pub fn rootfs_size(root: &std::path::Path) -> std::io::Result<u64> {
    meta::tree_size(root)
}
