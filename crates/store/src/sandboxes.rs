//! Sandboxes and code contexts.

use crate::events::{event_from_row, event_query};
use crate::{Col, ContextRow, EventRow, SandboxRow, Store, StoreError};
use sqlx::any::AnyRow;

const SANDBOX_COLS: &str = "id, workspace_id, template, template_generation, status, cpu, memory_mb, metadata, envs,
    ttl_seconds, persistent, created_at, last_active_at, instance_id, instance_dir, rootfs, guest_dir, boot_ms,
    boot_mode, from_snapshot, hibernate_image, deleted_at, network, guest_ip, disk_mb, host,
    volumes";

fn sandbox_from_row(r: &AnyRow) -> Result<SandboxRow, sqlx::Error> {
    Ok(SandboxRow {
        id: r.text(0)?,
        workspace_id: r.text(1)?,
        template: r.text(2)?,
        template_generation: r.int(3)?,
        status: r.text(4)?,
        cpu: r.uint(5)?,
        memory_mb: r.uint(6)?,
        metadata: r.json(7)?,
        envs: r.json(8)?,
        ttl_seconds: r.int(9)?,
        persistent: r.flag(10)?,
        created_at: r.int(11)?,
        last_active_at: r.int(12)?,
        instance_id: r.opt_text(13)?,
        instance_dir: r.opt_text(14)?,
        rootfs: r.text(15)?,
        guest_dir: r.text(16)?,
        boot_ms: r.opt_int(17)?,
        boot_mode: r.text(18)?,
        from_snapshot: r.opt_text(19)?,
        hibernate_image: r.opt_text(20)?,
        deleted_at: r.opt_int(21)?,
        network: r
            .opt_text(22)?
            .map(|s| {
                serde_json::from_str(&s).map_err(|e| sqlx::Error::ColumnDecode {
                    index: "network".into(),
                    source: Box::new(e),
                })
            })
            .transpose()?,
        guest_ip: r.opt_text(23)?,
        disk_mb: r.opt_uint(24)?,
        host: r.text(25)?,
        volumes: r.json(26)?,
    })
}

pub(crate) type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

/// The whole-row upsert of `s` (see [`Store::put_sandbox`]).
fn put_sandbox_query(s: &SandboxRow) -> Result<AnyQuery<'_>, StoreError> {
    static SQL: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| crate::upsert_sql("sandboxes", SANDBOX_COLS));
    Ok(sqlx::query(&SQL)
        .bind(&s.id)
        .bind(&s.workspace_id)
        .bind(&s.template)
        .bind(s.template_generation)
        .bind(&s.status)
        .bind(i64::from(s.cpu))
        .bind(i64::from(s.memory_mb))
        .bind(serde_json::to_string(&s.metadata)?)
        .bind(serde_json::to_string(&s.envs)?)
        .bind(s.ttl_seconds)
        .bind(i64::from(s.persistent))
        .bind(s.created_at)
        .bind(s.last_active_at)
        .bind(&s.instance_id)
        .bind(&s.instance_dir)
        .bind(&s.rootfs)
        .bind(&s.guest_dir)
        .bind(s.boot_ms)
        .bind(&s.boot_mode)
        .bind(&s.from_snapshot)
        .bind(&s.hibernate_image)
        .bind(s.deleted_at)
        .bind(s.network.as_ref().map(|v| v.to_string()))
        .bind(&s.guest_ip)
        .bind(s.disk_mb.map(i64::from))
        .bind(&s.host)
        .bind(serde_json::to_string(&s.volumes)?))
}

impl Store {
    /// Inserts or replaces a sandbox row (the whole row is written).
    ///
    /// # Errors
    /// [`StoreError::Db`] or [`StoreError::Json`].
    pub async fn put_sandbox(&self, s: &SandboxRow) -> Result<(), StoreError> {
        put_sandbox_query(s)?.execute(self.writes()).await?;
        Ok(())
    }

    /// Writes a sandbox row and the event of its state change in one transaction (issue 23
    /// finding 11: the store never says `running` for a sandbox whose `failed` event is
    /// missing, nor the reverse). `from` and `to` are the states the event records; the row
    /// is written whole, as [`Store::put_sandbox`] does. Returns the event with its sequence
    /// number.
    ///
    /// # Errors
    /// [`StoreError::Db`] (nothing is written) or [`StoreError::Json`].
    pub async fn put_sandbox_with_event(
        &self,
        s: &SandboxRow,
        from: &str,
        to: &str,
        cause: &str,
        at: i64,
    ) -> Result<EventRow, StoreError> {
        let mut tx = self.writes().begin().await?;
        put_sandbox_query(s)?.execute(&mut *tx).await?;
        let row = event_query(
            EventRow::SANDBOX,
            &s.workspace_id,
            &s.id,
            from,
            to,
            cause,
            at,
        )
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(event_from_row(&row)?)
    }

    /// A sandbox by id, deleted or not.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn sandbox(&self, id: &str) -> Result<Option<SandboxRow>, StoreError> {
        let sql = format!("SELECT {SANDBOX_COLS} FROM sandboxes WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.as_ref().map(sandbox_from_row).transpose()?)
    }

    /// Sandboxes not deleted, oldest first; of one workspace, or of all when `workspace_id` is
    /// None (the host agent's view).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn live_sandboxes(
        &self,
        workspace_id: Option<&str>,
    ) -> Result<Vec<SandboxRow>, StoreError> {
        let sql = format!(
            "SELECT {SANDBOX_COLS} FROM sandboxes WHERE deleted_at IS NULL AND ($1 IS NULL OR workspace_id = $1)
             ORDER BY created_at"
        );
        let rows = sqlx::query(&sql)
            .bind(workspace_id)
            .fetch_all(self.pool())
            .await?;
        Ok(rows
            .iter()
            .map(sandbox_from_row)
            .collect::<Result<_, _>>()?)
    }

    /// How many of workspace `workspace_id`'s sandboxes count toward its quota: not deleted
    /// and not failed, on any host.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn quota_sandboxes(&self, workspace_id: &str) -> Result<u64, StoreError> {
        let row = sqlx::query(
            "SELECT COUNT(*) FROM sandboxes
             WHERE workspace_id = $1 AND deleted_at IS NULL AND status NOT IN ('failed', 'deleted')",
        )
        .bind(workspace_id)
        .fetch_one(self.pool())
        .await?;
        Ok(row.int(0)?.max(0) as u64)
    }

    /// Sandboxes not deleted that live on `host`, oldest first (a host agent's own view,
    /// issue 12).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn host_sandboxes(&self, host: &str) -> Result<Vec<SandboxRow>, StoreError> {
        let sql = format!(
            "SELECT {SANDBOX_COLS} FROM sandboxes WHERE deleted_at IS NULL AND host = $1 ORDER BY created_at"
        );
        let rows = sqlx::query(&sql).bind(host).fetch_all(self.pool()).await?;
        Ok(rows
            .iter()
            .map(sandbox_from_row)
            .collect::<Result<_, _>>()?)
    }

    /// Gives every sandbox, snapshot, operation, volume, database and template build to
    /// `host`: a store of one host (SQLite) belongs wholly to it, whatever its name was before.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn claim_all(&self, host: &str) -> Result<(), StoreError> {
        for table in [
            "sandboxes",
            "snapshots",
            "operations",
            "volumes",
            "databases",
            "template_builds",
        ] {
            sqlx::query(&format!("UPDATE {table} SET host = $1 WHERE host <> $1"))
                .bind(host)
                .execute(self.writes())
                .await?;
        }
        Ok(())
    }

    /// Inserts a code context.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn insert_context(&self, c: &ContextRow) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO code_contexts (id, sandbox_id, kernel_id, language, created_at, closed_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&c.id)
        .bind(&c.sandbox_id)
        .bind(&c.kernel_id)
        .bind(&c.language)
        .bind(c.created_at)
        .bind(c.closed_at)
        .execute(self.writes())
        .await?;
        Ok(())
    }

    /// Open (not closed) code contexts of a sandbox, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn open_contexts(&self, sandbox_id: &str) -> Result<Vec<ContextRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, sandbox_id, kernel_id, language, created_at, closed_at FROM code_contexts
             WHERE sandbox_id = $1 AND closed_at IS NULL ORDER BY created_at",
        )
        .bind(sandbox_id)
        .fetch_all(self.pool())
        .await?;
        let ctx = |r: &AnyRow| -> Result<ContextRow, sqlx::Error> {
            Ok(ContextRow {
                id: r.text(0)?,
                sandbox_id: r.text(1)?,
                kernel_id: r.text(2)?,
                language: r.text(3)?,
                created_at: r.int(4)?,
                closed_at: r.opt_int(5)?,
            })
        };
        Ok(rows.iter().map(ctx).collect::<Result<_, _>>()?)
    }

    /// Marks a context closed.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the sandbox has no open context with this id.
    pub async fn close_context(
        &self,
        sandbox_id: &str,
        id: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE code_contexts SET closed_at = $3 WHERE sandbox_id = $1 AND id = $2 AND closed_at IS NULL",
        )
        .bind(sandbox_id)
        .bind(id)
        .bind(now)
        .execute(self.writes())
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("code context {id}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::sandbox_row as sandbox;
    use crate::*;

    #[tokio::test]
    async fn sandboxes_are_scoped_and_round_trip() {
        for s in crate::testing::stores().await {
            for ws in ["a", "b"] {
                let w = WorkspaceRow {
                    id: ws.into(),
                    name: ws.into(),
                    created_at: 0,
                };
                s.insert_workspace(&w).await.unwrap();
            }
            s.put_sandbox(&sandbox("s1", "a")).await.unwrap();
            s.put_sandbox(&sandbox("s2", "b")).await.unwrap();
            let mut failed = sandbox("s3", "a");
            failed.status = "failed".into();
            s.put_sandbox(&failed).await.unwrap();
            // The quota counts s1 only: s3 failed, s2 is b's.
            assert_eq!(s.quota_sandboxes("a").await.unwrap(), 1);
            let mut failed = sandbox("s3", "a");
            failed.deleted_at = Some(1);
            s.put_sandbox(&failed).await.unwrap();
            assert_eq!(s.sandbox("s1").await.unwrap().unwrap(), sandbox("s1", "a"));
            assert_eq!(s.live_sandboxes(Some("a")).await.unwrap().len(), 1);
            assert_eq!(s.live_sandboxes(None).await.unwrap().len(), 2);
            let mut gone = sandbox("s1", "a");
            gone.deleted_at = Some(9);
            s.put_sandbox(&gone).await.unwrap();
            assert!(s.live_sandboxes(Some("a")).await.unwrap().is_empty());
            assert_eq!(
                s.sandbox("s1").await.unwrap().unwrap(),
                gone,
                "{:?}",
                s.backend()
            );
        }
    }

    #[tokio::test]
    async fn events_resume_after_sequence() {
        for s in crate::testing::stores().await {
            let e1 = s
                .insert_event("a", "s1", "creating", "running", "create", 1)
                .await
                .unwrap();
            s.insert_event("b", "s9", "creating", "running", "create", 1)
                .await
                .unwrap();
            let e3 = s
                .insert_event("a", "s1", "running", "paused", "api", 2)
                .await
                .unwrap();
            let after = s.events("a", None, e1.seq, 100).await.unwrap();
            assert_eq!(after, vec![e3]);
        }
    }

    #[tokio::test]
    async fn contexts_close_once() {
        for s in crate::testing::stores().await {
            let w = WorkspaceRow {
                id: "a".into(),
                name: "a".into(),
                created_at: 0,
            };
            s.insert_workspace(&w).await.unwrap();
            s.put_sandbox(&sandbox("s1", "a")).await.unwrap();
            let c = ContextRow {
                id: "c1".into(),
                sandbox_id: "s1".into(),
                kernel_id: "k1".into(),
                language: "python".into(),
                created_at: 1,
                closed_at: None,
            };
            s.insert_context(&c).await.unwrap();
            assert_eq!(s.open_contexts("s1").await.unwrap(), vec![c]);
            s.close_context("s1", "c1", 2).await.unwrap();
            assert!(matches!(
                s.close_context("s1", "c1", 3).await,
                Err(StoreError::NotFound(_))
            ));
            assert!(s.open_contexts("s1").await.unwrap().is_empty());
        }
    }
}
