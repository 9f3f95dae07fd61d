//! PostgreSQL clusters of PandaStack databases (issue 10).
//!
//! # Mechanism
//! Every database is its own PostgreSQL cluster (Debian's `postgresql-15`), run by the
//! unprivileged `postgres` OS user:
//!
//! - **storage** ([`storage`]): the data directory lives on its own size-limited filesystem,
//!   a sparse ext4 image mounted through a loop device (`storage_mb`; grown online). The WAL
//!   lives next to it on the host's disk, so a full data disk fails writes with an ordinary
//!   PostgreSQL error instead of a WAL PANIC; it is bounded by `max_wal_size`.
//! - **template** ([`template`]): one cluster is `initdb`-ed per data dir, with the owner role
//!   and database made and the authentication set; a new database is a copy of it (a few tens
//!   of MiB), renamed and re-keyed, which takes well under a second instead of an `initdb`.
//! - **process** ([`cluster`]): the postmaster runs in its own session and cgroup
//!   ([`cgroup`]: the memory limit of the size tier, [`Tier`]), listens on a unix socket only
//!   and survives a restart of the server, which adopts it again.
//! - **access** ([`frontend`]): the server itself listens on each database's TCP port and
//!   splices a connection to the cluster's socket only after its [`frontend::Admission`]
//!   accepted the peer (the server maps a sandbox's address to its workspace), starting a
//!   stopped cluster on the way (wake on connect). Every role, the superuser too, logs in
//!   with SCRAM; only the server knows the superuser's password ([`admin`]).
//! - **secrets** ([`secret`]): passwords are random (143 bits) and kept sealed
//!   (XChaCha20-Poly1305) under a key file of the data dir.

pub mod admin;
pub mod cgroup;
pub mod cluster;
mod copy;
pub mod frontend;
pub mod names;
mod os_user;
pub mod provision;
pub mod secret;
pub mod storage;
pub mod template;
mod tier;
mod tool;

pub use os_user::OsUser;
pub use tier::{Tier, TierError};

use std::path::PathBuf;

/// Where and how this host runs clusters.
#[derive(Debug, Clone)]
pub struct PgConfig {
    /// Directory with `postgres`, `initdb` and `pg_basebackup` (Debian:
    /// `/usr/lib/postgresql/15/bin`).
    pub bin_dir: PathBuf,
    /// Root of every cluster's files: `<root>/template/`, `<root>/<database id>/`.
    pub root: PathBuf,
    /// Directory of the clusters' unix sockets (a short path: a socket path has at most 107
    /// bytes), e.g. `/run/pandastack/pg-<tag>`.
    pub socket_root: PathBuf,
    /// `fsync` of every cluster. Off only in tests (issue 10: committed transactions survive a
    /// host restart only with it on).
    pub fsync: bool,
    /// OS user that runs the clusters (`postgres`, made by the Debian package).
    pub os_user: String,
}

impl PgConfig {
    /// Checks that the OS user can reach [`PgConfig::root`]: every existing directory on the way
    /// must let it search (`x` for its uid, gid or others). A data dir of mode 0700 does not.
    ///
    /// # Errors
    /// [`PgError::NotInstalled`] without the user; [`PgError::NoAccess`] naming no path (the
    /// server logs which).
    pub fn check_access(&self) -> Result<(), PgError> {
        use std::os::unix::fs::MetadataExt;
        let user = OsUser::lookup(&self.os_user)?;
        for dir in self.root.ancestors() {
            let Ok(m) = std::fs::metadata(dir) else {
                continue;
            };
            let mode = m.mode();
            let searchable = (m.uid() == user.uid && mode & 0o100 != 0)
                || (m.gid() == user.gid && mode & 0o010 != 0)
                || mode & 0o001 != 0;
            if !searchable {
                tracing::warn!(dir = %dir.display(), "the postgres user cannot search this directory; databases are not available");
                return Err(PgError::NoAccess);
            }
        }
        Ok(())
    }
}

/// Errors of cluster operations. Messages are short but may name host paths (a tool's
/// complaint): the server logs them and tells API clients only what failed.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// PostgreSQL is not installed where [`PgConfig::bin_dir`] says.
    #[error("postgresql is not installed on this host")]
    NotInstalled,
    /// The postgres user cannot reach the clusters' directory (a parent lacks `x` for it).
    #[error("the postgres user cannot reach the data dir: give every parent directory of it o+x")]
    NoAccess,
    /// The storage's filesystem is still mounted in another mount namespace (a sandbox
    /// started while it was mounted, by a server without [`storage::share_root`]).
    #[error("the storage is still in use elsewhere; try again")]
    InUse,
    /// A tool (`mkfs.ext4`, `mount`, `initdb`, `pg_basebackup`, ...) failed.
    #[error("{tool} failed: {detail}")]
    Tool { tool: &'static str, detail: String },
    /// The postmaster did not come up.
    #[error("postgresql did not start: {0}")]
    Start(String),
    /// An SQL command of the server failed.
    #[error("admin sql: {0}")]
    Sql(#[from] tokio_postgres::Error),
    /// Sealing or unsealing a secret failed.
    #[error("secret: {0}")]
    Secret(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}
