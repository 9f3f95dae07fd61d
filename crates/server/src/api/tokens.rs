//! API keys of the caller's workspace (contract §2.9): `GET/POST /v1/me/tokens`,
//! `DELETE /v1/me/tokens/{prefix}`, and `GET /v1/me`.

use super::rfc3339;
use crate::auth::{create_key, Caller};
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json, Router};
use pandastack_api::{CreateToken, Token};
use pandastack_store::{now_ms, ApiKeyRow};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/me", get(me))
        .route("/me/tokens", get(list).post(create))
        .route("/me/tokens/:prefix", delete(revoke))
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

async fn me(caller: Caller) -> Json<pandastack_api::Me> {
    Json(pandastack_api::Me {
        workspace_id: caller.workspace_id,
        key_prefix: caller.key_prefix,
    })
}

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

async fn create(
    State(st): State<AppState>,
    caller: Caller,
    JsonBody(req): JsonBody<CreateToken>,
) -> Result<(StatusCode, Json<Token>), ApiError> {
    let label = req.label.unwrap_or_else(|| "token".into());
    if label.len() > 200 {
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

async fn revoke(
    State(st): State<AppState>,
    caller: Caller,
    Path(prefix): Path<String>,
) -> Result<StatusCode, ApiError> {
    st.host
        .store
        .revoke_api_key(&caller.workspace_id, &prefix, now_ms())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
