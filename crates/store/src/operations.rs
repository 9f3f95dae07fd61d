//! Intent records of lifecycle operations in progress ([`OperationRow`]).

use crate::{OperationRow, Store, StoreError};
use rusqlite::params;

impl Store {
    /// Records an operation before it starts.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`], e.g. when one with this id is already recorded.
    pub fn insert_operation(&self, op: &OperationRow) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO operations (id, kind, sandbox_id, image_dir, detail, started_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                op.id,
                op.kind,
                op.sandbox_id,
                op.image_dir,
                op.detail.to_string(),
                op.started_at
            ],
        )?;
        Ok(())
    }

    /// Forgets a finished (or rolled back) operation. Forgetting one twice is not an error.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn delete_operation(&self, id: &str) -> Result<(), StoreError> {
        self.conn()
            .execute("DELETE FROM operations WHERE id = ?1", params![id])?;
        Ok(())
    }

    /// Every recorded operation, oldest first (what a crash left for recovery).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn operations(&self) -> Result<Vec<OperationRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT id, kind, sandbox_id, image_dir, detail, started_at FROM operations ORDER BY started_at",
        )?;
        let rows = stmt.query_map([], |r| {
            let detail: String = r.get(4)?;
            Ok(OperationRow {
                id: r.get(0)?,
                kind: r.get(1)?,
                sandbox_id: r.get(2)?,
                image_dir: r.get(3)?,
                detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::Null),
                started_at: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The image directories of every snapshot, of any workspace (for collecting the ones no
    /// row references).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn snapshot_image_dirs(&self) -> Result<Vec<String>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT image_dir FROM snapshots")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    #[test]
    fn operations_are_recorded_listed_and_forgotten() {
        let s = Store::open_in_memory().unwrap();
        let op = OperationRow {
            id: "snap-1".into(),
            kind: "snapshot".into(),
            sandbox_id: "s1".into(),
            image_dir: "/d/snapshots/snap-1.partial".into(),
            detail: serde_json::json!({"a": 1}),
            started_at: 5,
        };
        s.insert_operation(&op).unwrap();
        assert!(s.insert_operation(&op).is_err());
        assert_eq!(s.operations().unwrap(), vec![op]);
        s.delete_operation("snap-1").unwrap();
        s.delete_operation("snap-1").unwrap();
        assert!(s.operations().unwrap().is_empty());
    }
}
