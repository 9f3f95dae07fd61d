//! Volumes (contract §2.6; seed 001 §3 "Attach a volume"): named ext4 volumes of a workspace
//! that outlive sandboxes, attached at create time and mounted at `/mnt/{name}`.

use serde::{Deserialize, Serialize};

/// `POST /v1/volumes` body (contract §2.6: both SDKs send exactly `{name, size_mb}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    /// `[A-Za-z0-9._-]{1,64}`, not `.` or `..` (the pattern says so without look-ahead);
    /// unique within the workspace.
    #[cfg_attr(
        feature = "openapi",
        schema(
            pattern = "^([A-Za-z0-9_-][A-Za-z0-9._-]{0,63}|\\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,62}|\\.\\.[A-Za-z0-9._-]{1,62})$"
        )
    )]
    pub name: String,
    /// Provisioned size, MiB (64 to 65536). Volumes are billed on it (seed 001) and can only
    /// grow.
    #[cfg_attr(feature = "openapi", schema(minimum = 64, maximum = 65536))]
    #[serde(deserialize_with = "crate::de::int")]
    pub size_mb: u64,
}

/// `PATCH /v1/volumes/{name}` body: grow a detached volume (seed 001: "a volume cannot
/// shrink ... growing later is easier").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResizeVolume {
    /// The new size, MiB (at most 65536); at least the current one.
    #[cfg_attr(feature = "openapi", schema(minimum = 64, maximum = 65536))]
    #[serde(deserialize_with = "crate::de::int")]
    pub size_mb: u64,
}

/// A volume as the API returns it (contract §2.6: the SDKs read `name`, `size_mb`,
/// `created_at`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Volume {
    /// `vol-` and 32 hex digits.
    pub id: String,
    pub name: String,
    /// Provisioned size, MiB.
    pub size_mb: u64,
    /// Bytes in use, the filesystem's own metadata (journal, inode tables) included, as `df`
    /// counts it: live while attached, else as it was left.
    pub used_bytes: u64,
    /// RFC 3339.
    pub created_at: String,
    /// The sandbox holding it: its read-write holder, else its first read-only one; null when
    /// detached.
    pub attached_to: Option<String>,
    /// Every sandbox holding it (one read-write, or any number read-only). A hibernated
    /// sandbox keeps its volumes.
    pub attachments: Vec<VolumeAttachment>,
}

/// One sandbox holding a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VolumeAttachment {
    pub sandbox_id: String,
    pub read_only: bool,
}

/// A volume in a sandbox's JSON (`volumes` of the sandbox object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SandboxVolume {
    pub name: String,
    pub read_only: bool,
    /// Where it is mounted inside: `/mnt/{name}`.
    pub mount_path: String,
}

/// What a fork does with the parent's read-write volumes (`"volumes"` of a fork or
/// fork-tree body). Without it, a fork of a sandbox holding one is refused with 409 (a volume
/// is attached to one sandbox at a time); read-only volumes are always inherited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ForkVolumes {
    /// Children start without the parent's read-write volumes.
    Detach,
}
