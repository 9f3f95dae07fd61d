//! The production [`Builder`]: Debian bookworm via `mmdebstrap --variant=minbase`.
//!
//! One mmdebstrap run per bake, as root in mode `unshare` (a private mount
//! namespace): packages from Debian's archive (see [`crate::MIRROR`]), then the customize hooks (wheels
//! first, then [`FINISH_HOOK`]), then mmdebstrap's own cleanup, which drops the
//! apt lists and package cache. Pinned wheels are downloaded on the host first
//! (see [`wheels`](crate::wheels)) and staged in the build's work directory.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::builder::Builder;
use crate::command::run_streamed;
use crate::error::{BakeError, BakeStep};
use crate::recipe::{
    Recipe, ARCH, DPKG_PATH_FILTERS, FINISH_HOOK, MODE, SUITE, VARIANT, WHEELS_HOOK,
};
use crate::{verify, wheels};

/// Builds rootfs directories with `mmdebstrap`; needs root, `mmdebstrap`,
/// `chroot` and (for recipes with wheels) host `python3 -m pip` on `PATH`, plus
/// network access to the Debian mirror and PyPI.
#[derive(Debug, Clone)]
pub struct MmdebstrapBuilder {
    wheel_cache: PathBuf,
}

impl MmdebstrapBuilder {
    /// A builder that caches downloaded wheels under `wheel_cache`
    /// (one directory per `name==version`; created on demand).
    pub fn new(wheel_cache: impl Into<PathBuf>) -> Self {
        Self {
            wheel_cache: wheel_cache.into(),
        }
    }

    /// Hard-links (or copies, across file systems) each pinned wheel into
    /// `<work_dir>/wheels`, the directory the wheels hook reads.
    fn stage_wheels(
        &self,
        recipe: &Recipe,
        work_dir: &Path,
        log: &mut dyn FnMut(&str),
    ) -> Result<PathBuf, BakeError> {
        let stage = work_dir.join("wheels");
        fs::create_dir_all(&stage).map_err(BakeError::io(BakeStep::FetchWheels))?;
        for spec in &recipe.pip_wheels {
            let wheel = wheels::fetch(&self.wheel_cache, spec, log)?;
            let Some(file_name) = wheel.file_name() else {
                continue;
            };
            let target = stage.join(file_name);
            if fs::hard_link(&wheel, &target).is_err() {
                fs::copy(&wheel, &target).map_err(BakeError::io(BakeStep::FetchWheels))?;
            }
        }
        Ok(stage)
    }
}

impl Builder for MmdebstrapBuilder {
    fn build(
        &self,
        recipe: &Recipe,
        work_dir: &Path,
        rootfs: &Path,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), BakeError> {
        let mut cmd = Command::new("mmdebstrap");
        // unshare mode as root: mmdebstrap mounts /proc, /sys and device nodes in
        // a private mount namespace, so a killed bake leaves no host mounts in
        // the partial build.
        cmd.arg(format!("--mode={MODE}"))
            .arg(format!("--variant={VARIANT}"))
            .arg(format!("--architectures={ARCH}"))
            .arg(format!("--include={}", recipe.packages.join(",")))
            .args(DPKG_PATH_FILTERS.iter().map(|f| format!("--dpkgopt={f}")));
        if !recipe.pip_wheels.is_empty() {
            let stage = self.stage_wheels(recipe, work_dir, log)?;
            let hook = write_hook(work_dir, "wheels.sh", WHEELS_HOOK)?;
            cmd.env("PANDASTACK_WHEEL_DIR", stage).arg(hook_arg(&hook));
        }
        if !recipe.ca_certificates.is_empty() {
            let dir = work_dir.join("ca");
            fs::create_dir_all(&dir).map_err(BakeError::io(BakeStep::Bootstrap))?;
            for ca in &recipe.ca_certificates {
                fs::write(dir.join(&ca.name), &ca.pem)
                    .map_err(BakeError::io(BakeStep::Bootstrap))?;
            }
            cmd.env("PANDASTACK_CA_DIR", &dir);
        }
        let finish = write_hook(work_dir, "finish.sh", FINISH_HOOK)?;
        cmd.arg(hook_arg(&finish))
            .arg(SUITE)
            .arg(rootfs)
            // Host locale settings would only produce perl warnings in the chroot.
            .env("LC_ALL", "C.UTF-8");
        log(&format!(
            "I: mmdebstrap {SUITE} ({VARIANT}) with {} packages",
            recipe.packages.len()
        ));
        run_streamed(BakeStep::Bootstrap, cmd, log)
    }

    fn verify(
        &self,
        recipe: &Recipe,
        rootfs: &Path,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), BakeError> {
        verify::in_chroot(recipe, rootfs, log)
    }
}

/// Writes hook `text` as an executable `<work_dir>/hooks/<file>`; mmdebstrap
/// runs an executable hook file directly (with the rootfs as `$1`), which keeps
/// the script out of its log.
fn write_hook(work_dir: &Path, file: &str, text: &str) -> Result<PathBuf, BakeError> {
    let dir = work_dir.join("hooks");
    let path = dir.join(file);
    let io = BakeError::io(BakeStep::Bootstrap);
    fs::create_dir_all(&dir)
        .and_then(|()| fs::write(&path, text))
        .and_then(|()| fs::set_permissions(&path, fs::Permissions::from_mode(0o755)))
        .map_err(io)?;
    Ok(path)
}

/// `--customize-hook=<path>`.
fn hook_arg(path: &Path) -> std::ffi::OsString {
    let mut arg = std::ffi::OsString::from("--customize-hook=");
    arg.push(path);
    arg
}
