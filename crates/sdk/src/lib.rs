//! The Rust SDK for PandaStack: an async client (Tokio, `reqwest`) for sandboxes, one-shot and
//! streaming exec, files, code contexts with rich results, pause/resume, hibernate/wake,
//! snapshots, fork / fork-tree / promote, events, templates, API tokens and databases.
//!
//! It speaks the same wire as the published SDKs (`shared/spec/sdk-wire-contract.md`, cited as
//! "contract §N"), with the server's own types ([`pandastack_api`], re-exported as [`api`]), the
//! same retries (contract §1.4: a 404 on reads resent once, warm-up retries of exec and file
//! calls, capacity retries of creates and forks) and one [`Error`] enum mirroring the published
//! SDKs' exceptions. The `pandastack` CLI is built on it.
//!
//! # Seed 000 in Rust: state across turns, across restarts, and branched
//!
//! ```no_run
//! use pandastack_sdk::{api::CreateSandbox, Client};
//!
//! # async fn demo() -> pandastack_sdk::Result<()> {
//! let client = Client::from_env()?; // PANDASTACK_API, PANDASTACK_API_KEY
//! let sandbox = client
//!     .sandboxes()
//!     .create(CreateSandbox {
//!         template: Some("code-interpreter".into()),
//!         ttl_seconds: Some(3600),
//!         ..Default::default()
//!     })
//!     .await?;
//! let ctx = sandbox.create_code_context().await?;
//! ctx.run_code("import pandas as pd; df = pd.DataFrame({'a': [1, 2, 3]})").await?;
//! let ex = ctx.run_code("total = int(df['a'].sum()); total").await?;
//! assert_eq!(ex.text(), Some("6"));
//!
//! let snap = sandbox.snapshot().await?; // memory + processes + files
//! sandbox.kill().await?;
//! let restored = client
//!     .sandboxes()
//!     .create(CreateSandbox { from_snapshot: Some(snap.id), ..Default::default() })
//!     .await?;
//! let ctx = restored.create_code_context().await?; // adopts the restored kernel
//! assert_eq!(ctx.run_code("print(total)").await?.stdout, "6\n");
//!
//! let branches = restored.fork_tree(3, None).await?;
//! for b in &branches {
//!     b.kill().await?;
//! }
//! restored.kill().await?;
//! # Ok(()) }
//! ```
//!
//! # Streaming
//!
//! [`Sandbox::exec_stream`] yields output as the command writes it; [`Files::read_stream`] and
//! [`Files::write_stream`] move files of any size without holding them in memory;
//! [`Client::events`] and [`Sandbox::logs_follow`] follow the server's event and log streams.
//!
//! ```no_run
//! use futures::StreamExt;
//! use pandastack_sdk::{ExecEvent, ExecOptions, Sandbox};
//!
//! # async fn demo(sandbox: Sandbox) -> pandastack_sdk::Result<()> {
//! let mut out = sandbox.exec_stream("for i in 1 2 3; do echo $i; sleep 1; done", &ExecOptions::default()).await?;
//! while let Some(ev) = out.next().await {
//!     match ev? {
//!         ExecEvent::Stdout(text) => print!("{text}"),
//!         ExecEvent::Stderr(text) => eprint!("{text}"),
//!         ExecEvent::Exit(code) => println!("exit {code}"),
//!     }
//! }
//! # Ok(()) }
//! ```

mod client;
mod code;
mod databases;
mod error;
mod exec;
mod files;
mod hosts;
mod http;
mod retry;
mod sandbox;
mod sse;
pub mod template_builds;
mod volumes;
mod workspace;

pub use client::{
    api_url, parse_base, Client, ClientBuilder, DEFAULT_API_URL, DEFAULT_TIMEOUT, ENV_API,
    ENV_API_KEY, ENV_MAX_CREATE_RETRY, ENV_READY_TIMEOUT, SLOW_TIMEOUT,
};
pub use code::CodeContext;
pub use databases::{Databases, READY_TIMEOUT as DATABASE_READY_TIMEOUT};
pub use error::{Error, Result};
pub use exec::{shell_quote, ExecEvent, ExecOptions, ExecOutput, ExecStream, Language};
pub use files::Files;
pub use hosts::Hosts;
pub use pandastack_api as api;
pub use sandbox::{without_nulls, LogStream, Sandbox, Sandboxes};
pub use sse::SseEvent;
pub use volumes::Volumes;
pub use workspace::{Snapshots, Templates, Tokens};
