//! Template builds: one row per `POST /v1/templates/build`, updated as the build runs.

use crate::{Col, Store, StoreError, TemplateBuildRow};
use sqlx::any::AnyRow;

const COLS: &str =
    "id, workspace_id, name, kind, status, error, cpu, memory_mb, size_mb, bytes, build_id,
    generation, cache_hit, created_at, started_at, ended_at, host";

fn from_row(r: &AnyRow) -> Result<TemplateBuildRow, sqlx::Error> {
    Ok(TemplateBuildRow {
        id: r.text(0)?,
        workspace_id: r.text(1)?,
        name: r.text(2)?,
        kind: r.text(3)?,
        status: r.text(4)?,
        error: r.opt_text(5)?,
        cpu: r.uint(6)?,
        memory_mb: r.uint(7)?,
        size_mb: r.uint(8)?,
        bytes: r.opt_int(9)?,
        build_id: r.opt_text(10)?,
        generation: r.opt_int(11)?,
        cache_hit: r.flag(12)?,
        created_at: r.int(13)?,
        started_at: r.opt_int(14)?,
        ended_at: r.opt_int(15)?,
        host: r.text(16)?,
    })
}

impl Store {
    /// Inserts or replaces a build row (the whole row is written).
    ///
    /// # Errors
    /// [`StoreError::Db`] (e.g. an unknown workspace).
    pub async fn put_template_build(&self, b: &TemplateBuildRow) -> Result<(), StoreError> {
        static SQL: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| crate::upsert_sql("template_builds", COLS));
        sqlx::query(&SQL)
            .bind(&b.id)
            .bind(&b.workspace_id)
            .bind(&b.name)
            .bind(&b.kind)
            .bind(&b.status)
            .bind(&b.error)
            .bind(i64::from(b.cpu))
            .bind(i64::from(b.memory_mb))
            .bind(i64::from(b.size_mb))
            .bind(b.bytes)
            .bind(&b.build_id)
            .bind(b.generation)
            .bind(i64::from(b.cache_hit))
            .bind(b.created_at)
            .bind(b.started_at)
            .bind(b.ended_at)
            .bind(&b.host)
            .execute(self.writes())
            .await?;
        Ok(())
    }

    /// Build `id` of workspace `workspace_id`.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn template_build(
        &self,
        workspace_id: &str,
        id: &str,
    ) -> Result<Option<TemplateBuildRow>, StoreError> {
        let sql = format!("SELECT {COLS} FROM template_builds WHERE workspace_id = $1 AND id = $2");
        let row = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.as_ref().map(from_row).transpose()?)
    }

    /// The workspace's builds, newest first, at most `limit`.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn template_builds(
        &self,
        workspace_id: &str,
        limit: usize,
    ) -> Result<Vec<TemplateBuildRow>, StoreError> {
        let sql = format!(
            "SELECT {COLS} FROM template_builds WHERE workspace_id = $1
             ORDER BY created_at DESC, id DESC LIMIT $2"
        );
        let rows = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(limit as i64)
            .fetch_all(self.pool())
            .await?;
        Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
    }

    /// Builds of every workspace still `queued` or `running`, on `host` only when given
    /// (start-up recovery fails its own; quotas count every host's).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn unfinished_template_builds(
        &self,
        host: Option<&str>,
    ) -> Result<Vec<TemplateBuildRow>, StoreError> {
        let sql = format!(
            "SELECT {COLS} FROM template_builds WHERE status IN ('queued', 'running')
             AND ($1 IS NULL OR host = $1) ORDER BY created_at"
        );
        let rows = sqlx::query(&sql).bind(host).fetch_all(self.pool()).await?;
        Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
    }

    /// Deletes the finished builds of `workspace_id` beyond the newest `keep`; returns their
    /// ids (the caller removes their logs).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn prune_template_builds(
        &self,
        workspace_id: &str,
        keep: usize,
    ) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "SELECT id FROM template_builds WHERE workspace_id = $1 AND status IN ('done', 'failed')
             ORDER BY created_at DESC, id DESC",
        )
        .bind(workspace_id)
        .fetch_all(self.pool())
        .await?;
        let ids: Vec<String> = rows
            .iter()
            .skip(keep)
            .map(|r| r.text(0))
            .collect::<Result<_, _>>()?;
        for id in &ids {
            sqlx::query("DELETE FROM template_builds WHERE id = $1")
                .bind(id)
                .execute(self.writes())
                .await?;
        }
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use crate::{TemplateBuildRow, WorkspaceRow};

    fn build(id: &str, ws: &str, created_at: i64, status: &str) -> TemplateBuildRow {
        TemplateBuildRow {
            id: id.into(),
            workspace_id: ws.into(),
            name: "t".into(),
            kind: "dockerfile".into(),
            status: status.into(),
            error: None,
            cpu: 1,
            memory_mb: 512,
            size_mb: 1024,
            bytes: None,
            build_id: None,
            generation: None,
            cache_hit: false,
            created_at,
            started_at: None,
            ended_at: None,
            host: if ws == "b" { "h2" } else { "h1" }.into(),
        }
    }

    async fn unfinished(s: &crate::Store, host: Option<&str>) -> Vec<String> {
        s.unfinished_template_builds(host)
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.id)
            .collect()
    }

    #[tokio::test]
    async fn builds_are_scoped_listed_newest_first_and_pruned() {
        for s in crate::testing::stores().await {
            for ws in ["a", "b"] {
                s.insert_workspace(&WorkspaceRow {
                    id: ws.into(),
                    name: ws.into(),
                    created_at: 0,
                })
                .await
                .unwrap();
            }
            s.put_template_build(&build("b1", "a", 1, "done"))
                .await
                .unwrap();
            s.put_template_build(&build("b2", "a", 2, "failed"))
                .await
                .unwrap();
            s.put_template_build(&build("b3", "a", 3, "running"))
                .await
                .unwrap();
            s.put_template_build(&build("x1", "b", 1, "queued"))
                .await
                .unwrap();
            assert_eq!(s.template_build("b", "b1").await.unwrap(), None);
            let mut done = build("b3", "a", 3, "done");
            done.bytes = Some(7);
            s.put_template_build(&done).await.unwrap();
            assert_eq!(s.template_build("a", "b3").await.unwrap(), Some(done));
            let ids: Vec<_> = s
                .template_builds("a", 10)
                .await
                .unwrap()
                .into_iter()
                .map(|b| b.id)
                .collect();
            assert_eq!(ids, ["b3", "b2", "b1"]);
            assert_eq!(unfinished(&s, None).await, ["x1"]);
            assert_eq!(unfinished(&s, Some("h2")).await, ["x1"]);
            assert!(unfinished(&s, Some("h1")).await.is_empty());
            assert_eq!(s.prune_template_builds("a", 1).await.unwrap(), ["b2", "b1"]);
            assert_eq!(s.template_builds("a", 10).await.unwrap().len(), 1);
            assert!(s
                .put_template_build(&build("z", "nope", 1, "queued"))
                .await
                .is_err());
        }
    }
}
