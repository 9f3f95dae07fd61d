//! The hosts of a cluster, for operators (issue 12): `GET /v1/hosts`, `POST
//! /v1/hosts/{name}/drain`, `POST /v1/hosts/{name}/activate`. They need a key of the first
//! workspace (the operator's); any other answers [`crate::Error::Api`] with status 403.

use crate::client::Client;
use crate::error::Result;
use crate::http::{Call, Deadline};
use reqwest::Method;

/// `client.hosts()`.
#[derive(Debug, Clone, Copy)]
pub struct Hosts<'a> {
    client: &'a Client,
}

impl Client {
    /// The hosts of the cluster (operator key).
    pub fn hosts(&self) -> Hosts<'_> {
        Hosts { client: self }
    }
}

impl Hosts<'_> {
    /// Every host: `[{name, advertise_url, state ("active", "draining", "down"),
    /// last_heartbeat, heartbeat_age_ms, capacity}]`.
    ///
    /// # Errors
    /// As any call; 403 for a key that is not the operator's.
    pub async fn list(&self) -> Result<Vec<serde_json::Value>> {
        self.client.json(Call::new(Method::GET, &["hosts"])).await
    }

    /// Moves every sandbox off host `name`, live, and marks it `draining`; answers when each
    /// sandbox was tried (seconds per sandbox, so without the client's deadline): `{host,
    /// moved: [{sandbox_id, to, state, ms}], left: [{sandbox_id, reason}]}`.
    ///
    /// # Errors
    /// As any call; 404 for an unknown host; 409 on a single host (a drain needs a cluster).
    pub async fn drain(&self, name: &str) -> Result<serde_json::Value> {
        self.client
            .json(Call::new(Method::POST, &["hosts", name, "drain"]).deadline(Deadline::Never))
            .await
    }

    /// Lets new sandboxes land on host `name` again; answers the host as [`Hosts::list`]
    /// shows it.
    ///
    /// # Errors
    /// As any call; 404 for an unknown host.
    pub async fn activate(&self, name: &str) -> Result<serde_json::Value> {
        self.client
            .json(Call::new(Method::POST, &["hosts", name, "activate"]))
            .await
    }
}
