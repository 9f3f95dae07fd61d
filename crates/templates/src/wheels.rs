//! Host-side cache of pinned PyPI wheels for the chroot.
//!
//! pip inside the chroot cannot reach PyPI (the host's TLS interception CA is
//! only in the host bundle), so the host runs `pip download` and the
//! [`WHEELS_HOOK`](crate::recipe::WHEELS_HOOK) copies the files in. Each pin has
//! its own directory `<cache>/<name==version>/` holding exactly one `.whl`;
//! a pin is immutable, so a filled directory is never fetched again.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::command::run_streamed;
use crate::error::{BakeError, BakeStep};
use crate::recipe::{WHEEL_PLATFORM, WHEEL_PYTHON};

/// Returns the cached wheel file of `spec` (`name==version`, already validated),
/// downloading it on the host first if it is not cached.
///
/// # Errors
/// [`BakeError`] with step [`BakeStep::FetchWheels`] if pip fails or does not
/// leave exactly one wheel.
pub(crate) fn fetch(
    cache: &Path,
    spec: &str,
    log: &mut dyn FnMut(&str),
) -> Result<PathBuf, BakeError> {
    let dir = cache.join(spec);
    if let Some(wheel) = single_wheel(&dir)? {
        log(&format!("I: wheel {spec} cached"));
        return Ok(wheel);
    }
    let partial = cache.join(format!("{spec}.partial"));
    if partial.exists() {
        fs::remove_dir_all(&partial).map_err(BakeError::io(BakeStep::FetchWheels))?;
    }
    fs::create_dir_all(&partial).map_err(BakeError::io(BakeStep::FetchWheels))?;
    log(&format!("I: downloading wheel {spec} on the host"));
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args([
            "--platform",
            WHEEL_PLATFORM,
            "--python-version",
            WHEEL_PYTHON,
        ])
        .arg("--disable-pip-version-check")
        .arg("-d")
        .arg(&partial)
        .arg(spec);
    let fetched = run_streamed(BakeStep::FetchWheels, cmd, log).and_then(|()| {
        single_wheel(&partial)?.ok_or_else(|| BakeError::Io {
            step: BakeStep::FetchWheels,
            source: std::io::Error::other(format!("pip left no single wheel for {spec}")),
        })
    });
    if let Err(e) = fetched {
        let _ = fs::remove_dir_all(&partial);
        return Err(e);
    }
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(BakeError::io(BakeStep::FetchWheels))?;
    }
    fs::rename(&partial, &dir).map_err(BakeError::io(BakeStep::FetchWheels))?;
    single_wheel(&dir)?.ok_or_else(|| BakeError::Io {
        step: BakeStep::FetchWheels,
        source: std::io::Error::other("wheel vanished from the cache"),
    })
}

/// The only `.whl` in `dir`, `None` if `dir` is missing or does not hold exactly one.
fn single_wheel(dir: &Path) -> Result<Option<PathBuf>, BakeError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(BakeError::io(BakeStep::FetchWheels)(e)),
    };
    let mut wheels = Vec::new();
    for entry in entries {
        let path = entry.map_err(BakeError::io(BakeStep::FetchWheels))?.path();
        if path.extension().is_some_and(|e| e == "whl") {
            wheels.push(path);
        }
    }
    Ok(if wheels.len() == 1 {
        wheels.pop()
    } else {
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn cached_wheel_is_reused_without_pip() {
        let tmp = TempDir::new("wheels");
        let dir = tmp.path().join("kaleido==0.2.1");
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("kaleido-0.2.1-py2.py3-none-manylinux1_x86_64.whl"),
            b"x",
        )
        .unwrap();
        let got = fetch(tmp.path(), "kaleido==0.2.1", &mut |_| {}).unwrap();
        assert_eq!(got.parent(), Some(dir.as_path()));
    }
}
