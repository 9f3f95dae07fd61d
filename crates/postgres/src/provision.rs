//! Making and removing whole clusters: a new one from the template, a clone of another, and
//! the removal of everything one holds (processes, mount, loop device, image, directories).
//! Every failure path removes what was made so far.

use crate::admin::Admin;
use crate::cluster::{self, ClusterDirs, Postmaster, RunSpec, StopMode};
use crate::names::DEFAULT_DATABASE;
use crate::os_user::OsUser;
use crate::secret::scram_verifier;
use crate::template::{relink_wal, Template};
use crate::tool::{command, run};
use crate::{copy, PgConfig, PgError};
use std::time::Instant;
use tracing::{info, warn};

/// What a new cluster gets.
#[derive(Debug, Clone)]
pub struct Provision<'a> {
    pub dirs: &'a ClusterDirs,
    /// Size of its storage, MiB.
    pub storage_mb: u64,
    pub run: RunSpec,
    /// Its database and owner role (for a clone: the source's, which the copy has).
    pub database: &'a str,
    pub role: &'a str,
    /// The owner's new password.
    pub owner_password: &'a str,
    /// The superuser's new password.
    pub superuser_password: &'a str,
}

/// Where a clone copies from.
#[derive(Debug, Clone)]
pub struct CloneSource<'a> {
    pub dirs: &'a ClusterDirs,
    /// The source's superuser password.
    pub superuser_password: &'a str,
    /// True when the source's postmaster runs (a base backup is taken); false when it is
    /// stopped cleanly and stays stopped while copied (the caller holds it so).
    pub running: bool,
}

/// Makes the cluster's directory and mounted, empty storage.
async fn prepare(cfg: &PgConfig, p: &Provision<'_>) -> Result<OsUser, PgError> {
    use std::os::unix::fs::PermissionsExt;
    let user = OsUser::lookup(&cfg.os_user)?;
    std::fs::create_dir_all(&p.dirs.dir)?;
    // The postgres user passes through to its WAL, mount and log, and reads nothing else here.
    std::fs::set_permissions(&p.dirs.dir, std::fs::Permissions::from_mode(0o711))?;
    user.make_dir(&p.dirs.wal, 0o700)?;
    let storage = p.dirs.storage();
    storage.create(p.storage_mb, (user.uid, user.gid)).await?;
    storage.mount().await?;
    std::fs::set_permissions(&storage.mountpoint, std::fs::Permissions::from_mode(0o700))?;
    Ok(user)
}

/// A new cluster copied from `template`, renamed and re-keyed, running.
///
/// # Errors
/// The failing step's error; nothing of the cluster is left.
pub async fn provision(
    cfg: &PgConfig,
    template: &Template,
    p: &Provision<'_>,
) -> Result<Postmaster, PgError> {
    let started = Instant::now();
    let made = async {
        prepare(cfg, p).await?;
        template.copy_to(p.dirs, cfg.fsync && p.run.fsync).await?;
        let pm = cluster::start(cfg, p.dirs, &p.run).await?;
        let admin = Admin::connect(&p.dirs.socket_dir, &template.superuser_password).await?;
        admin
            .personalize(
                (&Template::owner_role(), p.role),
                (DEFAULT_DATABASE, p.database),
                &scram_verifier(p.owner_password),
                &scram_verifier(p.superuser_password),
            )
            .await?;
        Ok::<_, PgError>(pm)
    }
    .await;
    finish(p, made, started, "provisioned").await
}

/// A new cluster holding a consistent copy of `source` at this moment: a base backup
/// (`pg_basebackup`, WAL streamed alongside) of a running source, a file copy of a stopped
/// one. It keeps the source's database and role names and gets new passwords.
///
/// # Errors
/// The failing step's error; nothing of the new cluster is left, the source is untouched.
pub async fn clone(
    cfg: &PgConfig,
    source: &CloneSource<'_>,
    p: &Provision<'_>,
) -> Result<Postmaster, PgError> {
    let started = Instant::now();
    let made = async {
        let user = prepare(cfg, p).await?;
        if source.running {
            base_backup(cfg, &user, source, p.dirs).await?;
        } else {
            let (from, to) = (source.dirs.clone(), p.dirs.clone());
            let fsync = cfg.fsync;
            tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                copy::tree(&from.data, &to.data, &["pg_wal"], fsync)?;
                copy::tree(&from.wal, &to.wal, &[], fsync)?;
                relink_wal(&to.data, &to.wal)
            })
            .await
            .map_err(|e| PgError::Io(std::io::Error::other(e)))??;
        }
        let pm = cluster::start(cfg, p.dirs, &p.run).await?;
        let admin = Admin::connect(&p.dirs.socket_dir, source.superuser_password).await?;
        admin
            .personalize(
                (p.role, p.role),
                (p.database, p.database),
                &scram_verifier(p.owner_password),
                &scram_verifier(p.superuser_password),
            )
            .await?;
        Ok::<_, PgError>(pm)
    }
    .await;
    finish(p, made, started, "cloned").await
}

async fn finish(
    p: &Provision<'_>,
    made: Result<Postmaster, PgError>,
    started: Instant,
    what: &str,
) -> Result<Postmaster, PgError> {
    match made {
        Ok(pm) => {
            info!(database_id = %p.dirs.id, ms = started.elapsed().as_millis() as u64, "cluster {what}");
            Ok(pm)
        }
        Err(e) => {
            warn!(database_id = %p.dirs.id, error = %e, "making the cluster failed; removing it");
            if let Err(d) = destroy(p.dirs).await {
                warn!(database_id = %p.dirs.id, error = %d, "removing a failed cluster");
            }
            Err(e)
        }
    }
}

/// `pg_basebackup` of the running `source` into `to` (data on its storage, WAL beside it).
async fn base_backup(
    cfg: &PgConfig,
    user: &OsUser,
    source: &CloneSource<'_>,
    to: &ClusterDirs,
) -> Result<(), PgError> {
    let mut cmd = command(
        &cfg.bin_dir.join("pg_basebackup").display().to_string(),
        &[
            "-h",
            &source.dirs.socket_dir.display().to_string(),
            "-p",
            "5432",
            "-U",
            "postgres",
            "-D",
            &to.data.display().to_string(),
            "--waldir",
            &to.wal.display().to_string(),
            "-X",
            "stream",
            "-c",
            "fast",
            "-w",
        ],
    );
    if !cfg.fsync {
        cmd.arg("--no-sync");
    }
    // The environment of a process is readable only by its own user and root.
    cmd.env("PGPASSWORD", source.superuser_password)
        .env("PGAPPNAME", "pandastack-clone")
        .uid(user.uid)
        .gid(user.gid)
        .current_dir(&to.dir);
    run("pg_basebackup", cmd).await.map(drop)
}

/// Mounts the cluster's storage if it is not (after a host restart).
///
/// # Errors
/// `mount`'s complaint.
pub async fn attach(dirs: &ClusterDirs) -> Result<(), PgError> {
    dirs.storage().mount().await
}

/// Stops the cluster and unmounts its storage (a graceful server stop).
///
/// # Errors
/// `umount`'s complaint.
pub async fn detach(dirs: &ClusterDirs) -> Result<(), PgError> {
    cluster::stop(dirs, StopMode::Fast).await;
    dirs.storage().unmount().await
}

/// Removes everything of the cluster: processes, cgroup, mount, loop device, image, WAL,
/// log, directories. Missing pieces are fine.
///
/// # Errors
/// `umount`'s complaint (something still holds the mount); what is left is retried by the
/// next start-up recovery.
pub async fn destroy(dirs: &ClusterDirs) -> Result<(), PgError> {
    cluster::stop(dirs, StopMode::Immediate).await;
    dirs.storage().destroy().await?;
    let _ = std::fs::remove_dir_all(&dirs.socket_dir);
    match std::fs::remove_dir_all(&dirs.dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    Ok(())
}
