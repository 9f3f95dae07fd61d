//! The seam between the store (caching, layout, generations) and the thing that
//! actually produces a rootfs. Production uses
//! [`MmdebstrapBuilder`](crate::MmdebstrapBuilder); tests inject a builder that
//! writes a few files.

use std::path::Path;

use crate::error::BakeError;
use crate::recipe::Recipe;

/// Produces and checks a rootfs for a recipe.
///
/// Both methods block (they run programs for minutes); async callers use
/// `spawn_blocking`.
pub trait Builder: Send + Sync {
    /// Creates `rootfs` (a path that does not exist yet) and fills it from
    /// `recipe`. `work_dir` is the build's private scratch directory (the parent
    /// of `rootfs`; everything else in it is dropped before publishing). Every
    /// log line goes to `log`.
    ///
    /// # Errors
    /// [`BakeError`] naming the step that failed; the store removes the partial
    /// build afterwards, so the builder need not clean up.
    fn build(
        &self,
        recipe: &Recipe,
        work_dir: &Path,
        rootfs: &Path,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), BakeError>;

    /// Checks that the finished `rootfs` works for `recipe`, without changing it.
    ///
    /// # Errors
    /// [`BakeError`] with step [`Verify`](crate::BakeStep::Verify).
    fn verify(
        &self,
        recipe: &Recipe,
        rootfs: &Path,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), BakeError>;
}
