//! Sandboxes (contract §2.1, §2.2; seed 003): [`Sandboxes`] creates, lists, gets and deletes;
//! a [`Sandbox`] handle carries the lifecycle calls, snapshots, forks, logs and metrics (exec,
//! files and code contexts are in their own modules).

use crate::client::{Client, SLOW_TIMEOUT};
use crate::error::Result;
use crate::http::{Call, Deadline};
use crate::sse::{decode, SseReader};
use futures::stream::BoxStream;
use futures::StreamExt;
use pandastack_api as api;
use reqwest::Method;
use std::collections::BTreeMap;

/// `client.sandboxes()`: the workspace's sandboxes.
#[derive(Debug, Clone, Copy)]
pub struct Sandboxes<'a> {
    pub(crate) client: &'a Client,
}

impl Client {
    /// The workspace's sandboxes.
    pub fn sandboxes(&self) -> Sandboxes<'_> {
        Sandboxes { client: self }
    }
}

impl Sandboxes<'_> {
    /// Creates a sandbox (`POST /v1/sandboxes`): from a template (default `code-interpreter`,
    /// ttl 3600 s) or, with `from_snapshot`, a restore whose template comes from the snapshot
    /// (seed 000 §2). Takes part in the capacity retry (contract §1.4); deadline 180 s.
    ///
    /// # Errors
    /// [`crate::Error::BadRequest`] naming a bad field; [`crate::Error::NotFound`] for an
    /// unknown template or snapshot; [`crate::Error::Conflict`] for a snapshot of an older
    /// template generation; [`crate::Error::Server`] when the boot failed.
    pub async fn create(&self, req: api::CreateSandbox) -> Result<Sandbox> {
        let call = Call::new(Method::POST, &["sandboxes"])
            .json(&without_nulls(&req)?)?
            .deadline(Deadline::After(SLOW_TIMEOUT))
            .capacity();
        let info = self.client.json(call).await?;
        Ok(Sandbox::from_info(self.client.clone(), info))
    }

    /// The workspace's live sandboxes (`GET /v1/sandboxes`).
    ///
    /// # Errors
    /// As any call.
    pub async fn list(&self) -> Result<Vec<api::Sandbox>> {
        self.client
            .json(Call::new(Method::GET, &["sandboxes"]))
            .await
    }

    /// A handle on sandbox `id`, after reading it (`GET /v1/sandboxes/{id}`).
    ///
    /// # Errors
    /// [`crate::Error::NotFound`] when it is not in the workspace; 400 for an id that is not a
    /// UUID.
    pub async fn get(&self, id: &str) -> Result<Sandbox> {
        let info = self
            .client
            .json(Call::new(Method::GET, &["sandboxes", id]))
            .await?;
        Ok(Sandbox::from_info(self.client.clone(), info))
    }

    /// Deletes sandbox `id` with its processes and files (`DELETE /v1/sandboxes/{id}`); its fork
    /// children go with it unless promoted.
    ///
    /// # Errors
    /// [`crate::Error::NotFound`]; as any call.
    pub async fn delete(&self, id: &str) -> Result<()> {
        self.client
            .unit(
                Call::new(Method::DELETE, &["sandboxes", id])
                    .deadline(Deadline::After(SLOW_TIMEOUT)),
            )
            .await
    }
}

/// A request body as the SDK sends it: JSON without its `null` top-level keys, so that only
/// what the caller set is sent (as the Python SDK does, contract §2.1).
///
/// # Errors
/// [`crate::Error::Decode`] when the value does not serialize (never for the wire types).
pub fn without_nulls<T: serde::Serialize>(req: &T) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(req).map_err(|e| crate::Error::Decode {
        what: "request body".into(),
        message: e.to_string(),
    })?;
    if let Some(m) = v.as_object_mut() {
        m.retain(|_, x| !x.is_null());
    }
    Ok(v)
}

/// A handle on one sandbox: its id, the [`api::Sandbox`] it was last read as, and the client.
/// Cheap to clone. [`Sandbox::info`] is not refreshed by calls; use [`Sandbox::refresh`].
#[derive(Debug, Clone)]
pub struct Sandbox {
    client: Client,
    info: api::Sandbox,
}

/// Which output [`Sandbox::logs`] shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStream {
    Stdout,
    Stderr,
    Both,
}

impl LogStream {
    fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
            LogStream::Both => "both",
        }
    }
}

impl Sandbox {
    /// A handle from a sandbox JSON the caller already has.
    pub fn from_info(client: Client, info: api::Sandbox) -> Sandbox {
        Sandbox { client, info }
    }

    /// The sandbox id (a UUID).
    pub fn id(&self) -> &str {
        &self.info.id
    }

    /// The sandbox as last read.
    pub fn info(&self) -> &api::Sandbox {
        &self.info
    }

    /// The client this handle uses.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The same sandbox reached through `client` (e.g. another key of the same workspace).
    pub fn with_client(&self, client: Client) -> Sandbox {
        Sandbox {
            client,
            info: self.info.clone(),
        }
    }

    fn call(&self, method: Method, rest: &[&str]) -> Call {
        let mut segments = vec!["sandboxes", self.id()];
        segments.extend_from_slice(rest);
        Call::new(method, &segments)
    }

    /// Reads the sandbox again and stores the result in the handle.
    ///
    /// # Errors
    /// [`crate::Error::NotFound`] once it is gone.
    pub async fn refresh(&mut self) -> Result<&api::Sandbox> {
        self.info = self.client.json(self.call(Method::GET, &[])).await?;
        Ok(&self.info)
    }

    /// Deletes the sandbox (Py `kill()`).
    ///
    /// # Errors
    /// [`crate::Error::NotFound`] when it is already gone.
    pub async fn kill(&self) -> Result<()> {
        self.client.sandboxes().delete(self.id()).await
    }

    async fn transition(&self, verb: &str) -> Result<api::Sandbox> {
        let call = self
            .call(Method::POST, &[verb])
            .deadline(Deadline::After(SLOW_TIMEOUT));
        self.client.json(call).await
    }

    /// running -> paused: no CPU, memory kept (seed 003). Returns the sandbox after it.
    ///
    /// # Errors
    /// [`crate::Error::Conflict`] naming the state when it is not running.
    pub async fn pause(&self) -> Result<api::Sandbox> {
        self.transition("pause").await
    }

    /// paused -> running.
    ///
    /// # Errors
    /// [`crate::Error::Conflict`] when it is not paused.
    pub async fn resume(&self) -> Result<api::Sandbox> {
        self.transition("resume").await
    }

    /// running | paused -> hibernated: memory written to disk, no process left (seed 003).
    ///
    /// # Errors
    /// [`crate::Error::Conflict`] from another state.
    pub async fn hibernate(&self) -> Result<api::Sandbox> {
        self.transition("hibernate").await
    }

    /// hibernated -> running (any other request wakes it too).
    ///
    /// # Errors
    /// [`crate::Error::Conflict`] when it is not hibernated.
    pub async fn wake(&self) -> Result<api::Sandbox> {
        self.transition("wake").await
    }

    /// TTL, persistence and idle seconds (`GET .../lifecycle`).
    ///
    /// # Errors
    /// As any call.
    pub async fn lifecycle(&self) -> Result<api::Lifecycle> {
        self.client
            .json(self.call(Method::GET, &["lifecycle"]))
            .await
    }

    async fn patch_lifecycle(&self, patch: &api::LifecyclePatch) -> Result<api::Lifecycle> {
        let call = self
            .call(Method::PATCH, &["lifecycle"])
            .json(&without_nulls(patch)?)?;
        self.client.json(call).await
    }

    /// Sets the seconds of inactivity until the sandbox is killed (Py `set_ttl`), 1 to 30 days.
    ///
    /// # Errors
    /// [`crate::Error::BadRequest`] out of range.
    pub async fn set_ttl(&self, seconds: i64) -> Result<api::Lifecycle> {
        self.patch_lifecycle(&api::LifecyclePatch {
            ttl_seconds: Some(seconds),
            persistent: None,
        })
        .await
    }

    /// Makes the sandbox persistent (no TTL; hibernated when idle) or not (Py `set_persistent`).
    ///
    /// # Errors
    /// As any call.
    pub async fn set_persistent(&self, persistent: bool) -> Result<api::Lifecycle> {
        self.patch_lifecycle(&api::LifecyclePatch {
            ttl_seconds: None,
            persistent: Some(persistent),
        })
        .await
    }

    /// Captures memory, processes and files into a snapshot that outlives the sandbox (seed 000
    /// §2). Deadline 180 s, as Py.
    ///
    /// # Errors
    /// [`crate::Error::Conflict`] when the sandbox is not running or paused.
    pub async fn snapshot(&self) -> Result<api::Snapshot> {
        let call = self
            .call(Method::POST, &["snapshots"])
            .deadline(Deadline::After(SLOW_TIMEOUT));
        self.client.json(call).await
    }

    /// Forks the running sandbox into one copy-on-write child carrying `metadata` plus
    /// `parent_id` and `fork_tree_id` (seed 000 §3). The parent keeps running. Capacity retry.
    ///
    /// # Errors
    /// [`crate::Error::Conflict`] when it is not running.
    pub async fn fork(&self, metadata: Option<BTreeMap<String, String>>) -> Result<Sandbox> {
        let call = self
            .call(Method::POST, &["fork"])
            .json(&api::ForkRequest {
                metadata,
                volumes: None,
                host: None,
            })?
            .deadline(Deadline::After(SLOW_TIMEOUT))
            .capacity();
        let info = self.client.json(call).await?;
        Ok(Sandbox::from_info(self.client.clone(), info))
    }

    /// Forks into `count` children at once from one capture (seed 000 §3 `fork_tree`).
    ///
    /// # Errors
    /// [`crate::Error::BadRequest`] for a count of 0 or over the server's limit (16).
    pub async fn fork_tree(
        &self,
        count: usize,
        metadata: Option<BTreeMap<String, String>>,
    ) -> Result<Vec<Sandbox>> {
        let call = self
            .call(Method::POST, &["fork-tree"])
            .json(&api::ForkTreeRequest {
                count,
                metadata,
                volumes: None,
            })?
            .deadline(Deadline::After(SLOW_TIMEOUT))
            .capacity();
        let infos: Vec<api::Sandbox> = self.client.json(call).await?;
        Ok(infos
            .into_iter()
            .map(|i| Sandbox::from_info(self.client.clone(), i))
            .collect())
    }

    /// Makes this fork child a standalone sandbox (it no longer dies with its parent), optionally
    /// deleting its siblings (contract §2.1 `promote`).
    ///
    /// # Errors
    /// [`crate::Error::Conflict`] when it is not a fork child (or not of `tree_id`).
    pub async fn promote(&self, req: api::PromoteRequest) -> Result<api::Promotion> {
        let call = self.call(Method::POST, &["promote"]).json(&req)?;
        self.client.json(call).await
    }

    /// What the sandbox's commands and kernels printed, as text (the last 1 MiB).
    ///
    /// # Errors
    /// As any call.
    pub async fn logs(&self, stream: LogStream) -> Result<String> {
        let call = self
            .call(Method::GET, &["logs"])
            .query("stream", stream.as_str())
            .query("follow", "false")
            .accept("text/plain");
        let resp = self.client.send(call).await?;
        resp.text()
            .await
            .map_err(|e| crate::http::connection_error(&e))
    }

    /// The stored log lines, then each new one as it is written, until the sandbox is gone or
    /// the stream is dropped (`follow=true`, SSE, contract §3.2).
    ///
    /// # Errors
    /// Before the stream starts, as any call; items: [`crate::Error::Connection`] when it breaks.
    pub async fn logs_follow(
        &self,
        stream: LogStream,
    ) -> Result<BoxStream<'static, Result<api::LogLine>>> {
        let call = self
            .call(Method::GET, &["logs"])
            .query("stream", stream.as_str())
            .query("follow", "true")
            .accept("text/event-stream")
            .deadline(Deadline::Never);
        let sse = SseReader::new(self.client.send(call).await?);
        Ok(futures::stream::unfold(sse, |mut sse| async move {
            match sse.next().await {
                Ok(Some(ev)) => Some((decode::<api::LogLine>(&ev, "log stream"), sse)),
                Ok(None) => None,
                Err(e) => Some((Err(e), sse)),
            }
        })
        .boxed())
    }

    /// The sandbox's state transitions so far (`GET .../events`).
    ///
    /// # Errors
    /// As any call.
    pub async fn events(&self) -> Result<Vec<api::Event>> {
        self.client.json(self.call(Method::GET, &["events"])).await
    }

    /// TCP ports listening inside the sandbox, each with the path of its proxy
    /// (`GET .../ports`, issue 7).
    ///
    /// # Errors
    /// [`crate::Error::Conflict`] when the sandbox is not running.
    pub async fn ports(&self) -> Result<Vec<api::Port>> {
        let ports: api::Ports = self.client.json(self.call(Method::GET, &["ports"])).await?;
        Ok(ports.ports)
    }

    /// A signed, expiring URL that opens `port` of the sandbox in a browser without an API
    /// key (`POST .../preview-token`, issue 7); `ttl_seconds` defaults to the server's 3600.
    ///
    /// # Errors
    /// [`crate::Error::BadRequest`] for port 0 or a TTL over 7 days.
    pub async fn preview_token(
        &self,
        port: u16,
        ttl_seconds: Option<u64>,
    ) -> Result<api::PreviewToken> {
        let call = self
            .call(Method::POST, &["preview-token"])
            .json(&api::PreviewTokenRequest { port, ttl_seconds })?;
        self.client.json(call).await
    }

    /// CPU and memory from the sandbox's cgroup (`GET .../metrics`).
    ///
    /// # Errors
    /// As any call.
    pub async fn metrics(&self) -> Result<api::SandboxMetrics> {
        self.client.json(self.call(Method::GET, &["metrics"])).await
    }
}
