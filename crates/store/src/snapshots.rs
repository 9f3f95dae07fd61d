//! Snapshots (seed 005): a sandbox's memory and disk image, restorable into new sandboxes.

use crate::{Col, SnapshotRow, Store, StoreError};
use sqlx::any::AnyRow;

const SNAPSHOT_COLS: &str =
    "id, workspace_id, sandbox_id, template, template_generation, cpu, memory_mb, rootfs,
    guest_dir, image_dir, size_bytes, kernels, created_at, disk_mb, host, volumes";

fn snapshot_from_row(r: &AnyRow) -> Result<SnapshotRow, sqlx::Error> {
    let kernels = r.text(11)?;
    Ok(SnapshotRow {
        id: r.text(0)?,
        workspace_id: r.text(1)?,
        sandbox_id: r.text(2)?,
        template: r.text(3)?,
        template_generation: r.int(4)?,
        cpu: r.uint(5)?,
        memory_mb: r.uint(6)?,
        rootfs: r.text(7)?,
        guest_dir: r.text(8)?,
        image_dir: r.text(9)?,
        size_bytes: r.int(10)?,
        kernels: serde_json::from_str(&kernels).unwrap_or(serde_json::Value::Null),
        created_at: r.int(12)?,
        disk_mb: r.opt_uint(13)?,
        host: r.text(14)?,
        volumes: r.json(15)?,
    })
}

impl Store {
    /// Inserts a snapshot row.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn insert_snapshot(&self, s: &SnapshotRow) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "INSERT INTO snapshots ({SNAPSHOT_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
        ))
        .bind(&s.id)
        .bind(&s.workspace_id)
        .bind(&s.sandbox_id)
        .bind(&s.template)
        .bind(s.template_generation)
        .bind(i64::from(s.cpu))
        .bind(i64::from(s.memory_mb))
        .bind(&s.rootfs)
        .bind(&s.guest_dir)
        .bind(&s.image_dir)
        .bind(s.size_bytes)
        .bind(s.kernels.to_string())
        .bind(s.created_at)
        .bind(s.disk_mb.map(i64::from))
        .bind(&s.host)
        .bind(serde_json::to_string(&s.volumes)?)
        .execute(self.writes())
        .await?;
        Ok(())
    }

    /// Snapshots of a workspace, newest first, optionally of one sandbox.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn list_snapshots(
        &self,
        workspace_id: &str,
        sandbox_id: Option<&str>,
    ) -> Result<Vec<SnapshotRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {SNAPSHOT_COLS} FROM snapshots
             WHERE workspace_id = $1 AND ($2 IS NULL OR sandbox_id = $2) ORDER BY created_at DESC"
        ))
        .bind(workspace_id)
        .bind(sandbox_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .iter()
            .map(snapshot_from_row)
            .collect::<Result<_, _>>()?)
    }

    /// A snapshot by id within a workspace.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn snapshot(
        &self,
        workspace_id: &str,
        id: &str,
    ) -> Result<Option<SnapshotRow>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {SNAPSHOT_COLS} FROM snapshots WHERE workspace_id = $1 AND id = $2"
        ))
        .bind(workspace_id)
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.as_ref().map(snapshot_from_row).transpose()?)
    }

    /// Bytes held by a workspace's snapshots.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn snapshot_bytes(&self, workspace_id: &str) -> Result<u64, StoreError> {
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(size_bytes), 0) AS BIGINT) FROM snapshots WHERE workspace_id = $1",
        )
        .bind(workspace_id)
        .fetch_one(self.pool())
        .await?;
        let total = row.int(0)?;
        Ok(total.max(0) as u64)
    }

    /// Deletes a snapshot row.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the workspace has no such snapshot.
    pub async fn delete_snapshot(&self, workspace_id: &str, id: &str) -> Result<(), StoreError> {
        let done = sqlx::query("DELETE FROM snapshots WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.writes())
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("snapshot {id}")));
        }
        Ok(())
    }
}
