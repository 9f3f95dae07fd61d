//! Workspace-wide resources: snapshots (contract §2.7), templates (§2.8), API tokens (§2.9),
//! the caller (`GET /v1/me`) and the live event stream (seed 003 "events stream").

use crate::client::Client;
use crate::error::Result;
use crate::http::{Call, Deadline};
use crate::sse::{decode, SseReader};
use futures::stream::BoxStream;
use futures::StreamExt;
use pandastack_api as api;
use reqwest::Method;

/// `client.snapshots()`.
#[derive(Debug, Clone, Copy)]
pub struct Snapshots<'a> {
    client: &'a Client,
}

/// `client.templates()` (builds: [`crate::template_builds`]).
#[derive(Debug, Clone, Copy)]
pub struct Templates<'a> {
    pub(crate) client: &'a Client,
}

/// `client.tokens()`: the workspace's API keys.
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'a> {
    client: &'a Client,
}

impl Client {
    /// The workspace's snapshots.
    pub fn snapshots(&self) -> Snapshots<'_> {
        Snapshots { client: self }
    }

    /// The templates: the server's built-ins and the workspace's own.
    pub fn templates(&self) -> Templates<'_> {
        Templates { client: self }
    }

    /// The workspace's API keys.
    pub fn tokens(&self) -> Tokens<'_> {
        Tokens { client: self }
    }

    /// The workspace and key prefix of this client's key (`GET /v1/me`).
    ///
    /// # Errors
    /// [`crate::Error::Auth`] for a bad key.
    pub async fn me(&self) -> Result<api::Me> {
        self.json(Call::new(Method::GET, &["me"])).await
    }

    /// Every state transition of the workspace's sandboxes as it happens (`GET /v1/events`,
    /// SSE), after first replaying those with `seq > since` when given. Runs until dropped.
    ///
    /// # Errors
    /// Before the stream starts, as any call; items: [`crate::Error::Connection`] when it
    /// breaks, [`crate::Error::Decode`] for a malformed event.
    pub async fn events(
        &self,
        since: Option<i64>,
    ) -> Result<BoxStream<'static, Result<api::Event>>> {
        let mut call = Call::new(Method::GET, &["events"])
            .accept("text/event-stream")
            .deadline(Deadline::Never);
        if let Some(s) = since {
            call = call.query("since", s.to_string());
        }
        let sse = SseReader::new(self.send(call).await?);
        Ok(futures::stream::unfold(sse, |mut sse| async move {
            loop {
                match sse.next().await {
                    Ok(Some(ev)) if ev.name == "transition" => {
                        return Some((decode::<api::Event>(&ev, "event stream"), sse))
                    }
                    Ok(Some(_)) => continue,
                    Ok(None) => return None,
                    Err(e) => return Some((Err(e), sse)),
                }
            }
        })
        .boxed())
    }
}

impl Snapshots<'_> {
    /// The workspace's snapshots, or one sandbox's (`GET /v1/snapshots[?sandbox_id=]`).
    ///
    /// # Errors
    /// As any call.
    pub async fn list(&self, sandbox_id: Option<&str>) -> Result<Vec<api::Snapshot>> {
        let mut call = Call::new(Method::GET, &["snapshots"]);
        if let Some(id) = sandbox_id {
            call = call.query("sandbox_id", id);
        }
        let list: api::SnapshotList = self.client.json(call).await?;
        Ok(list.snapshots)
    }

    /// One snapshot.
    ///
    /// # Errors
    /// [`crate::Error::NotFound`].
    pub async fn get(&self, id: &str) -> Result<api::Snapshot> {
        self.client
            .json(Call::new(Method::GET, &["snapshots", id]))
            .await
    }

    /// Deletes a snapshot and its image.
    ///
    /// # Errors
    /// [`crate::Error::NotFound`].
    pub async fn delete(&self, id: &str) -> Result<()> {
        self.client
            .unit(Call::new(Method::DELETE, &["snapshots", id]))
            .await
    }
}

impl Templates<'_> {
    /// The built-in templates baked on this server and the workspace's own
    /// (`GET /v1/templates`).
    ///
    /// # Errors
    /// As any call.
    pub async fn list(&self) -> Result<Vec<api::Template>> {
        self.client
            .json(Call::new(Method::GET, &["templates"]))
            .await
    }

    /// One template by name.
    ///
    /// # Errors
    /// [`crate::Error::NotFound`].
    pub async fn get(&self, name: &str) -> Result<api::Template> {
        self.client
            .json(Call::new(Method::GET, &["templates", name]))
            .await
    }
}

impl Tokens<'_> {
    /// The workspace's keys (prefixes and labels; never the secrets).
    ///
    /// # Errors
    /// As any call.
    pub async fn list(&self) -> Result<Vec<api::Token>> {
        self.client
            .json(Call::new(Method::GET, &["me", "tokens"]))
            .await
    }

    /// A new key; its secret (`token`) is in this reply only.
    ///
    /// # Errors
    /// [`crate::Error::BadRequest`] for a label over 200 characters or an expiry out of 1..=3650
    /// days.
    pub async fn create(&self, label: &str, expires_in_days: Option<i64>) -> Result<api::Token> {
        let call = Call::new(Method::POST, &["me", "tokens"]).json(&api::CreateToken {
            label: Some(label.to_string()),
            expires_in_days,
        })?;
        self.client.json(call).await
    }

    /// Revokes the key with public prefix `prefix`; it stops working at once.
    ///
    /// # Errors
    /// [`crate::Error::NotFound`].
    pub async fn revoke(&self, prefix: &str) -> Result<()> {
        self.client
            .unit(Call::new(Method::DELETE, &["me", "tokens", prefix]))
            .await
    }
}
