//! Reading the body of `POST /v1/templates/build` exactly as the SDKs send it (contract §2.8):
//! `application/x-www-form-urlencoded` (Python `build_from_dockerfile` without a context) or
//! `multipart/form-data` (everything else). A part without a filename is a text field; a part
//! with one is a file: a context file named by its relative path, or the `rootfs` tar. Files
//! are streamed to numbered files in the build's `input/` directory (never named after the
//! user's paths) while their sha256 is computed; nothing is held in memory.

use crate::error::ApiError;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::header::CONTENT_TYPE;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tokio::io::AsyncWriteExt;

/// Longest text field other than `dockerfile`, bytes.
const MAX_FIELD_BYTES: usize = 1024;
/// Longest Dockerfile, bytes.
pub const MAX_DOCKERFILE_BYTES: usize = 1024 * 1024;
/// Most files one build may upload.
const MAX_FILES: usize = 10_000;

/// An uploaded file part.
#[derive(Debug, Clone)]
pub struct Uploaded {
    /// The part's field name (a context path, or `rootfs`).
    pub field: String,
    /// Where its bytes are.
    pub file: PathBuf,
    pub size: u64,
    /// Hex sha256 of the bytes.
    pub sha256: String,
}

/// The parsed body.
#[derive(Debug, Default)]
pub struct BuildForm {
    /// Text fields by name.
    pub fields: BTreeMap<String, String>,
    /// File parts in the order they came.
    pub files: Vec<Uploaded>,
}

/// Upload limits, bytes.
#[derive(Debug, Clone, Copy)]
pub struct FormLimits {
    /// All files of a Dockerfile context together.
    pub context: u64,
    /// The rootfs tar.
    pub rootfs: u64,
}

/// Reads `req` into `input_dir`.
///
/// # Errors
/// 400 for another content type, a malformed body, a text field given twice or too long;
/// 413 when files pass the limits.
pub async fn read(
    req: Request,
    input_dir: &Path,
    limits: FormLimits,
) -> Result<BuildForm, ApiError> {
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if content_type.starts_with("multipart/form-data") {
        let multipart = Multipart::from_request(req, &())
            .await
            .map_err(|e| ApiError::BadRequest(format!("malformed multipart body: {e}")))?;
        read_multipart(multipart, input_dir, limits).await
    } else if content_type.starts_with("application/x-www-form-urlencoded") {
        let bytes = axum::body::to_bytes(req.into_body(), MAX_DOCKERFILE_BYTES + 64 * 1024)
            .await
            .map_err(|_| {
                ApiError::PayloadTooLarge(format!(
                    "request body: a urlencoded build request may be at most {} KiB; send context files as multipart",
                    MAX_DOCKERFILE_BYTES / 1024 + 64
                ))
            })?;
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(&bytes)
            .map_err(|e| ApiError::BadRequest(format!("malformed urlencoded body: {e}")))?;
        let mut form = BuildForm::default();
        for (k, v) in pairs {
            add_field(&mut form, k, v)?;
        }
        Ok(form)
    } else {
        Err(ApiError::BadRequest(
            "content type must be multipart/form-data or application/x-www-form-urlencoded (contract §2.8)".into(),
        ))
    }
}

async fn read_multipart(
    mut multipart: Multipart,
    input_dir: &Path,
    limits: FormLimits,
) -> Result<BuildForm, ApiError> {
    let mut form = BuildForm::default();
    let mut context_bytes = 0u64;
    let bad = |e: axum::extract::multipart::MultipartError| {
        ApiError::BadRequest(format!("malformed multipart body: {e}"))
    };
    while let Some(mut field) = multipart.next_field().await.map_err(bad)? {
        let name = field.name().unwrap_or("").to_string();
        if name.is_empty() {
            return Err(ApiError::BadRequest("a multipart part has no name".into()));
        }
        if field.file_name().is_none() {
            let limit = text_limit(&name);
            let mut text = Vec::new();
            while let Some(chunk) = field.chunk().await.map_err(bad)? {
                text.extend_from_slice(&chunk);
                if text.len() > limit {
                    return Err(too_long(&name, limit));
                }
            }
            let text = String::from_utf8(text)
                .map_err(|_| ApiError::BadRequest(format!("{}: not UTF-8 text", shown(&name))))?;
            add_field(&mut form, name, text)?;
            continue;
        }
        if form.files.len() >= MAX_FILES {
            return Err(ApiError::PayloadTooLarge(format!(
                "context: at most {MAX_FILES} files per build"
            )));
        }
        // Both SDKs send the text fields first, so a Dockerfile build's context limit applies
        // while it streams; the rootfs tar has its own.
        let is_context = form.fields.contains_key("dockerfile") || name != "rootfs";
        let path = input_dir.join(form.files.len().to_string());
        let mut out = tokio::fs::File::create(&path)
            .await
            .map_err(|e| ApiError::internal("storing an upload", e))?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        while let Some(chunk) = field.chunk().await.map_err(bad)? {
            size += chunk.len() as u64;
            if is_context {
                context_bytes += chunk.len() as u64;
                if context_bytes > limits.context {
                    return Err(ApiError::PayloadTooLarge(format!(
                        "context: files total more than {} MiB",
                        limits.context / (1024 * 1024)
                    )));
                }
            } else if size > limits.rootfs {
                return Err(ApiError::PayloadTooLarge(format!(
                    "rootfs: the tar is larger than {} MiB",
                    limits.rootfs / (1024 * 1024)
                )));
            }
            hasher.update(&chunk);
            out.write_all(&chunk)
                .await
                .map_err(|e| ApiError::internal("storing an upload", e))?;
        }
        out.flush()
            .await
            .map_err(|e| ApiError::internal("storing an upload", e))?;
        form.files.push(Uploaded {
            field: name,
            file: path,
            size,
            sha256: hex::encode(hasher.finalize()),
        });
    }
    Ok(form)
}

fn text_limit(name: &str) -> usize {
    if name == "dockerfile" {
        MAX_DOCKERFILE_BYTES
    } else {
        MAX_FIELD_BYTES
    }
}

fn add_field(form: &mut BuildForm, name: String, value: String) -> Result<(), ApiError> {
    let limit = text_limit(&name);
    if value.len() > limit {
        return Err(too_long(&name, limit));
    }
    if form.fields.insert(name.clone(), value).is_some() {
        return Err(ApiError::BadRequest(format!(
            "{}: given more than once",
            shown(&name)
        )));
    }
    Ok(())
}

fn too_long(name: &str, limit: usize) -> ApiError {
    if name == "dockerfile" {
        ApiError::PayloadTooLarge(format!("dockerfile: longer than {} KiB", limit / 1024))
    } else {
        ApiError::BadRequest(format!("{}: longer than {limit} bytes", shown(name)))
    }
}

/// A field name as it may appear in a message.
pub fn shown(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(80).collect()
}
