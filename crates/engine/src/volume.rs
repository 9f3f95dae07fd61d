//! Volumes as the engine sees them (issue 9): named ext4 images that outlive instances and are
//! mounted inside at [`VOLUMES_DIR`]`/{name}` (seed 001 §3: "it mounts at `/mnt/{name}`").
//!
//! The server owns a volume's life (its image file, who holds it, quotas); the engine only
//! attaches images to instances and detaches them. One image is used read-write by at most one
//! instance, or read-only by any number (the server enforces this; an engine refuses a spec
//! that breaks it). An engine may be asked to attach a volume when an instance starts
//! ([`crate::SandboxSpec::volumes`], also on restores: a checkpoint taken with files open on a
//! volume restores only when the volume is there again) or to a running instance
//! ([`crate::Engine::attach_volumes`], a warm-pool instance claimed by a create).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where volumes appear inside every sandbox: `/mnt/{name}`.
pub const VOLUMES_DIR: &str = "/mnt";

/// One volume attached to an instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VolumeMount {
    /// The volume's name: its directory under [`VOLUMES_DIR`] (`[A-Za-z0-9._-]{1,64}`, not `.`
    /// or `..`; the server validates it).
    pub name: String,
    /// The volume's ext4 image on the host. Images are told apart by their file name, which
    /// must be unique per engine (the server names them after the volume id).
    pub image: PathBuf,
    /// Mounted read-only: writes inside fail with EROFS.
    pub read_only: bool,
}

impl VolumeMount {
    /// The path inside the sandbox, e.g. `/mnt/agent-workspace`.
    pub fn mount_path(&self) -> String {
        format!("{VOLUMES_DIR}/{}", self.name)
    }
}

/// Space of a volume's filesystem, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeUsage {
    /// Bytes in use (files and the filesystem's own metadata, as `df` counts them).
    pub used_bytes: u64,
    /// Size of the filesystem.
    pub size_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volumes_mount_under_mnt() {
        let v = VolumeMount {
            name: "agent-workspace".into(),
            image: PathBuf::from("/d/volumes/vol-1.ext4"),
            read_only: false,
        };
        assert_eq!(v.mount_path(), "/mnt/agent-workspace");
    }
}
