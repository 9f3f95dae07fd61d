//! What an operator does to workspaces and keys from the data dir (issue 23 finding 12):
//! look a workspace up, revoke one key or all of a workspace's, and purge a workspace whose
//! resources are gone.
//!
//! Deleting a workspace is two steps (`pandastack admin workspace-delete`): its sandboxes,
//! databases, volumes, snapshots and templates are deleted through the running server (which
//! owns their processes, mounts and files), then [`Store::purge_workspace`] drops every row
//! left of it (deleted sandboxes, their code contexts and events, template builds, keys, the
//! workspace) in one transaction.

use crate::{Col, Store, StoreError, WorkspaceRow};
use sqlx::Row;

/// Rows a purge removes, in an order that satisfies the foreign keys (children first).
const PURGE: [&str; 9] = [
    "DELETE FROM code_contexts WHERE sandbox_id IN (SELECT id FROM sandboxes WHERE workspace_id = $1)",
    "DELETE FROM events WHERE workspace_id = $1",
    "DELETE FROM sandboxes WHERE workspace_id = $1",
    "DELETE FROM snapshots WHERE workspace_id = $1",
    "DELETE FROM template_builds WHERE workspace_id = $1",
    "DELETE FROM databases WHERE workspace_id = $1",
    "DELETE FROM volumes WHERE workspace_id = $1",
    "DELETE FROM api_keys WHERE workspace_id = $1",
    "DELETE FROM workspaces WHERE id = $1",
];

/// What a workspace still holds (counts of rows that are not deleted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holdings {
    /// Sandboxes in any state but deleted.
    pub sandboxes: i64,
    /// Databases not deleted.
    pub databases: i64,
    /// Volumes.
    pub volumes: i64,
    /// Snapshots.
    pub snapshots: i64,
}

impl Holdings {
    /// True when nothing is left but rows a purge may drop.
    pub fn is_empty(&self) -> bool {
        *self == Holdings::default()
    }
}

impl Store {
    /// The workspace with this id, if any.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn workspace(&self, id: &str) -> Result<Option<WorkspaceRow>, StoreError> {
        let row = sqlx::query("SELECT id, name, created_at FROM workspaces WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| {
            Ok(WorkspaceRow {
                id: r.text(0)?,
                name: r.text(1)?,
                created_at: r.int(2)?,
            })
        })
        .transpose()
        .map_err(|e: sqlx::Error| e.into())
    }

    /// How many resources workspace `id` still holds.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn holdings(&self, id: &str) -> Result<Holdings, StoreError> {
        let count = |sql: &'static str| async move {
            let n: i64 = sqlx::query(sql)
                .bind(id)
                .fetch_one(self.pool())
                .await?
                .try_get(0)?;
            Ok::<i64, StoreError>(n)
        };
        Ok(Holdings {
            sandboxes: count(
                "SELECT COUNT(*) FROM sandboxes WHERE workspace_id = $1 AND deleted_at IS NULL",
            )
            .await?,
            databases: count(
                "SELECT COUNT(*) FROM databases WHERE workspace_id = $1 AND deleted_at IS NULL",
            )
            .await?,
            volumes: count("SELECT COUNT(*) FROM volumes WHERE workspace_id = $1").await?,
            snapshots: count("SELECT COUNT(*) FROM snapshots WHERE workspace_id = $1").await?,
        })
    }

    /// Revokes every live key of workspace `id` but `keep` (a prefix), at `now` (Unix ms);
    /// returns how many were revoked.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn revoke_workspace_keys(
        &self,
        id: &str,
        keep: Option<&str>,
        now: i64,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE api_keys SET revoked_at = $2
             WHERE workspace_id = $1 AND revoked_at IS NULL AND ($3 IS NULL OR prefix <> $3)",
        )
        .bind(id)
        .bind(now)
        .bind(keep)
        .execute(self.writes())
        .await?;
        Ok(done.rows_affected())
    }

    /// Revokes the key with this prefix, whatever its workspace, at `now` (Unix ms); returns
    /// its workspace id.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when no live key has this prefix; [`StoreError::Db`].
    pub async fn revoke_key_by_prefix(&self, prefix: &str, now: i64) -> Result<String, StoreError> {
        let key = self
            .api_key(prefix)
            .await?
            .filter(|k| k.revoked_at.is_none())
            .ok_or_else(|| StoreError::NotFound(format!("live key {prefix}")))?;
        self.revoke_api_key(&key.workspace_id, prefix, now).await?;
        Ok(key.workspace_id)
    }

    /// Drops every row of workspace `id` in one transaction: its deleted sandboxes with their
    /// code contexts and events, template builds, keys and the workspace itself.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when the workspace still holds a sandbox, database, volume or
    /// snapshot ([`Store::holdings`]; delete those through the server first);
    /// [`StoreError::NotFound`] for an unknown workspace; [`StoreError::Db`].
    pub async fn purge_workspace(&self, id: &str) -> Result<(), StoreError> {
        let left = self.holdings(id).await?;
        if !left.is_empty() {
            // Reads "a resource of workspace ws-... already exists".
            return Err(StoreError::Conflict(format!(
                "a resource of workspace {id}"
            )));
        }
        let mut tx = self.writes().begin().await?;
        let mut removed = 0;
        for sql in PURGE {
            removed = sqlx::query(sql)
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        if removed == 0 {
            return Err(StoreError::NotFound(format!("workspace {id}")));
        }
        tx.commit().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{now_ms, ApiKeyRow, Store, StoreError, WorkspaceRow};

    async fn workspace_with_key(store: &Store, id: &str, prefix: &str) {
        store
            .insert_workspace(&WorkspaceRow {
                id: id.into(),
                name: id.into(),
                created_at: now_ms(),
            })
            .await
            .unwrap();
        store
            .insert_api_key(&ApiKeyRow {
                prefix: prefix.into(),
                workspace_id: id.into(),
                label: "admin".into(),
                hash: "h".into(),
                created_at: now_ms(),
                expires_at: None,
                revoked_at: None,
            })
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn keys_are_revoked_and_empty_workspaces_purged() {
        let store = Store::open_in_memory().await.unwrap();
        workspace_with_key(&store, "ws-a", "pds_aaaaaaaa").await;
        workspace_with_key(&store, "ws-b", "pds_bbbbbbbb").await;
        assert_eq!(
            store.revoke_key_by_prefix("pds_bbbbbbbb", 1).await.unwrap(),
            "ws-b"
        );
        assert!(matches!(
            store.revoke_key_by_prefix("pds_bbbbbbbb", 2).await,
            Err(StoreError::NotFound(_))
        ));
        assert_eq!(
            store.revoke_workspace_keys("ws-a", None, 3).await.unwrap(),
            1
        );
        assert!(store.holdings("ws-a").await.unwrap().is_empty());
        store.purge_workspace("ws-a").await.unwrap();
        assert!(store.workspace("ws-a").await.unwrap().is_none());
        assert!(store.api_key("pds_aaaaaaaa").await.unwrap().is_none());
        assert!(store.workspace("ws-b").await.unwrap().is_some());
        assert!(matches!(
            store.purge_workspace("ws-a").await,
            Err(StoreError::NotFound(_))
        ));
    }
}
