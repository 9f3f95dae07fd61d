//! `GET /v1/templates`, `GET /v1/templates/{name}`, `DELETE /v1/templates/{name}` (contract
//! §2.8): the built-in templates baked on this host plus the caller's own (issue 13
//! "Ownership": another workspace's template is 404, a built-in cannot be deleted). Lists are
//! bare arrays (TS needs one).

use super::openapi::Errors;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::host::catalog::is_builtin;
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use pandastack_api::ErrorBody;
use pandastack_api::Template;
use pandastack_templates::{TemplateInfo, TemplateKind};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(get_one, delete))
}

/// The wire form of a template build.
pub fn wire(t: TemplateInfo) -> Template {
    let python = t.has_python();
    Template {
        name: t.name,
        generation: t.generation as i64,
        size_bytes: t.size_bytes,
        cpu: t.cpu,
        memory_mb: t.memory_mb,
        is_global: t.workspace.is_none(),
        description: t.description,
        hash: t.hash,
        built_at: t.built_at as i64,
        workspace: t.workspace,
        kind: match t.kind {
            TemplateKind::Builtin => "builtin",
            TemplateKind::Dockerfile => "dockerfile",
            TemplateKind::RootfsTar => "rootfs_tar",
        }
        .into(),
        base: t.base,
        size_mb: t.disk_mb,
        python,
    }
}

/// The built-in templates baked on this host, then the caller's own (a bare array, contract
/// §2.8; issue 13 "Ownership").
#[utoipa::path(
    get,
    path = "/templates",
    tag = "templates",
    operation_id = "list_templates",
    responses((status = 200, description = "The templates.", body = Vec<Template>), Errors)
)]
async fn list(State(st): State<AppState>, caller: Caller) -> Result<Json<Vec<Template>>, ApiError> {
    let all = st.host.visible_templates(&caller.workspace_id)?;
    Ok(Json(all.into_iter().map(wire).collect()))
}

/// One template.
#[utoipa::path(
    get,
    path = "/templates/{name}",
    tag = "templates",
    operation_id = "get_template",
    params(("name" = String, Path, description = "The template name, e.g. `code-interpreter`.")),
    responses((status = 200, description = "The template.", body = Template), Errors)
)]
async fn get_one(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<Template>, ApiError> {
    st.host
        .find_template(&caller.workspace_id, &name)?
        .map(|t| Json(wire(t)))
        .ok_or_else(|| ApiError::NotFound(format!("template {} not found", shown(&name))))
}

/// Delete one of the workspace's templates (its builds go in the background; running
/// sandboxes keep theirs). Issue 13 "Ownership": a built-in cannot be deleted (403), another
/// workspace's template is 404, one with a build queued or running is 409.
#[utoipa::path(
    delete,
    path = "/templates/{name}",
    tag = "templates",
    operation_id = "delete_template",
    params(("name" = String, Path, description = "The template name.")),
    responses((status = 204, description = "Deleted."), (status = 403, description = "A built-in template.", body = ErrorBody), Errors)
)]
async fn delete(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if is_builtin(&name) {
        return Err(ApiError::Forbidden(format!(
            "template {name} is built in and cannot be deleted"
        )));
    }
    if pandastack_templates::validate_name(&name).is_err() {
        return Err(ApiError::NotFound(format!(
            "template {} not found",
            shown(&name)
        )));
    }
    let building = st
        .host
        .store
        .unfinished_template_builds(None)
        .await?
        .into_iter()
        .any(|b| b.workspace_id == caller.workspace_id && b.name == name);
    if building {
        return Err(ApiError::Conflict(format!(
            "template {name} has a build queued or running; wait for it to end"
        )));
    }
    st.host.delete_template(&caller.workspace_id, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A name as it may be echoed in a message (cut, no control characters).
fn shown(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(64).collect()
}
