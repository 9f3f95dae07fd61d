//! Numbered schema migrations. `PRAGMA user_version` records how many have run; a new one is
//! appended, never edited.

use rusqlite::Connection;

const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    r#"
    CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE api_keys (
        prefix TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        label TEXT NOT NULL,
        hash TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER,
        revoked_at INTEGER
    );
    CREATE TABLE sandboxes (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        template TEXT NOT NULL,
        template_generation INTEGER NOT NULL,
        status TEXT NOT NULL,
        cpu INTEGER NOT NULL,
        memory_mb INTEGER NOT NULL,
        metadata TEXT NOT NULL,
        envs TEXT NOT NULL,
        ttl_seconds INTEGER NOT NULL,
        persistent INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        last_active_at INTEGER NOT NULL,
        instance_id TEXT,
        instance_dir TEXT,
        rootfs TEXT NOT NULL,
        guest_dir TEXT NOT NULL,
        boot_ms INTEGER,
        boot_mode TEXT NOT NULL,
        from_snapshot TEXT,
        hibernate_image TEXT,
        deleted_at INTEGER
    );
    CREATE INDEX sandboxes_workspace ON sandboxes(workspace_id, deleted_at);
    CREATE TABLE code_contexts (
        id TEXT PRIMARY KEY,
        sandbox_id TEXT NOT NULL REFERENCES sandboxes(id),
        kernel_id TEXT NOT NULL,
        language TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        closed_at INTEGER
    );
    CREATE INDEX code_contexts_sandbox ON code_contexts(sandbox_id);
    CREATE TABLE snapshots (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        sandbox_id TEXT NOT NULL,
        template TEXT NOT NULL,
        template_generation INTEGER NOT NULL,
        cpu INTEGER NOT NULL,
        memory_mb INTEGER NOT NULL,
        rootfs TEXT NOT NULL,
        guest_dir TEXT NOT NULL,
        image_dir TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        kernels TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        workspace_id TEXT NOT NULL,
        sandbox_id TEXT NOT NULL,
        from_state TEXT NOT NULL,
        to_state TEXT NOT NULL,
        cause TEXT NOT NULL,
        at INTEGER NOT NULL
    );
    CREATE INDEX events_sandbox ON events(sandbox_id);
    "#,
    // 2: sandbox networking (issue 7): the egress policy of each sandbox, the address of its
    // current instance, and server settings (the preview-token secret).
    r#"
    ALTER TABLE sandboxes ADD COLUMN network TEXT;
    ALTER TABLE sandboxes ADD COLUMN guest_ip TEXT;
    CREATE TABLE settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    "#,
    // 3: lifecycle operations in progress (intent records for crash-safe snapshot, hibernate
    // and fork: start-up recovery finishes or rolls back what a crash interrupted).
    r#"
    CREATE TABLE operations (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        sandbox_id TEXT NOT NULL,
        image_dir TEXT NOT NULL,
        detail TEXT NOT NULL,
        started_at INTEGER NOT NULL
    );
    "#,
    // 4: template builds (issue 13).
    r#"
    CREATE TABLE template_builds (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        cpu INTEGER NOT NULL,
        memory_mb INTEGER NOT NULL,
        size_mb INTEGER NOT NULL,
        bytes INTEGER,
        build_id TEXT,
        generation INTEGER,
        cache_hit INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        started_at INTEGER,
        ended_at INTEGER
    );
    CREATE INDEX template_builds_workspace ON template_builds(workspace_id, created_at);
    "#,
    // 5: the disk size of each sandbox and snapshot (issue 8); NULL for those made before.
    r#"
    ALTER TABLE sandboxes ADD COLUMN disk_mb INTEGER;
    ALTER TABLE snapshots ADD COLUMN disk_mb INTEGER;
    "#,
    // 6: databases (issue 10): one PostgreSQL cluster each; passwords sealed (never plain);
    // events of databases share the events table (and its sequence) with sandboxes.
    r#"
    CREATE TABLE databases (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        label TEXT,
        status TEXT NOT NULL,
        size TEXT NOT NULL,
        cpu INTEGER NOT NULL,
        storage_mb INTEGER NOT NULL,
        always_on INTEGER NOT NULL,
        port INTEGER,
        database TEXT NOT NULL,
        username TEXT NOT NULL,
        password_sealed TEXT NOT NULL,
        superuser_password_sealed TEXT NOT NULL,
        cloned_from TEXT,
        error TEXT,
        created_at INTEGER NOT NULL,
        last_active_at INTEGER NOT NULL,
        deleted_at INTEGER
    );
    CREATE INDEX databases_workspace ON databases(workspace_id, deleted_at);
    ALTER TABLE events ADD COLUMN subject TEXT NOT NULL DEFAULT 'sandbox';
    "#,
];

/// Runs every migration past the database's `user_version`, each in its own transaction.
///
/// # Errors
/// The first SQL error; the failing migration is rolled back.
pub fn apply(conn: &mut Connection) -> rusqlite::Result<()> {
    let done: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(done as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn migrations_are_idempotent() {
        let mut c = rusqlite::Connection::open_in_memory().unwrap();
        super::apply(&mut c).unwrap();
        super::apply(&mut c).unwrap();
        let v: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v as usize, super::MIGRATIONS.len());
    }
}
