//! Smoke test of a finished rootfs: bash runs, and python3 imports the recipe's
//! `verify_imports`, inside `chroot` (no sandbox, so it needs root).
//!
//! The environment is cleared and bytecode writing is off, so the checks leave
//! the rootfs unchanged.

use std::path::Path;
use std::process::Command;

use crate::command::run_streamed;
use crate::error::{BakeError, BakeStep};
use crate::recipe::Recipe;

/// Runs the checks of `recipe` against `rootfs`.
///
/// # Errors
/// [`BakeError`] with step [`BakeStep::Verify`] for the first failing check.
pub(crate) fn in_chroot(
    recipe: &Recipe,
    rootfs: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<(), BakeError> {
    log("I: verify: /bin/bash runs");
    run_streamed(
        BakeStep::Verify,
        chroot(rootfs, &["/bin/bash", "-c", "true"]),
        log,
    )?;

    let imports = if recipe.verify_imports.is_empty() {
        "sys".to_owned()
    } else {
        recipe.verify_imports.join(", ")
    };
    let script = format!("import {imports}");
    log(&format!("I: verify: python3 -c '{script}'"));
    run_streamed(
        BakeStep::Verify,
        chroot(rootfs, &["python3", "-c", &script]),
        log,
    )
}

fn chroot(rootfs: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("chroot");
    cmd.arg(rootfs)
        .args(args)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("HOME", "/root")
        .env("LC_ALL", "C.UTF-8")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("MPLBACKEND", "Agg");
    cmd
}
