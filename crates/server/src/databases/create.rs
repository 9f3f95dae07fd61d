//! `POST /v1/databases` and `POST /v1/databases/{id}/clone` (contract §2.12): the row is
//! written (`provisioning`) and the port opened at once, the reply is 202, and the cluster is
//! made in the background (a copy of the template, or of the source for a clone); the SDKs
//! poll `GET /v1/databases/{id}` until `running` with a `connection_url`. A failure leaves
//! the row `failed` with a short reason and nothing else.

use super::{DatabaseState, Databases, LiveDb};
use crate::error::ApiError;
use pandastack_api::{CloneDatabase, CreateDatabase};
use pandastack_postgres::cluster;
use pandastack_postgres::names::{database_name, owner_role};
use pandastack_postgres::provision::{self, CloneSource, Provision};
use pandastack_postgres::secret::generate_password;
use pandastack_postgres::{PgError, Tier};
use pandastack_store::{now_ms, DatabaseRow};
use std::sync::Arc;

/// Storage of a database when the create does not say, MiB (issue 10: 5 GiB).
pub const DEFAULT_STORAGE_MB: u64 = 5 * 1024;
/// Smallest storage, MiB (a fresh cluster takes ~30 MiB of it).
pub const MIN_STORAGE_MB: u64 = 256;
/// Largest storage, MiB (1 TiB; the image is sparse: only what is written costs disk).
pub const MAX_STORAGE_MB: u64 = 1024 * 1024;
/// CPUs of a database when the create does not say (the SDKs' documented default).
pub const DEFAULT_CPU: u32 = 2;
/// Most CPUs of a database.
pub const MAX_CPU: u32 = 64;
/// Longest label, characters.
pub const MAX_LABEL_CHARS: usize = 128;
/// Host disk a new database writes at once, bytes: the template's copy (~30 MiB) and its first
/// WAL segments. Its `storage_mb` is sparse and costs disk only as it fills, so the disk
/// reserve (issue 8) counts this, not `storage_mb`.
pub const NEW_DATABASE_BYTES: u64 = 64 << 20;

/// A checked create (or clone) request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDatabase {
    pub label: Option<String>,
    pub tier: Tier,
    pub cpu: u32,
    pub storage_mb: u64,
    pub always_on: bool,
}

fn check_label(label: Option<String>) -> Result<Option<String>, ApiError> {
    let Some(l) = label else { return Ok(None) };
    if l.chars().count() > MAX_LABEL_CHARS || l.chars().any(char::is_control) {
        return Err(ApiError::BadRequest(format!(
            "label must be at most {MAX_LABEL_CHARS} characters without control characters"
        )));
    }
    Ok(Some(l))
}

fn check_tier(size: Option<&str>) -> Result<Option<Tier>, ApiError> {
    size.map(|s| Tier::parse(s).map_err(|e| ApiError::BadRequest(e.to_string())))
        .transpose()
}

/// Checks `storage_mb` (absent: `default`).
///
/// # Errors
/// 400 naming `storage_mb`.
pub fn check_storage(storage_mb: Option<u64>, default: u64) -> Result<u64, ApiError> {
    let mb = storage_mb.unwrap_or(default);
    if !(MIN_STORAGE_MB..=MAX_STORAGE_MB).contains(&mb) {
        return Err(ApiError::BadRequest(format!(
            "storage_mb must be between {MIN_STORAGE_MB} and {MAX_STORAGE_MB}, got {mb}"
        )));
    }
    Ok(mb)
}

impl NewDatabase {
    /// Checks a create body: `size` a tier, `memory_mb` (if given) a tier's memory agreeing
    /// with `size`, `cpu` 1..=64, `storage_mb` 256..=1048576, `label` at most 128 characters.
    ///
    /// # Errors
    /// 400 naming the field.
    pub fn from_request(req: CreateDatabase) -> Result<Self, ApiError> {
        let by_size = check_tier(req.size.as_deref())?;
        let by_memory = req
            .memory_mb
            .map(|mb| {
                Tier::from_memory_mb(mb).ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "memory_mb must be a size tier's memory (1024, 4096 or 16384), got {mb}"
                    ))
                })
            })
            .transpose()?;
        let tier = match (by_size, by_memory) {
            (Some(s), Some(m)) if s != m => {
                return Err(ApiError::BadRequest(format!(
                    "memory_mb {} does not match size {s}",
                    m.memory_mb()
                )))
            }
            (s, m) => s.or(m).unwrap_or(Tier::G1),
        };
        let cpu = req.cpu.unwrap_or(DEFAULT_CPU);
        if !(1..=MAX_CPU).contains(&cpu) {
            return Err(ApiError::BadRequest(format!(
                "cpu must be between 1 and {MAX_CPU}, got {cpu}"
            )));
        }
        Ok(NewDatabase {
            label: check_label(req.label)?,
            tier,
            cpu,
            storage_mb: check_storage(req.storage_mb, DEFAULT_STORAGE_MB)?,
            always_on: req.always_on.unwrap_or(false),
        })
    }
}

impl Databases {
    /// Refuses creates on a host without PostgreSQL, or whose data dir the postgres user
    /// cannot reach.
    fn check_installed(&self) -> Result<(), ApiError> {
        if !self.settings.postgres_bin.join("postgres").exists() {
            return Err(ApiError::Unavailable(
                "databases are not available: postgresql is not installed on this host".into(),
            ));
        }
        self.pg
            .check_access()
            .map_err(|e| ApiError::Unavailable(format!("databases are not available: {e}")))
    }

    /// Refuses a database operation (`what`) that writes about `need_bytes` to the host's
    /// disk when the data dir's filesystem would keep less than its reserve free (issue 8;
    /// README "Limits").
    ///
    /// # Errors
    /// 507 `host storage low: ...`.
    pub(super) fn check_disk(&self, what: &str, need_bytes: u64) -> Result<(), ApiError> {
        self.host.check_disk_reserve(what, need_bytes)
    }

    /// Admits a new database ([`quota`](super::quota)), writes its row, opens its port and
    /// returns it (`provisioning`).
    async fn admit_new(
        self: &Arc<Self>,
        workspace_id: &str,
        new: &NewDatabase,
        names: (String, String),
        cloned_from: Option<String>,
    ) -> Result<Arc<LiveDb>, ApiError> {
        // Held until the row counts (`provisioning`) and holds its port.
        let _admitted = self.admit_creation(workspace_id, new.tier).await?;
        let id = uuid::Uuid::new_v4().to_string();
        let seal = |pw: String| {
            self.sealer
                .seal(&pw)
                .map_err(|e| ApiError::internal("sealing a password", e))
        };
        let now = now_ms();
        let row = DatabaseRow {
            id: id.clone(),
            workspace_id: workspace_id.to_string(),
            label: new.label.clone(),
            status: DatabaseState::Provisioning.as_str().into(),
            size: new.tier.as_str().into(),
            cpu: new.cpu,
            storage_mb: new.storage_mb,
            always_on: new.always_on,
            port: None,
            database: names.0,
            username: names.1,
            password_sealed: seal(generate_password())?,
            superuser_password_sealed: seal(generate_password())?,
            cloned_from,
            error: None,
            created_at: now,
            last_active_at: now,
            deleted_at: None,
            host: self.host.cfg.host_name.clone(),
        };
        self.host.store.put_database(&row).await?;
        let db = Arc::new(LiveDb::new(row, self.dirs(&id)));
        self.insert(db.clone());
        if let Err(e) = self.bind(&db).await {
            self.remove(&id);
            let _ = self.host.store.remove_database(&id).await;
            return Err(e);
        }
        Ok(db)
    }

    /// `POST /v1/databases`: a new database, provisioned in the background.
    ///
    /// # Errors
    /// 429 at the workspace's database count or port share; 503 without PostgreSQL or a free
    /// port, or (with `Retry-After: 10`) when its memory does not fit; 507 below the disk
    /// reserve; store errors.
    pub async fn create(
        self: &Arc<Self>,
        workspace_id: &str,
        new: NewDatabase,
    ) -> Result<Arc<LiveDb>, ApiError> {
        self.check_installed()?;
        self.check_disk("database create", NEW_DATABASE_BYTES)?;
        let database = database_name(new.label.as_deref());
        let role = owner_role(&database);
        let db = self
            .admit_new(workspace_id, &new, (database, role), None)
            .await?;
        let (me, task_db) = (self.clone(), db.clone());
        // Provisioning holds the lifecycle exclusively from the start (nobody else knows the
        // database yet, so this does not wait), and a delete that arrives meanwhile waits.
        let exclusive = db.lifecycle.clone().write_owned().await;
        self.tasks.spawn(async move {
            let _exclusive = exclusive;
            let made = async {
                let t = me.template().await?;
                let (row, dirs) = (task_db.snapshot(), task_db.dirs.clone());
                let owner = me.open_secret(&row.password_sealed)?;
                let superuser = me.open_secret(&row.superuser_password_sealed)?;
                provision::provision(
                    &me.pg,
                    &t,
                    &Provision {
                        dirs: &dirs,
                        storage_mb: row.storage_mb,
                        run: me.run_spec(&row),
                        database: &row.database,
                        role: &row.username,
                        owner_password: &owner,
                        superuser_password: &superuser,
                    },
                )
                .await
                .map(drop)
            }
            .await;
            me.finish_provisioning(&task_db, made, "create").await;
        });
        Ok(db)
    }

    /// `POST /v1/databases/{id}/clone`: a new database holding a consistent copy of `source`
    /// at this moment (a base backup while it runs, a file copy while it is stopped).
    ///
    /// # Errors
    /// 400 for `target_time` (point-in-time clones need archived WAL, which this server does
    /// not keep) and bad fields; 409 when the source is provisioning or failed; 507 when the
    /// copy (the source's bytes on the host disk) would eat into the disk reserve; 429 and 503
    /// as [`Databases::create`].
    pub async fn clone_database(
        self: &Arc<Self>,
        source: &Arc<LiveDb>,
        req: CloneDatabase,
    ) -> Result<Arc<LiveDb>, ApiError> {
        if req.target_time.is_some() {
            return Err(ApiError::BadRequest("target_time is not supported".into()));
        }
        self.check_installed()?;
        let src = source.snapshot();
        self.check_disk("database clone", source.dirs.host_bytes())?;
        match DatabaseState::parse(&src.status) {
            DatabaseState::Running | DatabaseState::Stopped => {}
            s => {
                return Err(ApiError::Conflict(format!(
                    "database {} is {s}; only a running or stopped database can be cloned",
                    src.id
                )))
            }
        }
        let tier =
            check_tier(req.size.as_deref())?.unwrap_or(Tier::parse(&src.size).unwrap_or(Tier::G1));
        let storage_mb = check_storage(req.storage_mb, src.storage_mb)?;
        if storage_mb < src.storage_mb {
            return Err(ApiError::BadRequest(format!(
                "storage_mb must be at least the source's {} MiB",
                src.storage_mb
            )));
        }
        let label = match req.label {
            Some(l) => Some(l),
            None => Some(format!(
                "{} (clone)",
                src.label.clone().unwrap_or_else(|| src.database.clone())
            )),
        };
        let new = NewDatabase {
            label: check_label(label)?,
            tier,
            cpu: src.cpu,
            storage_mb,
            always_on: false,
        };
        let names = (src.database.clone(), src.username.clone());
        let db = self
            .admit_new(&src.workspace_id, &new, names, Some(src.id.clone()))
            .await?;
        let (me, task_db, source) = (self.clone(), db.clone(), source.clone());
        let exclusive = db.lifecycle.clone().write_owned().await;
        self.tasks.spawn(async move {
            let _exclusive = exclusive;
            // Shared: the source is neither stopped, started nor deleted while copied.
            let _source = source.lifecycle.read().await;
            let made = async {
                let (row, dirs) = (task_db.snapshot(), task_db.dirs.clone());
                let src = source.snapshot();
                let owner = me.open_secret(&row.password_sealed)?;
                let superuser = me.open_secret(&row.superuser_password_sealed)?;
                let source_superuser = me.open_secret(&src.superuser_password_sealed)?;
                let running = source.state() == DatabaseState::Running
                    && cluster::running(&source.dirs).is_some();
                if !running {
                    source.dirs.storage().mount().await?;
                }
                provision::clone(
                    &me.pg,
                    &CloneSource {
                        dirs: &source.dirs,
                        superuser_password: &source_superuser,
                        running,
                    },
                    &Provision {
                        dirs: &dirs,
                        storage_mb: row.storage_mb,
                        run: me.run_spec(&row),
                        database: &row.database,
                        role: &row.username,
                        owner_password: &owner,
                        superuser_password: &superuser,
                    },
                )
                .await
                .map(drop)
            }
            .await;
            me.finish_provisioning(&task_db, made, "clone").await;
        });
        Ok(db)
    }

    fn open_secret(&self, sealed: &str) -> Result<String, PgError> {
        self.sealer.open(sealed)
    }

    /// Records the outcome of provisioning: `running`, or `failed` with a short reason (the
    /// cause is logged; the cluster's pieces are already removed, and its port is closed).
    async fn finish_provisioning(&self, db: &LiveDb, made: Result<(), PgError>, what: &str) {
        let outcome = match made {
            Ok(()) => {
                db.touch();
                self.set_state(db, DatabaseState::Running, "api").await
            }
            Err(e) => {
                tracing::error!(database_id = %db.id, error = %e, "database {what} failed");
                db.row().error = Some(match e {
                    PgError::NotInstalled => e.to_string(),
                    _ => format!("{what} failed; see the server log for database {}", db.id),
                });
                db.close_binding();
                if let Err(e) = self.sync_ports().await {
                    tracing::warn!(database_id = %db.id, error = %e, "closing a failed database's port");
                }
                self.set_state(db, DatabaseState::Failed, "api").await
            }
        };
        if let Err(e) = outcome {
            tracing::warn!(database_id = %db.id, error = %e, "recording a provisioning outcome");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(json: &str) -> Result<NewDatabase, ApiError> {
        NewDatabase::from_request(serde_json::from_str(json).unwrap())
    }

    #[test]
    fn create_bodies_are_checked() {
        let d = req("{}").unwrap();
        assert_eq!(
            d,
            NewDatabase {
                label: None,
                tier: Tier::G1,
                cpu: 2,
                storage_mb: 5120,
                always_on: false
            }
        );
        assert_eq!(req(r#"{"size":"4g"}"#).unwrap().tier, Tier::G4);
        assert_eq!(req(r#"{"memory_mb":16384}"#).unwrap().tier, Tier::G16);
        let err = |j: &str| req(j).unwrap_err().to_string();
        assert!(err(r#"{"size":"2g"}"#).contains("size"));
        assert!(err(r#"{"memory_mb":512}"#).contains("memory_mb"));
        assert!(err(r#"{"size":"1g","memory_mb":4096}"#).contains("memory_mb"));
        assert!(err(r#"{"cpu":0}"#).contains("cpu"));
        assert!(err(r#"{"storage_mb":10}"#).contains("storage_mb"));
        assert!(err(r#"{"label":"a\nb"}"#).contains("label"));
        assert!(serde_json::from_str::<CreateDatabase>(r#"{"bogus":1}"#)
            .unwrap_err()
            .to_string()
            .contains("bogus"));
    }
}
