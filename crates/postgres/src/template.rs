//! The template cluster every new database is copied from (issue 10: "a pre-initialized
//! cluster copied per database").
//!
//! Made once per data dir (and per PostgreSQL major version and [`FORMAT`]) in
//! `<root>/template/pg<major>-f<FORMAT>/`: `initdb` (SCRAM for every role, UTF-8, `C.UTF-8`,
//! 4 MiB WAL segments so a copy carries little WAL), then one start to make the owner role
//! and database ([`crate::names::DEFAULT_DATABASE`]), then a clean stop and the final
//! `pg_hba.conf`: unix socket only, SCRAM only. A copy is a consistent, cleanly shut down
//! cluster that only needs renaming and new passwords ([`crate::admin::Admin::personalize`]).

use crate::admin::Admin;
use crate::cluster::{self, ClusterDirs, RunSpec, StopMode};
use crate::copy;
use crate::names::{owner_role, DEFAULT_DATABASE};
use crate::os_user::OsUser;
use crate::secret::generate_password;
use crate::tool::{command, run};
use crate::{PgConfig, PgError, Tier};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tracing::info;

/// Version of the template's layout; a change makes a new template (old databases keep
/// working: they are copies).
pub const FORMAT: u32 = 1;

/// `pg_hba.conf` of every cluster: connections arrive only on the unix socket (the front end
/// splices TCP to it), and every role proves its password with SCRAM.
pub const PG_HBA: &str =
    "# PandaStack: unix socket only (the server's front end splices TCP here), SCRAM only.
local   all          postgres   scram-sha-256
local   replication  postgres   scram-sha-256
local   all          all        scram-sha-256
";

/// A ready template.
#[derive(Debug, Clone)]
pub struct Template {
    /// `<root>/template/pg<major>-f<FORMAT>`.
    pub dir: PathBuf,
    /// The superuser password every copy starts with (each copy replaces it at once).
    pub superuser_password: String,
}

impl Template {
    /// The template's data directory.
    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The template's WAL directory.
    pub fn wal(&self) -> PathBuf {
        self.dir.join("wal")
    }

    /// The owner role of every copy before it is renamed.
    pub fn owner_role() -> String {
        owner_role(DEFAULT_DATABASE)
    }

    /// Copies the template into the cluster at `dirs` (whose storage is mounted): the data
    /// directory onto the storage, the WAL next to it, `pg_wal` linked to it.
    ///
    /// # Errors
    /// I/O errors; the caller removes a partial copy with the cluster.
    pub async fn copy_to(&self, dirs: &ClusterDirs, fsync: bool) -> Result<(), PgError> {
        let (data, wal) = (self.data(), self.wal());
        let (to_data, to_wal) = (dirs.data.clone(), dirs.wal.clone());
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            copy::tree(&data, &to_data, &["pg_wal"], fsync)?;
            copy::tree(&wal, &to_wal, &[], fsync)?;
            relink_wal(&to_data, &to_wal)
        })
        .await
        .map_err(|e| PgError::Io(std::io::Error::other(e)))??;
        Ok(())
    }
}

/// Points `data/pg_wal` at `wal` (owned by the postgres user like the rest).
pub fn relink_wal(data: &Path, wal: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let link = data.join("pg_wal");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(wal, &link)?;
    let m = std::fs::metadata(data)?;
    std::os::unix::fs::lchown(&link, Some(m.uid()), Some(m.gid()))
}

/// PostgreSQL's major version from `postgres --version` (`postgres (PostgreSQL) 15.18 ...`).
async fn major_version(cfg: &PgConfig) -> Result<String, PgError> {
    let postgres = cfg.bin_dir.join("postgres");
    if !postgres.exists() {
        return Err(PgError::NotInstalled);
    }
    let out = run(
        "postgres",
        command(&postgres.display().to_string(), &["--version"]),
    )
    .await?;
    out.split_whitespace()
        .last()
        .and_then(|v| v.split('.').next())
        .map(String::from)
        .ok_or_else(|| PgError::Tool {
            tool: "postgres",
            detail: format!("unexpected version line '{}'", out.trim()),
        })
}

/// The template of this host, made now when there is none (~2 s: initdb, one start and stop).
/// Not safe to run twice at once for one root: the caller serializes.
///
/// # Errors
/// [`PgError::NotInstalled`] without PostgreSQL; the failing tool's complaint. A partial
/// template is removed.
pub async fn ensure(cfg: &PgConfig) -> Result<Template, PgError> {
    let major = major_version(cfg).await?;
    let dir = cfg
        .root
        .join("template")
        .join(format!("pg{major}-f{FORMAT}"));
    let pw_file = dir.join("superuser.pw");
    if dir.join("ready").exists() {
        let superuser_password = std::fs::read_to_string(&pw_file)?.trim().to_string();
        return Ok(Template {
            dir,
            superuser_password,
        });
    }
    let started = Instant::now();
    let partial = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    let _ = std::fs::remove_dir_all(&dir);
    // A name of its own: the cgroup and process titles of a cluster are named by it, and
    // another server on this host may be making its template right now.
    let id = format!("template-{:08x}", rand::random::<u32>());
    let made = build(cfg, &partial, &id).await;
    let superuser_password = match made {
        Ok(pw) => pw,
        Err(e) => {
            cluster::stop(&template_dirs(cfg, &partial, &id), StopMode::Immediate).await;
            let _ = std::fs::remove_dir_all(&partial);
            return Err(e);
        }
    };
    std::fs::rename(&partial, &dir)?;
    relink_wal(&dir.join("data"), &dir.join("wal"))?;
    std::fs::write(dir.join("ready"), format!("{major}\n"))?;
    info!(
        ms = started.elapsed().as_millis() as u64,
        dir = %dir.display(),
        "database template ready"
    );
    Ok(Template {
        dir,
        superuser_password,
    })
}

fn template_dirs(cfg: &PgConfig, dir: &Path, id: &str) -> ClusterDirs {
    ClusterDirs {
        id: id.to_string(),
        dir: dir.to_path_buf(),
        data: dir.join("data"),
        wal: dir.join("wal"),
        log: dir.join("postgres.log"),
        socket_dir: cfg.socket_root.join(id),
    }
}

/// initdb, owner role and database, stop, pg_hba. Returns the superuser password.
async fn build(cfg: &PgConfig, dir: &Path, id: &str) -> Result<String, PgError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let user = OsUser::lookup(&cfg.os_user)?;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    let dirs = template_dirs(cfg, dir, id);
    user.make_dir(&dirs.data, 0o700)?;
    user.make_dir(&dirs.wal, 0o700)?;
    let password = generate_password();
    // initdb reads the superuser's password from a file the postgres user can read.
    let pwfile = dir.join("initdb.pw");
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&pwfile)?;
        f.write_all(password.as_bytes())?;
        user.chown(&pwfile)?;
    }
    let mut initdb = command(
        &cfg.bin_dir.join("initdb").display().to_string(),
        &[
            "-D",
            &dirs.data.display().to_string(),
            "--waldir",
            &dirs.wal.display().to_string(),
            "--wal-segsize=4",
            "-U",
            "postgres",
            "--pwfile",
            &pwfile.display().to_string(),
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        ],
    );
    if !cfg.fsync {
        initdb.arg("--no-sync");
    }
    initdb.uid(user.uid).gid(user.gid).current_dir(dir);
    let inited = run("initdb", initdb).await;
    let _ = std::fs::remove_file(&pwfile);
    inited?;
    let spec = RunSpec {
        tier: Tier::G1,
        cpus: 1,
        fsync: cfg.fsync,
    };
    cluster::start(cfg, &dirs, &spec).await?;
    let setup = async {
        let admin = Admin::connect(&dirs.socket_dir, &password).await?;
        admin
            .make_owner_database(&Template::owner_role(), DEFAULT_DATABASE)
            .await
    }
    .await;
    cluster::stop(&dirs, StopMode::Fast).await;
    let _ = std::fs::remove_dir(&dirs.socket_dir);
    setup?;
    let hba = dirs.data.join("pg_hba.conf");
    std::fs::write(&hba, PG_HBA)?;
    user.chown(&hba)?;
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.join("superuser.pw"))?;
        f.write_all(password.as_bytes())?;
    }
    Ok(password)
}
