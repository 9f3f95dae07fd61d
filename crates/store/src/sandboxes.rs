//! Sandboxes, code contexts, snapshots and events.

use crate::{ContextRow, EventRow, SandboxRow, SnapshotRow, Store, StoreError};
use rusqlite::{params, OptionalExtension};

const SANDBOX_COLS: &str = "id, workspace_id, template, template_generation, status, cpu, memory_mb, metadata, envs,
    ttl_seconds, persistent, created_at, last_active_at, instance_id, instance_dir, rootfs, guest_dir, boot_ms,
    boot_mode, from_snapshot, hibernate_image, deleted_at, network, guest_ip, disk_mb";

fn sandbox_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SandboxRow> {
    let json = |i: usize| -> rusqlite::Result<std::collections::BTreeMap<String, String>> {
        let s: String = r.get(i)?;
        serde_json::from_str(&s).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
        })
    };
    Ok(SandboxRow {
        id: r.get(0)?,
        workspace_id: r.get(1)?,
        template: r.get(2)?,
        template_generation: r.get(3)?,
        status: r.get(4)?,
        cpu: r.get(5)?,
        memory_mb: r.get(6)?,
        metadata: json(7)?,
        envs: json(8)?,
        ttl_seconds: r.get(9)?,
        persistent: r.get(10)?,
        created_at: r.get(11)?,
        last_active_at: r.get(12)?,
        instance_id: r.get(13)?,
        instance_dir: r.get(14)?,
        rootfs: r.get(15)?,
        guest_dir: r.get(16)?,
        boot_ms: r.get(17)?,
        boot_mode: r.get(18)?,
        from_snapshot: r.get(19)?,
        hibernate_image: r.get(20)?,
        deleted_at: r.get(21)?,
        network: r
            .get::<_, Option<String>>(22)?
            .map(|s| {
                serde_json::from_str(&s).map_err(|e| {
                    rusqlite::Error::FromSqlConversionFailure(
                        22,
                        rusqlite::types::Type::Text,
                        Box::new(e),
                    )
                })
            })
            .transpose()?,
        guest_ip: r.get(23)?,
        disk_mb: r.get(24)?,
    })
}

impl Store {
    /// Inserts or replaces a sandbox row (the whole row is written).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] or [`StoreError::Json`].
    pub fn put_sandbox(&self, s: &SandboxRow) -> Result<(), StoreError> {
        let sql = format!(
            "INSERT OR REPLACE INTO sandboxes ({SANDBOX_COLS}) VALUES
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22,
              ?23, ?24, ?25)"
        );
        self.conn().execute(
            &sql,
            params![
                s.id,
                s.workspace_id,
                s.template,
                s.template_generation,
                s.status,
                s.cpu,
                s.memory_mb,
                serde_json::to_string(&s.metadata)?,
                serde_json::to_string(&s.envs)?,
                s.ttl_seconds,
                s.persistent,
                s.created_at,
                s.last_active_at,
                s.instance_id,
                s.instance_dir,
                s.rootfs,
                s.guest_dir,
                s.boot_ms,
                s.boot_mode,
                s.from_snapshot,
                s.hibernate_image,
                s.deleted_at,
                s.network.as_ref().map(|v| v.to_string()),
                s.guest_ip,
                s.disk_mb
            ],
        )?;
        Ok(())
    }

    /// A sandbox by id, deleted or not.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn sandbox(&self, id: &str) -> Result<Option<SandboxRow>, StoreError> {
        let sql = format!("SELECT {SANDBOX_COLS} FROM sandboxes WHERE id = ?1");
        Ok(self
            .conn()
            .query_row(&sql, params![id], sandbox_from_row)
            .optional()?)
    }

    /// Sandboxes not deleted, oldest first; of one workspace, or of all when `workspace_id` is
    /// None (the host agent's view).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn live_sandboxes(
        &self,
        workspace_id: Option<&str>,
    ) -> Result<Vec<SandboxRow>, StoreError> {
        let sql = format!(
            "SELECT {SANDBOX_COLS} FROM sandboxes WHERE deleted_at IS NULL AND (?1 IS NULL OR workspace_id = ?1)
             ORDER BY created_at"
        );
        let conn = self.conn();
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map(params![workspace_id], sandbox_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Inserts a code context.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn insert_context(&self, c: &ContextRow) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO code_contexts (id, sandbox_id, kernel_id, language, created_at, closed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                c.id,
                c.sandbox_id,
                c.kernel_id,
                c.language,
                c.created_at,
                c.closed_at
            ],
        )?;
        Ok(())
    }

    /// Open (not closed) code contexts of a sandbox, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn open_contexts(&self, sandbox_id: &str) -> Result<Vec<ContextRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT id, sandbox_id, kernel_id, language, created_at, closed_at FROM code_contexts
             WHERE sandbox_id = ?1 AND closed_at IS NULL ORDER BY created_at",
        )?;
        let rows = stmt.query_map(params![sandbox_id], |r| {
            Ok(ContextRow {
                id: r.get(0)?,
                sandbox_id: r.get(1)?,
                kernel_id: r.get(2)?,
                language: r.get(3)?,
                created_at: r.get(4)?,
                closed_at: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Marks a context closed.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the sandbox has no open context with this id.
    pub fn close_context(&self, sandbox_id: &str, id: &str, now: i64) -> Result<(), StoreError> {
        let n = self.conn().execute(
            "UPDATE code_contexts SET closed_at = ?3 WHERE sandbox_id = ?1 AND id = ?2 AND closed_at IS NULL",
            params![sandbox_id, id, now],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound(format!("code context {id}")));
        }
        Ok(())
    }

    /// Inserts a snapshot row.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn insert_snapshot(&self, s: &SnapshotRow) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO snapshots (id, workspace_id, sandbox_id, template, template_generation, cpu, memory_mb,
             rootfs, guest_dir, image_dir, size_bytes, kernels, created_at, disk_mb)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            params![
                s.id,
                s.workspace_id,
                s.sandbox_id,
                s.template,
                s.template_generation,
                s.cpu,
                s.memory_mb,
                s.rootfs,
                s.guest_dir,
                s.image_dir,
                s.size_bytes,
                s.kernels.to_string(),
                s.created_at,
                s.disk_mb
            ],
        )?;
        Ok(())
    }

    /// Snapshots of a workspace, newest first, optionally of one sandbox.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn list_snapshots(
        &self,
        workspace_id: &str,
        sandbox_id: Option<&str>,
    ) -> Result<Vec<SnapshotRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT id, workspace_id, sandbox_id, template, template_generation, cpu, memory_mb, rootfs, guest_dir,
             image_dir, size_bytes, kernels, created_at, disk_mb FROM snapshots
             WHERE workspace_id = ?1 AND (?2 IS NULL OR sandbox_id = ?2) ORDER BY created_at DESC",
        )?;
        let rows = stmt.query_map(params![workspace_id, sandbox_id], snapshot_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A snapshot by id within a workspace.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn snapshot(
        &self,
        workspace_id: &str,
        id: &str,
    ) -> Result<Option<SnapshotRow>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT id, workspace_id, sandbox_id, template, template_generation, cpu, memory_mb, rootfs, guest_dir,
                 image_dir, size_bytes, kernels, created_at, disk_mb FROM snapshots WHERE workspace_id = ?1 AND id = ?2",
                params![workspace_id, id],
                snapshot_from_row,
            )
            .optional()?)
    }

    /// Bytes held by a workspace's snapshots.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn snapshot_bytes(&self, workspace_id: &str) -> Result<u64, StoreError> {
        let total: i64 = self.conn().query_row(
            "SELECT COALESCE(SUM(size_bytes), 0) FROM snapshots WHERE workspace_id = ?1",
            params![workspace_id],
            |r| r.get(0),
        )?;
        Ok(total.max(0) as u64)
    }

    /// Deletes a snapshot row.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the workspace has no such snapshot.
    pub fn delete_snapshot(&self, workspace_id: &str, id: &str) -> Result<(), StoreError> {
        let n = self.conn().execute(
            "DELETE FROM snapshots WHERE workspace_id = ?1 AND id = ?2",
            params![workspace_id, id],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound(format!("snapshot {id}")));
        }
        Ok(())
    }

    /// Appends a lifecycle event and returns it with its sequence number.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn insert_event(
        &self,
        workspace_id: &str,
        sandbox_id: &str,
        from: &str,
        to: &str,
        cause: &str,
        at: i64,
    ) -> Result<EventRow, StoreError> {
        self.insert_subject_event(
            EventRow::SANDBOX,
            workspace_id,
            sandbox_id,
            from,
            to,
            cause,
            at,
        )
    }

    /// Records a transition of `subject` ([`EventRow::SANDBOX`] or [`EventRow::DATABASE`])
    /// `id`.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    #[allow(clippy::too_many_arguments)]
    pub fn insert_subject_event(
        &self,
        subject: &str,
        workspace_id: &str,
        id: &str,
        from: &str,
        to: &str,
        cause: &str,
        at: i64,
    ) -> Result<EventRow, StoreError> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO events (workspace_id, subject, sandbox_id, from_state, to_state, cause, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![workspace_id, subject, id, from, to, cause, at],
        )?;
        Ok(EventRow {
            seq: conn.last_insert_rowid(),
            workspace_id: workspace_id.into(),
            subject: subject.into(),
            sandbox_id: id.into(),
            from_state: from.into(),
            to_state: to.into(),
            cause: cause.into(),
            at,
        })
    }

    /// Events of a workspace after sequence number `after`, optionally of one sandbox, oldest
    /// first, at most `limit`.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn events(
        &self,
        workspace_id: &str,
        sandbox_id: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<EventRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT seq, workspace_id, sandbox_id, from_state, to_state, cause, at, subject FROM events
             WHERE workspace_id = ?1 AND (?2 IS NULL OR sandbox_id = ?2) AND seq > ?3 ORDER BY seq LIMIT ?4",
        )?;
        let rows = stmt.query_map(params![workspace_id, sandbox_id, after, limit], |r| {
            Ok(EventRow {
                seq: r.get(0)?,
                workspace_id: r.get(1)?,
                sandbox_id: r.get(2)?,
                from_state: r.get(3)?,
                to_state: r.get(4)?,
                cause: r.get(5)?,
                at: r.get(6)?,
                subject: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

fn snapshot_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SnapshotRow> {
    let kernels: String = r.get(11)?;
    Ok(SnapshotRow {
        id: r.get(0)?,
        workspace_id: r.get(1)?,
        sandbox_id: r.get(2)?,
        template: r.get(3)?,
        template_generation: r.get(4)?,
        cpu: r.get(5)?,
        memory_mb: r.get(6)?,
        rootfs: r.get(7)?,
        guest_dir: r.get(8)?,
        image_dir: r.get(9)?,
        size_bytes: r.get(10)?,
        kernels: serde_json::from_str(&kernels).unwrap_or(serde_json::Value::Null),
        created_at: r.get(12)?,
        disk_mb: r.get(13)?,
    })
}

#[cfg(test)]
mod tests {
    use crate::*;
    use std::collections::BTreeMap;

    fn sandbox(id: &str, ws: &str) -> SandboxRow {
        SandboxRow {
            id: id.into(),
            workspace_id: ws.into(),
            template: "base".into(),
            template_generation: 1,
            status: "running".into(),
            cpu: 1,
            memory_mb: 512,
            metadata: BTreeMap::from([("job".into(), "demo".into())]),
            envs: BTreeMap::new(),
            ttl_seconds: 3600,
            persistent: false,
            created_at: 1,
            last_active_at: 1,
            instance_id: Some("ps-1".into()),
            instance_dir: None,
            rootfs: "/r".into(),
            guest_dir: "/g".into(),
            boot_ms: Some(5),
            boot_mode: "cold".into(),
            from_snapshot: None,
            hibernate_image: None,
            deleted_at: None,
            network: Some(serde_json::json!({"internet": true})),
            guest_ip: Some("10.201.0.6".into()),
            disk_mb: Some(1024),
        }
    }

    #[test]
    fn sandboxes_are_scoped_and_round_trip() {
        let s = Store::open_in_memory().unwrap();
        for ws in ["a", "b"] {
            s.insert_workspace(&WorkspaceRow {
                id: ws.into(),
                name: ws.into(),
                created_at: 0,
            })
            .unwrap();
        }
        s.put_sandbox(&sandbox("s1", "a")).unwrap();
        s.put_sandbox(&sandbox("s2", "b")).unwrap();
        assert_eq!(s.sandbox("s1").unwrap().unwrap(), sandbox("s1", "a"));
        assert_eq!(s.live_sandboxes(Some("a")).unwrap().len(), 1);
        assert_eq!(s.live_sandboxes(None).unwrap().len(), 2);
        let mut gone = sandbox("s1", "a");
        gone.deleted_at = Some(9);
        s.put_sandbox(&gone).unwrap();
        assert!(s.live_sandboxes(Some("a")).unwrap().is_empty());
    }

    #[test]
    fn events_resume_after_sequence() {
        let s = Store::open_in_memory().unwrap();
        let e1 = s
            .insert_event("a", "s1", "creating", "running", "create", 1)
            .unwrap();
        s.insert_event("b", "s9", "creating", "running", "create", 1)
            .unwrap();
        let e3 = s
            .insert_event("a", "s1", "running", "paused", "api", 2)
            .unwrap();
        let after = s.events("a", None, e1.seq, 100).unwrap();
        assert_eq!(after, vec![e3]);
    }

    #[test]
    fn contexts_close_once() {
        let s = Store::open_in_memory().unwrap();
        s.insert_workspace(&WorkspaceRow {
            id: "a".into(),
            name: "a".into(),
            created_at: 0,
        })
        .unwrap();
        s.put_sandbox(&sandbox("s1", "a")).unwrap();
        let c = ContextRow {
            id: "c1".into(),
            sandbox_id: "s1".into(),
            kernel_id: "k1".into(),
            language: "python".into(),
            created_at: 1,
            closed_at: None,
        };
        s.insert_context(&c).unwrap();
        assert_eq!(s.open_contexts("s1").unwrap(), vec![c]);
        s.close_context("s1", "c1", 2).unwrap();
        assert!(matches!(
            s.close_context("s1", "c1", 3),
            Err(StoreError::NotFound(_))
        ));
        assert!(s.open_contexts("s1").unwrap().is_empty());
    }
}
