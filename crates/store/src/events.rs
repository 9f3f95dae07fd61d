//! Lifecycle events of sandboxes and databases.

use crate::sandboxes::AnyQuery;
use crate::{Col, EventRow, Store, StoreError};
use sqlx::any::AnyRow;

/// The columns [`event_from_row`] reads, in its order.
pub(crate) const EVENT_COLS: &str =
    "seq, workspace_id, sandbox_id, from_state, to_state, cause, at, subject";

pub(crate) fn event_from_row(r: &AnyRow) -> Result<EventRow, sqlx::Error> {
    Ok(EventRow {
        seq: r.int(0)?,
        workspace_id: r.text(1)?,
        sandbox_id: r.text(2)?,
        from_state: r.text(3)?,
        to_state: r.text(4)?,
        cause: r.text(5)?,
        at: r.int(6)?,
        subject: r.text(7)?,
    })
}

/// The insert of one event, `RETURNING` it (see [`Store::insert_subject_event`]).
pub(crate) fn event_query<'q>(
    subject: &'q str,
    workspace_id: &'q str,
    id: &'q str,
    from: &'q str,
    to: &'q str,
    cause: &'q str,
    at: i64,
) -> AnyQuery<'q> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "INSERT INTO events (workspace_id, subject, sandbox_id, from_state, to_state, cause, at)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {EVENT_COLS}"
        )
    });
    sqlx::query(&SQL)
        .bind(workspace_id)
        .bind(subject)
        .bind(id)
        .bind(from)
        .bind(to)
        .bind(cause)
        .bind(at)
}

impl Store {
    /// Appends a lifecycle event and returns it with its sequence number.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn insert_event(
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
        .await
    }

    /// Records a transition of `subject` ([`EventRow::SANDBOX`] or [`EventRow::DATABASE`])
    /// `id`.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    #[allow(clippy::too_many_arguments)]
    pub async fn insert_subject_event(
        &self,
        subject: &str,
        workspace_id: &str,
        id: &str,
        from: &str,
        to: &str,
        cause: &str,
        at: i64,
    ) -> Result<EventRow, StoreError> {
        let row = event_query(subject, workspace_id, id, from, to, cause, at)
            .fetch_one(self.writes())
            .await?;
        Ok(event_from_row(&row)?)
    }

    /// Events of a workspace after sequence number `after`, optionally of one sandbox, oldest
    /// first, at most `limit`.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn events(
        &self,
        workspace_id: &str,
        sandbox_id: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<EventRow>, StoreError> {
        let rows = sqlx::query(
            &format!("SELECT {EVENT_COLS} FROM events
             WHERE workspace_id = $1 AND ($2 IS NULL OR sandbox_id = $2) AND seq > $3 ORDER BY seq LIMIT $4"),
        )
        .bind(workspace_id)
        .bind(sandbox_id)
        .bind(after)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.iter().map(event_from_row).collect::<Result<_, _>>()?)
    }
}
