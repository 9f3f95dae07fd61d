//! Request extractors that turn bad input into 400s naming the problem.

use crate::error::ApiError;
use axum::async_trait;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

/// A JSON body. An empty body (the SDKs send POSTs without parameters empty, with any or no
/// content type; contract §1.2) decodes as `T::default()`. Errors name the field:
/// `invalid request body: ttl_seconds: invalid type: string "x", expected i64`.
pub struct JsonBody<T>(pub T);

#[async_trait]
impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::BadRequest(format!("unreadable request body: {e}")))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(T::default()));
        }
        decode(&bytes).map(JsonBody)
    }
}

/// A JSON body that must be present (exec, run).
pub struct RequiredJson<T>(pub T);

#[async_trait]
impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for RequiredJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::BadRequest(format!("unreadable request body: {e}")))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::BadRequest(
                "request body is required (JSON)".into(),
            ));
        }
        decode(&bytes).map(RequiredJson)
    }
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // serde would accept a JSON array for a struct (`["base"]` as a create body): every body
    // of this API is an object.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::BadRequest(
            "malformed JSON body: expected a JSON object".into(),
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::BadRequest(format!("malformed JSON body: {inner}"))
        } else if path == "." {
            ApiError::BadRequest(format!("invalid request body: {inner}"))
        } else {
            ApiError::BadRequest(format!("invalid request body: {path}: {inner}"))
        }
    })
}

/// Checks that a path parameter is a sandbox id (a UUID).
///
/// # Errors
/// 400 naming the bad id.
pub fn sandbox_id(raw: &str) -> Result<String, ApiError> {
    uuid::Uuid::parse_str(raw)
        .map(|u| u.hyphenated().to_string())
        .map_err(|_| ApiError::BadRequest(format!("sandbox id '{}' is not a UUID", truncate(raw))))
}

/// Checks an in-sandbox path from `?path=`: absolute, no `..` component, no NUL, at most
/// 4096 bytes. (The sandbox's own root is the only filesystem a path can reach; symlinks
/// resolve inside gVisor, never on the host.)
///
/// # Errors
/// 400 naming the problem.
pub fn sandbox_path(raw: Option<&str>) -> Result<String, ApiError> {
    let p = raw.ok_or_else(|| ApiError::BadRequest("query parameter 'path' is required".into()))?;
    if p.is_empty() || !p.starts_with('/') {
        return Err(ApiError::BadRequest(format!(
            "path '{}' must be absolute",
            truncate(p)
        )));
    }
    if p.len() > 4096 || p.contains('\0') {
        return Err(ApiError::BadRequest(
            "path is too long or contains NUL".into(),
        ));
    }
    if p.split('/').any(|c| c == "..") {
        return Err(ApiError::BadRequest(format!(
            "path '{}' must not contain '..'",
            truncate(p)
        )));
    }
    Ok(p.to_string())
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked() {
        assert!(sandbox_path(Some("/workspace/a.csv")).is_ok());
        assert!(sandbox_path(Some("/workspace/../../etc")).is_err());
        assert!(sandbox_path(Some("relative")).is_err());
        assert!(sandbox_path(None).is_err());
        assert!(sandbox_path(Some("/a\0b")).is_err());
    }

    #[test]
    fn ids_must_be_uuids() {
        assert!(sandbox_id("0b0e6f0a-0000-4000-8000-000000000000").is_ok());
        assert!(sandbox_id("../etc").is_err());
    }

    #[test]
    fn body_errors_name_the_field() {
        let e = decode::<pandastack_api::CreateSandbox>(br#"{"ttl_seconds":"x"}"#).unwrap_err();
        assert!(e.to_string().contains("ttl_seconds"), "{e}");
        let e = decode::<pandastack_api::CreateSandbox>(br#"["base"]"#).unwrap_err();
        assert!(e.to_string().contains("JSON object"), "{e}");
        let e = decode::<pandastack_api::CreateSandbox>(b"{not json").unwrap_err();
        assert!(e.to_string().contains("malformed JSON"), "{e}");
    }
}
