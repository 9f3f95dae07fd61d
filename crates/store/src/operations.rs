//! Intent records of lifecycle operations in progress ([`OperationRow`]).

use crate::{Col, OperationRow, Store, StoreError};
use sqlx::Row;

impl Store {
    /// Records an operation before it starts.
    ///
    /// # Errors
    /// [`StoreError::Db`], e.g. when one with this id is already recorded.
    pub async fn insert_operation(&self, op: &OperationRow) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO operations (id, kind, sandbox_id, image_dir, detail, started_at, host)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&op.id)
        .bind(&op.kind)
        .bind(&op.sandbox_id)
        .bind(&op.image_dir)
        .bind(op.detail.to_string())
        .bind(op.started_at)
        .bind(&op.host)
        .execute(self.writes())
        .await?;
        Ok(())
    }

    /// Forgets a finished (or rolled back) operation. Forgetting one twice is not an error.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn delete_operation(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM operations WHERE id = $1")
            .bind(id)
            .execute(self.writes())
            .await?;
        Ok(())
    }

    /// Every operation recorded by `host`, oldest first (what a crash of that host left for its
    /// recovery).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn operations(&self, host: &str) -> Result<Vec<OperationRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, kind, sandbox_id, image_dir, detail, started_at, host FROM operations
             WHERE host = $1 ORDER BY started_at",
        )
        .bind(host)
        .fetch_all(self.pool())
        .await?;
        let op = |r: &sqlx::any::AnyRow| -> Result<OperationRow, sqlx::Error> {
            Ok(OperationRow {
                id: r.text(0)?,
                kind: r.text(1)?,
                sandbox_id: r.text(2)?,
                image_dir: r.text(3)?,
                detail: serde_json::from_str(&r.text(4)?).unwrap_or(serde_json::Value::Null),
                started_at: r.int(5)?,
                host: r.text(6)?,
            })
        };
        Ok(rows.iter().map(op).collect::<Result<_, _>>()?)
    }

    /// The distinct rootfs paths the snapshots on `host` were taken on (a fetched template
    /// build stays while one needs it).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn snapshot_rootfs(&self, host: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT DISTINCT rootfs FROM snapshots WHERE host = $1")
            .bind(host)
            .fetch_all(self.pool())
            .await?;
        Ok(rows
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?)
    }

    /// The image directories of every snapshot on `host`, of any workspace (for collecting the
    /// ones no row references).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn snapshot_image_dirs(&self, host: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT image_dir FROM snapshots WHERE host = $1")
            .bind(host)
            .fetch_all(self.pool())
            .await?;
        Ok(rows
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    #[tokio::test]
    async fn operations_are_recorded_listed_and_forgotten() {
        for s in crate::testing::stores().await {
            let op = OperationRow {
                id: "snap-1".into(),
                kind: "snapshot".into(),
                sandbox_id: "s1".into(),
                image_dir: "/d/snapshots/snap-1.partial".into(),
                detail: serde_json::json!({"a": 1}),
                started_at: 5,
                host: "a".into(),
            };
            s.insert_operation(&op).await.unwrap();
            assert!(s.insert_operation(&op).await.is_err());
            assert_eq!(s.operations("a").await.unwrap(), vec![op]);
            assert!(s.operations("b").await.unwrap().is_empty());
            s.delete_operation("snap-1").await.unwrap();
            s.delete_operation("snap-1").await.unwrap();
            assert!(s.operations("a").await.unwrap().is_empty());
        }
    }
}
