//! `/v1/databases` (contract §2.12, issue 10): create, list, get, delete, connection,
//! reset-credentials, update, wake, clone, failover (501 on one host) and a database's events.

use super::detached;
use super::openapi::{BodyTooLarge, Errors, HostStorage};
use crate::auth::Caller;
use crate::databases::create::NewDatabase;
use crate::databases::{DatabaseState, Databases, LiveDb, NO_FAILOVER};
use crate::error::ApiError;
use crate::extract::{database_id, JsonBody};
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use pandastack_api::{
    CloneDatabase, CreateDatabase, Database, DatabaseAccepted, DatabaseConnection, DatabaseEvent,
    DatabaseList, DatabaseWake, UpdateDatabase,
};
use pandastack_store::EventRow;
use std::sync::Arc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(get_one, delete, update))
        .routes(routes!(connection))
        .routes(routes!(reset_credentials))
        .routes(routes!(wake))
        .routes(routes!(clone))
        .routes(routes!(failover))
        .routes(routes!(events))
}

/// 501: database failover (contract §2.12) needs a standby, which one host does not have.
#[allow(dead_code)] // a description, never constructed
#[derive(utoipa::IntoResponses)]
enum NoFailover {
    /// There is no standby to fail over to; the message says so.
    #[response(status = 501)]
    NotImplemented(pandastack_api::ErrorBody),
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

/// Create a PostgreSQL database the workspace's sandboxes (and the host) can reach. The reply
/// comes at once with `provisioning`; poll `GET /v1/databases/{id}` until `running` (or
/// `failed`, with `error`).
#[utoipa::path(
    post,
    path = "/databases",
    tag = "databases",
    operation_id = "create_database",
    request_body(content = Option<CreateDatabase>, description = "May be empty: a `1g` database of 5120 MiB."),
    responses((status = 202, description = "Accepted; the database is provisioning.", body = DatabaseAccepted), BodyTooLarge, HostStorage, Errors)
)]
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

/// The workspace's databases, without credentials (`password` and `connection_url` absent);
/// in a cluster, every host's.
#[utoipa::path(
    get,
    path = "/databases",
    tag = "databases",
    operation_id = "list_databases",
    responses((status = 200, description = "The databases.", body = DatabaseList), Errors)
)]
async fn list(State(st): State<AppState>, caller: Caller) -> Result<Json<DatabaseList>, ApiError> {
    let mut items: Vec<_> = st
        .databases
        .all()
        .iter()
        .filter(|d| d.workspace_id == caller.workspace_id)
        .map(|d| st.databases.wire(d, false))
        .collect();
    if st.cluster.cfg.shared {
        // Databases of the workspace on the other hosts, from the shared store (issue 12:
        // any host answers any request).
        let here: std::collections::HashSet<String> = items.iter().map(|d| d.id.clone()).collect();
        for row in st.host.store.databases_of(&caller.workspace_id).await? {
            if !here.contains(&row.id) {
                let id = row.id.clone();
                let remote = LiveDb::new(row, st.databases.dirs(&id));
                items.push(st.databases.wire(&remote, false));
            }
        }
        items.sort_by_key(|d| d.created_at);
    }
    Ok(Json(DatabaseList { items }))
}

/// A database with its credentials.
#[utoipa::path(
    get,
    path = "/databases/{id}",
    tag = "databases",
    operation_id = "get_database",
    params(("id" = uuid::Uuid, Path, description = "The database id.")),
    responses((status = 200, description = "The database.", body = Database), Errors)
)]
async fn get_one(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Database>, ApiError> {
    let db = find(&st, &caller, &id)?;
    Ok(Json(st.databases.wire(&db, true)))
}

/// Delete a database and all its data (its cluster, storage and port). Irreversible.
#[utoipa::path(
    delete,
    path = "/databases/{id}",
    tag = "databases",
    operation_id = "delete_database",
    params(("id" = uuid::Uuid, Path, description = "The database id.")),
    responses((status = 204, description = "Deleted."), Errors)
)]
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

/// Change `always_on` or grow the storage (never shrinks; the cluster stops for about a
/// second while its filesystem grows).
#[utoipa::path(
    patch,
    path = "/databases/{id}",
    tag = "databases",
    operation_id = "update_database",
    params(("id" = uuid::Uuid, Path, description = "The database id.")),
    request_body(content = Option<UpdateDatabase>, description = "May be empty: nothing changes."),
    responses((status = 200, description = "The database after the change.", body = Database), BodyTooLarge, HostStorage, Errors)
)]
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

/// The connection URL of a database (a stopped one starts on its first connection).
#[utoipa::path(
    get,
    path = "/databases/{id}/connection",
    tag = "databases",
    operation_id = "database_connection",
    params(("id" = uuid::Uuid, Path, description = "The database id.")),
    responses((status = 200, description = "Its URL.", body = DatabaseConnection), Errors)
)]
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

/// A new password for the owner role; sessions opened with the old one are ended.
#[utoipa::path(
    post,
    path = "/databases/{id}/reset-credentials",
    tag = "databases",
    operation_id = "reset_database_credentials",
    params(("id" = uuid::Uuid, Path, description = "The database id.")),
    responses((status = 200, description = "The database with its new password.", body = Database), Errors)
)]
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

/// Start a stopped (idle) database now and wait until it takes connections.
#[utoipa::path(
    post,
    path = "/databases/{id}/wake",
    tag = "databases",
    operation_id = "wake_database",
    params(("id" = uuid::Uuid, Path, description = "The database id.")),
    responses((status = 200, description = "It runs.", body = DatabaseWake), Errors)
)]
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

/// A new database holding a consistent copy of this one now (it keeps running).
#[utoipa::path(
    post,
    path = "/databases/{id}/clone",
    tag = "databases",
    operation_id = "clone_database",
    params(("id" = uuid::Uuid, Path, description = "The database id.")),
    request_body(content = Option<CloneDatabase>, description = "May be empty: the source's size and storage."),
    responses((status = 202, description = "Accepted; the clone is provisioning.", body = DatabaseAccepted), BodyTooLarge, HostStorage, Errors)
)]
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

/// Fail over to a standby (contract §2.12): this server runs no standbys, so always 501 for an
/// existing database.
#[utoipa::path(
    post,
    path = "/databases/{id}/failover",
    tag = "databases",
    operation_id = "failover_database",
    params(("id" = uuid::Uuid, Path, description = "The database id.")),
    responses((status = 200, description = "The database after failover (never on this server).", body = Database), NoFailover, Errors)
)]
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

/// A database's state changes so far, oldest first.
#[utoipa::path(
    get,
    path = "/databases/{id}/events",
    tag = "databases",
    operation_id = "database_events",
    params(("id" = uuid::Uuid, Path, description = "The database id.")),
    responses((status = 200, description = "The events.", body = Vec<DatabaseEvent>), Errors)
)]
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
