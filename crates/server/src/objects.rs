//! Object storage for images (issue 12 point 6): `--object-store s3://BUCKET` (endpoint,
//! region and keys from the standard `AWS_*` environment variables) or `file:///DIR` (a
//! directory every host mounts), through the `object_store` crate.
//!
//! An image is a directory of files (a runsc checkpoint: `checkpoint.img`, `pages.img`,
//! `pages_meta.img`, ...). [`Objects::upload_dir`] stores each file under `<prefix>/<name>`
//! (multipart, streamed from disk) and then `<prefix>/manifest.json` listing every file with
//! its size and SHA-256: an image is in the store exactly when its manifest is.
//! [`Objects::fetch_dir`] reads the manifest, downloads every file into `<dir>.partial/`,
//! checks each one's size and SHA-256 while it is written, and renames the directory into
//! place; concurrent fetches of one image wait for the first one (one download).

use futures::StreamExt;
use object_store::{path::Path as ObjectPath, ObjectStore, ObjectStoreExt, WriteMultipart};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Size of the parts of a multipart upload, bytes (S3's minimum is 5 MiB).
const PART_BYTES: usize = 16 << 20;
/// Parts of one file in flight at once.
const PARTS_IN_FLIGHT: usize = 4;
/// The object listing an image's files; written last.
const MANIFEST: &str = "manifest.json";
/// The encoding of compressed objects ([`FileEntry::encoding`]).
const ZSTD: &str = "zstd";
/// zstd level: checkpoint pages shrink ~4x at ~400 MB/s on one core here (level 1), faster
/// than the loopback S3 server takes them, so compressing pays on every transfer.
const ZSTD_LEVEL: i32 = 1;

/// Why an object-store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ObjectsError {
    /// `--object-store` is not `s3://BUCKET` or `file:///DIR`, or the client cannot be built.
    #[error("object store: {0}")]
    Config(String),
    /// The object store refused or failed a request.
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    /// Reading or writing the local copy failed.
    #[error("object store: local image: {0}")]
    Io(#[from] std::io::Error),
    /// The image has no manifest in the store (never uploaded, or deleted).
    #[error("image {0} is not in the object store")]
    Missing(String),
    /// A downloaded file does not match its manifest.
    #[error("image {prefix}: {file} does not match its checksum")]
    Checksum { prefix: String, file: String },
}

/// One file of an image's manifest.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct FileEntry {
    name: String,
    /// Bytes.
    size: u64,
    /// SHA-256, hex.
    sha256: String,
    /// How the object holds the file: absent for the bytes themselves, `zstd` for one zstd
    /// stream of them (`size` and `sha256` are then the object's, compressed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    encoding: Option<String>,
    /// Bytes of the file itself when `encoding` is set (what a fetch writes to disk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    raw_size: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Manifest {
    files: Vec<FileEntry>,
}

/// The object store of this host's images (see the module doc). Shared as `Arc<Objects>`.
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    /// The `--object-store` URL (for logs).
    pub url: String,
    /// One lock per image prefix being fetched (coalesces concurrent fetches).
    fetching: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects").field("url", &self.url).finish()
    }
}

impl Objects {
    /// The object store of `--object-store URL`: `s3://BUCKET` (the `AWS_*` environment
    /// variables give endpoint `AWS_ENDPOINT_URL`, region `AWS_REGION`, keys
    /// `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP=true` for a plain-HTTP
    /// endpoint) or `file:///DIR` (created if missing).
    ///
    /// # Errors
    /// [`ObjectsError::Config`] for another scheme, a missing bucket or directory name, or a
    /// client that cannot be built.
    pub fn open(url: &str) -> Result<Arc<Self>, ObjectsError> {
        let store: Arc<dyn ObjectStore> = if let Some(bucket) = url.strip_prefix("s3://") {
            let bucket = bucket.trim_end_matches('/');
            if bucket.is_empty() || bucket.contains('/') {
                return Err(ObjectsError::Config(format!(
                    "--object-store {url}: expected s3://BUCKET"
                )));
            }
            Arc::new(
                object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .build()
                    .map_err(|e| ObjectsError::Config(e.to_string()))?,
            )
        } else if let Some(dir) = url.strip_prefix("file://") {
            if !dir.starts_with('/') || dir.len() < 2 {
                return Err(ObjectsError::Config(format!(
                    "--object-store {url}: expected file:///ABSOLUTE/DIR"
                )));
            }
            std::fs::create_dir_all(dir)?;
            Arc::new(
                object_store::local::LocalFileSystem::new_with_prefix(dir)
                    .map_err(|e| ObjectsError::Config(e.to_string()))?
                    .with_automatic_cleanup(true),
            )
        } else {
            return Err(ObjectsError::Config(format!(
                "--object-store {url}: expected s3://BUCKET or file:///DIR"
            )));
        };
        Ok(Arc::new(Objects {
            store,
            url: url.to_string(),
            fetching: Mutex::default(),
        }))
    }

    /// Uploads every regular file of `dir` under `prefix`, then its manifest. Returns the
    /// bytes uploaded. An upload interrupted before the manifest leaves no usable image (a
    /// retry overwrites the files).
    ///
    /// # Errors
    /// Reading `dir` or any store request failing.
    pub async fn upload_dir(&self, prefix: &str, dir: &Path) -> Result<u64, ObjectsError> {
        let mut names = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            if e.file_type()?.is_file() {
                names.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        let mut files = Vec::with_capacity(names.len());
        let mut total = 0;
        for name in names {
            let entry = self
                .upload_file(&key(prefix, &name), &dir.join(&name), name)
                .await?;
            total += entry.size;
            files.push(entry);
        }
        let manifest = serde_json::to_vec(&Manifest { files })
            .map_err(|e| ObjectsError::Config(e.to_string()))?;
        self.store
            .put(&key(prefix, MANIFEST), manifest.into())
            .await?;
        Ok(total)
    }

    async fn upload_file(
        &self,
        location: &ObjectPath,
        path: &Path,
        name: String,
    ) -> Result<FileEntry, ObjectsError> {
        if tokio::fs::metadata(path).await?.len() < PART_BYTES as u64 {
            // One request, as it is (and S3 refuses a multipart upload of an empty file).
            let bytes = tokio::fs::read(path).await?;
            let entry = FileEntry {
                name,
                size: bytes.len() as u64,
                sha256: hex::encode(Sha256::digest(&bytes)),
                encoding: None,
                raw_size: None,
            };
            self.store.put(location, bytes.into()).await?;
            return Ok(entry);
        }
        let path = path.to_path_buf();
        let (size, sha256, raw, ()) = self
            .put_streamed(location, move |out| {
                let mut file = std::fs::File::open(&path)?;
                std::io::copy(&mut file, out)?;
                Ok(())
            })
            .await?;
        Ok(FileEntry {
            name,
            size,
            sha256,
            encoding: Some(ZSTD.into()),
            raw_size: Some(raw),
        })
    }

    /// Uploads, multipart, one zstd stream of what `produce` writes on a blocking thread;
    /// returns the object's size and SHA-256, the bytes `produce` wrote and what it
    /// returned. When `produce` fails the upload is aborted.
    async fn put_streamed<T: Send + 'static>(
        &self,
        location: &ObjectPath,
        produce: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<T> + Send + 'static,
    ) -> Result<(u64, String, u64, T), ObjectsError> {
        let (writer, mut reader) = tokio::io::duplex(PART_BYTES);
        let bridge = tokio_util::io::SyncIoBridge::new(writer);
        let producer = tokio::task::spawn_blocking(move || {
            let out = std::io::BufWriter::with_capacity(1 << 20, bridge);
            let mut counted = Counting {
                inner: zstd::stream::write::Encoder::new(out, ZSTD_LEVEL)?,
                bytes: 0,
            };
            let value = produce(&mut counted)?;
            let mut out = counted.inner.finish()?;
            std::io::Write::flush(&mut out)?;
            Ok::<_, std::io::Error>((counted.bytes, value))
        });
        let mut upload = WriteMultipart::new_with_chunk_size(
            self.store.put_multipart(location).await?,
            PART_BYTES,
        );
        let sent = send_parts(&mut upload, &mut reader).await;
        // An upload that failed drops the reader, so the producer's next write fails too.
        drop(reader);
        let produced = producer
            .await
            .map_err(|e| ObjectsError::Io(std::io::Error::other(e.to_string())));
        let ((size, sha256), (raw, value)) = match (sent, produced) {
            (Ok(sent), Ok(Ok(value))) => (sent, value),
            (Err(e), _) | (Ok(_), Err(e)) => {
                let _ = upload.abort().await;
                return Err(e);
            }
            (Ok(_), Ok(Err(e))) => {
                let _ = upload.abort().await;
                return Err(e.into());
            }
        };
        upload.finish().await?;
        Ok((size, sha256, raw, value))
    }

    /// Uploads what `produce` writes (on a blocking thread) as the one file `name` under
    /// `prefix`, zstd-compressed and multipart, then the manifest listing it; returns the
    /// bytes uploaded (compressed), the bytes `produce` wrote and what it returned. When
    /// `produce` fails the upload is aborted and no manifest written.
    ///
    /// # Errors
    /// `produce`'s error ([`ObjectsError::Io`]); store errors.
    pub async fn upload_stream<T: Send + 'static>(
        &self,
        prefix: &str,
        name: &str,
        produce: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<T> + Send + 'static,
    ) -> Result<(u64, u64, T), ObjectsError> {
        let (size, sha256, raw, value) = self.put_streamed(&key(prefix, name), produce).await?;
        let files = vec![FileEntry {
            name: name.to_string(),
            size,
            sha256,
            encoding: Some(ZSTD.into()),
            raw_size: Some(raw),
        }];
        let manifest = serde_json::to_vec(&Manifest { files })
            .map_err(|e| ObjectsError::Config(e.to_string()))?;
        self.store
            .put(&key(prefix, MANIFEST), manifest.into())
            .await?;
        Ok((size, raw, value))
    }

    /// Bytes of the file `name` of the object under `prefix`, from its manifest.
    ///
    /// # Errors
    /// [`ObjectsError::Missing`] when there is no manifest or it does not list `name`;
    /// store errors.
    pub async fn stream_size(&self, prefix: &str, name: &str) -> Result<u64, ObjectsError> {
        let entry = self.manifest_entry(prefix, name).await?;
        Ok(entry.raw_size.unwrap_or(entry.size))
    }

    /// The name of the one file the manifest under `prefix` lists (a streamed object, whose
    /// name differs per upload so two hosts writing one prefix never mix their bytes).
    ///
    /// # Errors
    /// [`ObjectsError::Missing`] when there is no manifest; [`ObjectsError::Checksum`] when it
    /// lists another number of files or a name with `/`; store errors.
    pub async fn only_file(&self, prefix: &str) -> Result<String, ObjectsError> {
        let manifest = match self.store.get(&key(prefix, MANIFEST)).await {
            Ok(r) => r.bytes().await?,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(ObjectsError::Missing(prefix.to_string()))
            }
            Err(e) => return Err(e.into()),
        };
        let bad = || ObjectsError::Checksum {
            prefix: prefix.to_string(),
            file: MANIFEST.into(),
        };
        let manifest: Manifest = serde_json::from_slice(&manifest).map_err(|_| bad())?;
        match manifest.files.as_slice() {
            [one] if !one.name.contains('/') && !one.name.starts_with('.') => Ok(one.name.clone()),
            _ => Err(bad()),
        }
    }

    async fn manifest_entry(&self, prefix: &str, name: &str) -> Result<FileEntry, ObjectsError> {
        let manifest = match self.store.get(&key(prefix, MANIFEST)).await {
            Ok(r) => r.bytes().await?,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(ObjectsError::Missing(prefix.to_string()))
            }
            Err(e) => return Err(e.into()),
        };
        let manifest: Manifest =
            serde_json::from_slice(&manifest).map_err(|_| ObjectsError::Checksum {
                prefix: prefix.to_string(),
                file: MANIFEST.into(),
            })?;
        manifest
            .files
            .into_iter()
            .find(|f| f.name == name)
            .ok_or_else(|| ObjectsError::Missing(format!("{prefix}/{name}")))
    }

    /// Streams the file `name` under `prefix` into `consume` (on a blocking thread), checking
    /// its size and SHA-256 against the manifest as it is read (what `consume` leaves unread
    /// is read too). `consume`'s result counts only when the check passes; the caller undoes
    /// what `consume` made otherwise.
    ///
    /// # Errors
    /// [`ObjectsError::Missing`]; [`ObjectsError::Checksum`] on a mismatch; `consume`'s error
    /// ([`ObjectsError::Io`]); store errors.
    pub async fn fetch_stream<T: Send + 'static>(
        &self,
        prefix: &str,
        name: &str,
        consume: impl FnOnce(&mut dyn std::io::Read) -> std::io::Result<T> + Send + 'static,
    ) -> Result<T, ObjectsError> {
        let entry = self.manifest_entry(prefix, name).await?;
        self.read_entry(prefix, &entry, consume).await
    }

    /// Streams the object of `entry` under `prefix`, decoded, into `consume` on a blocking
    /// thread, checking the object's size and SHA-256 (see [`Objects::fetch_stream`]).
    async fn read_entry<T: Send + 'static>(
        &self,
        prefix: &str,
        entry: &FileEntry,
        consume: impl FnOnce(&mut dyn std::io::Read) -> std::io::Result<T> + Send + 'static,
    ) -> Result<T, ObjectsError> {
        let zstd = match entry.encoding.as_deref() {
            None => false,
            Some(ZSTD) => true,
            Some(other) => {
                return Err(ObjectsError::Config(format!(
                    "{prefix}/{}: unknown encoding {other}",
                    entry.name
                )))
            }
        };
        let stream = self
            .store
            .get(&key(prefix, &entry.name))
            .await?
            .into_stream()
            .map(|chunk| chunk.map_err(std::io::Error::other));
        let bridge = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
        let (value, size, sha) = tokio::task::spawn_blocking(move || {
            let mut reader = Hashing {
                inner: std::io::BufReader::with_capacity(1 << 20, bridge),
                hash: Sha256::new(),
                size: 0,
            };
            let value = if zstd {
                zstd::stream::read::Decoder::new(&mut reader).and_then(|mut decoded| {
                    let value = consume(&mut decoded)?;
                    std::io::copy(&mut decoded, &mut std::io::sink())?;
                    Ok(value)
                })
            } else {
                consume(&mut reader)
            };
            // All of it is read and hashed even when decoding failed: a damaged object is
            // reported as such, not as whatever its garbage made the consumer say.
            std::io::copy(&mut reader, &mut std::io::sink())?;
            Ok::<_, std::io::Error>((value, reader.size, hex::encode(reader.hash.finalize())))
        })
        .await
        .map_err(|e| ObjectsError::Io(std::io::Error::other(e.to_string())))??;
        if size != entry.size || sha != entry.sha256 {
            return Err(ObjectsError::Checksum {
                prefix: prefix.to_string(),
                file: entry.name.clone(),
            });
        }
        Ok(value?)
    }

    /// Makes `dir` a checked copy of the image under `prefix` (see the module doc); returns at
    /// once when `dir` exists. Concurrent calls for one prefix download it once.
    ///
    /// # Errors
    /// [`ObjectsError::Missing`] when the image has no manifest; [`ObjectsError::Checksum`]
    /// when a file does not match it; store and disk errors. Nothing is left at `dir` then.
    pub async fn fetch_dir(&self, prefix: &str, dir: &Path) -> Result<(), ObjectsError> {
        let lock = self
            .fetching
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(prefix.to_string())
            .or_default()
            .clone();
        let result = {
            let _one = lock.lock().await;
            if dir.is_dir() {
                Ok(())
            } else {
                self.download(prefix, dir).await
            }
        };
        drop(lock);
        self.fetching
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, l| Arc::strong_count(l) > 1);
        result
    }

    async fn download(&self, prefix: &str, dir: &Path) -> Result<(), ObjectsError> {
        let manifest = match self.store.get(&key(prefix, MANIFEST)).await {
            Ok(r) => r.bytes().await?,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(ObjectsError::Missing(prefix.to_string()))
            }
            Err(e) => return Err(e.into()),
        };
        let manifest: Manifest =
            serde_json::from_slice(&manifest).map_err(|_| ObjectsError::Checksum {
                prefix: prefix.to_string(),
                file: MANIFEST.into(),
            })?;
        let partial = crate::host::partial_path(dir);
        let _ = tokio::fs::remove_dir_all(&partial).await;
        tokio::fs::create_dir_all(&partial).await?;
        let result = async {
            for f in &manifest.files {
                if f.name.contains('/') || f.name.starts_with('.') {
                    return Err(ObjectsError::Checksum {
                        prefix: prefix.to_string(),
                        file: f.name.clone(),
                    });
                }
                self.download_file(prefix, f, &partial.join(&f.name))
                    .await?;
            }
            tokio::fs::rename(&partial, dir).await?;
            Ok(())
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_dir_all(&partial).await;
        }
        result
    }

    async fn download_file(
        &self,
        prefix: &str,
        f: &FileEntry,
        path: &Path,
    ) -> Result<(), ObjectsError> {
        if f.encoding.is_some() {
            let path = path.to_path_buf();
            return self
                .read_entry(prefix, f, move |decoded| {
                    let mut out = std::fs::File::create(&path)?;
                    std::io::copy(decoded, &mut out)?;
                    Ok(())
                })
                .await;
        }
        let mut stream = self.store.get(&key(prefix, &f.name)).await?.into_stream();
        let mut out = tokio::fs::File::create(path).await?;
        let mut hash = Sha256::new();
        let mut size = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            hash.update(&chunk);
            size += chunk.len() as u64;
            out.write_all(&chunk).await?;
        }
        out.flush().await?;
        if size != f.size || hex::encode(hash.finalize()) != f.sha256 {
            return Err(ObjectsError::Checksum {
                prefix: prefix.to_string(),
                file: f.name.clone(),
            });
        }
        Ok(())
    }

    /// Whether the image under `prefix` is complete in the store (its manifest exists).
    ///
    /// # Errors
    /// Store errors other than not-found.
    pub async fn exists(&self, prefix: &str) -> Result<bool, ObjectsError> {
        match self.store.head(&key(prefix, MANIFEST)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes the image under `prefix`: its manifest first (so it stops being fetchable),
    /// then every object under the prefix. Deleting what is not there succeeds.
    ///
    /// # Errors
    /// Store errors.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<(), ObjectsError> {
        match self.store.delete(&key(prefix, MANIFEST)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let listed: Vec<_> = self
            .store
            .list(Some(&ObjectPath::from(prefix)))
            .collect()
            .await;
        for meta in listed {
            let meta = meta?;
            match self.store.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The small object at `name` (a pointer: a few bytes of JSON); `None` when absent.
    ///
    /// # Errors
    /// Store errors.
    pub async fn get_small(&self, name: &str) -> Result<Option<Vec<u8>>, ObjectsError> {
        match self.store.get(&ObjectPath::from(name)).await {
            Ok(r) => Ok(Some(r.bytes().await?.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the small object `name` (one request).
    ///
    /// # Errors
    /// Store errors.
    pub async fn put_small(&self, name: &str, bytes: Vec<u8>) -> Result<(), ObjectsError> {
        self.store
            .put(&ObjectPath::from(name), bytes.into())
            .await?;
        Ok(())
    }

    /// Names of the objects under `prefix` (tests and diagnostics).
    ///
    /// # Errors
    /// Store errors.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, ObjectsError> {
        let listed: Vec<_> = self
            .store
            .list(Some(&ObjectPath::from(prefix)))
            .collect()
            .await;
        listed
            .into_iter()
            .map(|m| Ok(m?.location.to_string()))
            .collect()
    }
}

/// Writes everything `reader` yields into `upload` (at most [`PARTS_IN_FLIGHT`] parts in
/// flight); returns its size in bytes and SHA-256 (hex). The caller finishes or aborts.
async fn send_parts(
    upload: &mut WriteMultipart,
    reader: &mut (impl tokio::io::AsyncRead + Unpin),
) -> Result<(u64, String), ObjectsError> {
    let mut hash = Sha256::new();
    let mut size = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        size += n as u64;
        upload.wait_for_capacity(PARTS_IN_FLIGHT).await?;
        upload.write(&buf[..n]);
    }
    Ok((size, hex::encode(hash.finalize())))
}

/// A writer that counts what passes through it.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: std::io::Write> std::io::Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that hashes and counts what passes through it.
struct Hashing<R> {
    inner: R,
    hash: Sha256,
    size: u64,
}

impl<R: std::io::Read> std::io::Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
}

fn key(prefix: &str, name: &str) -> ObjectPath {
    ObjectPath::from(format!("{prefix}/{name}"))
}

/// The object-store prefix of snapshot `id`'s image.
pub fn snapshot_prefix(id: &str) -> String {
    format!("snapshots/{id}")
}

/// The object-store prefix of a hibernation image of sandbox `id` taken at `at` (Unix ms: a
/// sandbox hibernated again gets a new prefix, so an old upload still running cannot mix
/// into the new image).
pub fn hibernate_prefix(id: &str, at: i64) -> String {
    format!("hibernate/{id}/{at}")
}

/// The object-store prefix of a cross-host fork's capture (fork tree `tree_id`).
pub fn fork_prefix(tree_id: &str) -> String {
    format!("forks/{tree_id}")
}

/// The object-store prefix of the template build whose rootfs has manifest digest `digest`
/// (content-addressed: hosts holding copies of one build publish it once).
pub fn template_build_prefix(digest: &str) -> String {
    format!("template-builds/{digest}")
}

/// The object naming the published build of built-in template `name` baked from the recipe
/// whose hash is `recipe_hash` (JSON `{"digest": ...}`): a host baking that recipe fetches
/// that build instead (`host::shared_builds::FetchingBuilder`).
pub fn recipe_pointer(name: &str, recipe_hash: &str) -> String {
    format!("template-recipes/{name}/{recipe_hash}.json")
}

/// Where this host keeps images fetched from the object store: `<data_dir>/object-cache/`.
pub fn cache_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("object-cache")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_image_round_trips_checked_and_is_deleted_whole() {
        let root = tempfile_dir("objects-rt");
        let store_dir = root.join("store");
        let objects = Objects::open(&format!("file://{}", store_dir.display())).unwrap();
        let image = root.join("image");
        std::fs::create_dir_all(&image).unwrap();
        std::fs::write(image.join("pages.img"), vec![7u8; (PART_BYTES * 2) + 5]).unwrap();
        std::fs::write(image.join("checkpoint.img"), b"state").unwrap();
        std::fs::write(image.join("checkpoint.log"), b"").unwrap();
        assert!(!objects.exists("snapshots/s1").await.unwrap());
        let n = objects.upload_dir("snapshots/s1", &image).await.unwrap();
        // pages.img (32 MiB of one byte) travels compressed; the small files as they are.
        assert!(n < 1 << 20, "{n} bytes uploaded");
        let stored = std::fs::metadata(store_dir.join("snapshots/s1/pages.img"))
            .unwrap()
            .len();
        assert!(stored < 1 << 20, "pages.img stored as {stored} bytes");
        assert!(objects.exists("snapshots/s1").await.unwrap());
        let copy = root.join("copy");
        let (a, b) = tokio::join!(
            objects.fetch_dir("snapshots/s1", &copy),
            objects.fetch_dir("snapshots/s1", &copy)
        );
        a.unwrap();
        b.unwrap();
        assert_eq!(
            std::fs::read(copy.join("checkpoint.img")).unwrap(),
            b"state"
        );
        assert_eq!(
            std::fs::metadata(copy.join("pages.img")).unwrap().len(),
            (PART_BYTES * 2 + 5) as u64
        );
        // A corrupted object is refused and leaves nothing behind.
        std::fs::write(store_dir.join("snapshots/s1/checkpoint.img"), b"STATE").unwrap();
        let again = root.join("again");
        assert!(matches!(
            objects.fetch_dir("snapshots/s1", &again).await,
            Err(ObjectsError::Checksum { .. })
        ));
        assert!(!again.exists() && !crate::host::partial_path(&again).exists());
        objects.delete_prefix("snapshots/s1").await.unwrap();
        assert!(objects.list("snapshots/s1").await.unwrap().is_empty());
        assert!(matches!(
            objects.fetch_dir("snapshots/s1", &again).await,
            Err(ObjectsError::Missing(_))
        ));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn a_stream_round_trips_checked_and_a_failed_producer_leaves_no_object() {
        let root = tempfile_dir("objects-stream");
        let store_dir = root.join("store");
        let objects = Objects::open(&format!("file://{}", store_dir.display())).unwrap();
        let data: Vec<u8> = (0..(PART_BYTES * 2 + 77))
            .map(|i| (i % 251) as u8)
            .collect();
        let sent = data.clone();
        let (n, raw, tag) = objects
            .upload_stream("template-builds/d1", "rootfs.tar", move |w| {
                w.write_all(&sent)?;
                Ok("made")
            })
            .await
            .unwrap();
        // Stored compressed (the pattern shrinks a lot); read back whole, it is the data.
        assert_eq!((tag, raw), ("made", data.len() as u64));
        assert!(n < data.len() as u64 / 10, "{n} bytes stored");
        assert_eq!(
            objects.only_file("template-builds/d1").await.unwrap(),
            "rootfs.tar"
        );
        let whole = objects
            .fetch_stream("template-builds/d1", "rootfs.tar", |r| {
                let mut all = Vec::new();
                r.read_to_end(&mut all)?;
                Ok(all)
            })
            .await
            .unwrap();
        assert!(whole == data, "the data came back changed");
        assert_eq!(
            objects
                .stream_size("template-builds/d1", "rootfs.tar")
                .await
                .unwrap(),
            raw
        );
        // The consumer reads only a part: the rest is read (and checked) all the same.
        let head = objects
            .fetch_stream("template-builds/d1", "rootfs.tar", |r| {
                let mut head = vec![0u8; 10];
                r.read_exact(&mut head)?;
                Ok(head)
            })
            .await
            .unwrap();
        assert_eq!(head, data[..10]);
        std::fs::write(store_dir.join("template-builds/d1/rootfs.tar"), b"other").unwrap();
        assert!(matches!(
            objects
                .fetch_stream("template-builds/d1", "rootfs.tar", |r| {
                    std::io::copy(r, &mut std::io::sink())
                })
                .await,
            Err(ObjectsError::Checksum { .. })
        ));
        let failed = objects
            .upload_stream("template-builds/d2", "rootfs.tar", |w| {
                w.write_all(&[1u8; 1000])?;
                Err::<(), _>(std::io::Error::other("walk failed"))
            })
            .await;
        assert!(matches!(failed, Err(ObjectsError::Io(_))));
        assert!(!objects.exists("template-builds/d2").await.unwrap());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn only_s3_and_file_urls_are_accepted() {
        for bad in ["http://x", "s3://", "s3://a/b", "file://rel", "gs://b"] {
            assert!(
                matches!(Objects::open(bad), Err(ObjectsError::Config(_))),
                "{bad}"
            );
        }
    }

    fn tempfile_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("{tag}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
