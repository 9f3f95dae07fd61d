//! Databases (issue 10).

use crate::{DatabaseRow, Store, StoreError};
use rusqlite::{params, OptionalExtension};

const COLS: &str = "id, workspace_id, label, status, size, cpu, storage_mb, always_on, port, database,
    username, password_sealed, superuser_password_sealed, cloned_from, error, created_at, last_active_at,
    deleted_at";

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DatabaseRow> {
    Ok(DatabaseRow {
        id: r.get(0)?,
        workspace_id: r.get(1)?,
        label: r.get(2)?,
        status: r.get(3)?,
        size: r.get(4)?,
        cpu: r.get(5)?,
        storage_mb: r.get(6)?,
        always_on: r.get(7)?,
        port: r.get(8)?,
        database: r.get(9)?,
        username: r.get(10)?,
        password_sealed: r.get(11)?,
        superuser_password_sealed: r.get(12)?,
        cloned_from: r.get(13)?,
        error: r.get(14)?,
        created_at: r.get(15)?,
        last_active_at: r.get(16)?,
        deleted_at: r.get(17)?,
    })
}

impl Store {
    /// Inserts or replaces a database row (the whole row is written).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn put_database(&self, d: &DatabaseRow) -> Result<(), StoreError> {
        let sql = format!(
            "INSERT OR REPLACE INTO databases ({COLS}) VALUES
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
        );
        self.conn().execute(
            &sql,
            params![
                d.id,
                d.workspace_id,
                d.label,
                d.status,
                d.size,
                d.cpu,
                d.storage_mb,
                d.always_on,
                d.port,
                d.database,
                d.username,
                d.password_sealed,
                d.superuser_password_sealed,
                d.cloned_from,
                d.error,
                d.created_at,
                d.last_active_at,
                d.deleted_at,
            ],
        )?;
        Ok(())
    }

    /// The database `id`, if its row exists (deleted or not).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn database(&self, id: &str) -> Result<Option<DatabaseRow>, StoreError> {
        let sql = format!("SELECT {COLS} FROM databases WHERE id = ?1");
        Ok(self
            .conn()
            .query_row(&sql, params![id], from_row)
            .optional()?)
    }

    /// Every database row (any workspace, deleted ones too), oldest first: start-up recovery
    /// reconciles each with what is on disk.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn all_databases(&self) -> Result<Vec<DatabaseRow>, StoreError> {
        let sql = format!("SELECT {COLS} FROM databases ORDER BY created_at, id");
        let conn = self.conn();
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map([], from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Databases of a workspace that are not being deleted, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn databases_of(&self, workspace_id: &str) -> Result<Vec<DatabaseRow>, StoreError> {
        let sql = format!(
            "SELECT {COLS} FROM databases WHERE workspace_id = ?1 AND deleted_at IS NULL
             ORDER BY created_at, id"
        );
        let conn = self.conn();
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map(params![workspace_id], from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Removes database `id`'s row (the end of a delete). Its events stay.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn remove_database(&self, id: &str) -> Result<(), StoreError> {
        self.conn()
            .execute("DELETE FROM databases WHERE id = ?1", params![id])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{DatabaseRow, EventRow, Store, WorkspaceRow};

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
        }
    }

    #[test]
    fn databases_round_trip_and_list_per_workspace() {
        let s = Store::open_in_memory().unwrap();
        for ws in ["w1", "w2"] {
            s.insert_workspace(&WorkspaceRow {
                id: ws.into(),
                name: ws.into(),
                created_at: 0,
            })
            .unwrap();
        }
        let mut a = row("a", "w1", 1);
        s.put_database(&a).unwrap();
        s.put_database(&row("b", "w2", 2)).unwrap();
        a.status = "running".into();
        a.port = Some(15432);
        s.put_database(&a).unwrap();
        assert_eq!(s.database("a").unwrap(), Some(a.clone()));
        assert_eq!(s.databases_of("w1").unwrap(), vec![a.clone()]);
        a.deleted_at = Some(5);
        s.put_database(&a).unwrap();
        assert!(s.databases_of("w1").unwrap().is_empty());
        assert_eq!(s.all_databases().unwrap().len(), 2);
        s.remove_database("a").unwrap();
        assert_eq!(s.database("a").unwrap(), None);
    }

    #[test]
    fn database_events_share_the_sequence() {
        let s = Store::open_in_memory().unwrap();
        let e1 = s
            .insert_event("w", "sb", "creating", "running", "api", 1)
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
            .unwrap();
        assert!(e2.seq > e1.seq);
        let all = s.events("w", None, 0, 10).unwrap();
        assert_eq!(all[0].subject, EventRow::SANDBOX);
        assert_eq!(all[1], e2);
        assert_eq!(s.events("w", Some("db"), 0, 10).unwrap(), vec![e2]);
    }
}
