//! Installs the guest daemon and kernel driver into a content-addressed directory
//! `<data_dir>/guest/<sha256 prefix>/`, mounted read-only at `/.pandastack` in sandboxes.
//! A checkpoint image records the directory it ran with, so images keep restoring after the
//! binary is upgraded (the old directory stays until nothing refers to it).

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Copies `guest_bin` and `kernel_py` into `<data_dir>/guest/<hash>/` (if not there yet) and
/// returns that directory.
///
/// # Errors
/// I/O errors reading the sources or writing the copy.
pub fn install_guest_dir(
    data_dir: &Path,
    guest_bin: &Path,
    kernel_py: &Path,
) -> std::io::Result<PathBuf> {
    let bin = std::fs::read(guest_bin)?;
    let py = std::fs::read(kernel_py)?;
    let mut h = Sha256::new();
    h.update((bin.len() as u64).to_be_bytes());
    h.update(&bin);
    h.update(&py);
    let hash = hex::encode(h.finalize());
    let dir = data_dir.join("guest").join(&hash[..16]);
    if dir.join("pandastack-guest").exists() && dir.join("kernel.py").exists() {
        return Ok(dir);
    }
    let tmp = data_dir
        .join("guest")
        .join(format!("{}.partial", &hash[..16]));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    std::fs::write(tmp.join("pandastack-guest"), &bin)?;
    std::fs::write(tmp.join("kernel.py"), &py)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        tmp.join("pandastack-guest"),
        std::fs::Permissions::from_mode(0o755),
    )?;
    std::fs::set_permissions(
        tmp.join("kernel.py"),
        std::fs::Permissions::from_mode(0o644),
    )?;
    std::fs::rename(&tmp, &dir)?;
    Ok(dir)
}
