//! Request extractors that turn bad input into 400s naming the problem.

use crate::error::ApiError;
use axum::async_trait;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// A JSON body. An empty body (the SDKs send POSTs without parameters empty, with any or no
/// content type; contract §1.2), or `null`, decodes as `T::default()`. Errors name the field:
/// `invalid request body: ttl_seconds: invalid type: string "x", expected i64`.
pub struct JsonBody<T>(pub T);

#[async_trait]
impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = body_bytes(req, state).await?;
        if is_empty_or_null(&bytes) {
            return Ok(JsonBody(T::default()));
        }
        decode(&bytes).map(JsonBody)
    }
}

/// Query parameters; a value of the wrong type is a 400 `{"error"}` naming it (axum's own
/// rejection is plain text, which no client of this API expects).
pub struct Query<T>(pub T);

#[async_trait]
impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(q)| Query(q))
            .map_err(|e| ApiError::BadRequest(format!("invalid query string: {}", e.body_text())))
    }
}

/// A JSON body that must be present (exec, run).
pub struct RequiredJson<T>(pub T);

#[async_trait]
impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for RequiredJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = body_bytes(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::BadRequest(
                "request body is required (JSON)".into(),
            ));
        }
        decode(&bytes).map(RequiredJson)
    }
}

/// Largest JSON request body, bytes (8 MiB: room for a large code cell). File uploads stream
/// and are not limited by this.
pub const MAX_JSON_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Reads a whole JSON body of at most [`MAX_JSON_BODY_BYTES`].
///
/// # Errors
/// 413 past the limit; 400 when the body cannot be read.
async fn body_bytes<S: Send + Sync>(req: Request, _state: &S) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(req.into_body(), MAX_JSON_BODY_BYTES)
        .await
        .map_err(|e| {
            let inner = e.into_inner();
            if inner.is::<http_body_util::LengthLimitError>() {
                ApiError::PayloadTooLarge(format!(
                    "request body is larger than {} MiB",
                    MAX_JSON_BODY_BYTES / (1024 * 1024)
                ))
            } else {
                ApiError::BadRequest(format!("unreadable request body: {inner}"))
            }
        })
}

/// True for a body with no parameters: empty, whitespace, or the JSON `null`.
fn is_empty_or_null(bytes: &[u8]) -> bool {
    let text = bytes.trim_ascii();
    text.is_empty() || text == b"null"
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

/// Checks environment variables for `field` (`envs` of a create, `env` of an exec): names must
/// be non-empty and free of `=` and NUL, values free of NUL (execve cannot carry them).
///
/// # Errors
/// 400 naming the field and the variable.
pub fn env_vars(
    field: &str,
    vars: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<(), ApiError> {
    for (k, v) in vars.into_iter().flatten() {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(ApiError::BadRequest(format!(
                "{field}: invalid variable name '{}' (it must be non-empty, without '=' or NUL)",
                truncate(&k.replace('\0', "\\0"))
            )));
        }
        if v.contains('\0') {
            return Err(ApiError::BadRequest(format!(
                "{field}: the value of '{}' contains a NUL byte",
                truncate(k)
            )));
        }
    }
    Ok(())
}

/// Most metadata keys a sandbox may carry.
pub const MAX_METADATA_KEYS: usize = 64;
/// Longest metadata key, bytes.
pub const MAX_METADATA_KEY_BYTES: usize = 256;
/// Longest metadata value, bytes.
pub const MAX_METADATA_VALUE_BYTES: usize = 4096;
/// Largest metadata map (keys plus values), bytes.
pub const MAX_METADATA_BYTES: usize = 32 * 1024;

/// Checks a metadata map (create, fork, fork-tree): at most [`MAX_METADATA_KEYS`] keys, keys
/// non-empty and up to [`MAX_METADATA_KEY_BYTES`], values up to [`MAX_METADATA_VALUE_BYTES`],
/// [`MAX_METADATA_BYTES`] in all. Metadata is echoed in every sandbox reply and listed for
/// every sandbox, so it stays small.
///
/// # Errors
/// 400 naming `metadata` and the limit.
pub fn metadata(map: Option<&std::collections::BTreeMap<String, String>>) -> Result<(), ApiError> {
    let Some(map) = map else { return Ok(()) };
    if map.len() > MAX_METADATA_KEYS {
        return Err(ApiError::BadRequest(format!(
            "metadata: at most {MAX_METADATA_KEYS} keys, got {}",
            map.len()
        )));
    }
    let mut total = 0;
    for (k, v) in map {
        if k.is_empty() || k.len() > MAX_METADATA_KEY_BYTES {
            return Err(ApiError::BadRequest(format!(
                "metadata: keys must be 1 to {MAX_METADATA_KEY_BYTES} bytes, got {} bytes",
                k.len()
            )));
        }
        if v.len() > MAX_METADATA_VALUE_BYTES {
            return Err(ApiError::BadRequest(format!(
                "metadata: the value of '{}' is {} bytes; at most {MAX_METADATA_VALUE_BYTES}",
                truncate(k),
                v.len()
            )));
        }
        total += k.len() + v.len();
    }
    if total > MAX_METADATA_BYTES {
        return Err(ApiError::BadRequest(format!(
            "metadata: {total} bytes in all; at most {MAX_METADATA_BYTES}"
        )));
    }
    Ok(())
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

/// Checks that a path parameter is a database id (a UUID).
///
/// # Errors
/// 400 naming the bad id.
pub fn database_id(raw: &str) -> Result<String, ApiError> {
    uuid::Uuid::parse_str(raw)
        .map(|u| u.hyphenated().to_string())
        .map_err(|_| ApiError::BadRequest(format!("database id '{}' is not a UUID", truncate(raw))))
}

/// Longest in-sandbox path, characters (so at most 4096 bytes, Linux's `PATH_MAX`).
pub const MAX_PATH_CHARS: usize = 1024;
/// Longest path component, bytes (Linux's `NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;

/// Checks an in-sandbox path from `?path=` and returns it normalised (`//` and `.` components
/// dropped, no trailing `/`): absolute, no `..` component, no NUL, at most [`MAX_PATH_CHARS`]
/// characters, components of at most [`MAX_NAME_BYTES`] bytes. The OpenAPI description states
/// the same rule as a pattern (`api/fs.rs`). (The sandbox's own root is the only filesystem a
/// path can reach; symlinks resolve inside gVisor, never on the host.)
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
    if p.chars().count() > MAX_PATH_CHARS || p.contains('\0') {
        return Err(ApiError::BadRequest(format!(
            "path is longer than {MAX_PATH_CHARS} characters or contains NUL"
        )));
    }
    let mut parts = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                return Err(ApiError::BadRequest(format!(
                    "path '{}' must not contain '..'",
                    truncate(p)
                )))
            }
            name if name.len() > MAX_NAME_BYTES => {
                return Err(ApiError::BadRequest(format!(
                    "path component '{}...' is longer than {MAX_NAME_BYTES} bytes",
                    truncate(name)
                )))
            }
            name => parts.push(name),
        }
    }
    Ok(format!("/{}", parts.join("/")))
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
        assert_eq!(sandbox_path(Some("//a/./b/")).ok().as_deref(), Some("/a/b"));
        assert_eq!(sandbox_path(Some("/./")).ok().as_deref(), Some("/"));
        assert_eq!(sandbox_path(Some("/...")).ok().as_deref(), Some("/..."));
        assert!(sandbox_path(Some(&format!("/{}", "a".repeat(256)))).is_err());
        assert!(sandbox_path(Some(&format!("/{}", "é".repeat(128)))).is_err());
        assert!(sandbox_path(Some(&format!("/{}", "a".repeat(255)))).is_ok());
        assert!(sandbox_path(Some(&"/a".repeat(513))).is_err());
    }

    #[test]
    fn ids_must_be_uuids() {
        assert!(sandbox_id("0b0e6f0a-0000-4000-8000-000000000000").is_ok());
        assert!(sandbox_id("../etc").is_err());
    }

    #[test]
    fn metadata_is_bounded() {
        use std::collections::BTreeMap;
        let ok = BTreeMap::from([("job".to_string(), "demo".to_string())]);
        assert!(metadata(Some(&ok)).is_ok());
        assert!(metadata(None).is_ok());
        let many: BTreeMap<_, _> = (0..=MAX_METADATA_KEYS)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        assert!(metadata(Some(&many))
            .unwrap_err()
            .to_string()
            .contains("keys"));
        let long = BTreeMap::from([("k".to_string(), "v".repeat(MAX_METADATA_VALUE_BYTES + 1))]);
        assert!(metadata(Some(&long)).is_err());
        let total: BTreeMap<_, _> = (0..10)
            .map(|i| (format!("k{i}"), "v".repeat(MAX_METADATA_VALUE_BYTES)))
            .collect();
        assert!(metadata(Some(&total))
            .unwrap_err()
            .to_string()
            .contains("in all"));
    }

    #[tokio::test]
    async fn oversized_json_bodies_are_413() {
        let big = vec![b' '; MAX_JSON_BODY_BYTES + 1];
        let req = Request::builder()
            .body(axum::body::Body::from(big))
            .unwrap();
        let e = body_bytes(req, &()).await.unwrap_err();
        assert!(matches!(e, ApiError::PayloadTooLarge(_)), "{e:?}");
        let ok = vec![b' '; 1024];
        let req = Request::builder().body(axum::body::Body::from(ok)).unwrap();
        assert_eq!(body_bytes(req, &()).await.unwrap().len(), 1024);
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
