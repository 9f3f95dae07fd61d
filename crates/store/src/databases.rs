//! Databases (issue 10).

use crate::{Col, DatabaseRow, Store, StoreError};
use sqlx::any::AnyRow;

const COLS: &str = "id, workspace_id, label, status, size, cpu, storage_mb, always_on, port, database,
    username, password_sealed, superuser_password_sealed, cloned_from, error, created_at, last_active_at,
    deleted_at, host";

fn from_row(r: &AnyRow) -> Result<DatabaseRow, sqlx::Error> {
    let decode = |index: &str, e: std::num::TryFromIntError| sqlx::Error::ColumnDecode {
        index: index.into(),
        source: Box::new(e),
    };
    Ok(DatabaseRow {
        id: r.text(0)?,
        workspace_id: r.text(1)?,
        label: r.opt_text(2)?,
        status: r.text(3)?,
        size: r.text(4)?,
        cpu: r.uint(5)?,
        storage_mb: u64::try_from(r.int(6)?).map_err(|e| decode("storage_mb", e))?,
        always_on: r.flag(7)?,
        port: r
            .opt_int(8)?
            .map(|p| u16::try_from(p).map_err(|e| decode("port", e)))
            .transpose()?,
        database: r.text(9)?,
        username: r.text(10)?,
        password_sealed: r.text(11)?,
        superuser_password_sealed: r.text(12)?,
        cloned_from: r.opt_text(13)?,
        error: r.opt_text(14)?,
        created_at: r.int(15)?,
        last_active_at: r.int(16)?,
        deleted_at: r.opt_int(17)?,
        host: r.text(18)?,
    })
}

impl Store {
    /// Inserts or replaces a database row (the whole row is written).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn put_database(&self, d: &DatabaseRow) -> Result<(), StoreError> {
        static SQL: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| crate::upsert_sql("databases", COLS));
        sqlx::query(&SQL)
            .bind(&d.id)
            .bind(&d.workspace_id)
            .bind(&d.label)
            .bind(&d.status)
            .bind(&d.size)
            .bind(i64::from(d.cpu))
            .bind(i64::try_from(d.storage_mb).unwrap_or(i64::MAX))
            .bind(i64::from(d.always_on))
            .bind(d.port.map(i64::from))
            .bind(&d.database)
            .bind(&d.username)
            .bind(&d.password_sealed)
            .bind(&d.superuser_password_sealed)
            .bind(&d.cloned_from)
            .bind(&d.error)
            .bind(d.created_at)
            .bind(d.last_active_at)
            .bind(d.deleted_at)
            .bind(&d.host)
            .execute(self.writes())
            .await?;
        Ok(())
    }

    /// The database `id`, if its row exists (deleted or not).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn database(&self, id: &str) -> Result<Option<DatabaseRow>, StoreError> {
        let sql = format!("SELECT {COLS} FROM databases WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.as_ref().map(from_row).transpose()?)
    }

    /// Every database row of `host` (any workspace, deleted ones too), oldest first: start-up
    /// recovery reconciles each with what is on that host's disk.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn host_databases(&self, host: &str) -> Result<Vec<DatabaseRow>, StoreError> {
        let sql = format!("SELECT {COLS} FROM databases WHERE host = $1 ORDER BY created_at, id");
        let rows = sqlx::query(&sql).bind(host).fetch_all(self.pool()).await?;
        Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
    }

    /// Databases of a workspace that are not being deleted, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn databases_of(&self, workspace_id: &str) -> Result<Vec<DatabaseRow>, StoreError> {
        let sql = format!(
            "SELECT {COLS} FROM databases WHERE workspace_id = $1 AND deleted_at IS NULL
             ORDER BY created_at, id"
        );
        let rows = sqlx::query(&sql)
            .bind(workspace_id)
            .fetch_all(self.pool())
            .await?;
        Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
    }

    /// Removes database `id`'s row (the end of a delete). Its events stay.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn remove_database(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM databases WHERE id = $1")
            .bind(id)
            .execute(self.writes())
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{DatabaseRow, EventRow, WorkspaceRow};

    fn row(id: &str, ws: &str, at: i64) -> DatabaseRow {
        DatabaseRow {
            id: id.into(),
            workspace_id: ws.into(),
            label: Some("agent-memory".into()),
            status: "provisioning".into(),
            size: "1g".into(),
            cpu: 2,
            storage_mb: 5120,
            always_on: false,
            port: None,
            database: "agent_memory".into(),
            username: "agent_memory_owner".into(),
            password_sealed: "v1:x".into(),
            superuser_password_sealed: "v1:y".into(),
            cloned_from: None,
            error: None,
            created_at: at,
            last_active_at: at,
            deleted_at: None,
            host: "h1".into(),
        }
    }

    #[tokio::test]
    async fn databases_round_trip_and_list_per_workspace() {
        for s in crate::testing::stores().await {
            for ws in ["w1", "w2"] {
                s.insert_workspace(&WorkspaceRow {
                    id: ws.into(),
                    name: ws.into(),
                    created_at: 0,
                })
                .await
                .unwrap();
            }
            let mut a = row("a", "w1", 1);
            s.put_database(&a).await.unwrap();
            s.put_database(&row("b", "w2", 2)).await.unwrap();
            let mut elsewhere = row("c", "w2", 3);
            elsewhere.host = "h2".into();
            s.put_database(&elsewhere).await.unwrap();
            a.status = "running".into();
            a.port = Some(15432);
            s.put_database(&a).await.unwrap();
            assert_eq!(s.database("a").await.unwrap(), Some(a.clone()));
            assert_eq!(s.databases_of("w1").await.unwrap(), vec![a.clone()]);
            a.deleted_at = Some(5);
            s.put_database(&a).await.unwrap();
            assert!(s.databases_of("w1").await.unwrap().is_empty());
            // A host's recovery sees its own databases only (deleted ones too).
            assert_eq!(s.host_databases("h1").await.unwrap().len(), 2);
            assert_eq!(s.host_databases("h2").await.unwrap(), vec![elsewhere]);
            s.remove_database("a").await.unwrap();
            assert_eq!(s.database("a").await.unwrap(), None);
        }
    }

    #[tokio::test]
    async fn database_events_share_the_sequence() {
        for s in crate::testing::stores().await {
            let e1 = s
                .insert_event("w", "sb", "creating", "running", "api", 1)
                .await
                .unwrap();
            let e2 = s
                .insert_subject_event(
                    EventRow::DATABASE,
                    "w",
                    "db",
                    "provisioning",
                    "running",
                    "api",
                    2,
                )
                .await
                .unwrap();
            assert!(e2.seq > e1.seq);
            let all = s.events("w", None, 0, 10).await.unwrap();
            assert_eq!(all[0].subject, EventRow::SANDBOX);
            assert_eq!(all[1], e2);
            assert_eq!(s.events("w", Some("db"), 0, 10).await.unwrap(), vec![e2]);
        }
    }
}
