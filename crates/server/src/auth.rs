//! API keys and the [`Caller`] extractor.
//!
//! A key is `pds_` + 40 random alphanumerics. Its first 12 characters are its *prefix*, the
//! public handle stored in clear; only the SHA-256 of the whole key is stored. Requests carry
//! `Authorization: Bearer <key>` (contract §1.2).

use crate::error::ApiError;
use crate::AppState;
use axum::async_trait;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use pandastack_store::{now_ms, ApiKeyRow, Store, StoreError, WorkspaceRow};
use rand::distributions::Alphanumeric;
use rand::Rng;
use sha2::{Digest, Sha256};

/// Length of a key's public prefix, `pds_` included.
pub const PREFIX_LEN: usize = 12;

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub workspace_id: String,
    /// Prefix of the key used.
    pub key_prefix: String,
}

fn hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// Creates a key for `workspace_id` and returns `(secret, row)`. The secret is shown once.
///
/// # Errors
/// Store errors.
pub async fn create_key(
    store: &Store,
    workspace_id: &str,
    label: &str,
    expires_at: Option<i64>,
) -> Result<(String, ApiKeyRow), StoreError> {
    let secret: String = rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(40)
        .map(char::from)
        .collect();
    let key = format!("pds_{secret}");
    let row = ApiKeyRow {
        prefix: key[..PREFIX_LEN].to_string(),
        workspace_id: workspace_id.to_string(),
        label: label.to_string(),
        hash: hash(&key),
        created_at: now_ms(),
        expires_at,
        revoked_at: None,
    };
    store.insert_api_key(&row).await?;
    Ok((key, row))
}

/// Creates a workspace named `name` with an admin key; returns `(workspace_id, key)`.
///
/// # Errors
/// Store errors.
pub async fn create_workspace(store: &Store, name: &str) -> Result<(String, String), StoreError> {
    let id = format!("ws-{}", uuid::Uuid::new_v4().simple());
    store
        .insert_workspace(&WorkspaceRow {
            id: id.clone(),
            name: name.to_string(),
            created_at: now_ms(),
        })
        .await?;
    let (key, _) = create_key(store, &id, "admin", None).await?;
    Ok((id, key))
}

/// Resolves a bearer key to its workspace.
///
/// # Errors
/// 401 for a missing, unknown, revoked or expired key.
pub async fn authenticate(store: &Store, key: &str) -> Result<Caller, ApiError> {
    let bad = || ApiError::Unauthorized("invalid API key".into());
    if key.len() <= PREFIX_LEN || !key.starts_with("pds_") {
        return Err(bad());
    }
    let row = store.api_key(&key[..PREFIX_LEN]).await?.ok_or_else(bad)?;
    let expired = row.expires_at.is_some_and(|t| t <= now_ms());
    if row.revoked_at.is_some()
        || expired
        || !constant_time_eq(row.hash.as_bytes(), hash(key).as_bytes())
    {
        return Err(bad());
    }
    Ok(Caller {
        workspace_id: row.workspace_id,
        key_prefix: row.prefix,
    })
}

/// Whether `a == b`, in time independent of where they differ (secrets: key hashes, the
/// cluster's node token).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The caller named by a request's `Authorization: Bearer <key>` header.
///
/// # Errors
/// 401 when the header is missing, malformed, or names no valid key.
pub async fn from_headers(
    store: &Store,
    headers: &axum::http::HeaderMap,
) -> Result<Caller, ApiError> {
    let header = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| ApiError::Unauthorized("missing Authorization: Bearer <API key>".into()))?;
    let key = bearer_token(header)
        .ok_or_else(|| ApiError::Unauthorized("Authorization must be 'Bearer <API key>'".into()))?;
    authenticate(store, key).await
}

/// The token of an `Authorization` header value of the `Bearer` scheme, whatever the scheme's
/// letter case (RFC 9110 §11.1: schemes are case-insensitive; issue 23 finding 12: the proxy
/// must recognise and strip `BEARER pds_...` as well as `Bearer pds_...`); `None` for other
/// schemes or an empty token.
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once([' ', '\t'])?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[async_trait]
impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    /// Authenticates the request and takes it from the workspace's rate limit.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = from_headers(&state.host.store, &parts.headers).await?;
        state.rate_limit.check(&caller.workspace_id)?;
        Ok(caller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keys_authenticate_until_revoked() {
        let store = Store::open_in_memory().await.unwrap();
        let (ws, key) = create_workspace(&store, "default").await.unwrap();
        assert_eq!(authenticate(&store, &key).await.unwrap().workspace_id, ws);
        assert!(authenticate(&store, "pds_nope_nope_nope").await.is_err());
        let mut forged = key.clone();
        forged.push('x');
        assert!(authenticate(&store, &forged).await.is_err());
        store
            .revoke_api_key(&ws, &key[..PREFIX_LEN], now_ms())
            .await
            .unwrap();
        assert!(authenticate(&store, &key).await.is_err());
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer pds_x"), Some("pds_x"));
        assert_eq!(bearer_token("BEARER  pds_x "), Some("pds_x"));
        assert_eq!(bearer_token("bEaReR\tpds_x"), Some("pds_x"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearerpds_x"), None);
    }
}
