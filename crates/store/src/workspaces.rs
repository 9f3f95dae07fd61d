//! Workspaces and API keys.

use crate::{ApiKeyRow, Col, Store, StoreError, WorkspaceRow};
use sqlx::any::AnyRow;
use sqlx::Row;

const KEY_COLS: &str = "prefix, workspace_id, label, hash, created_at, expires_at, revoked_at";

fn key_from_row(r: &AnyRow) -> Result<ApiKeyRow, sqlx::Error> {
    Ok(ApiKeyRow {
        prefix: r.text(0)?,
        workspace_id: r.text(1)?,
        label: r.text(2)?,
        hash: r.text(3)?,
        created_at: r.int(4)?,
        expires_at: r.opt_int(5)?,
        revoked_at: r.opt_int(6)?,
    })
}

impl Store {
    /// Inserts a workspace.
    ///
    /// # Errors
    /// [`StoreError::Db`], e.g. on a duplicate id.
    pub async fn insert_workspace(&self, w: &WorkspaceRow) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO workspaces (id, name, created_at) VALUES ($1, $2, $3)")
            .bind(&w.id)
            .bind(&w.name)
            .bind(w.created_at)
            .execute(self.writes())
            .await?;
        Ok(())
    }

    /// Number of workspaces (0 on a fresh database).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn count_workspaces(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query("SELECT COUNT(*) FROM workspaces")
            .fetch_one(self.pool())
            .await?
            .try_get(0)?)
    }

    /// The id of the first workspace created (the bootstrap workspace, whose keys are the
    /// operator's), if any.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn first_workspace_id(&self) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT id FROM workspaces ORDER BY created_at, id LIMIT 1")
            .fetch_optional(self.pool())
            .await?;
        Ok(row.map(|r| r.try_get(0)).transpose()?)
    }

    /// Inserts an API key row.
    ///
    /// # Errors
    /// [`StoreError::Db`] (e.g. an unknown workspace).
    pub async fn insert_api_key(&self, k: &ApiKeyRow) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "INSERT INTO api_keys ({KEY_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
        ))
        .bind(&k.prefix)
        .bind(&k.workspace_id)
        .bind(&k.label)
        .bind(&k.hash)
        .bind(k.created_at)
        .bind(k.expires_at)
        .bind(k.revoked_at)
        .execute(self.writes())
        .await?;
        Ok(())
    }

    /// The key with this prefix, revoked or not.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn api_key(&self, prefix: &str) -> Result<Option<ApiKeyRow>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {KEY_COLS} FROM api_keys WHERE prefix = $1"
        ))
        .bind(prefix)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.as_ref().map(key_from_row).transpose()?)
    }

    /// Keys of a workspace that are not revoked, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn list_api_keys(&self, workspace_id: &str) -> Result<Vec<ApiKeyRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {KEY_COLS} FROM api_keys WHERE workspace_id = $1 AND revoked_at IS NULL ORDER BY created_at"
        ))
        .bind(workspace_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.iter().map(key_from_row).collect::<Result<_, _>>()?)
    }

    /// Revokes a key of `workspace_id`.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the workspace has no live key with this prefix.
    pub async fn revoke_api_key(
        &self,
        workspace_id: &str,
        prefix: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE api_keys SET revoked_at = $3 WHERE workspace_id = $1 AND prefix = $2 AND revoked_at IS NULL",
        )
        .bind(workspace_id)
        .bind(prefix)
        .bind(now)
        .execute(self.writes())
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("token {prefix}")));
        }
        Ok(())
    }
}
