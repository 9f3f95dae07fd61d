//! `pandastack admin ...`: an operator's commands. Workspaces and keys work on the data dir's
//! store (as `workspace-create` always has); `drain` / `activate` go through the API.
//!
//! `workspace-delete` (issue 23 finding 12) refuses while the workspace holds sandboxes unless
//! `--force`. It first revokes every key of the workspace (so from that moment the workspace
//! cannot authenticate and cannot create anything more), then, through the running server of
//! the store (the host with a fresh heartbeat; the server owns the processes, mounts and files
//! of what it deletes), deletes its sandboxes, databases, volumes, snapshots and templates
//! with a key minted for the purpose (valid 10 minutes, revoked at the end), waits until the
//! store shows none left, and last drops every row of the workspace in one transaction. With
//! no server running, a workspace that holds nothing but rows is purged directly; one that
//! holds resources is refused (start the server first): nothing is half deleted in silence.

use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use pandastack_store::{now_ms, Store};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the key minted for a deletion is valid, ms.
const DELETE_KEY_TTL_MS: i64 = 10 * 60 * 1000;
/// How long a deletion waits for the server to finish deleting what it was asked to.
const DELETE_WAIT: Duration = Duration::from_secs(120);

/// The `admin` subcommands.
#[derive(Subcommand)]
pub enum AdminCommand {
    /// Create a workspace and print its admin key.
    WorkspaceCreate {
        #[arg(long)]
        name: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Delete a workspace: its keys, sandboxes, databases, volumes, snapshots, templates and
    /// every row of it (issue 23). Refuses while it holds sandboxes unless --force. Needs the
    /// server of the data dir running when the workspace holds anything but rows.
    WorkspaceDelete {
        /// The workspace id (`ws-...`, as `workspace-create` printed it).
        id: String,
        /// Delete the workspace's sandboxes too (running ones included).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke an API key of any workspace, by its prefix (the first 12 characters, as
    /// `pandastack token list` shows them) or the whole key.
    KeyRevoke {
        /// The key's prefix (`pds_` + 8 characters) or the whole key.
        key: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Move every sandbox off host NAME, live, and mark it draining (a cluster; through
    /// PANDASTACK_API with an operator key in PANDASTACK_API_KEY). Exits 1 when some stayed.
    Drain {
        /// The host's name (`GET /v1/hosts`).
        name: String,
        /// Print the server's JSON report.
        #[arg(long)]
        json: bool,
    },
    /// Let new sandboxes land on host NAME again after a drain.
    Activate {
        /// The host's name (`GET /v1/hosts`).
        name: String,
        #[arg(long)]
        json: bool,
    },
}

/// Where the store of the admin commands is.
#[derive(clap::Args)]
pub struct StoreArgs {
    #[arg(
        long,
        env = "PANDASTACK_DATA_DIR",
        default_value = "/var/lib/pandastack"
    )]
    data_dir: PathBuf,
    /// The server's store when it is PostgreSQL (`--store` of `pandastack server`).
    #[arg(long, env = "PANDASTACK_STORE")]
    store: Option<String>,
}

impl StoreArgs {
    async fn open(&self) -> Result<Store> {
        Ok(pandastack_server::open_store(&self.data_dir, self.store.as_deref()).await?)
    }
}

/// Runs an admin command; the exit code.
///
/// # Errors
/// What failed, for `main` to print (exit code 1).
pub fn run(cmd: AdminCommand) -> Result<i32> {
    use pandastack_cli::commands::host::HostAction;
    match cmd {
        AdminCommand::WorkspaceCreate { name, store } => block(async move {
            let store = store.open().await?;
            let (ws, key) = pandastack_server::auth::create_workspace(&store, &name).await?;
            println!("workspace {ws}\nexport PANDASTACK_API_KEY={key}");
            Ok(())
        }),
        AdminCommand::WorkspaceDelete { id, force, store } => block(async move {
            let s = store.open().await?;
            delete_workspace(&s, &store.data_dir, &id, force).await
        }),
        AdminCommand::KeyRevoke { key, store } => block(async move {
            let prefix: String = key
                .trim()
                .chars()
                .take(pandastack_server::auth::PREFIX_LEN)
                .collect();
            let ws = store
                .open()
                .await?
                .revoke_key_by_prefix(&prefix, now_ms())
                .await?;
            println!("key {prefix} of workspace {ws} revoked");
            Ok(())
        }),
        AdminCommand::Drain { name, json } => Ok(pandastack_cli::run_host_admin(
            HostAction::Drain,
            &name,
            json,
        )),
        AdminCommand::Activate { name, json } => Ok(pandastack_cli::run_host_admin(
            HostAction::Activate,
            &name,
            json,
        )),
    }
}

/// Runs `f` on a one-thread runtime; exit code 0 when it succeeds.
fn block(f: impl std::future::Future<Output = Result<()>>) -> Result<i32> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)?;
    Ok(0)
}

/// Deletes workspace `id` as the module says.
async fn delete_workspace(store: &Store, data_dir: &Path, id: &str, force: bool) -> Result<()> {
    store
        .workspace(id)
        .await?
        .ok_or_else(|| anyhow!("workspace {id} not found"))?;
    if store.first_workspace_id().await?.as_deref() == Some(id) {
        bail!("workspace {id} is the operator's (the first one created); it cannot be deleted");
    }
    let sandboxes = store.live_sandboxes(Some(id)).await?;
    if !sandboxes.is_empty() && !force {
        let list: Vec<String> = sandboxes
            .iter()
            .map(|s| format!("{} ({})", s.id, s.status))
            .collect();
        bail!(
            "workspace {id} holds {} sandbox(es): {}; delete them first or pass --force",
            list.len(),
            list.join(", ")
        );
    }
    let revoked = store.revoke_workspace_keys(id, None, now_ms()).await?;
    println!("revoked {revoked} key(s) of workspace {id}");
    let user_templates = data_dir.join("user-templates").join(id);
    if !store.holdings(id).await?.is_empty() || user_templates.exists() {
        let url = server_url(store).await?.ok_or_else(|| {
            anyhow!(
                "workspace {id} still holds resources and no server of this store is running to delete them; start the server and run this again (its keys are revoked)"
            )
        })?;
        delete_through_server(store, id, &url).await?;
    }
    store
        .purge_workspace(id)
        .await
        .with_context(|| format!("dropping the rows of workspace {id}"))?;
    println!("workspace {id} deleted");
    Ok(())
}

/// The API URL of a server of this store whose heartbeat is fresh, if any.
async fn server_url(store: &Store) -> Result<Option<String>> {
    let hosts = store.hosts().await?;
    Ok(hosts
        .into_iter()
        .find(|h| !pandastack_server::cluster::is_down(h))
        .map(|h| h.advertise_url))
}

/// Deletes everything workspace `id` holds through the server at `url`, with a key minted
/// for it (revoked at the end, also on failure), and waits until the store shows it gone.
async fn delete_through_server(store: &Store, id: &str, url: &str) -> Result<()> {
    let expires = now_ms() + DELETE_KEY_TTL_MS;
    let (key, row) =
        pandastack_server::auth::create_key(store, id, "workspace-delete", Some(expires)).await?;
    let client = pandastack_sdk::Client::builder()
        .api_url(url)
        .api_key(key)
        .build()?;
    let result = delete_all(store, id, &client).await;
    // Best effort: the key expires by itself in minutes, and the purge drops it.
    let _ = store.revoke_api_key(id, &row.prefix, now_ms()).await;
    result
}

async fn delete_all(store: &Store, id: &str, client: &pandastack_sdk::Client) -> Result<()> {
    let started = Instant::now();
    loop {
        for s in client.sandboxes().list().await? {
            ignore_gone(client.sandboxes().delete(&s.id).await)
                .with_context(|| format!("deleting sandbox {}", s.id))?;
        }
        for d in client.databases().list().await? {
            ignore_gone(client.databases().delete(&d.id).await)
                .with_context(|| format!("deleting database {}", d.id))?;
        }
        for s in client.snapshots().list(None).await? {
            ignore_gone(client.snapshots().delete(&s.id).await)
                .with_context(|| format!("deleting snapshot {}", s.id))?;
        }
        for v in client.volumes().list().await? {
            ignore_gone(client.volumes().delete(&v.name).await)
                .with_context(|| format!("deleting volume {}", v.name))?;
        }
        for t in client.templates().list().await? {
            if t.workspace.as_deref() == Some(id) {
                ignore_gone(client.templates().delete(&t.name).await)
                    .with_context(|| format!("deleting template {}", t.name))?;
            }
        }
        let left = store.holdings(id).await?;
        if left.is_empty() {
            return Ok(());
        }
        if started.elapsed() > DELETE_WAIT {
            bail!("workspace {id} still holds {left:?} after {DELETE_WAIT:?}; run this again");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `Ok` for a thing that is already gone (404).
fn ignore_gone(r: pandastack_sdk::Result<()>) -> Result<()> {
    match r {
        Err(e) if e.status() == Some(404) => Ok(()),
        other => Ok(other?),
    }
}
