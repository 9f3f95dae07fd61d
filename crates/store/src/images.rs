//! Images in object storage (issue 12 point 6): one row per snapshot or hibernation image a
//! host took, saying which host took it (and holds it on disk), what a restore of it needs on
//! another host (its `origin`: the template build and guest daemon), and whether it reached
//! the object store. The image's bytes are on the taking host's disk and, once uploaded, in
//! the object store under a key derived from the row's id.

use crate::{Col, Store, StoreError};
use sqlx::any::AnyRow;

/// What a snapshot image is (the row id is the snapshot id).
pub const SNAPSHOT: &str = "snapshot";
/// What a hibernation image is (the row id is `hibernate-<sandbox id>`).
pub const HIBERNATE: &str = "hibernate";

/// One image (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct ImageRow {
    /// The snapshot id, or `hibernate-<sandbox id>`.
    pub id: String,
    /// [`SNAPSHOT`] or [`HIBERNATE`].
    pub kind: String,
    /// The sandbox it is an image of.
    pub sandbox_id: String,
    /// The host that took it.
    pub host: String,
    /// The image directory on that host.
    pub dir: String,
    /// What a restore needs (JSON object: template build, rootfs manifest digest, guest dir).
    pub origin: serde_json::Value,
    /// Unix ms.
    pub created_at: i64,
    /// When its upload completed, Unix ms; `None` while not uploaded.
    pub uploaded_at: Option<i64>,
    /// Upload attempts that failed so far.
    pub attempts: i64,
    /// The last upload error, if any.
    pub error: Option<String>,
}

const COLS: &str =
    "id, kind, sandbox_id, host, dir, origin, created_at, uploaded_at, attempts, error";

fn image_from_row(r: &AnyRow) -> Result<ImageRow, sqlx::Error> {
    Ok(ImageRow {
        id: r.text(0)?,
        kind: r.text(1)?,
        sandbox_id: r.text(2)?,
        host: r.text(3)?,
        dir: r.text(4)?,
        origin: r.json(5)?,
        created_at: r.int(6)?,
        uploaded_at: r.opt_int(7)?,
        attempts: r.int(8)?,
        error: r.opt_text(9)?,
    })
}

impl Store {
    /// Records an image (replacing a row of the same id: a sandbox hibernated again).
    ///
    /// # Errors
    /// [`StoreError::Db`] or [`StoreError::Json`].
    pub async fn put_image(&self, i: &ImageRow) -> Result<(), StoreError> {
        static SQL: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| crate::upsert_sql("images", COLS));
        sqlx::query(&SQL)
            .bind(&i.id)
            .bind(&i.kind)
            .bind(&i.sandbox_id)
            .bind(&i.host)
            .bind(&i.dir)
            .bind(serde_json::to_string(&i.origin)?)
            .bind(i.created_at)
            .bind(i.uploaded_at)
            .bind(i.attempts)
            .bind(&i.error)
            .execute(self.writes())
            .await?;
        Ok(())
    }

    /// The image `id`, if recorded.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn image(&self, id: &str) -> Result<Option<ImageRow>, StoreError> {
        let row = sqlx::query(&format!("SELECT {COLS} FROM images WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.as_ref().map(image_from_row).transpose()?)
    }

    /// Images of host `host` not uploaded yet (start-up resumes their uploads).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn pending_images(&self, host: &str) -> Result<Vec<ImageRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLS} FROM images WHERE host = $1 AND uploaded_at IS NULL ORDER BY created_at"
        ))
        .bind(host)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.iter().map(image_from_row).collect::<Result<_, _>>()?)
    }

    /// Records the outcome of an upload attempt of image `id`: `Ok(at)` marks it uploaded at
    /// `at` (Unix ms), `Err(why)` counts a failed attempt. A row deleted meanwhile stays
    /// deleted.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn image_upload_result(
        &self,
        id: &str,
        result: Result<i64, &str>,
    ) -> Result<(), StoreError> {
        let q = match result {
            Ok(at) => sqlx::query("UPDATE images SET uploaded_at = $2, error = NULL WHERE id = $1")
                .bind(id)
                .bind(at),
            Err(why) => {
                sqlx::query("UPDATE images SET attempts = attempts + 1, error = $2 WHERE id = $1")
                    .bind(id)
                    .bind(why.to_string())
            }
        };
        q.execute(self.writes()).await?;
        Ok(())
    }

    /// Deletes the row of image `id` (no error when there is none).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn delete_image(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM images WHERE id = $1")
            .bind(id)
            .execute(self.writes())
            .await?;
        Ok(())
    }

    /// Moves hibernated sandbox `id` from host `from` to host `to` (a wake on `to` of a
    /// sandbox whose host is down, issue 12 point 7), and its hibernation image row with it.
    /// Returns whether this call moved it: false when the sandbox is no longer hibernated on
    /// `from` (another host took it first, or it was woken or deleted).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn move_hibernated(
        &self,
        id: &str,
        from: &str,
        to: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE sandboxes SET host = $3
             WHERE id = $1 AND host = $2 AND status = 'hibernated' AND deleted_at IS NULL",
        )
        .bind(id)
        .bind(from)
        .bind(to)
        .execute(self.writes())
        .await?;
        Ok(done.rows_affected() == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::stores;

    fn row(id: &str) -> ImageRow {
        ImageRow {
            id: id.into(),
            kind: SNAPSHOT.into(),
            sandbox_id: "sb-1".into(),
            host: "a".into(),
            dir: "/d/snapshots/x".into(),
            origin: serde_json::json!({"build": "templates/base/h-g1"}),
            created_at: 1,
            uploaded_at: None,
            attempts: 0,
            error: None,
        }
    }

    #[tokio::test]
    async fn an_image_is_pending_until_uploaded_and_failures_are_counted() {
        for s in stores().await {
            s.put_image(&row("snap-1")).await.unwrap();
            assert_eq!(s.pending_images("a").await.unwrap().len(), 1);
            assert!(s.pending_images("b").await.unwrap().is_empty());
            s.image_upload_result("snap-1", Err("refused"))
                .await
                .unwrap();
            let i = s.image("snap-1").await.unwrap().unwrap();
            assert_eq!((i.attempts, i.error.as_deref()), (1, Some("refused")));
            s.image_upload_result("snap-1", Ok(7)).await.unwrap();
            let i = s.image("snap-1").await.unwrap().unwrap();
            assert_eq!((i.uploaded_at, i.error), (Some(7), None));
            assert!(s.pending_images("a").await.unwrap().is_empty());
            assert_eq!(i.origin, row("snap-1").origin);
            s.delete_image("snap-1").await.unwrap();
            assert_eq!(s.image("snap-1").await.unwrap(), None);
        }
    }

    #[tokio::test]
    async fn a_hibernated_sandbox_moves_to_one_host_only() {
        for s in stores().await {
            crate::testing::workspace(&s, "ws").await;
            let mut r = crate::testing::sandbox_row("sb-1", "ws");
            r.status = "hibernated".into();
            r.host = "a".into();
            s.put_sandbox(&r).await.unwrap();
            assert!(s.move_hibernated("sb-1", "a", "b").await.unwrap());
            // The second taker finds it gone from host a.
            assert!(!s.move_hibernated("sb-1", "a", "c").await.unwrap());
            assert_eq!(s.sandbox("sb-1").await.unwrap().unwrap().host, "b");
            r.host = "b".into();
            r.status = "running".into();
            s.put_sandbox(&r).await.unwrap();
            assert!(!s.move_hibernated("sb-1", "b", "c").await.unwrap());
        }
    }
}
