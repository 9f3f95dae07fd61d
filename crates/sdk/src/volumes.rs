//! Volumes (contract §2.6, issue 9; seed 001 §3): `client.volumes()`.
//!
//! ```no_run
//! # async fn demo() -> pandastack_sdk::Result<()> {
//! use pandastack_sdk::Client;
//! let client = Client::from_env()?;
//! let vol = client.volumes().create("agent-workspace", 8192).await?;
//! println!("{} {} MiB", vol.name, vol.size_mb); // attach it with `volumes` in a create
//! client.volumes().delete("agent-workspace").await?; // refused (409) while attached
//! # Ok(()) }
//! ```

use crate::client::Client;
use crate::error::Result;
use crate::http::Call;
use pandastack_api as api;
use reqwest::Method;

/// `client.volumes()`.
#[derive(Debug, Clone, Copy)]
pub struct Volumes<'a> {
    client: &'a Client,
}

impl Client {
    /// The workspace's volumes.
    pub fn volumes(&self) -> Volumes<'_> {
        Volumes { client: self }
    }
}

impl Volumes<'_> {
    /// Creates an empty volume of `size_mb` MiB (`POST /v1/volumes`).
    ///
    /// # Errors
    /// [`crate::Error::BadRequest`] for a bad name or size; [`crate::Error::Conflict`] for a
    /// name the workspace has; [`crate::Error::RateLimited`] at the workspace's volume quota;
    /// [`crate::Error::Server`] 507 when the host is short of disk.
    pub async fn create(&self, name: &str, size_mb: u64) -> Result<api::Volume> {
        let body = api::CreateVolume {
            name: name.to_string(),
            size_mb,
        };
        self.client
            .json(Call::new(Method::POST, &["volumes"]).json(&body)?)
            .await
    }

    /// The workspace's volumes, by name.
    ///
    /// # Errors
    /// As any call.
    pub async fn list(&self) -> Result<Vec<api::Volume>> {
        self.client.json(Call::new(Method::GET, &["volumes"])).await
    }

    /// One volume, with who holds it and the space in use.
    ///
    /// # Errors
    /// [`crate::Error::NotFound`].
    pub async fn get(&self, name: &str) -> Result<api::Volume> {
        self.client
            .json(Call::new(Method::GET, &["volumes", name]))
            .await
    }

    /// Grows a detached volume to `size_mb` MiB (`PATCH /v1/volumes/{name}`; it never
    /// shrinks).
    ///
    /// # Errors
    /// [`crate::Error::BadRequest`] for a smaller size; [`crate::Error::Conflict`] while it
    /// is attached.
    pub async fn resize(&self, name: &str, size_mb: u64) -> Result<api::Volume> {
        self.client
            .json(
                Call::new(Method::PATCH, &["volumes", name])
                    .json(&api::ResizeVolume { size_mb })?,
            )
            .await
    }

    /// Deletes a detached volume and its data, irreversibly.
    ///
    /// # Errors
    /// [`crate::Error::NotFound`]; [`crate::Error::Conflict`] while a sandbox holds it.
    pub async fn delete(&self, name: &str) -> Result<()> {
        self.client
            .unit(Call::new(Method::DELETE, &["volumes", name]))
            .await
    }
}
