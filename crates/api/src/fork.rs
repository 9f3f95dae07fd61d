//! Fork, fork-tree and promote (contract §2.1; seed 000 §3, seed 003 "fork").

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /v1/sandboxes/{id}/fork` body; may be absent (Py sends none, TS an empty text body).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// Metadata of the child (added to `parent_id` and `fork_tree_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::metadata_map))]
    pub metadata: Option<BTreeMap<String, String>>,
    /// `"detach"`: the child starts without the parent's read-write volumes (else a parent
    /// holding one cannot be forked: 409).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<crate::ForkVolumes>,
    /// Placement hint (issue 12): the host the child runs on. Another host than the parent's
    /// gets the child through object storage (the capture is uploaded and restored there).
    /// REST only; 400 for an unknown host, 503 when it is down, draining or full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// `POST /v1/sandboxes/{id}/fork-tree` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ForkTreeRequest {
    /// Number of children, 1 to 16.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 16))]
    #[serde(deserialize_with = "crate::de::int")]
    pub count: usize,
    /// Metadata of every child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::metadata_map))]
    pub metadata: Option<BTreeMap<String, String>>,
    /// As [`ForkRequest::volumes`], for every child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<crate::ForkVolumes>,
}

/// `POST /v1/sandboxes/{id}/promote` body (both SDKs always send `cleanup_siblings`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PromoteRequest {
    /// The fork tree the child must belong to (checked when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree_id: Option<String>,
    /// Delete the child's siblings (the other children of its tree).
    #[serde(default)]
    pub cleanup_siblings: bool,
}

/// `POST /v1/sandboxes/{id}/promote` reply: the child is now a standalone sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Promotion {
    /// The promoted sandbox.
    pub winner: String,
    pub tree_id: Option<String>,
    /// Siblings deleted (with `cleanup_siblings`).
    pub deleted: Vec<String>,
    /// Siblings that could not be deleted: id -> message.
    pub failures: BTreeMap<String, String>,
}
