//! `GET /v1/templates`, `GET /v1/templates/{name}` (contract §2.8): the templates baked on this
//! host. Lists are bare arrays (TS needs one).

use crate::auth::Caller;
use crate::error::ApiError;
use crate::AppState;
use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use pandastack_api::Template;
use pandastack_templates::TemplateInfo;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/templates", get(list))
        .route("/templates/:name", get(get_one))
}

fn wire(t: TemplateInfo) -> Template {
    Template {
        name: t.name,
        generation: t.generation as i64,
        size_bytes: t.size_bytes,
        cpu: t.cpu,
        memory_mb: t.memory_mb,
        is_global: true,
        description: t.description,
        hash: t.hash,
        built_at: t.built_at as i64,
    }
}

async fn list(
    State(st): State<AppState>,
    _caller: Caller,
) -> Result<Json<Vec<Template>>, ApiError> {
    let all = st
        .host
        .templates
        .list()
        .map_err(|e| ApiError::internal("template list", e))?;
    Ok(Json(all.into_iter().map(wire).collect()))
}

async fn get_one(
    State(st): State<AppState>,
    _caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<Template>, ApiError> {
    let not_found = || {
        let shown: String = name.chars().take(64).collect();
        ApiError::NotFound(format!("template {shown} not found"))
    };
    // A name that could never be a template (`../../etc`) is simply not found.
    if pandastack_templates::validate_name(&name).is_err() {
        return Err(not_found());
    }
    let t = st
        .host
        .templates
        .get(&name)
        .map_err(|e| ApiError::internal("template lookup", e))?;
    t.map(|t| Json(wire(t))).ok_or_else(not_found)
}
