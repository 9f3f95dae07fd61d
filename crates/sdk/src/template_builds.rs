//! Templates users build (contract §2.8, §3.3; issue 13): from a Dockerfile with its context
//! files, or from a rootfs tar, sent as `multipart/form-data` exactly as the published SDKs
//! send it (text fields, one file part per context file named by its relative path, or a
//! `rootfs` file part); the build's status; its log, followed live; deleting a template.
//!
//! ```no_run
//! use futures::StreamExt;
//! use pandastack_sdk::template_builds::BuildOptions;
//! use pandastack_sdk::Client;
//!
//! # async fn demo(client: Client) -> pandastack_sdk::Result<()> {
//! let dockerfile = "FROM base\nRUN pip install six\n";
//! let build = client
//!     .templates()
//!     .build_from_dockerfile("with-six", dockerfile, &[], &BuildOptions::default())
//!     .await?;
//! let mut log = client.templates().build_logs(&build.id, true).await?;
//! while let Some(line) = log.next().await {
//!     println!("{}", line?);
//! }
//! assert_eq!(client.templates().get_build(&build.id).await?.status, "done");
//! # Ok(()) }
//! ```

use crate::error::{Error, Result};
use crate::http::{Body, Call, Deadline};
use crate::sse::SseReader;
use crate::workspace::Templates;
use futures::stream::BoxStream;
use futures::StreamExt;
use pandastack_api as api;
use reqwest::multipart::{Form, Part};
use reqwest::Method;
use std::path::{Path, PathBuf};

/// Resources baked into the template (contract §2.8: `cpu`, `memory_mb`, `size_mb`); the
/// server's defaults for those left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuildOptions {
    /// vCPUs of the template's sandboxes.
    pub cpu: Option<u32>,
    /// Memory of the template's sandboxes, MiB.
    pub memory_mb: Option<u32>,
    /// Disk size, MiB.
    pub size_mb: Option<u32>,
}

/// One file of a Dockerfile's build context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextFile {
    /// Its path in the context, `/`-separated and relative (`src/app.py`).
    pub path: String,
    /// Where to read it from.
    pub file: PathBuf,
}

impl Templates<'_> {
    /// Starts a build from `dockerfile` (its text) and `context` (`POST /v1/templates/build`);
    /// the reply is the build, usually `queued` (`done` when nothing changed, `failed` for a
    /// Dockerfile the server cannot build).
    ///
    /// # Errors
    /// [`Error::Io`] when a context file cannot be opened; as any call (400 naming a bad
    /// field, 429 for a used-up template quota).
    pub async fn build_from_dockerfile(
        &self,
        name: &str,
        dockerfile: &str,
        context: &[ContextFile],
        options: &BuildOptions,
    ) -> Result<api::TemplateBuild> {
        let mut form = fields(name, options).text("dockerfile", dockerfile.to_string());
        for f in context {
            let part = file_part(&f.file).await?.file_name(f.path.clone());
            form = form.part(f.path.clone(), part);
        }
        self.submit(form).await
    }

    /// Starts a build whose rootfs is the tar (or tar.gz) at `rootfs`.
    ///
    /// # Errors
    /// As [`Templates::build_from_dockerfile`].
    pub async fn build_rootfs(
        &self,
        name: &str,
        rootfs: &Path,
        options: &BuildOptions,
    ) -> Result<api::TemplateBuild> {
        let part = file_part(rootfs).await?;
        let file_name = rootfs
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "rootfs.tar".into());
        let part = part
            .file_name(file_name)
            .mime_str("application/x-tar")
            .map_err(|e| Error::Config(format!("rootfs part: {e}")))?;
        self.submit(fields(name, options).part("rootfs", part))
            .await
    }

    async fn submit(&self, form: Form) -> Result<api::TemplateBuild> {
        let call = Call::new(Method::POST, &["templates", "build"])
            .body(Body::Multipart(Some(form)))
            .deadline(Deadline::Never);
        self.client.json(call).await
    }

    /// The workspace's builds, newest first (`GET /v1/templates/builds`).
    ///
    /// # Errors
    /// As any call.
    pub async fn builds(&self) -> Result<Vec<api::TemplateBuild>> {
        self.client
            .json(Call::new(Method::GET, &["templates", "builds"]))
            .await
    }

    /// One build by id.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown id or another workspace's build.
    pub async fn get_build(&self, id: &str) -> Result<api::TemplateBuild> {
        self.client
            .json(Call::new(Method::GET, &["templates", "builds", id]))
            .await
    }

    /// The build's log lines (contract §3.3: one `data:` line each, ended by `data: end` and
    /// `event: done`); with `follow`, as they are written until the build ends.
    ///
    /// # Errors
    /// Before the stream starts, as any call; items: [`Error::Connection`] when it breaks.
    pub async fn build_logs(
        &self,
        id: &str,
        follow: bool,
    ) -> Result<BoxStream<'static, Result<String>>> {
        let mut call = Call::new(Method::GET, &["templates", "builds", id, "logs"])
            .accept("text/event-stream")
            .deadline(Deadline::Never);
        if follow {
            call = call.query("follow", "1");
        }
        let sse = SseReader::new(self.client.send(call).await?);
        Ok(futures::stream::unfold(Some(sse), |state| async move {
            let mut sse = state?;
            loop {
                match sse.next().await {
                    Ok(Some(ev)) if ev.name == "done" => return None,
                    Ok(Some(ev)) if ev.data == "end" => continue,
                    Ok(Some(ev)) => return Some((Ok(ev.data), Some(sse))),
                    Ok(None) => return None,
                    Err(e) => return Some((Err(e), None)),
                }
            }
        })
        .boxed())
    }

    /// Deletes one of the workspace's templates (`DELETE /v1/templates/{name}`); its running
    /// sandboxes keep running, its snapshots stop restoring.
    ///
    /// # Errors
    /// [`Error::NotFound`]; [`Error::Auth`]-class 403 for a built-in.
    pub async fn delete(&self, name: &str) -> Result<()> {
        self.client
            .unit(Call::new(Method::DELETE, &["templates", name]))
            .await
    }
}

fn fields(name: &str, options: &BuildOptions) -> Form {
    // Part names are context paths (`src/app.py`): sent as they are, like the published
    // SDKs do, not as RFC 2231 `name*=` parameters the server's parser would not read.
    let mut form = Form::new()
        .percent_encode_noop()
        .text("name", name.to_string());
    for (key, value) in [
        ("cpu", options.cpu),
        ("memory_mb", options.memory_mb),
        ("size_mb", options.size_mb),
    ] {
        if let Some(v) = value {
            form = form.text(key, v.to_string());
        }
    }
    form
}

/// A part streaming `path` (never read into memory).
async fn file_part(path: &Path) -> Result<Part> {
    let io = |source| Error::Io {
        what: format!("reading {}", path.display()),
        source,
    };
    let file = tokio::fs::File::open(path).await.map_err(io)?;
    let len = file.metadata().await.map_err(io)?.len();
    let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(file));
    Ok(Part::stream_with_length(body, len))
}
