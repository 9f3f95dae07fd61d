//! The filesystem of a sandbox (contract §2.4; seed 004 "File uploads"): raw bytes both ways,
//! streamed, never base64. Writes are atomic in the guest (temp file + rename) and create the
//! parent directories. Every call but the streamed upload takes part in the warm-up retry.

use crate::error::{Error, Result};
use crate::http::{connection_error, Body, Call, Deadline};
use crate::sandbox::Sandbox;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use pandastack_api::{DirListing, FileInfo, WriteResult};
use reqwest::Method;
use std::path::Path;

/// `sandbox.files()`: the sandbox's filesystem. Paths are absolute paths inside the sandbox.
#[derive(Debug, Clone, Copy)]
pub struct Files<'a> {
    sandbox: &'a Sandbox,
}

impl Sandbox {
    /// The sandbox's filesystem (Py `sandbox.filesystem`).
    pub fn files(&self) -> Files<'_> {
        Files { sandbox: self }
    }
}

impl Files<'_> {
    fn call(&self, method: Method, rest: &[&str], path: &str) -> Call {
        let mut segments = vec!["sandboxes", self.sandbox.id(), "fs"];
        segments.extend_from_slice(rest);
        Call::new(method, &segments).query("path", path).warmup()
    }

    /// The whole file (`GET .../fs?path=`). For large files use [`Files::read_stream`].
    ///
    /// # Errors
    /// [`Error::NotFound`] when it does not exist; [`Error::BadRequest`] for a relative path or
    /// a directory.
    pub async fn read(&self, path: &str) -> Result<Bytes> {
        let resp = self
            .sandbox
            .client()
            .send(self.call(Method::GET, &[], path).deadline(Deadline::Never))
            .await?;
        resp.bytes().await.map_err(|e| connection_error(&e))
    }

    /// The file as a stream of chunks, and its length in bytes when the server sent one.
    ///
    /// # Errors
    /// As [`Files::read`]; items: [`Error::Connection`] when the transfer breaks.
    pub async fn read_stream(
        &self,
        path: &str,
    ) -> Result<(Option<u64>, BoxStream<'static, Result<Bytes>>)> {
        let resp = self
            .sandbox
            .client()
            .send(self.call(Method::GET, &[], path).deadline(Deadline::Never))
            .await?;
        let len = resp.content_length();
        let body = resp
            .bytes_stream()
            .map_err(|e| connection_error(&e))
            .boxed();
        Ok((len, body))
    }

    /// Writes `data` to `path`, replacing it atomically (`PUT .../fs?path=`).
    ///
    /// # Errors
    /// [`Error::BadRequest`] for a bad path or when it is a directory.
    pub async fn write(&self, path: &str, data: impl Into<Bytes>) -> Result<WriteResult> {
        let call = self
            .call(Method::PUT, &[], path)
            .body(Body::Bytes(data.into()))
            .deadline(Deadline::Never);
        self.sandbox.client().json(call).await
    }

    /// Writes a stream of chunks to `path` without holding it in memory. Not retried (a stream
    /// cannot be sent twice).
    ///
    /// # Errors
    /// As [`Files::write`]; [`Error::Connection`] when the stream or the connection fails.
    pub async fn write_stream<S>(&self, path: &str, chunks: S) -> Result<WriteResult>
    where
        S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    {
        let call = self
            .call(Method::PUT, &[], path)
            .body(Body::Stream(reqwest::Body::wrap_stream(chunks)))
            .deadline(Deadline::Never);
        self.sandbox.client().json(call).await
    }

    /// Uploads the local file `local` to `path`, streamed (Py `filesystem.upload`).
    ///
    /// # Errors
    /// [`Error::Io`] when `local` cannot be opened; as [`Files::write_stream`].
    pub async fn upload(&self, local: &Path, path: &str) -> Result<WriteResult> {
        let file = tokio::fs::File::open(local).await.map_err(|e| Error::Io {
            what: format!("reading {}", local.display()),
            source: e,
        })?;
        self.write_stream(path, tokio_util::io::ReaderStream::new(file))
            .await
    }

    /// Downloads `path` into the local file `local` (Py `filesystem.download`): streamed into a
    /// temp file beside it, renamed over `local` only when complete. Returns the bytes written.
    ///
    /// # Errors
    /// As [`Files::read`]; [`Error::Io`] for local failures (the temp file is removed).
    pub async fn download(&self, path: &str, local: &Path) -> Result<u64> {
        use tokio::io::AsyncWriteExt;
        let (_, mut body) = self.read_stream(path).await?;
        let name = local
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "download".into());
        let tmp = local.with_file_name(format!(".{name}.pandastack-{}.part", std::process::id()));
        let io = |what: String| move |e| Error::Io { what, source: e };
        let result = async {
            let mut file = tokio::fs::File::create(&tmp)
                .await
                .map_err(io(format!("creating {}", tmp.display())))?;
            let mut n = 0u64;
            while let Some(chunk) = body.next().await {
                let chunk = chunk?;
                n += chunk.len() as u64;
                file.write_all(&chunk)
                    .await
                    .map_err(io(format!("writing {}", tmp.display())))?;
            }
            file.sync_all()
                .await
                .map_err(io(format!("writing {}", tmp.display())))?;
            tokio::fs::rename(&tmp, local)
                .await
                .map_err(io(format!("renaming into {}", local.display())))?;
            Ok(n)
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        result
    }

    /// The entries of directory `path` (Py `listdir`, TS `list`).
    ///
    /// # Errors
    /// [`Error::NotFound`]; [`Error::BadRequest`] when it is not a directory.
    pub async fn list(&self, path: &str) -> Result<Vec<FileInfo>> {
        let listing: DirListing = self
            .sandbox
            .client()
            .json(self.call(Method::GET, &["dir"], path))
            .await?;
        Ok(listing.entries)
    }

    /// Size, mode, mtime and kind of `path`.
    ///
    /// # Errors
    /// [`Error::NotFound`] when it does not exist.
    pub async fn stat(&self, path: &str) -> Result<FileInfo> {
        self.sandbox
            .client()
            .json(self.call(Method::GET, &["stat"], path))
            .await
    }

    /// True when `path` exists (a 404 from stat is `false`, as in both SDKs).
    ///
    /// # Errors
    /// Any error of [`Files::stat`] but [`Error::NotFound`].
    pub async fn exists(&self, path: &str) -> Result<bool> {
        match self.stat(path).await {
            Ok(_) => Ok(true),
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes a file or a directory tree.
    ///
    /// # Errors
    /// [`Error::NotFound`]; [`Error::BadRequest`] for `/`.
    pub async fn remove(&self, path: &str) -> Result<()> {
        self.sandbox
            .client()
            .unit(self.call(Method::DELETE, &[], path))
            .await
    }

    /// Creates directory `path` and its parents.
    ///
    /// # Errors
    /// [`Error::BadRequest`] when a file is in the way.
    pub async fn mkdir(&self, path: &str) -> Result<()> {
        self.sandbox
            .client()
            .unit(self.call(Method::POST, &["mkdir"], path))
            .await
    }
}
