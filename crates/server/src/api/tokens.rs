//! API keys of the caller's workspace (contract §2.9): `GET/POST /v1/me/tokens`,
//! `DELETE /v1/me/tokens/{prefix}`, and `GET /v1/me`.

use super::openapi::{BodyTooLarge, Errors};
use super::rfc3339;
use crate::auth::{create_key, Caller};
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use pandastack_api::{CreateToken, Token};
use pandastack_store::{now_ms, ApiKeyRow};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(me))
        .routes(routes!(list, create))
        .routes(routes!(revoke))
}

fn wire(k: &ApiKeyRow, secret: Option<String>) -> Token {
    Token {
        prefix: k.prefix.clone(),
        name: k.label.clone(),
        label: k.label.clone(),
        token: secret,
        created_at: rfc3339(k.created_at),
        expires_at: k.expires_at.map(rfc3339),
    }
}

/// The workspace and key prefix of the caller.
#[utoipa::path(
    get,
    path = "/me",
    tag = "tokens",
    operation_id = "me",
    responses((status = 200, description = "The caller.", body = pandastack_api::Me), Errors)
)]
async fn me(caller: Caller) -> Json<pandastack_api::Me> {
    Json(pandastack_api::Me {
        workspace_id: caller.workspace_id,
        key_prefix: caller.key_prefix,
    })
}

/// The workspace's API keys (never their secrets).
#[utoipa::path(
    get,
    path = "/me/tokens",
    tag = "tokens",
    operation_id = "list_tokens",
    responses((status = 200, description = "The keys.", body = Vec<Token>), Errors)
)]
async fn list(State(st): State<AppState>, caller: Caller) -> Result<Json<Vec<Token>>, ApiError> {
    Ok(Json(
        st.host
            .store
            .list_api_keys(&caller.workspace_id)
            .await?
            .iter()
            .map(|k| wire(k, None))
            .collect(),
    ))
}

/// A new API key; its secret (`token`) is in this reply only (contract §2.9).
#[utoipa::path(
    post,
    path = "/me/tokens",
    tag = "tokens",
    operation_id = "create_token",
    request_body(content = Option<CreateToken>),
    responses((status = 201, description = "The key, with its secret.", body = Token), BodyTooLarge, Errors)
)]
async fn create(
    State(st): State<AppState>,
    caller: Caller,
    JsonBody(req): JsonBody<CreateToken>,
) -> Result<(StatusCode, Json<Token>), ApiError> {
    let label = req.label.unwrap_or_else(|| "token".into());
    if label.chars().count() > 200 {
        return Err(ApiError::BadRequest(
            "label must be at most 200 characters".into(),
        ));
    }
    let expires_at = match req.expires_in_days {
        None => None,
        Some(d) if (1..=3650).contains(&d) => Some(now_ms() + d * 86_400_000),
        Some(d) => {
            return Err(ApiError::BadRequest(format!(
                "expires_in_days must be between 1 and 3650, got {d}"
            )))
        }
    };
    let (secret, row) =
        create_key(&st.host.store, &caller.workspace_id, &label, expires_at).await?;
    Ok((StatusCode::CREATED, Json(wire(&row, Some(secret)))))
}

/// Revoke a key; it stops working at once. A key cannot revoke itself (409).
#[utoipa::path(
    delete,
    path = "/me/tokens/{prefix}",
    tag = "tokens",
    operation_id = "revoke_token",
    params(("prefix" = String, Path, description = "The key's public prefix (`pds_` + 8 characters).")),
    responses((status = 204, description = "Revoked."), Errors)
)]
async fn revoke(
    State(st): State<AppState>,
    caller: Caller,
    Path(prefix): Path<String>,
) -> Result<StatusCode, ApiError> {
    // The key a request carries cannot revoke itself: a caller revoking its last key would lock
    // the workspace out for good. Another key of the workspace can.
    if prefix == caller.key_prefix {
        return Err(ApiError::Conflict(format!(
            "key {prefix} is the one this request uses; revoke it with another key of the workspace"
        )));
    }
    st.host
        .store
        .revoke_api_key(&caller.workspace_id, &prefix, now_ms())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
