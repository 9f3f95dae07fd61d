//! One module per resource, one file per command. Each command parses nothing itself (clap
//! did), makes its calls through the SDK client of [`Ctx::client`] (driven to completion by
//! [`Ctx::block`] on a one-thread Tokio runtime) and prints through [`crate::output`].
//! Commands return the process exit code: 0, or the sandbox command's own for exec/run-code.

pub mod auth;
pub mod completions;
pub mod db;
pub mod fs;
pub mod host;
pub mod mcp;
pub mod sandbox;
pub mod snapshot;
pub mod template;
pub mod token;
pub mod version;
pub mod volume;

use crate::config::Settings;
use crate::error::{CliError, Result};
use crate::output::Format;
use crate::Command;
use pandastack_sdk::Client;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Deadline of the CLI's ordinary calls (the SDK's streams and transfers have none).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Flags accepted after any resource word (`global`: also after its subcommands).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GlobalOpts {
    /// Output format: `table` for people, `json` for the server's JSON reply.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

/// What every command gets: the output format, a way to reach the server and the runtime
/// its calls run on.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// `-o` choice.
    pub format: Format,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl Ctx {
    /// A context for the parsed global flags.
    ///
    /// Errors: the async runtime cannot start (no threads or timers left).
    pub fn new(opts: &GlobalOpts) -> Result<Ctx> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CliError::io("starting the async runtime", e))?;
        Ok(Ctx {
            format: opts.output,
            runtime: Arc::new(runtime),
        })
    }

    /// Runs an SDK call to completion.
    pub fn block<F: Future>(&self, call: F) -> F::Output {
        self.runtime.block_on(call)
    }

    /// True for `-o json`.
    pub fn json(&self) -> bool {
        self.format == Format::Json
    }

    /// An SDK client for the configured server and key.
    ///
    /// Errors: the config file is unreadable, no key is configured, or the URL is unusable.
    pub fn client(&self) -> Result<Client> {
        let s = Settings::resolve()?;
        let key = s.api_key.ok_or_else(|| {
            CliError::Config(
                "no API key: set PANDASTACK_API_KEY or run `pandastack auth login --key KEY`"
                    .into(),
            )
        })?;
        client_for(&s.api_url, &key)
    }
}

/// An SDK client for `api_url` and `key` with the CLI's user agent and deadline.
///
/// Errors: the URL does not parse or is not `http://`.
pub fn client_for(api_url: &str, key: &str) -> Result<Client> {
    Ok(Client::builder()
        .api_url(api_url)
        .api_key(key)
        .timeout(CALL_TIMEOUT)
        .user_agent(concat!("pandastack-cli/", env!("CARGO_PKG_VERSION")))
        .build()?)
}

/// Runs one parsed command; returns its exit code.
pub fn dispatch(cmd: Command) -> Result<i32> {
    match cmd {
        Command::Sandbox(a) => sandbox::run(a.command, &Ctx::new(&a.opts)?),
        Command::Fs(a) => fs::run(a.command, &Ctx::new(&a.opts)?),
        Command::Snapshot(a) => snapshot::run(a.command, &Ctx::new(&a.opts)?),
        Command::Db(a) => db::run(a.command, &Ctx::new(&a.opts)?),
        Command::Volume(a) => volume::run(a.command, &Ctx::new(&a.opts)?),
        Command::Template(a) => template::run(a.command, &Ctx::new(&a.opts)?),
        Command::Token(a) => token::run(a.command, &Ctx::new(&a.opts)?),
        Command::Auth(a) => auth::run(a.command, &Ctx::new(&a.opts)?),
        Command::Mcp(a) => mcp::run(&a, &Ctx::new(&GlobalOpts::default())?).map(|_| 0),
        Command::Completions(a) => completions::run(&a).map(|_| 0),
        Command::Version(a) => version::run(&Ctx::new(&a.opts)?).map(|_| 0),
    }
}

/// Prints `value` as JSON (`-o json`): the reply's wire type serialized back, which is the
/// server's JSON.
///
/// Errors: stdout is closed or unwritable.
pub fn print_json<T: serde::Serialize>(value: &T) -> Result<()> {
    let v = serde_json::to_value(value)
        .map_err(|e| CliError::Usage(format!("cannot encode JSON: {e}")))?;
    crate::output::json(&v)
}
