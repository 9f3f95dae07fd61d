//! One module per resource, one file per command. Each command parses nothing itself (clap
//! did), makes its REST calls through [`Ctx::client`] and prints through [`crate::output`].
//! Commands return the process exit code: 0, or the sandbox command's own for exec/run-code.

pub mod auth;
pub mod completions;
pub mod fs;
pub mod sandbox;
pub mod snapshot;
pub mod template;
pub mod token;
pub mod version;

use crate::client::Client;
use crate::config::Settings;
use crate::error::Result;
use crate::output::Format;
use crate::Command;

/// Flags accepted after any resource word (`global`: also after its subcommands).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GlobalOpts {
    /// Output format: `table` for people, `json` for the server's JSON reply.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

/// What every command gets: the output format and a way to reach the server.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// `-o` choice.
    pub format: Format,
}

impl Ctx {
    /// A context for the parsed global flags.
    pub fn new(opts: &GlobalOpts) -> Ctx {
        Ctx {
            format: opts.output,
        }
    }

    /// True for `-o json`.
    pub fn json(&self) -> bool {
        self.format == Format::Json
    }

    /// A client for the configured server and key.
    ///
    /// Errors: the config file is unreadable, no key is configured, or the URL is unusable.
    pub fn client(&self) -> Result<Client> {
        Client::new(&Settings::resolve()?)
    }
}

/// Runs one parsed command; returns its exit code.
pub fn dispatch(cmd: Command) -> Result<i32> {
    match cmd {
        Command::Sandbox(a) => sandbox::run(a.command, &Ctx::new(&a.opts)),
        Command::Fs(a) => fs::run(a.command, &Ctx::new(&a.opts)),
        Command::Snapshot(a) => snapshot::run(a.command, &Ctx::new(&a.opts)),
        Command::Template(a) => template::run(a.command, &Ctx::new(&a.opts)),
        Command::Token(a) => token::run(a.command, &Ctx::new(&a.opts)),
        Command::Auth(a) => auth::run(a.command, &Ctx::new(&a.opts)),
        Command::Completions(a) => completions::run(&a).map(|_| 0),
        Command::Version(a) => version::run(&Ctx::new(&a.opts)).map(|_| 0),
    }
}

/// A request body as JSON with its `null` top-level keys left out, so that only the flags the
/// user gave are sent (as the Python SDK does, contract §2.1).
///
/// Errors: the value does not serialize (never for the wire types).
pub fn body<T: serde::Serialize>(req: &T) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(req)
        .map_err(|e| crate::error::CliError::Usage(format!("cannot encode request: {e}")))?;
    if let Some(m) = v.as_object_mut() {
        m.retain(|_, x| !x.is_null());
    }
    Ok(v)
}
