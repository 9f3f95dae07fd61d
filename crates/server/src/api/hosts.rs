//! The hosts of the cluster (issue 12 point 2): `GET /v1/hosts` lists every host with its
//! state (`active`, `draining`, or `down` when its heartbeat is older than 20 s), its last
//! heartbeat and the load it reported. Operators only: a key of the first workspace (the one
//! the first server created, whose key is in its `admin.env`); 403 for any other.

use crate::auth::Caller;
use crate::cluster::HostView;
use crate::error::ApiError;
use crate::AppState;
use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list))
}

/// 403 for a caller that is not an operator.
#[allow(dead_code)] // a description, never constructed
#[derive(utoipa::IntoResponses)]
enum OperatorOnly {
    /// The key is not one of the first workspace's.
    #[response(status = 403)]
    Forbidden(pandastack_api::ErrorBody),
}

/// Refuses a caller that is not the operator's (403).
///
/// # Errors
/// 403 for a key of any workspace but the first; store errors.
pub async fn require_operator(st: &AppState, caller: &Caller) -> Result<(), ApiError> {
    match st.host.store.first_workspace_id().await? {
        Some(ws) if ws == caller.workspace_id => Ok(()),
        _ => Err(ApiError::Forbidden(
            "this needs an operator key (a key of the first workspace)".into(),
        )),
    }
}

/// The hosts of the cluster with their state and load (operator key only).
#[utoipa::path(
    get,
    path = "/hosts",
    tag = "hosts",
    operation_id = "list_hosts",
    responses((status = 200, description = "Every host, this one included.", body = Vec<HostView>), OperatorOnly, super::openapi::Errors)
)]
async fn list(State(st): State<AppState>, caller: Caller) -> Result<Json<Vec<HostView>>, ApiError> {
    require_operator(&st, &caller).await?;
    let hosts = st.cluster.hosts().await?;
    Ok(Json(hosts.iter().map(HostView::of).collect()))
}
