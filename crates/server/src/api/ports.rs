//! `GET /v1/sandboxes/{id}/ports` (contract §2.2: the SDKs' `preview_urls()` read
//! `ports[].port`) and `POST /v1/sandboxes/{id}/preview-token` (issue 7).

use super::openapi::{BodyTooLarge, Errors};
use super::rfc3339;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{sandbox_id, RequiredJson};
use crate::previews::{self, MAX_TTL_SECONDS};
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::Json;
use pandastack_api::{Port, Ports, PreviewToken, PreviewTokenRequest};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Token lifetime when the request gives none, seconds.
pub const DEFAULT_TTL_SECONDS: u64 = 3600;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(ports))
        .routes(routes!(preview_token))
}

/// The TCP ports something listens on in the sandbox, with their proxy paths (contract §2.2
/// `preview_urls()`).
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/ports",
    tag = "network",
    operation_id = "sandbox_ports",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 200, description = "The listening ports.", body = Ports), Errors)
)]
async fn ports(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Ports>, ApiError> {
    let id = sandbox_id(&id)?;
    let live = st.host.get(&caller.workspace_id, &id)?;
    let listeners = st.host.listeners(&live).await?;
    Ok(Json(Ports {
        ports: listeners
            .into_iter()
            .map(|l| Port {
                port: l.port,
                listening: true,
                address: l.addr.to_string(),
                proxy_url: format!("/v1/sandboxes/{id}/proxy/{}/", l.port),
            })
            .collect(),
    }))
}

/// A signed URL a browser can open for one port of the sandbox, valid for `ttl_seconds`.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/preview-token",
    tag = "network",
    operation_id = "create_preview_token",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    request_body(content = PreviewTokenRequest),
    responses((status = 200, description = "The token and its URL.", body = PreviewToken), BodyTooLarge, Errors)
)]
async fn preview_token(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    RequiredJson(req): RequiredJson<PreviewTokenRequest>,
) -> Result<Json<PreviewToken>, ApiError> {
    let id = sandbox_id(&id)?;
    let live = st.host.get(&caller.workspace_id, &id)?;
    if req.port == 0 {
        return Err(ApiError::BadRequest(
            "port: must be between 1 and 65535".into(),
        ));
    }
    let ttl = req.ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS);
    if !(1..=MAX_TTL_SECONDS).contains(&ttl) {
        return Err(ApiError::BadRequest(format!(
            "ttl_seconds: must be between 1 and {MAX_TTL_SECONDS}, got {ttl}"
        )));
    }
    let expires = previews::now_secs() + ttl;
    let token = st.previews.sign(&live.id, req.port, expires);
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .filter(|p| *p == "https")
        .unwrap_or("http");
    let url = match &st.previews.host_suffix {
        Some(suffix) => format!(
            "{scheme}://{}-{id}.{suffix}{}/?{}={token}",
            req.port,
            port_of(&headers),
            previews::TOKEN_PARAM
        ),
        None => {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("localhost");
            format!(
                "{scheme}://{host}/v1/sandboxes/{id}/proxy/{}/?{}={token}",
                req.port,
                previews::TOKEN_PARAM
            )
        }
    };
    live.touch().await;
    Ok(Json(PreviewToken {
        url,
        token,
        expires_at: rfc3339(expires as i64 * 1000),
    }))
}

/// `:port` of the request's Host header, so a preview URL works against a server on a
/// non-default port.
fn port_of(headers: &HeaderMap) -> String {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.rsplit_once(':'))
        .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        .map(|(_, p)| format!(":{p}"))
        .unwrap_or_default()
}
