//! Databases (contract §2.12, issue 10): `POST/GET /v1/databases`, `GET/PATCH/DELETE
//! /v1/databases/{id}`, `.../connection`, `.../reset-credentials`, `.../wake`, `.../clone`,
//! `.../failover`, `.../events`.

use serde::{Deserialize, Serialize};

/// `POST /v1/databases` body. The published SDKs send only the keys they were given (`cpu`,
/// `memory_mb`, `label`, `size`, `always_on`); `storage_mb` is REST and CLI only. Unknown
/// keys are a 400 naming the field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateDatabase {
    /// Free text shown in listings; also names the database inside (`agent-memory` ->
    /// `agent_memory`). At most 128 characters, no control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 128, pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$")
    )]
    pub label: Option<String>,
    /// RAM tier: `1g` (default), `4g` or `16g` (any case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^(1|4|16)[gG]$"))]
    pub size: Option<String>,
    /// True: never stopped when idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub always_on: Option<bool>,
    /// Storage size, MiB (default 5120, at least 256). Can grow later (`PATCH`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::de::opt_int"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 256, maximum = 1048576))]
    pub storage_mb: Option<u64>,
    /// Whole CPUs of the cluster's CPU quota (default 2, at most 64).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::de::opt_int"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 64))]
    pub cpu: Option<u32>,
    /// MiB; must be a tier's memory (1024, 4096, 16384) and agree with `size` if both given.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::de::opt_int"
    )]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::tier_memory))]
    pub memory_mb: Option<u64>,
}

/// `POST /v1/databases/{id}/clone` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CloneDatabase {
    /// Label of the clone (default: `<source label> (clone)`); as `CreateDatabase.label`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 128, pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$")
    )]
    pub label: Option<String>,
    /// RAM tier of the clone (default: the source's): the way to resize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^(1|4|16)[gG]$"))]
    pub size: Option<String>,
    /// Point-in-time clone from archived WAL (an RFC 3339 time): not supported by this
    /// server, so only absent or `null` is accepted (any value: 400 naming it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::unsupported))]
    pub target_time: Option<String>,
    /// Storage of the clone, MiB (default: the source's; never less).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::de::opt_int"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 256, maximum = 1048576))]
    pub storage_mb: Option<u64>,
}

/// `PATCH /v1/databases/{id}` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdateDatabase {
    /// True: never stopped when idle (a stopped database starts now); false: stopped again
    /// after its idle time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub always_on: Option<bool>,
    /// A larger storage size, MiB (storage never shrinks). The cluster stops for about a
    /// second while its filesystem grows.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::de::opt_int"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 256, maximum = 1048576))]
    pub storage_mb: Option<u64>,
}

/// A database as the API returns it (contract §2.12 "DatabaseInfo"). The secrets (`password`,
/// `connection_url`) are present in `GET /v1/databases/{id}` and the replies of create, clone,
/// reset-credentials and update, and absent from listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Database {
    /// UUID.
    pub id: String,
    pub label: Option<String>,
    /// `provisioning`, `running`, `stopped` (idle; the next connection starts it) or `failed`.
    pub status: String,
    /// What runs it: `postgresql-15`.
    pub template: String,
    /// `postgres://USER:PASSWORD@HOST:PORT/DATABASE`; null until provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_url: Option<String>,
    /// Where sandboxes and the host connect: `10.0.2.2` (every sandbox's gateway, and an
    /// address of the host) or `127.0.0.1` on a server without sandbox networking.
    pub host: String,
    /// TCP port; null until provisioned.
    pub port: Option<u16>,
    /// The database's name inside the cluster.
    pub database: String,
    /// The owner role (not a superuser; owns `database` and nothing else).
    pub username: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// RAM tier (`1g`, `4g`, `16g`).
    pub size: String,
    /// Memory limit of the cluster, MiB (the tier's).
    pub memory_mb: u32,
    /// Whole CPUs of its CPU quota.
    pub cpu: u32,
    /// Storage size, MiB.
    pub storage_mb: u64,
    /// Storage in use, bytes (null while the storage is not mounted).
    pub storage_used_bytes: Option<u64>,
    pub always_on: bool,
    /// Unix seconds (the TypeScript SDK types it as a number, contract §2.12).
    pub created_at: i64,
    /// The source database of a clone.
    pub cloned_from: Option<String>,
    /// Why the database failed (`status: failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Open connections through the front end right now.
    pub connections: u64,
    /// Always false: there is no standby to fail over to on one host.
    pub failover_available: bool,
    pub failover_reason: String,
}

/// `GET /v1/databases` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatabaseList {
    pub items: Vec<Database>,
}

/// `GET /v1/databases/{id}/connection` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatabaseConnection {
    pub connection_url: String,
}

/// `POST /v1/databases/{id}/wake` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatabaseWake {
    pub id: String,
    /// `running` once the cluster accepts connections.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `POST /v1/databases` and `.../clone` reply (202): the new id, and `provisioning`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatabaseAccepted {
    pub id: String,
    pub status: String,
}

/// One state change of a database: an element of `GET /v1/databases/{id}/events` and the
/// data of each `event: database` of the `GET /v1/events` stream (SSE `id:` is `seq`, shared
/// with the sandbox transitions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatabaseEvent {
    pub seq: i64,
    pub database_id: String,
    /// State before (`provisioning` for a new database).
    pub from: String,
    /// State after, or `deleted`.
    pub to: String,
    /// `api`, `idle`, `connection`, `recovery`, `crashed`, `always_on`, ...
    pub cause: String,
    /// RFC 3339 with milliseconds.
    pub at: String,
    pub at_ms: i64,
}
