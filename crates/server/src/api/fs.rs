//! The filesystem API (contract §2.4): `GET/PUT/DELETE .../fs?path=` with raw bytes streamed
//! both ways, `GET .../fs/dir?path=`, `GET .../fs/stat?path=`. Writes are atomic in the guest
//! (temp file + rename). Bodies stream in chunks of at most 1 MiB, so a 1 GiB file never sits in
//! server memory.

use super::openapi::{Errors, FileErrors};
use crate::auth::Caller;
use crate::error::{from_guest, ApiError};
use crate::extract::Query;
use crate::extract::{sandbox_id, sandbox_path};
use crate::AppState;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use pandastack_api::{DirListing, FileInfo, WriteResult};
use pandastack_guest_protocol::ErrorCode;
use pandastack_guest_protocol::{FileEntry, GuestMsg, HostMsg};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Largest chunk sent to the guest per frame, bytes.
const CHUNK_BYTES: usize = 1024 * 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(read, write, remove, write_by_post))
        .routes(routes!(list_dir))
        .routes(routes!(stat))
        .routes(routes!(mkdir))
}

#[derive(Debug, Deserialize)]
pub struct PathQuery {
    path: Option<String>,
}

/// `?path=` of the file calls as [`sandbox_path`] checks it, for the description (ECMA-262):
/// absolute, components of at most 255 characters that are not `..` and hold no NUL, at most
/// 1024 characters. (The server counts a component's bytes, at most 255: names of long
/// multi-byte characters are refused sooner than the pattern says.)
#[allow(dead_code)] // a description, never constructed: the handlers read `PathQuery`
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct FilePathParam {
    /// Absolute path in the sandbox; no `..` component, no NUL.
    #[param(
        pattern = r"^(?:/(?:[^/\x00.][^/\x00]{0,254}|\.(?:[^/\x00.][^/\x00]{0,253})?|\.\.[^/\x00]{1,253})?)+$",
        max_length = 1024
    )]
    path: String,
}

/// The optional `?path=` of `fs/dir`.
#[allow(dead_code)] // a description, never constructed: the handler reads `PathQuery`
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct DirPathParam {
    /// Absolute directory path (default `/`); no `..` component, no NUL.
    #[param(
        pattern = r"^(?:/(?:[^/\x00.][^/\x00]{0,254}|\.(?:[^/\x00.][^/\x00]{0,253})?|\.\.[^/\x00]{1,253})?)+$",
        max_length = 1024
    )]
    path: Option<String>,
}

/// The `?path=` of a removal: as [`FilePathParam`], and not the root.
#[allow(dead_code)] // a description, never constructed: the handler reads `PathQuery`
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct RemovePathParam {
    /// Absolute path in the sandbox, not `/`; no `..` component, no NUL.
    #[param(
        pattern = r"^(?:/(?:[^/\x00.][^/\x00]{0,254}|\.(?:[^/\x00.][^/\x00]{0,253})?|\.\.[^/\x00]{1,253})?)*/(?:[^/\x00.][^/\x00]{0,254}|\.[^/\x00.][^/\x00]{0,253}|\.\.[^/\x00]{1,253})(?:/(?:[^/\x00.][^/\x00]{0,254}|\.(?:[^/\x00.][^/\x00]{0,253})?|\.\.[^/\x00]{1,253})?)*$",
        max_length = 1024
    )]
    path: String,
}

/// Messages of the guest's file errors (`crates/guest` `files/`, OS `strerror` texts) that
/// describe the state of the path rather than a malformed request.
const STATE_CONFLICTS: [&str; 4] = [
    "is a directory",
    "is not a directory",
    "file exists",
    "directory not empty",
];

/// A guest error of a file operation: a path that exists as the wrong kind (a directory where
/// a file is wanted, or the reverse) is a 409, like any request that the resource's state
/// forbids; the rest as [`from_guest`].
fn file_error(code: ErrorCode, message: String) -> ApiError {
    let lower = message.to_lowercase();
    if code == ErrorCode::Invalid && STATE_CONFLICTS.iter().any(|m| lower.ends_with(m)) {
        return ApiError::Conflict(message);
    }
    from_guest(code, message)
}

/// The wire form of a guest directory entry.
pub fn file_info(e: FileEntry) -> FileInfo {
    FileInfo {
        name: e.name,
        path: e.path,
        is_dir: e.is_dir,
        size: e.size,
        mode: format!("{:04o}", e.mode & 0o7777),
        mtime: e.mtime,
    }
}

/// The raw bytes of a file, streamed (contract §2.4).
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/fs",
    tag = "files",
    operation_id = "read_file",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id."), FilePathParam),
    responses((status = 200, description = "The file.", content_type = "application/octet-stream", body = [u8]), FileErrors, Errors)
)]
async fn read(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Response, ApiError> {
    let path = sandbox_path(q.path.as_deref())?;
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    let ready = st.host.ready(&live).await?;
    super::fs_special::refuse_special(&ready.conn, &path).await?;
    let rid = ready.conn.new_id();
    let mut rx = ready
        .conn
        .request(
            HostMsg::FileRead {
                id: rid,
                path: path.clone(),
                window: ready.conn.read_window(),
            },
            Vec::new(),
        )
        .await?;
    // Wait for the first frame so that a missing file is a 404, not a broken 200 stream.
    let first = rx
        .recv()
        .await
        .ok_or_else(|| ApiError::Unavailable("guest channel closed: connection refused".into()))?;
    let first_body = match first {
        (GuestMsg::Error { code, message, .. }, _) => {
            return Err(super::fs_special::read_error(
                &path, code, message, file_error,
            ))
        }
        (GuestMsg::FileEnd { .. }, _) => None,
        (GuestMsg::FileChunk { .. }, body) => Some(body),
        (other, _) => {
            return Err(ApiError::internal(
                "file read",
                format!("unexpected guest reply {other:?}"),
            ))
        }
    };
    // The lifecycle gate is released here: kill, the TTL, snapshot and hibernate never wait on
    // a client's download (issue 8); if the instance goes, the stream ends with an error.
    let conn = ready.conn.clone();
    drop(ready);
    let active = live.activity();
    let windowed = conn.read_window().is_some();
    let stream = async_stream::stream! {
        let _active = active;
        // Dropping the stream (the client went away) stops the guest's read and the routing
        // of its frames.
        let mut read = ReadGuard { conn, id: rid, windowed, done: false };
        let Some(first) = first_body else { read.done = true; return };
        yield Ok::<Bytes, std::io::Error>(Bytes::from(first));
        // Polled again: the client took that chunk, so the guest may send one more.
        read.ack().await;
        while let Some((msg, body)) = rx.recv().await {
            match msg {
                GuestMsg::FileChunk { .. } => {
                    yield Ok(Bytes::from(body));
                    read.ack().await;
                }
                GuestMsg::FileEnd { .. } => {
                    read.done = true;
                    return;
                }
                GuestMsg::Error { message, .. } => {
                    yield Err(std::io::Error::other(message));
                    return;
                }
                _ => {}
            }
        }
        let lost = live.channel_lost("download").await;
        yield Err(std::io::Error::other(lost.to_string()));
    };
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from_stream(stream),
    )
        .into_response())
}

/// Write the raw body to a file, atomically (temp file + rename); parent directories are
/// created (contract §2.4).
#[utoipa::path(
    put,
    path = "/sandboxes/{id}/fs",
    tag = "files",
    operation_id = "write_file",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id."), FilePathParam),
    request_body(content = [u8], content_type = "application/octet-stream"),
    responses((status = 200, description = "Written.", body = WriteResult), FileErrors, Errors)
)]
async fn write(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
    body: Body,
) -> Result<Json<WriteResult>, ApiError> {
    let path = sandbox_path(q.path.as_deref())?;
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    let ready = st.host.ready(&live).await?;
    // As for downloads: the upload holds no lifecycle gate, only activity.
    let conn = ready.conn.clone();
    drop(ready);
    let _active = live.activity();
    let conn = &conn;
    let rid = conn.new_id();
    let mut rx = conn
        .request(
            HostMsg::FileWrite {
                id: rid,
                path: path.clone(),
            },
            Vec::new(),
        )
        .await?;
    let mut stream = body.into_data_stream();
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK_BYTES);
    let aborted = async {
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::BadRequest(format!("upload interrupted: {e}")))?;
            let mut rest: &[u8] = &chunk;
            while !rest.is_empty() {
                let take = rest.len().min(CHUNK_BYTES - buf.len());
                buf.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                if buf.len() == CHUNK_BYTES {
                    conn.send(
                        HostMsg::FileChunk { id: rid },
                        std::mem::replace(&mut buf, Vec::with_capacity(CHUNK_BYTES)),
                    )
                    .await?;
                }
            }
            // An early guest error (e.g. the path is a directory) ends the upload at once.
            if let Some((GuestMsg::Error { code, message, .. }, _)) = rx.try_recv() {
                return Err(file_error(code, message));
            }
        }
        if !buf.is_empty() {
            conn.send(HostMsg::FileChunk { id: rid }, std::mem::take(&mut buf))
                .await?;
        }
        conn.send(HostMsg::FileEnd { id: rid }, Vec::new()).await?;
        Ok::<(), ApiError>(())
    }
    .await;
    if let Err(e) = aborted {
        let _ = conn.send(HostMsg::FileAbort { id: rid }, Vec::new()).await;
        conn.forget(rid);
        return Err(e);
    }
    while let Some((msg, _)) = rx.recv().await {
        match msg {
            GuestMsg::FileWritten { bytes, .. } => return Ok(Json(WriteResult { path, bytes })),
            GuestMsg::Error { code, message, .. } => return Err(file_error(code, message)),
            _ => {}
        }
    }
    Err(live.channel_lost("upload").await)
}

/// A download in progress: acknowledges chunks (for a guest that paces reads) and, dropped
/// before the end, stops the guest's read and the routing of its frames.
struct ReadGuard {
    conn: crate::guest::GuestConn,
    id: u64,
    windowed: bool,
    done: bool,
}

impl ReadGuard {
    async fn ack(&self) {
        if self.windowed {
            let _ = self
                .conn
                .send(HostMsg::FileReadAck { id: self.id }, Vec::new())
                .await;
        }
    }
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        self.conn.forget(self.id);
        if self.windowed && !self.done {
            let (conn, id) = (self.conn.clone(), self.id);
            tokio::spawn(async move {
                let _ = conn.send(HostMsg::FileAbort { id }, Vec::new()).await;
            });
        }
    }
}

/// The same as `PUT` (for clients that upload with `POST`).
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/fs",
    tag = "files",
    operation_id = "write_file_post",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id."), FilePathParam),
    request_body(content = [u8], content_type = "application/octet-stream"),
    responses((status = 200, description = "Written.", body = WriteResult), FileErrors, Errors)
)]
async fn write_by_post(
    st: State<AppState>,
    caller: Caller,
    id: Path<String>,
    q: Query<PathQuery>,
    body: Body,
) -> Result<Json<WriteResult>, ApiError> {
    write(st, caller, id, q, body).await
}

async fn simple(
    st: &AppState,
    caller: &Caller,
    id: &str,
    make: impl FnOnce(u64) -> HostMsg,
) -> Result<GuestMsg, ApiError> {
    let live = st.host.get(&caller.workspace_id, &sandbox_id(id)?)?;
    let ready = st.host.ready(&live).await?;
    let rid = ready.conn.new_id();
    match ready.conn.call(make(rid)).await? {
        (GuestMsg::Error { code, message, .. }, _) => Err(file_error(code, message)),
        (msg, _) => Ok(msg),
    }
}

/// Remove a file or a directory tree (not `/`).
#[utoipa::path(
    delete,
    path = "/sandboxes/{id}/fs",
    tag = "files",
    operation_id = "remove_file",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id."), RemovePathParam),
    responses((status = 204, description = "Removed."), FileErrors, Errors)
)]
async fn remove(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<StatusCode, ApiError> {
    let path = sandbox_path(q.path.as_deref())?;
    if path == "/" {
        return Err(ApiError::BadRequest("path '/' cannot be removed".into()));
    }
    simple(&st, &caller, &id, |rid| HostMsg::Remove { id: rid, path }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Create a directory and its parents.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/fs/mkdir",
    tag = "files",
    operation_id = "make_dir",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id."), FilePathParam),
    responses((status = 204, description = "Created."), FileErrors, Errors)
)]
async fn mkdir(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<StatusCode, ApiError> {
    let path = sandbox_path(q.path.as_deref())?;
    simple(&st, &caller, &id, |rid| HostMsg::MakeDir { id: rid, path }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The entries of a directory.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/fs/dir",
    tag = "files",
    operation_id = "list_dir",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id."), DirPathParam),
    responses((status = 200, description = "The listing.", body = DirListing), FileErrors, Errors)
)]
async fn list_dir(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Json<DirListing>, ApiError> {
    let path = sandbox_path(q.path.as_deref().or(Some("/")))?;
    let p = path.clone();
    match simple(&st, &caller, &id, |rid| HostMsg::ListDir {
        id: rid,
        path: p,
    })
    .await?
    {
        GuestMsg::DirList { entries, .. } => Ok(Json(DirListing {
            path,
            entries: entries.into_iter().map(file_info).collect(),
        })),
        other => Err(ApiError::internal(
            "list dir",
            format!("unexpected guest reply {other:?}"),
        )),
    }
}

/// One FileInfo; 404 when the path does not exist.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/fs/stat",
    tag = "files",
    operation_id = "stat_file",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id."), FilePathParam),
    responses((status = 200, description = "The file's details.", body = FileInfo), FileErrors, Errors)
)]
async fn stat(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Json<FileInfo>, ApiError> {
    let path = sandbox_path(q.path.as_deref())?;
    match simple(&st, &caller, &id, |rid| HostMsg::Stat { id: rid, path }).await? {
        GuestMsg::Stat { entry, .. } => Ok(Json(file_info(entry))),
        other => Err(ApiError::internal(
            "stat",
            format!("unexpected guest reply {other:?}"),
        )),
    }
}
