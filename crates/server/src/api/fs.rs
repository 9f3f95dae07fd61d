//! The filesystem API (contract §2.4): `GET/PUT/DELETE .../fs?path=` with raw bytes streamed
//! both ways, `GET .../fs/dir?path=`, `GET .../fs/stat?path=`. Writes are atomic in the guest
//! (temp file + rename). Bodies stream in chunks of at most 1 MiB, so a 1 GiB file never sits in
//! server memory.

use crate::auth::Caller;
use crate::error::{from_guest, ApiError};
use crate::extract::{sandbox_id, sandbox_path};
use crate::AppState;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures::StreamExt;
use pandastack_api::{DirListing, FileInfo, WriteResult};
use pandastack_guest_protocol::{FileEntry, GuestMsg, HostMsg};
use serde::Deserialize;

/// Largest chunk sent to the guest per frame, bytes.
const CHUNK_BYTES: usize = 1024 * 1024;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/sandboxes/:id/fs",
            get(read).put(write).delete(remove).post(write),
        )
        .route("/sandboxes/:id/fs/dir", get(list_dir))
        .route("/sandboxes/:id/fs/stat", get(stat))
        .route("/sandboxes/:id/fs/mkdir", axum::routing::post(mkdir))
}

#[derive(Debug, Deserialize)]
pub struct PathQuery {
    path: Option<String>,
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

async fn read(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Response, ApiError> {
    let path = sandbox_path(q.path.as_deref())?;
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    let ready = st.host.ready(&live).await?;
    let rid = ready.conn.new_id();
    let mut rx = ready
        .conn
        .request(
            HostMsg::FileRead {
                id: rid,
                path: path.clone(),
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
        (GuestMsg::Error { code, message, .. }, _) => return Err(from_guest(code, message)),
        (GuestMsg::FileEnd { .. }, _) => None,
        (GuestMsg::FileChunk { .. }, body) => Some(body),
        (other, _) => {
            return Err(ApiError::internal(
                "file read",
                format!("unexpected guest reply {other:?}"),
            ))
        }
    };
    let stream = async_stream::stream! {
        // The lifecycle gate is held until the download is complete.
        let _ready = ready;
        let Some(first) = first_body else { return };
        yield Ok::<Bytes, std::io::Error>(Bytes::from(first));
        while let Some((msg, body)) = rx.recv().await {
            match msg {
                GuestMsg::FileChunk { .. } => yield Ok(Bytes::from(body)),
                GuestMsg::FileEnd { .. } => return,
                GuestMsg::Error { message, .. } => {
                    yield Err(std::io::Error::other(message));
                    return;
                }
                _ => {}
            }
        }
        yield Err(std::io::Error::other("guest channel closed during download"));
    };
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from_stream(stream),
    )
        .into_response())
}

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
    let conn = &ready.conn;
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
            if let Ok((GuestMsg::Error { code, message, .. }, _)) = rx.try_recv() {
                return Err(from_guest(code, message));
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
            GuestMsg::Error { code, message, .. } => return Err(from_guest(code, message)),
            _ => {}
        }
    }
    Err(ApiError::Unavailable(
        "guest channel closed during upload: connection refused".into(),
    ))
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
        (GuestMsg::Error { code, message, .. }, _) => Err(from_guest(code, message)),
        (msg, _) => Ok(msg),
    }
}

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
