//! Databases (contract §2.12, issue 10): `client.databases()`.
//!
//! ```no_run
//! # async fn demo() -> pandastack_sdk::Result<()> {
//! use pandastack_sdk::{api::CreateDatabase, Client};
//! let client = Client::from_env()?;
//! let db = client
//!     .databases()
//!     .create(CreateDatabase { label: Some("agent-memory".into()), ..Default::default() })
//!     .await?; // waits until it runs
//! println!("{}", db.connection_url.unwrap_or_default()); // postgres://...@10.0.2.2:PORT/agent_memory
//! client.databases().delete(&db.id).await?;
//! # Ok(()) }
//! ```

use crate::client::Client;
use crate::error::{Error, Result};
use crate::http::{Call, Deadline};
use pandastack_api as api;
use reqwest::Method;
use std::time::{Duration, Instant};

/// How long [`Databases::wait_until_ready`] waits by default (the published SDKs: 180 s).
pub const READY_TIMEOUT: Duration = Duration::from_secs(180);
/// Deadline of calls that start or change a cluster (reset-credentials: 180 s in the
/// published SDKs).
const SLOW: Deadline = Deadline::After(Duration::from_secs(180));

/// `client.databases()`.
#[derive(Debug, Clone, Copy)]
pub struct Databases<'a> {
    client: &'a Client,
}

impl Client {
    /// The workspace's databases.
    pub fn databases(&self) -> Databases<'_> {
        Databases { client: self }
    }
}

impl Databases<'_> {
    /// Creates a database and waits until it runs (`POST /v1/databases`, then polling).
    ///
    /// # Errors
    /// [`Error::BadRequest`] naming a bad field; [`Error::Failed`] when provisioning fails;
    /// [`Error::Timeout`] after [`READY_TIMEOUT`].
    pub async fn create(&self, req: api::CreateDatabase) -> Result<api::Database> {
        let accepted = self.create_nowait(req).await?;
        self.wait_until_ready(&accepted.id, READY_TIMEOUT).await
    }

    /// Starts creating a database and returns at once (202: its id, `provisioning`).
    ///
    /// # Errors
    /// As any call.
    pub async fn create_nowait(&self, req: api::CreateDatabase) -> Result<api::DatabaseAccepted> {
        self.client
            .json(Call::new(Method::POST, &["databases"]).json(&req)?)
            .await
    }

    /// Polls `GET /v1/databases/{id}` until it is `running` with a `connection_url` (every
    /// 50 ms at first, then up to every second).
    ///
    /// # Errors
    /// [`Error::Failed`] when it reports `failed`, quoting its `error`; [`Error::Timeout`]
    /// after `timeout`.
    pub async fn wait_until_ready(&self, id: &str, timeout: Duration) -> Result<api::Database> {
        let deadline = Instant::now() + timeout;
        let mut delay = Duration::from_millis(50);
        loop {
            let db = self.get(id).await?;
            if db.status == "running" && db.connection_url.is_some() {
                return Ok(db);
            }
            if db.status == "failed" {
                return Err(Error::Failed {
                    message: format!(
                        "database {id} failed to provision: {}",
                        db.error.unwrap_or_else(|| "no reason given".into())
                    ),
                });
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    message: format!(
                        "database {id} not ready after {} s (status {})",
                        timeout.as_secs(),
                        db.status
                    ),
                });
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }

    /// The workspace's databases, without credentials.
    ///
    /// # Errors
    /// As any call.
    pub async fn list(&self) -> Result<Vec<api::Database>> {
        let list: api::DatabaseList = self
            .client
            .json(Call::new(Method::GET, &["databases"]))
            .await?;
        Ok(list.items)
    }

    /// One database, with its credentials.
    ///
    /// # Errors
    /// [`Error::NotFound`].
    pub async fn get(&self, id: &str) -> Result<api::Database> {
        self.client
            .json(Call::new(Method::GET, &["databases", id]))
            .await
    }

    /// Deletes a database and all its data, irreversibly.
    ///
    /// # Errors
    /// [`Error::NotFound`].
    pub async fn delete(&self, id: &str) -> Result<()> {
        self.client
            .unit(Call::new(Method::DELETE, &["databases", id]).deadline(SLOW))
            .await
    }

    /// The connection URL (`postgres://USER:PASSWORD@HOST:PORT/DATABASE`).
    ///
    /// # Errors
    /// [`Error::Conflict`] while it is provisioning or failed.
    pub async fn connection(&self, id: &str) -> Result<String> {
        let c: api::DatabaseConnection = self
            .client
            .json(Call::new(Method::GET, &["databases", id, "connection"]))
            .await?;
        Ok(c.connection_url)
    }

    /// A new password; open sessions of the old one are ended. Returns the database with the
    /// new `connection_url`.
    ///
    /// # Errors
    /// As any call.
    pub async fn reset_credentials(&self, id: &str) -> Result<api::Database> {
        self.client
            .json(Call::new(Method::POST, &["databases", id, "reset-credentials"]).deadline(SLOW))
            .await
    }

    /// Changes `always_on` and/or grows the storage (`PATCH /v1/databases/{id}`).
    ///
    /// # Errors
    /// [`Error::BadRequest`] for a smaller storage.
    pub async fn update(&self, id: &str, req: api::UpdateDatabase) -> Result<api::Database> {
        self.client
            .json(
                Call::new(Method::PATCH, &["databases", id])
                    .json(&req)?
                    .deadline(SLOW),
            )
            .await
    }

    /// Starts a stopped database (a connection does too).
    ///
    /// # Errors
    /// [`Error::Conflict`] while provisioning or failed.
    pub async fn wake(&self, id: &str) -> Result<api::DatabaseWake> {
        self.client
            .json(Call::new(Method::POST, &["databases", id, "wake"]).deadline(SLOW))
            .await
    }

    /// Clones a database (a consistent copy of its data now) and waits until the clone runs.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for `target_time` (not supported); as [`Databases::create`].
    pub async fn clone(&self, id: &str, req: api::CloneDatabase) -> Result<api::Database> {
        let accepted: api::DatabaseAccepted = self
            .client
            .json(Call::new(Method::POST, &["databases", id, "clone"]).json(&req)?)
            .await?;
        self.wait_until_ready(&accepted.id, READY_TIMEOUT).await
    }

    /// The database's state changes, oldest first.
    ///
    /// # Errors
    /// [`Error::NotFound`].
    pub async fn events(&self, id: &str) -> Result<Vec<api::DatabaseEvent>> {
        self.client
            .json(Call::new(Method::GET, &["databases", id, "events"]))
            .await
    }
}
