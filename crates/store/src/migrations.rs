//! Numbered schema migrations, one list per backend: a new migration is appended to both
//! (same tables and columns; each in its dialect), never edited. SQLite records how many have
//! run in `PRAGMA user_version`; PostgreSQL in the table `pandastack_schema`, under an advisory
//! lock so that servers starting at once against one database migrate it once (issue 12).

use crate::{Backend, Store, StoreError};
use sqlx::{Acquire, Row};

/// SQLite schema history (`PRAGMA user_version` = how many have run).
const SQLITE: &[&str] = &[
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
    // 7: several hosts (issue 12): the host each sandbox, snapshot and operation belongs to,
    // the hosts with their heartbeats, and the leases of running sandboxes (seed 003).
    r#"
    ALTER TABLE sandboxes ADD COLUMN host TEXT NOT NULL DEFAULT '';
    ALTER TABLE snapshots ADD COLUMN host TEXT NOT NULL DEFAULT '';
    ALTER TABLE operations ADD COLUMN host TEXT NOT NULL DEFAULT '';
    CREATE TABLE hosts (
        name TEXT PRIMARY KEY,
        advertise_url TEXT NOT NULL,
        state TEXT NOT NULL,
        capacity TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        heartbeat_at INTEGER NOT NULL
    );
    CREATE TABLE leases (
        sandbox_id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        expires_at INTEGER NOT NULL
    );
    CREATE INDEX leases_host ON leases(host);
    CREATE INDEX leases_expiry ON leases(expires_at);
    "#,
    // 8: volumes (issue 9): named per workspace, on the host that holds the image; the volumes
    // each sandbox holds and the ones each snapshot was taken with (JSON lists of
    // {volume_id, name, read_only}).
    r#"
    CREATE TABLE volumes (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        name TEXT NOT NULL,
        size_mb INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        host TEXT NOT NULL,
        UNIQUE (workspace_id, name)
    );
    ALTER TABLE sandboxes ADD COLUMN volumes TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE snapshots ADD COLUMN volumes TEXT NOT NULL DEFAULT '[]';
    "#,
    // 9: the host each database and template build belongs to (issue 12: a host's recovery
    // takes only its own).
    r#"
    ALTER TABLE databases ADD COLUMN host TEXT NOT NULL DEFAULT '';
    ALTER TABLE template_builds ADD COLUMN host TEXT NOT NULL DEFAULT '';
    "#,
    // 10: images in object storage (issue 12 point 6): one row per snapshot or hibernation
    // image a host took, with where it was taken, what it needs, and whether it is uploaded.
    r#"
    CREATE TABLE images (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        sandbox_id TEXT NOT NULL,
        host TEXT NOT NULL,
        dir TEXT NOT NULL,
        origin TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        uploaded_at BIGINT,
        attempts BIGINT NOT NULL DEFAULT 0,
        error TEXT
    );
    "#,
];

/// PostgreSQL schema history (table `pandastack_schema` = how many have run). The same tables
/// and columns as [`SQLITE`]; integers (and booleans, 0/1) are `BIGINT`.
const POSTGRES: &[&str] = &[
    // 1: everything of SQLite migrations 1-7 (workspaces, keys, sandboxes with their network,
    // disk and host, code contexts, snapshots, events with their subject, settings, operations,
    // template builds, databases, hosts, leases).
    r#"
    CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        created_at BIGINT NOT NULL
    );
    CREATE TABLE api_keys (
        prefix TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        label TEXT NOT NULL,
        hash TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT,
        revoked_at BIGINT
    );
    CREATE TABLE sandboxes (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        template TEXT NOT NULL,
        template_generation BIGINT NOT NULL,
        status TEXT NOT NULL,
        cpu BIGINT NOT NULL,
        memory_mb BIGINT NOT NULL,
        metadata TEXT NOT NULL,
        envs TEXT NOT NULL,
        ttl_seconds BIGINT NOT NULL,
        persistent BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        last_active_at BIGINT NOT NULL,
        instance_id TEXT,
        instance_dir TEXT,
        rootfs TEXT NOT NULL,
        guest_dir TEXT NOT NULL,
        boot_ms BIGINT,
        boot_mode TEXT NOT NULL,
        from_snapshot TEXT,
        hibernate_image TEXT,
        deleted_at BIGINT,
        network TEXT,
        guest_ip TEXT,
        disk_mb BIGINT,
        host TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX sandboxes_host ON sandboxes(host, deleted_at);
    CREATE INDEX sandboxes_workspace ON sandboxes(workspace_id, deleted_at);
    CREATE TABLE code_contexts (
        id TEXT PRIMARY KEY,
        sandbox_id TEXT NOT NULL REFERENCES sandboxes(id),
        kernel_id TEXT NOT NULL,
        language TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        closed_at BIGINT
    );
    CREATE INDEX code_contexts_sandbox ON code_contexts(sandbox_id);
    CREATE TABLE snapshots (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        sandbox_id TEXT NOT NULL,
        template TEXT NOT NULL,
        template_generation BIGINT NOT NULL,
        cpu BIGINT NOT NULL,
        memory_mb BIGINT NOT NULL,
        rootfs TEXT NOT NULL,
        guest_dir TEXT NOT NULL,
        image_dir TEXT NOT NULL,
        size_bytes BIGINT NOT NULL,
        kernels TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        disk_mb BIGINT,
        host TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE events (
        seq BIGSERIAL PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        sandbox_id TEXT NOT NULL,
        from_state TEXT NOT NULL,
        to_state TEXT NOT NULL,
        cause TEXT NOT NULL,
        at BIGINT NOT NULL,
        subject TEXT NOT NULL DEFAULT 'sandbox'
    );
    CREATE INDEX events_sandbox ON events(sandbox_id);
    CREATE TABLE settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE operations (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        sandbox_id TEXT NOT NULL,
        image_dir TEXT NOT NULL,
        detail TEXT NOT NULL,
        started_at BIGINT NOT NULL,
        host TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE template_builds (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        cpu BIGINT NOT NULL,
        memory_mb BIGINT NOT NULL,
        size_mb BIGINT NOT NULL,
        bytes BIGINT,
        build_id TEXT,
        generation BIGINT,
        cache_hit BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        started_at BIGINT,
        ended_at BIGINT
    );
    CREATE INDEX template_builds_workspace ON template_builds(workspace_id, created_at);
    CREATE TABLE databases (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        label TEXT,
        status TEXT NOT NULL,
        size TEXT NOT NULL,
        cpu BIGINT NOT NULL,
        storage_mb BIGINT NOT NULL,
        always_on BIGINT NOT NULL,
        port BIGINT,
        database TEXT NOT NULL,
        username TEXT NOT NULL,
        password_sealed TEXT NOT NULL,
        superuser_password_sealed TEXT NOT NULL,
        cloned_from TEXT,
        error TEXT,
        created_at BIGINT NOT NULL,
        last_active_at BIGINT NOT NULL,
        deleted_at BIGINT
    );
    CREATE INDEX databases_workspace ON databases(workspace_id, deleted_at);
    CREATE TABLE hosts (
        name TEXT PRIMARY KEY,
        advertise_url TEXT NOT NULL,
        state TEXT NOT NULL,
        capacity TEXT NOT NULL,
        started_at BIGINT NOT NULL,
        heartbeat_at BIGINT NOT NULL
    );
    CREATE TABLE leases (
        sandbox_id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        expires_at BIGINT NOT NULL
    );
    CREATE INDEX leases_host ON leases(host);
    CREATE INDEX leases_expiry ON leases(expires_at);
    -- Every host's event relay wakes on this (issue 12: LISTEN/NOTIFY as the wake-up, the
    -- events table as the truth).
    CREATE FUNCTION pandastack_notify_event() RETURNS trigger AS $$
    BEGIN
        PERFORM pg_notify('pandastack_events', NEW.seq::text);
        RETURN NEW;
    END
    $$ LANGUAGE plpgsql;
    CREATE TRIGGER events_notify AFTER INSERT ON events
        FOR EACH ROW EXECUTE FUNCTION pandastack_notify_event();
    "#,
    // 2: volumes (issue 9), as SQLite's 8.
    r#"
    CREATE TABLE volumes (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        name TEXT NOT NULL,
        size_mb BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        host TEXT NOT NULL,
        UNIQUE (workspace_id, name)
    );
    ALTER TABLE sandboxes ADD COLUMN volumes TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE snapshots ADD COLUMN volumes TEXT NOT NULL DEFAULT '[]';
    "#,
    // 3: as SQLite 9 (the host of databases and template builds).
    r#"
    ALTER TABLE databases ADD COLUMN host TEXT NOT NULL DEFAULT '';
    ALTER TABLE template_builds ADD COLUMN host TEXT NOT NULL DEFAULT '';
    "#,
    // 4: as SQLite 10 (images in object storage).
    r#"
    CREATE TABLE images (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        sandbox_id TEXT NOT NULL,
        host TEXT NOT NULL,
        dir TEXT NOT NULL,
        origin TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        uploaded_at BIGINT,
        attempts BIGINT NOT NULL DEFAULT 0,
        error TEXT
    );
    "#,
];

/// Key of the PostgreSQL advisory lock held while migrating ("pandasta" in ASCII).
const MIGRATION_LOCK: i64 = 0x70616e6461737461;

/// Runs every migration the database has not had yet, each in its own transaction.
///
/// # Errors
/// The first database error; the failing migration is rolled back.
pub async fn apply(store: &Store) -> Result<(), StoreError> {
    let mut conn = store.pool().acquire().await?;
    match store.backend() {
        Backend::Sqlite => {
            let done: i64 = sqlx::query("PRAGMA user_version")
                .fetch_one(&mut *conn)
                .await?
                .try_get(0)?;
            for (i, sql) in SQLITE.iter().enumerate().skip(done as usize) {
                let mut tx = conn.begin().await?;
                sqlx::raw_sql(sql).execute(&mut *tx).await?;
                sqlx::raw_sql(&format!("PRAGMA user_version = {}", i + 1))
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
            }
        }
        Backend::Postgres => {
            sqlx::query("SELECT pg_advisory_lock($1)")
                .bind(MIGRATION_LOCK)
                .execute(&mut *conn)
                .await?;
            let result = async {
                sqlx::raw_sql(
                    "CREATE TABLE IF NOT EXISTS pandastack_schema (version BIGINT NOT NULL)",
                )
                .execute(&mut *conn)
                .await?;
                let done: Option<i64> = sqlx::query("SELECT MAX(version) FROM pandastack_schema")
                    .fetch_one(&mut *conn)
                    .await?
                    .try_get(0)?;
                for (i, sql) in POSTGRES.iter().enumerate().skip(done.unwrap_or(0) as usize) {
                    let mut tx = conn.begin().await?;
                    sqlx::raw_sql(sql).execute(&mut *tx).await?;
                    sqlx::query("INSERT INTO pandastack_schema (version) VALUES ($1)")
                        .bind((i + 1) as i64)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                }
                Ok::<_, StoreError>(())
            }
            .await;
            sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(MIGRATION_LOCK)
                .execute(&mut *conn)
                .await?;
            result?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testing::stores;

    #[tokio::test]
    async fn migrations_are_idempotent() {
        for s in stores().await {
            super::apply(&s).await.unwrap();
            super::apply(&s).await.unwrap();
            // Every table exists on both backends.
            for t in [
                "workspaces",
                "api_keys",
                "sandboxes",
                "code_contexts",
                "snapshots",
                "events",
                "settings",
                "operations",
                "volumes",
                "images",
            ] {
                sqlx::query(&format!("SELECT COUNT(*) FROM {t}"))
                    .fetch_one(s.pool())
                    .await
                    .unwrap_or_else(|e| panic!("{t} on {:?}: {e}", s.backend()));
            }
        }
    }
}
