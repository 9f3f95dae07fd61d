//! Template builds in object storage (issue 12 point 6: "cross-host restore needs the
//! byte-identical rootfs the image was taken on, so a template build is published once and
//! other hosts fetch it instead of baking their own").
//!
//! **Publish.** Before a host uploads an image (snapshot, hibernation, drain, cross-host fork
//! capture) it makes sure the template build the image ran on is in the object store:
//! `template-builds/<manifest digest>/rootfs-<uuid>.tar` (`pandastack_templates::transfer::pack`:
//! numeric owners, modes, hard links, times to the nanosecond) with the manifest listing its
//! size and SHA-256. The key is the rootfs manifest digest, so hosts holding copies of one
//! bake share one object and a second host never uploads it again; each host checks once per
//! process and digest. So an image is `uploaded` only when its build is too, and whichever
//! host restores it can get everything it needs. The start-up of a host with an object store
//! publishes its current builds in the background, off the first image's path.
//!
//! **Fetch.** A host restoring an image whose build it lacks (another bake of the template, a
//! user template built elsewhere, a build retired here since) uses, in order: its build of the
//! same directory with the same digest, any current build of its own with that digest, a copy
//! fetched earlier (`<data_dir>/fetched-templates/<digest>/rootfs`), or fetches one now:
//! the archive is streamed into `<digest>.partial/rootfs` (checked against the manifest's
//! SHA-256 as it is read; the host's disk reserve must hold its size), its manifest digest is
//! computed and compared with the image's, and only then is it renamed into place. Concurrent
//! restores of one build fetch it once.
//!
//! **Bakes.** Publishing a built-in's build also names it as *the* bake of its recipe
//! (`template-recipes/<name>/<recipe hash>.json`, written by a first host to publish one: two
//! publishing at once may both write it, and either is a good bake of the recipe);
//! `pandastack template-bake --object-store URL` on another host then fetches that build
//! ([`FetchingBuilder`]) instead of running mmdebstrap, so every host of a cluster holds the
//! same bytes and their images need no fetched builds at all. A host baked before the pointer
//! existed keeps its own bake and fetches builds per image as above.
//!
//! **Lifetime.** A fetched build stays while a sandbox of this host runs on it (hibernated
//! ones included) or a snapshot of this host was taken on it, and for 10 minutes after its
//! last use, then the sweeper removes it; a
//! restart removes half-fetched ones. Objects under `template-builds/` are never deleted by a
//! host: images on any host may need them, and one object per distinct build is small next to
//! the images.

use super::Host;
use crate::error::ApiError;
use crate::host::images::Origin;
use crate::objects::{self, ObjectsError};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Directory under the data dir holding template builds fetched from the object store.
pub const FETCHED_TEMPLATES_DIR: &str = "fetched-templates";
/// A fetched build no sandbox of this host runs on is removed this long after its last use.
const KEEP_UNUSED: Duration = Duration::from_secs(600);
/// Touched at every use of a fetched build (its mtime is the last use).
const USED: &str = "used";

/// What this host knows of published and fetched builds (one per host).
#[derive(Default)]
pub struct SharedBuilds {
    /// Digests known to be in the object store.
    published: Mutex<HashSet<String>>,
    /// One lock per digest being published or fetched (coalesces concurrent calls).
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl SharedBuilds {
    fn is_published(&self, digest: &str) -> bool {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(digest)
    }

    fn set_published(&self, digest: &str) {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(digest.to_string());
    }

    fn lock_of(&self, digest: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks.entry(digest.to_string()).or_default().clone()
    }
}

/// A manifest digest as written by this code: 64 lowercase hex digits (it names a directory
/// and an object prefix, so nothing else is accepted from an image row).
fn valid_digest(digest: &str) -> bool {
    digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Host {
    /// Makes sure the build `origin` names (a build of this host) is in the object store
    /// (module doc). Without an object store there is nothing to do.
    ///
    /// # Errors
    /// A build that is not in this data dir or cannot be packed; store errors.
    pub(super) async fn publish_origin(&self, origin: &Origin) -> Result<(), ObjectsError> {
        let Some(objects) = self.objects().cloned() else {
            return Ok(());
        };
        let digest = origin.manifest.clone();
        if !valid_digest(&digest) || self.shared_builds.is_published(&digest) {
            return Ok(());
        }
        let lock = self.shared_builds.lock_of(&digest);
        let _one = lock.lock().await;
        if self.shared_builds.is_published(&digest) {
            return Ok(());
        }
        publish(&objects, &self.cfg.data_dir, origin).await?;
        self.shared_builds.set_published(&digest);
        Ok(())
    }

    /// Publishes every current build of this host in the background (start-up, and after a
    /// template build), so the first image of each does not wait for it. Failures are logged:
    /// the first image's upload publishes again.
    pub fn publish_current_builds_later(self: &Arc<Self>) {
        if self.objects().is_none() {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            for t in me.all_current_templates() {
                let origin = match me
                    .origin_of(
                        &t.rootfs.display().to_string(),
                        &me.cfg.guest_dir.display().to_string(),
                    )
                    .await
                {
                    Ok(o) => o,
                    Err(e) => {
                        warn!(template = %t.name, error = %e, "rootfs manifest");
                        continue;
                    }
                };
                if let Err(e) = me.publish_origin(&origin).await {
                    warn!(template = %t.name, error = %e, "publishing a template build");
                }
            }
        });
    }

    /// This host's rootfs with the manifest digest of `origin`: one of its own builds, a copy
    /// fetched before, or one fetched from the object store now (module doc).
    ///
    /// # Errors
    /// 409 when no local build matches and the object store has none (or there is no object
    /// store); 507 when the host's disk reserve cannot hold the archive; 502 when the fetch
    /// fails or its copy does not have the image's digest.
    pub(super) async fn rootfs_for(&self, origin: &Origin) -> Result<PathBuf, ApiError> {
        let digest = &origin.manifest;
        for t in self.all_current_templates() {
            if self.manifest_of(&t.rootfs).await.ok().as_ref() == Some(digest) {
                return Ok(t.rootfs);
            }
        }
        let not_here = || {
            ApiError::Conflict(format!(
                "the image was taken on template build {} (rootfs manifest {}), which this host ({}) does not have{}",
                origin.build,
                &digest[..digest.len().min(16)],
                self.cfg.host_name,
                if self.objects().is_some() {
                    " and the object store does not hold"
                } else {
                    " (without an object store builds are not shared)"
                }
            ))
        };
        if !valid_digest(digest) {
            return Err(not_here());
        }
        let dir = self.cfg.data_dir.join(FETCHED_TEMPLATES_DIR).join(digest);
        let rootfs = dir.join("rootfs");
        let Some(objects) = self.objects().cloned() else {
            return Err(not_here());
        };
        let lock = self.shared_builds.lock_of(digest);
        let _one = lock.lock().await;
        if rootfs.is_dir() {
            touch_used(&dir);
            return Ok(rootfs);
        }
        let prefix = objects::template_build_prefix(digest);
        let found = match objects.only_file(&prefix).await {
            Ok(name) => objects.stream_size(&prefix, &name).await.map(|n| (name, n)),
            Err(e) => Err(e),
        };
        let (archive, size) = match found {
            Ok(found) => found,
            Err(ObjectsError::Missing(_)) => return Err(not_here()),
            Err(e) => {
                return Err(ApiError::BadGateway(format!(
                    "template build {digest}: {e}"
                )))
            }
        };
        self.check_disk_reserve("template build fetch", size)?;
        let partial = super::partial_path(&dir);
        let started = Instant::now();
        let fetched = self
            .fetch_build(&objects, (&prefix, &archive), &partial, digest)
            .await;
        match fetched {
            Ok(()) => {
                // A `<digest>/` without `rootfs/` (a crash while one was removed) is in the way.
                let _ = std::fs::remove_dir_all(&dir);
                if let Err(e) = std::fs::rename(&partial, &dir) {
                    let _ =
                        tokio::task::spawn_blocking(move || std::fs::remove_dir_all(partial)).await;
                    return Err(ApiError::internal("template build fetch", e));
                }
                touch_used(&dir);
                self.manifests
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(rootfs.clone(), digest.clone());
                self.shared_builds.set_published(digest);
                crate::metrics::observe("template_fetch", started);
                info!(build = %origin.build, digest = %&digest[..16], bytes = size,
                    ms = started.elapsed().as_millis() as u64, "template build fetched");
                Ok(rootfs)
            }
            Err(e) => {
                let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(partial)).await;
                Err(e)
            }
        }
    }

    /// Fetches the archive under `prefix` into `partial/rootfs` and checks its digest.
    async fn fetch_build(
        &self,
        objects: &objects::Objects,
        (prefix, archive): (&str, &str),
        partial: &Path,
        digest: &str,
    ) -> Result<(), ApiError> {
        let _ = std::fs::remove_dir_all(partial);
        let rootfs = partial.join("rootfs");
        std::fs::create_dir_all(&rootfs)
            .map_err(|e| ApiError::internal("template build fetch", e))?;
        let target = rootfs.clone();
        objects
            .fetch_stream(prefix, archive, move |input| {
                pandastack_templates::transfer::unpack(input, &target)
            })
            .await
            .map_err(|e| {
                ApiError::BadGateway(format!("fetching template build {}: {e}", &digest[..16]))
            })?;
        let got = tokio::task::spawn_blocking(move || {
            pandastack_templates::transfer::manifest_digest(&rootfs)
        })
        .await
        .map_err(|e| ApiError::internal("template build fetch", e))?
        .map_err(|e| ApiError::internal("template build fetch", e))?;
        if got != digest {
            return Err(ApiError::BadGateway(format!(
                "the fetched template build {} unpacked to manifest {}: not the build the image needs",
                &digest[..16],
                &got[..16]
            )));
        }
        Ok(())
    }

    /// Removes fetched builds no sandbox of this host runs on and unused for
    /// [`KEEP_UNUSED`] (module doc). Run by the sweeper every 10 s.
    pub(super) async fn sweep_fetched_builds(&self) {
        let root = self.cfg.data_dir.join(FETCHED_TEMPLATES_DIR);
        let Ok(entries) = std::fs::read_dir(&root) else {
            return;
        };
        let mut in_use = HashSet::new();
        for live in self.all() {
            in_use.insert(live.row.lock().await.rootfs.clone());
        }
        // Snapshots taken here on a fetched build restore onto it too.
        match self.store.snapshot_rootfs(&self.cfg.host_name).await {
            Ok(paths) => in_use.extend(paths),
            Err(e) => {
                warn!(error = %e, "fetched builds: cannot read snapshots; keeping all");
                return;
            }
        }
        for entry in entries.flatten() {
            let dir = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !valid_digest(&name) {
                continue; // `.partial`: a fetch in flight (or, at start-up, removed)
            }
            if in_use.contains(&dir.join("rootfs").display().to_string()) {
                touch_used(&dir);
                continue;
            }
            let lock = self.shared_builds.lock_of(&name);
            let _one = lock.lock().await;
            // Decided under the lock: a restore that took the build meanwhile touched it.
            let idle = std::fs::metadata(dir.join(USED))
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age > KEEP_UNUSED);
            if idle {
                info!(digest = %&name[..16], "removing a fetched template build nothing uses");
                let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
            }
        }
    }

    /// Removes half-fetched builds (start-up: no fetch runs yet).
    pub(super) fn clear_partial_fetched_builds(&self) {
        let Ok(entries) = std::fs::read_dir(self.cfg.data_dir.join(FETCHED_TEMPLATES_DIR)) else {
            return;
        };
        for entry in entries.flatten() {
            if !valid_digest(&entry.file_name().to_string_lossy()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// Puts the build `origin` names (under `data_dir`) in the object store unless it is there,
/// and for a built-in names it the bake of its recipe (module doc).
///
/// # Errors
/// A build outside the data dir or that cannot be packed; store errors.
pub async fn publish(
    objects: &objects::Objects,
    data_dir: &Path,
    origin: &Origin,
) -> Result<(), ObjectsError> {
    let digest = &origin.manifest;
    let prefix = objects::template_build_prefix(digest);
    if objects.exists(&prefix).await? {
        info!(build = %origin.build, digest = %&digest[..16], "template build already published");
    } else {
        if origin.build.contains("..") {
            return Err(ObjectsError::Config(format!(
                "template build {}: not in the data dir",
                origin.build
            )));
        }
        let rootfs = data_dir.join(&origin.build).join("rootfs");
        let started = Instant::now();
        // A name of its own: a host racing this one for the same digest writes its own
        // object, and the manifest written last names one whole archive.
        let archive = format!("rootfs-{}.tar", uuid::Uuid::new_v4().simple());
        let (bytes, _raw, tree) = objects
            .upload_stream(&prefix, &archive, move |out| {
                pandastack_templates::transfer::pack(&rootfs, out)
            })
            .await?;
        crate::metrics::observe("template_publish", started);
        info!(
            build = %origin.build,
            digest = %&digest[..16],
            bytes,
            entries = tree.entries,
            ms = started.elapsed().as_millis() as u64,
            "template build published"
        );
    }
    publish_recipe_pointer(objects, origin).await
}

/// For a built-in's build (`templates/<name>/<recipe hash>-g<N>`): names it the bake of its
/// recipe unless another host's bake already is (module doc, "Bakes").
async fn publish_recipe_pointer(
    objects: &objects::Objects,
    origin: &Origin,
) -> Result<(), ObjectsError> {
    let mut parts = origin.build.split('/');
    let (Some("templates"), Some(name), Some(build), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Ok(());
    };
    let Some((hash, _generation)) = build.rsplit_once("-g") else {
        return Ok(());
    };
    if !super::catalog::is_builtin(name) {
        return Ok(());
    }
    let pointer = objects::recipe_pointer(name, hash);
    if objects.get_small(&pointer).await?.is_none() {
        let body = serde_json::json!({ "digest": origin.manifest, "build": origin.build });
        objects
            .put_small(&pointer, body.to_string().into_bytes())
            .await?;
        info!(template = name, recipe = %&hash[..hash.len().min(16)], "named this host's build the bake of its recipe");
    }
    Ok(())
}

/// A template builder for `pandastack template-bake --object-store URL` (module doc,
/// "Bakes"): it fetches the build published for the recipe when there is one, checked (the
/// archive's SHA-256 while it is read, then the rootfs digest), and bakes with `inner`
/// otherwise, also when the fetch fails (logged).
pub struct FetchingBuilder {
    /// The builder that bakes when nothing is published (mmdebstrap).
    pub inner: Arc<dyn pandastack_templates::Builder>,
    pub objects: Arc<objects::Objects>,
    /// The runtime the object-store calls run on (the bake itself blocks).
    pub runtime: tokio::runtime::Handle,
}

impl FetchingBuilder {
    /// The published build's digest for `recipe`, fetched into `rootfs`; `None` when no
    /// bake of it is published.
    fn fetch(
        &self,
        recipe: &pandastack_templates::Recipe,
        rootfs: &Path,
    ) -> Result<Option<String>, String> {
        self.runtime.block_on(async {
            let pointer = objects::recipe_pointer(&recipe.name, &recipe.hash());
            let Some(body) = self
                .objects
                .get_small(&pointer)
                .await
                .map_err(|e| e.to_string())?
            else {
                return Ok(None);
            };
            let digest = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["digest"].as_str().map(str::to_owned))
                .filter(|d| valid_digest(d))
                .ok_or_else(|| format!("{pointer} is not a build pointer"))?;
            std::fs::create_dir_all(rootfs).map_err(|e| e.to_string())?;
            let target = rootfs.to_path_buf();
            let prefix = objects::template_build_prefix(&digest);
            let archive = self
                .objects
                .only_file(&prefix)
                .await
                .map_err(|e| e.to_string())?;
            self.objects
                .fetch_stream(&prefix, &archive, move |input| {
                    pandastack_templates::transfer::unpack(input, &target)
                })
                .await
                .map_err(|e| e.to_string())?;
            let target = rootfs.to_path_buf();
            let got = tokio::task::spawn_blocking(move || {
                pandastack_templates::transfer::manifest_digest(&target)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
            if got != digest {
                return Err(format!(
                    "the fetched build unpacked to manifest {got}, not {digest}"
                ));
            }
            Ok(Some(digest))
        })
    }
}

impl pandastack_templates::Builder for FetchingBuilder {
    fn build(
        &self,
        recipe: &pandastack_templates::Recipe,
        work_dir: &Path,
        rootfs: &Path,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), pandastack_templates::BakeError> {
        let started = Instant::now();
        match self.fetch(recipe, rootfs) {
            Ok(Some(digest)) => {
                log(&format!(
                    "I: fetched the published bake of this recipe from {} (rootfs manifest {}) in {:.1} s",
                    self.objects.url,
                    &digest[..16],
                    started.elapsed().as_secs_f64()
                ));
                return Ok(());
            }
            Ok(None) => log(&format!(
                "I: {} holds no bake of this recipe: baking here",
                self.objects.url
            )),
            Err(e) => log(&format!(
                "W: fetching the published bake failed ({e}): baking here"
            )),
        }
        // The inner builder starts from nothing.
        let _ = std::fs::remove_dir_all(rootfs);
        self.inner.build(recipe, work_dir, rootfs, log)
    }

    fn verify(
        &self,
        recipe: &pandastack_templates::Recipe,
        rootfs: &Path,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), pandastack_templates::BakeError> {
        self.inner.verify(recipe, rootfs, log)
    }
}

fn touch_used(dir: &Path) {
    // Content, not an empty write: every write moves the mtime.
    if let Err(e) = std::fs::write(dir.join(USED), pandastack_store::now_ms().to_string()) {
        warn!(dir = %dir.display(), error = %e, "marking a fetched template build used");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pandastack_templates::{BakeError, Builder, Recipe, TemplateStore};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Bakes a tiny rootfs whose file times differ per bake (as two real bakes would).
    #[derive(Default)]
    struct FakeBake {
        runs: AtomicUsize,
    }

    impl Builder for FakeBake {
        fn build(
            &self,
            _: &Recipe,
            _: &Path,
            rootfs: &Path,
            _: &mut dyn FnMut(&str),
        ) -> Result<(), BakeError> {
            self.runs.fetch_add(1, Ordering::SeqCst);
            std::fs::create_dir_all(rootfs.join("usr/bin")).unwrap();
            std::fs::write(rootfs.join("usr/bin/bash"), b"bash").unwrap();
            std::os::unix::fs::symlink("usr/bin", rootfs.join("bin")).unwrap();
            Ok(())
        }

        fn verify(
            &self,
            _: &Recipe,
            rootfs: &Path,
            _: &mut dyn FnMut(&str),
        ) -> Result<(), BakeError> {
            assert!(rootfs.join("usr/bin/bash").is_file());
            Ok(())
        }
    }

    fn fetching(
        objects: &Arc<objects::Objects>,
        rt: &tokio::runtime::Runtime,
        inner: Arc<FakeBake>,
    ) -> FetchingBuilder {
        FetchingBuilder {
            inner,
            objects: objects.clone(),
            runtime: rt.handle().clone(),
        }
    }

    /// Issue 12 point 6: the second host's bake of a recipe fetches the first host's
    /// published build (same digest, its own builder never runs); with nothing published
    /// it bakes.
    #[test]
    fn a_bake_fetches_the_published_build_of_its_recipe_instead_of_baking() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let root =
            std::env::temp_dir().join(format!("fetch-bake-{}", uuid::Uuid::new_v4().simple()));
        let objects =
            objects::Objects::open(&format!("file://{}", root.join("bucket").display())).unwrap();
        let recipe = pandastack_templates::builtin("base").unwrap();
        let noop = &mut |_: &str| {};

        // Host a: nothing published yet, so it bakes, then publishes as a server would.
        let a_inner = Arc::new(FakeBake::default());
        let a = TemplateStore::with_builder(
            root.join("a/templates"),
            Arc::new(fetching(&objects, &rt, a_inner.clone())),
        );
        let built = a.bake(&recipe, false, noop).unwrap();
        assert_eq!(a_inner.runs.load(Ordering::SeqCst), 1);
        let digest = pandastack_templates::transfer::manifest_digest(&built.rootfs).unwrap();
        let origin = Origin {
            build: format!("templates/base/{}", built.build_id),
            manifest: digest.clone(),
            guest: String::new(),
        };
        rt.block_on(publish(&objects, &root.join("a"), &origin))
            .unwrap();

        // Host b: fetches it; the result is a's build, byte for byte in the digest's terms.
        std::thread::sleep(Duration::from_millis(20)); // a bake here would get other times
        let b_inner = Arc::new(FakeBake::default());
        let b = TemplateStore::with_builder(
            root.join("b/templates"),
            Arc::new(fetching(&objects, &rt, b_inner.clone())),
        );
        let fetched = b.bake(&recipe, false, noop).unwrap();
        assert_eq!(
            b_inner.runs.load(Ordering::SeqCst),
            0,
            "b baked instead of fetching"
        );
        assert_eq!(
            pandastack_templates::transfer::manifest_digest(&fetched.rootfs).unwrap(),
            digest
        );

        // A host whose bake differs and publishes later does not replace the recipe's bake.
        let c_inner = Arc::new(FakeBake::default());
        let c = TemplateStore::with_builder(
            root.join("c/templates"),
            Arc::new(FakeBakeOnly(c_inner.clone())),
        );
        let other = c.bake(&recipe, false, noop).unwrap();
        let other_digest = pandastack_templates::transfer::manifest_digest(&other.rootfs).unwrap();
        assert_ne!(other_digest, digest);
        let c_origin = Origin {
            build: format!("templates/base/{}", other.build_id),
            manifest: other_digest,
            guest: String::new(),
        };
        rt.block_on(publish(&objects, &root.join("c"), &c_origin))
            .unwrap();
        let d_inner = Arc::new(FakeBake::default());
        let d = TemplateStore::with_builder(
            root.join("d/templates"),
            Arc::new(fetching(&objects, &rt, d_inner.clone())),
        );
        let d_build = d.bake(&recipe, false, noop).unwrap();
        assert_eq!(
            pandastack_templates::transfer::manifest_digest(&d_build.rootfs).unwrap(),
            digest
        );

        // A corrupted archive is refused (checksum) and the host bakes itself.
        let published = root
            .join("bucket")
            .join(objects::template_build_prefix(&digest));
        let archive = std::fs::read_dir(&published)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("rootfs-")
            })
            .unwrap();
        let mut bytes = std::fs::read(&archive).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&archive, bytes).unwrap();
        let e_inner = Arc::new(FakeBake::default());
        let e = TemplateStore::with_builder(
            root.join("e/templates"),
            Arc::new(fetching(&objects, &rt, e_inner.clone())),
        );
        e.bake(&recipe, false, noop).unwrap();
        assert_eq!(e_inner.runs.load(Ordering::SeqCst), 1);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// The fake bake without an object store.
    struct FakeBakeOnly(Arc<FakeBake>);

    impl Builder for FakeBakeOnly {
        fn build(
            &self,
            r: &Recipe,
            w: &Path,
            rootfs: &Path,
            log: &mut dyn FnMut(&str),
        ) -> Result<(), BakeError> {
            self.0.build(r, w, rootfs, log)
        }

        fn verify(
            &self,
            r: &Recipe,
            rootfs: &Path,
            log: &mut dyn FnMut(&str),
        ) -> Result<(), BakeError> {
            self.0.verify(r, rootfs, log)
        }
    }

    #[test]
    fn only_well_formed_digests_name_a_directory() {
        assert!(valid_digest(&"ab".repeat(32)));
        for bad in [
            "",
            "../../etc",
            &"AB".repeat(32),
            &"a".repeat(63),
            &format!("{}/", "a".repeat(63)),
        ] {
            assert!(!valid_digest(bad), "{bad}");
        }
    }
}
