//! Several hosts sharing one store (issue 12): the host registry with heartbeats, the lease of
//! every running sandbox (seed 003 "Lease semantics") and the events every host records.
//!
//! Every time here is the database's clock ([`Store::db_now_ms`] in SQL): hosts' own clocks
//! never decide whether a lease has expired or a host is down.

use crate::events::{event_from_row, EVENT_COLS};
use crate::{now_sql, Backend, Col, EventRow, Store, StoreError};

/// A host of the cluster as registered by its heartbeats.
#[derive(Debug, Clone, PartialEq)]
pub struct HostRow {
    /// `--host-name`, unique in the cluster.
    pub name: String,
    /// How the other hosts reach its API, e.g. `http://10.0.0.5:8080`.
    pub advertise_url: String,
    /// `active` or `draining` as set by operators (whether it is down comes from
    /// `heartbeat_at`).
    pub state: String,
    /// What the host reported in its last heartbeat (JSON object: cpus, memory, sandboxes,
    /// disk, templates).
    pub capacity: serde_json::Value,
    /// When this host process registered, Unix ms (database clock).
    pub started_at: i64,
    /// Its last heartbeat, Unix ms (database clock).
    pub heartbeat_at: i64,
    /// The database's clock when the row was read, Unix ms: `now_ms - heartbeat_at` is the
    /// heartbeat's age without trusting the reader's clock.
    pub now_ms: i64,
}

impl Store {
    /// Registers (or re-registers) host `name` and records a heartbeat. A host that was
    /// `draining` stays so; a new one starts `active`. `started` marks this process's first
    /// heartbeat (it sets `started_at`).
    ///
    /// # Errors
    /// [`StoreError::Db`] or [`StoreError::Json`].
    pub async fn heartbeat(
        &self,
        name: &str,
        advertise_url: &str,
        capacity: &serde_json::Value,
        started: bool,
    ) -> Result<(), StoreError> {
        let now = now_sql(self.backend());
        let started_at = if started {
            "excluded.started_at"
        } else {
            "hosts.started_at"
        };
        sqlx::query(&format!(
            "INSERT INTO hosts (name, advertise_url, state, capacity, started_at, heartbeat_at)
             VALUES ($1, $2, 'active', $3, {now}, {now})
             ON CONFLICT (name) DO UPDATE SET advertise_url = excluded.advertise_url,
                capacity = excluded.capacity, heartbeat_at = excluded.heartbeat_at,
                started_at = {started_at}"
        ))
        .bind(name)
        .bind(advertise_url)
        .bind(serde_json::to_string(capacity)?)
        .execute(self.writes())
        .await?;
        Ok(())
    }

    /// Every registered host, by name.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn hosts(&self) -> Result<Vec<HostRow>, StoreError> {
        let now = now_sql(self.backend());
        let rows = sqlx::query(&format!(
            "SELECT name, advertise_url, state, capacity, started_at, heartbeat_at, {now}
             FROM hosts ORDER BY name"
        ))
        .fetch_all(self.pool())
        .await?;
        let host = |r: &sqlx::any::AnyRow| -> Result<HostRow, sqlx::Error> {
            Ok(HostRow {
                name: r.text(0)?,
                advertise_url: r.text(1)?,
                state: r.text(2)?,
                capacity: r.json(3)?,
                started_at: r.int(4)?,
                heartbeat_at: r.int(5)?,
                now_ms: r.int(6)?,
            })
        };
        Ok(rows.iter().map(host).collect::<Result<_, _>>()?)
    }

    /// Sets a host's operator state (`active` or `draining`).
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown host; [`StoreError::Db`].
    pub async fn set_host_state(&self, name: &str, state: &str) -> Result<(), StoreError> {
        let done = sqlx::query("UPDATE hosts SET state = $2 WHERE name = $1")
            .bind(name)
            .bind(state)
            .execute(self.writes())
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("host {name}")));
        }
        Ok(())
    }

    /// Gives sandbox `sandbox_id`'s lease to `host` for `ttl_ms` from now (database clock),
    /// taking it over from any earlier holder (the sandbox has just started there).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn acquire_lease(
        &self,
        sandbox_id: &str,
        host: &str,
        ttl_ms: i64,
    ) -> Result<(), StoreError> {
        let now = now_sql(self.backend());
        sqlx::query(&format!(
            "INSERT INTO leases (sandbox_id, host, expires_at) VALUES ($1, $2, {now} + $3)
             ON CONFLICT (sandbox_id) DO UPDATE SET host = excluded.host,
                expires_at = excluded.expires_at"
        ))
        .bind(sandbox_id)
        .bind(host)
        .bind(ttl_ms)
        .execute(self.writes())
        .await?;
        Ok(())
    }

    /// Drops `host`'s lease of a sandbox that stopped running there (deleted, hibernated,
    /// failed). Another host's lease of it is left alone.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn release_lease(&self, sandbox_id: &str, host: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM leases WHERE sandbox_id = $1 AND host = $2")
            .bind(sandbox_id)
            .bind(host)
            .execute(self.writes())
            .await?;
        Ok(())
    }

    /// Renews, in one statement, every lease `host` still holds that has not expired, to
    /// `ttl_ms` from now; returns the sandboxes renewed. A lease that expired is not renewed:
    /// its sandbox is lost to this host (fencing, seed 003).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn renew_leases(&self, host: &str, ttl_ms: i64) -> Result<Vec<String>, StoreError> {
        let now = now_sql(self.backend());
        let rows = sqlx::query(&format!(
            "UPDATE leases SET expires_at = {now} + $2 WHERE host = $1 AND expires_at > {now}
             RETURNING sandbox_id"
        ))
        .bind(host)
        .bind(ttl_ms)
        .fetch_all(self.writes())
        .await?;
        Ok(rows.iter().map(|r| r.text(0)).collect::<Result<_, _>>()?)
    }

    /// Collects up to `limit` expired leases, in one transaction: each lease is deleted, its
    /// sandbox (if still `running` or `paused` on the lease's host) becomes `failed`, and an
    /// event with cause `lease expired (host NAME)` is recorded. Returns those events. Any live
    /// host may call this at any time: on PostgreSQL, rows another host is collecting are
    /// skipped (`FOR UPDATE SKIP LOCKED`), so each lease is collected once.
    ///
    /// # Errors
    /// [`StoreError::Db`]; nothing is changed then.
    pub async fn expire_leases(&self, limit: i64) -> Result<Vec<EventRow>, StoreError> {
        let now = now_sql(self.backend());
        let lock = match self.backend() {
            Backend::Postgres => "FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let mut tx = self.writes().begin().await?;
        let expired = sqlx::query(&format!(
            "SELECT sandbox_id, host FROM leases WHERE expires_at <= {now}
             ORDER BY expires_at LIMIT $1 {lock}"
        ))
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let mut events = Vec::new();
        for row in &expired {
            let (sandbox_id, host) = (row.text(0)?, row.text(1)?);
            sqlx::query("DELETE FROM leases WHERE sandbox_id = $1")
                .bind(&sandbox_id)
                .execute(&mut *tx)
                .await?;
            let live = sqlx::query(
                "SELECT workspace_id, status FROM sandboxes
                 WHERE id = $1 AND host = $2 AND deleted_at IS NULL
                    AND status IN ('running', 'paused')",
            )
            .bind(&sandbox_id)
            .bind(&host)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(live) = live else { continue };
            let (workspace_id, from) = (live.text(0)?, live.text(1)?);
            let at = sqlx::query(&format!(
                "UPDATE sandboxes SET status = 'failed', instance_id = NULL, instance_dir = NULL,
                    guest_ip = NULL WHERE id = $1 RETURNING {now}"
            ))
            .bind(&sandbox_id)
            .fetch_one(&mut *tx)
            .await?
            .int(0)?;
            let ev = sqlx::query(&format!(
                "INSERT INTO events (workspace_id, subject, sandbox_id, from_state, to_state, cause, at)
                 VALUES ($1, 'sandbox', $2, $3, 'failed', $4, $5) RETURNING {EVENT_COLS}"
            ))
            .bind(&workspace_id)
            .bind(&sandbox_id)
            .bind(&from)
            .bind(format!("lease expired (host {host})"))
            .bind(at)
            .fetch_one(&mut *tx)
            .await?;
            events.push(event_from_row(&ev)?);
        }
        tx.commit().await?;
        Ok(events)
    }

    /// Events of every workspace with a sequence number above `after`, oldest first, at most
    /// `limit` (what the other hosts recorded, for this host's `/v1/events` subscribers).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn events_after(&self, after: i64, limit: i64) -> Result<Vec<EventRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {EVENT_COLS} FROM events WHERE seq > $1 ORDER BY seq LIMIT $2"
        ))
        .bind(after)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.iter().map(event_from_row).collect::<Result<_, _>>()?)
    }

    /// The host holding snapshot `id`'s image, of any workspace (for relaying a request to it).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn snapshot_host(&self, id: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT host FROM snapshots WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.map(|r| r.text(0)).transpose()?)
    }

    /// The highest event sequence number so far (0 when there is none).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn last_event_seq(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT CAST(COALESCE(MAX(seq), 0) AS BIGINT) FROM events")
            .fetch_one(self.pool())
            .await?;
        Ok(row.int(0)?)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{sandbox_row, stores};

    #[tokio::test]
    async fn heartbeats_register_hosts_and_keep_their_state() {
        for s in stores().await {
            let cap = serde_json::json!({"sandboxes": 1});
            s.heartbeat("a", "http://127.0.0.1:1", &cap, true)
                .await
                .unwrap();
            s.set_host_state("a", "draining").await.unwrap();
            s.heartbeat("a", "http://127.0.0.1:2", &cap, false)
                .await
                .unwrap();
            let hosts = s.hosts().await.unwrap();
            assert_eq!(hosts.len(), 1);
            assert_eq!(hosts[0].state, "draining");
            assert_eq!(hosts[0].advertise_url, "http://127.0.0.1:2");
            assert!(hosts[0].now_ms >= hosts[0].heartbeat_at);
            assert!(s.set_host_state("nope", "active").await.is_err());
        }
    }

    #[tokio::test]
    async fn an_expired_lease_fails_its_sandbox_once_and_is_not_renewed() {
        for s in stores().await {
            crate::testing::workspace(&s, "w").await;
            let mut row = sandbox_row("s1", "w");
            row.status = "running".into();
            row.host = "a".into();
            s.put_sandbox(&row).await.unwrap();
            s.acquire_lease("s1", "a", 60_000).await.unwrap();
            assert_eq!(s.renew_leases("a", 60_000).await.unwrap(), vec!["s1"]);
            assert!(s.renew_leases("b", 60_000).await.unwrap().is_empty());
            assert!(s.expire_leases(10).await.unwrap().is_empty());

            // A lease whose time has run out: not renewed, collected once.
            s.acquire_lease("s1", "a", -1).await.unwrap();
            assert!(s.renew_leases("a", 60_000).await.unwrap().is_empty());
            let events = s.expire_leases(10).await.unwrap();
            assert_eq!(events.len(), 1);
            assert_eq!(events[0].to_state, "failed");
            assert_eq!(events[0].cause, "lease expired (host a)");
            assert!(s.expire_leases(10).await.unwrap().is_empty());
            let failed = s.sandbox("s1").await.unwrap().unwrap();
            assert_eq!(failed.status, "failed");
            assert_eq!(failed.instance_id, None);
            assert_eq!(s.events_after(0, 10).await.unwrap().len(), 1);
            assert_eq!(s.last_event_seq().await.unwrap(), events[0].seq);

            // Released leases are gone; another host's lease is not released by this one.
            s.acquire_lease("s2", "b", 60_000).await.unwrap();
            s.release_lease("s2", "a").await.unwrap();
            assert_eq!(s.renew_leases("b", 60_000).await.unwrap(), vec!["s2"]);
            s.release_lease("s2", "b").await.unwrap();
            assert!(s.renew_leases("b", 60_000).await.unwrap().is_empty());
        }
    }
}
