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
