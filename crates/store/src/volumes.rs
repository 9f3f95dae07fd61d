//! Volumes (issue 9). Names are unique per workspace (a UNIQUE constraint, so two creates of
//! one name cannot both succeed, whichever host they reach). Who holds a volume is recorded on
//! the holder ([`crate::SandboxRow::volumes`]), not here.

use crate::{Col, Store, StoreError, VolumeRow};
use sqlx::any::AnyRow;

const COLS: &str = "id, workspace_id, name, size_mb, created_at, host";

fn from_row(r: &AnyRow) -> Result<VolumeRow, sqlx::Error> {
    Ok(VolumeRow {
        id: r.text(0)?,
        workspace_id: r.text(1)?,
        name: r.text(2)?,
        size_mb: r.uint(3)?,
        created_at: r.int(4)?,
        host: r.text(5)?,
    })
}

impl Store {
    /// Inserts a volume.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when the workspace already has a volume of that name;
    /// [`StoreError::Db`].
    pub async fn insert_volume(&self, v: &VolumeRow) -> Result<(), StoreError> {
        let done = sqlx::query(&format!(
            "INSERT INTO volumes ({COLS}) VALUES ($1, $2, $3, $4, $5, $6)"
        ))
        .bind(&v.id)
        .bind(&v.workspace_id)
        .bind(&v.name)
        .bind(i64::from(v.size_mb))
        .bind(v.created_at)
        .bind(&v.host)
        .execute(self.writes())
        .await;
        match done {
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                Err(StoreError::Conflict(format!("volume {}", v.name)))
            }
            other => other.map(|_| ()).map_err(Into::into),
        }
    }

    /// The workspace's volume called `name`.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn volume(
        &self,
        workspace_id: &str,
        name: &str,
    ) -> Result<Option<VolumeRow>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {COLS} FROM volumes WHERE workspace_id = $1 AND name = $2"
        ))
        .bind(workspace_id)
        .bind(name)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.as_ref().map(from_row).transpose()?)
    }

    /// A volume by id (any workspace).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn volume_by_id(&self, id: &str) -> Result<Option<VolumeRow>, StoreError> {
        let row = sqlx::query(&format!("SELECT {COLS} FROM volumes WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.as_ref().map(from_row).transpose()?)
    }

    /// Volumes of a workspace by name, or of every workspace when `workspace_id` is None.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn list_volumes(
        &self,
        workspace_id: Option<&str>,
    ) -> Result<Vec<VolumeRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLS} FROM volumes WHERE $1 IS NULL OR workspace_id = $1
             ORDER BY workspace_id, name"
        ))
        .bind(workspace_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
    }

    /// Volumes whose image lives on host `host` (start-up recovery looks for orphan images
    /// among these only).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn host_volumes(&self, host: &str) -> Result<Vec<VolumeRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLS} FROM volumes WHERE host = $1 ORDER BY id"
        ))
        .bind(host)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
    }

    /// Moves volume `id` from host `from` to host `to` (a drain moved its holder), only if
    /// `from` still has it; true when it moved.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn move_volume(&self, id: &str, from: &str, to: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE volumes SET host = $3 WHERE id = $1 AND host = $2")
            .bind(id)
            .bind(from)
            .bind(to)
            .execute(self.writes())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Sets a volume's size, MiB.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when there is no such volume; [`StoreError::Db`].
    pub async fn set_volume_size(&self, id: &str, size_mb: u32) -> Result<(), StoreError> {
        let done = sqlx::query("UPDATE volumes SET size_mb = $2 WHERE id = $1")
            .bind(id)
            .bind(i64::from(size_mb))
            .execute(self.writes())
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("volume {id}")));
        }
        Ok(())
    }

    /// Deletes a volume row.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when there is no such volume; [`StoreError::Db`].
    pub async fn delete_volume(&self, id: &str) -> Result<(), StoreError> {
        let done = sqlx::query("DELETE FROM volumes WHERE id = $1")
            .bind(id)
            .execute(self.writes())
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("volume {id}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{stores, workspace};
    use crate::*;

    fn vol(id: &str, ws: &str, name: &str) -> VolumeRow {
        VolumeRow {
            id: id.into(),
            workspace_id: ws.into(),
            name: name.into(),
            size_mb: 8192,
            created_at: 1,
            host: "h".into(),
        }
    }

    #[tokio::test]
    async fn names_are_unique_per_workspace() {
        for s in stores().await {
            let on = s.backend();
            workspace(&s, "a").await;
            workspace(&s, "b").await;
            s.insert_volume(&vol("vol-1", "a", "work")).await.unwrap();
            s.insert_volume(&vol("vol-2", "b", "work")).await.unwrap();
            let dup = s.insert_volume(&vol("vol-3", "a", "work")).await;
            assert!(
                matches!(dup, Err(StoreError::Conflict(_))),
                "{on:?}: {dup:?}"
            );
            assert_eq!(
                s.volume("a", "work").await.unwrap().unwrap(),
                vol("vol-1", "a", "work")
            );
            assert_eq!(s.volume("b", "work").await.unwrap().unwrap().id, "vol-2");
            assert!(s.volume("a", "other").await.unwrap().is_none());
            assert_eq!(s.list_volumes(Some("a")).await.unwrap().len(), 1);
            assert_eq!(s.list_volumes(None).await.unwrap().len(), 2);
            assert_eq!(s.host_volumes("h").await.unwrap().len(), 2);
            assert!(s.host_volumes("other").await.unwrap().is_empty());
            // A store of one host is wholly that host's, volumes included.
            s.claim_all("renamed").await.unwrap();
            assert_eq!(s.host_volumes("renamed").await.unwrap().len(), 2, "{on:?}");
            s.set_volume_size("vol-1", 16384).await.unwrap();
            let grown = s.volume_by_id("vol-1").await.unwrap().unwrap();
            assert_eq!(grown.size_mb, 16384, "{on:?}");
            s.delete_volume("vol-1").await.unwrap();
            assert!(matches!(
                s.delete_volume("vol-1").await,
                Err(StoreError::NotFound(_))
            ));
            assert!(s.volume("a", "work").await.unwrap().is_none());
        }
    }
}
