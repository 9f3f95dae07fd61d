//! Template builds: one row per `POST /v1/templates/build`, updated as the build runs.

use crate::{Store, StoreError, TemplateBuildRow};
use rusqlite::{params, OptionalExtension};

const COLS: &str =
    "id, workspace_id, name, kind, status, error, cpu, memory_mb, size_mb, bytes, build_id,
    generation, cache_hit, created_at, started_at, ended_at";

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TemplateBuildRow> {
    Ok(TemplateBuildRow {
        id: r.get(0)?,
        workspace_id: r.get(1)?,
        name: r.get(2)?,
        kind: r.get(3)?,
        status: r.get(4)?,
        error: r.get(5)?,
        cpu: r.get(6)?,
        memory_mb: r.get(7)?,
        size_mb: r.get(8)?,
        bytes: r.get(9)?,
        build_id: r.get(10)?,
        generation: r.get(11)?,
        cache_hit: r.get(12)?,
        created_at: r.get(13)?,
        started_at: r.get(14)?,
        ended_at: r.get(15)?,
    })
}

impl Store {
    /// Inserts or replaces a build row (the whole row is written).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] (e.g. an unknown workspace).
    pub fn put_template_build(&self, b: &TemplateBuildRow) -> Result<(), StoreError> {
        let sql = format!(
            "INSERT OR REPLACE INTO template_builds ({COLS}) VALUES
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
        );
        self.conn().execute(
            &sql,
            params![
                b.id,
                b.workspace_id,
                b.name,
                b.kind,
                b.status,
                b.error,
                b.cpu,
                b.memory_mb,
                b.size_mb,
                b.bytes,
                b.build_id,
                b.generation,
                b.cache_hit,
                b.created_at,
                b.started_at,
                b.ended_at
            ],
        )?;
        Ok(())
    }

    /// Build `id` of workspace `workspace_id`.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn template_build(
        &self,
        workspace_id: &str,
        id: &str,
    ) -> Result<Option<TemplateBuildRow>, StoreError> {
        let sql = format!("SELECT {COLS} FROM template_builds WHERE workspace_id = ?1 AND id = ?2");
        Ok(self
            .conn()
            .query_row(&sql, params![workspace_id, id], from_row)
            .optional()?)
    }

    /// The workspace's builds, newest first, at most `limit`.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn template_builds(
        &self,
        workspace_id: &str,
        limit: usize,
    ) -> Result<Vec<TemplateBuildRow>, StoreError> {
        let sql = format!(
            "SELECT {COLS} FROM template_builds WHERE workspace_id = ?1
             ORDER BY created_at DESC, id DESC LIMIT ?2"
        );
        let conn = self.conn();
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map(params![workspace_id, limit as i64], from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Builds of every workspace still `queued` or `running` (start-up recovery fails them).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn unfinished_template_builds(&self) -> Result<Vec<TemplateBuildRow>, StoreError> {
        let sql = format!(
            "SELECT {COLS} FROM template_builds WHERE status IN ('queued', 'running') ORDER BY created_at"
        );
        let conn = self.conn();
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map([], from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Deletes the finished builds of `workspace_id` beyond the newest `keep`; returns their
    /// ids (the caller removes their logs).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn prune_template_builds(
        &self,
        workspace_id: &str,
        keep: usize,
    ) -> Result<Vec<String>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT id FROM template_builds WHERE workspace_id = ?1 AND status IN ('done', 'failed')
             ORDER BY created_at DESC, id DESC LIMIT -1 OFFSET ?2",
        )?;
        let ids: Vec<String> = stmt
            .query_map(params![workspace_id, keep as i64], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        for id in &ids {
            conn.execute("DELETE FROM template_builds WHERE id = ?1", params![id])?;
        }
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Store, TemplateBuildRow, WorkspaceRow};

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
        }
    }

    #[test]
    fn builds_are_scoped_listed_newest_first_and_pruned() {
        let s = Store::open_in_memory().unwrap();
        for ws in ["a", "b"] {
            s.insert_workspace(&WorkspaceRow {
                id: ws.into(),
                name: ws.into(),
                created_at: 0,
            })
            .unwrap();
        }
        s.put_template_build(&build("b1", "a", 1, "done")).unwrap();
        s.put_template_build(&build("b2", "a", 2, "failed"))
            .unwrap();
        s.put_template_build(&build("b3", "a", 3, "running"))
            .unwrap();
        s.put_template_build(&build("x1", "b", 1, "queued"))
            .unwrap();
        assert_eq!(s.template_build("b", "b1").unwrap(), None);
        let mut done = build("b3", "a", 3, "done");
        done.bytes = Some(7);
        s.put_template_build(&done).unwrap();
        assert_eq!(s.template_build("a", "b3").unwrap(), Some(done));
        let ids: Vec<_> = s
            .template_builds("a", 10)
            .unwrap()
            .into_iter()
            .map(|b| b.id)
            .collect();
        assert_eq!(ids, ["b3", "b2", "b1"]);
        let unfinished: Vec<_> = s
            .unfinished_template_builds()
            .unwrap()
            .into_iter()
            .map(|b| b.id)
            .collect();
        assert_eq!(unfinished, ["x1"]);
        assert_eq!(s.prune_template_builds("a", 1).unwrap(), ["b2", "b1"]);
        assert_eq!(s.template_builds("a", 10).unwrap().len(), 1);
        assert!(s
            .put_template_build(&build("z", "nope", 1, "queued"))
            .is_err());
    }
}
