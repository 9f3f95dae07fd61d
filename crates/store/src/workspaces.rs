//! Workspaces and API keys.

use crate::{ApiKeyRow, Store, StoreError, WorkspaceRow};
use rusqlite::{params, OptionalExtension};

impl Store {
    /// Inserts a workspace.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`], e.g. on a duplicate id.
    pub fn insert_workspace(&self, w: &WorkspaceRow) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO workspaces (id, name, created_at) VALUES (?1, ?2, ?3)",
            params![w.id, w.name, w.created_at],
        )?;
        Ok(())
    }

    /// Number of workspaces (0 on a fresh database).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn count_workspaces(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn()
            .query_row("SELECT COUNT(*) FROM workspaces", [], |r| r.get(0))?)
    }

    /// Inserts an API key row.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] (e.g. an unknown workspace).
    pub fn insert_api_key(&self, k: &ApiKeyRow) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO api_keys (prefix, workspace_id, label, hash, created_at, expires_at, revoked_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![k.prefix, k.workspace_id, k.label, k.hash, k.created_at, k.expires_at, k.revoked_at],
        )?;
        Ok(())
    }

    /// The key with this prefix, revoked or not.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn api_key(&self, prefix: &str) -> Result<Option<ApiKeyRow>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT prefix, workspace_id, label, hash, created_at, expires_at, revoked_at
                 FROM api_keys WHERE prefix = ?1",
                params![prefix],
                key_from_row,
            )
            .optional()?)
    }

    /// Keys of a workspace that are not revoked, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn list_api_keys(&self, workspace_id: &str) -> Result<Vec<ApiKeyRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT prefix, workspace_id, label, hash, created_at, expires_at, revoked_at
             FROM api_keys WHERE workspace_id = ?1 AND revoked_at IS NULL ORDER BY created_at",
        )?;
        let rows = stmt.query_map(params![workspace_id], key_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Revokes a key of `workspace_id`.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the workspace has no live key with this prefix.
    pub fn revoke_api_key(
        &self,
        workspace_id: &str,
        prefix: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        let n = self.conn().execute(
            "UPDATE api_keys SET revoked_at = ?3 WHERE workspace_id = ?1 AND prefix = ?2 AND revoked_at IS NULL",
            params![workspace_id, prefix, now],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound(format!("token {prefix}")));
        }
        Ok(())
    }
}

fn key_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ApiKeyRow> {
    Ok(ApiKeyRow {
        prefix: r.get(0)?,
        workspace_id: r.get(1)?,
        label: r.get(2)?,
        hash: r.get(3)?,
        created_at: r.get(4)?,
        expires_at: r.get(5)?,
        revoked_at: r.get(6)?,
    })
}
