//! `/v1/databases` (contract §2.12, issue 10): create, list, get, delete, connection,
//! reset-credentials, update, wake, clone, failover (501 on one host) and a database's events.

use super::detached;
use crate::auth::Caller;
use crate::databases::create::NewDatabase;
use crate::databases::{DatabaseState, Databases, LiveDb, NO_FAILOVER};
use crate::error::ApiError;
use crate::extract::{database_id, JsonBody};
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use pandastack_api::{
    CloneDatabase, CreateDatabase, Database, DatabaseAccepted, DatabaseConnection, DatabaseEvent,
    DatabaseList, DatabaseWake, UpdateDatabase,
};
use pandastack_store::EventRow;
use std::sync::Arc;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/databases", get(list).post(create))
        .route("/databases/:id", get(get_one).delete(delete).patch(update))
        .route("/databases/:id/connection", get(connection))
        .route("/databases/:id/reset-credentials", post(reset_credentials))
        .route("/databases/:id/wake", post(wake))
        .route("/databases/:id/clone", post(clone))
        .route("/databases/:id/failover", post(failover))
        .route("/databases/:id/events", get(events))
}

/// The caller's database `raw`.
fn find(st: &AppState, caller: &Caller, raw: &str) -> Result<Arc<LiveDb>, ApiError> {
    st.databases.get(&caller.workspace_id, &database_id(raw)?)
}

fn accepted(db: &LiveDb) -> (StatusCode, Json<DatabaseAccepted>) {
    (
        StatusCode::ACCEPTED,
        Json(DatabaseAccepted {
            id: db.id.clone(),
            status: db.state().as_str().into(),
        }),
    )
}

async fn create(
    State(st): State<AppState>,
    caller: Caller,
    JsonBody(req): JsonBody<CreateDatabase>,
) -> Result<(StatusCode, Json<DatabaseAccepted>), ApiError> {
    let new = NewDatabase::from_request(req)?;
    let dbs = st.databases.clone();
    let db = detached(async move { dbs.create(&caller.workspace_id, new).await }).await?;
    Ok(accepted(&db))
}

async fn list(State(st): State<AppState>, caller: Caller) -> Json<DatabaseList> {
    let items = st
        .databases
        .all()
        .iter()
        .filter(|d| d.workspace_id == caller.workspace_id)
        .map(|d| st.databases.wire(d, false))
        .collect();
    Json(DatabaseList { items })
}

async fn get_one(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Database>, ApiError> {
    let db = find(&st, &caller, &id)?;
    Ok(Json(st.databases.wire(&db, true)))
}

async fn delete(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let db = find(&st, &caller, &id)?;
    let dbs = st.databases.clone();
    detached(async move { dbs.delete(&db).await }).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn update(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<UpdateDatabase>,
) -> Result<Json<Database>, ApiError> {
    let db = find(&st, &caller, &id)?;
    let dbs = st.databases.clone();
    let d = db.clone();
    detached(async move { dbs.update(&d, req).await }).await?;
    Ok(Json(st.databases.wire(&db, true)))
}

/// The URL of a database that can take connections (running, or stopped: it wakes).
fn ready_url(dbs: &Databases, db: &LiveDb) -> Result<String, ApiError> {
    dbs.wire(db, true).connection_url.ok_or_else(|| {
        ApiError::Conflict(format!(
            "database {} is {}; it has no connection yet",
            db.id,
            db.state()
        ))
    })
}

async fn connection(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<DatabaseConnection>, ApiError> {
    let db = find(&st, &caller, &id)?;
    Ok(Json(DatabaseConnection {
        connection_url: ready_url(&st.databases, &db)?,
    }))
}

async fn reset_credentials(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Database>, ApiError> {
    let db = find(&st, &caller, &id)?;
    let (dbs, d) = (st.databases.clone(), db.clone());
    detached(async move { dbs.reset_credentials(&d).await }).await?;
    Ok(Json(st.databases.wire(&db, true)))
}

async fn wake(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<DatabaseWake>, ApiError> {
    let db = find(&st, &caller, &id)?;
    let was = db.state();
    let (dbs, d) = (st.databases.clone(), db.clone());
    detached(async move { dbs.ensure_running(&d, "api").await }).await?;
    Ok(Json(DatabaseWake {
        id: db.id.clone(),
        status: db.state().as_str().into(),
        detail: Some(if was == DatabaseState::Running {
            "it was running".into()
        } else {
            format!("started (it was {was})")
        }),
    }))
}

async fn clone(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<CloneDatabase>,
) -> Result<(StatusCode, Json<DatabaseAccepted>), ApiError> {
    let source = find(&st, &caller, &id)?;
    let dbs = st.databases.clone();
    let db = detached(async move { dbs.clone_database(&source, req).await }).await?;
    Ok(accepted(&db))
}

async fn failover(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Database>, ApiError> {
    find(&st, &caller, &id)?;
    Err(ApiError::NotImplemented(NO_FAILOVER.into()))
}

/// The wire form of a database event row.
pub fn wire_event(e: &EventRow) -> DatabaseEvent {
    DatabaseEvent {
        seq: e.seq,
        database_id: e.sandbox_id.clone(),
        from: e.from_state.clone(),
        to: e.to_state.clone(),
        cause: e.cause.clone(),
        at: super::rfc3339_ms(e.at),
        at_ms: e.at,
    }
}

async fn events(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Vec<DatabaseEvent>>, ApiError> {
    let db = find(&st, &caller, &id)?;
    let rows = st
        .databases
        .host
        .store
        .events(&caller.workspace_id, Some(&db.id), 0, 10_000)
        .await?;
    Ok(Json(
        rows.iter()
            .filter(|e| e.subject == EventRow::DATABASE)
            .map(wire_event)
            .collect(),
    ))
}
