//! `sandbox create`: `POST /v1/sandboxes` (contract §2.1 "Create body"), with the SDK's
//! capacity retry. Only the flags given are sent; the server picks the template
//! (`code-interpreter`) and TTL (3600 s) otherwise, and a `--from-snapshot` restore takes its
//! template from the snapshot.

use super::render;
use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::parse::{self, KeyValue};
use clap::Args;
use pandastack_api::{CreateSandbox, SandboxNetwork, VolumeMount};

/// Flags of `sandbox create`.
#[derive(Debug, Clone, Args)]
pub struct CreateArgs {
    /// Template name, e.g. `code-interpreter` or `base`.
    #[arg(long)]
    pub template: Option<String>,
    /// Seconds until the sandbox is killed, refreshed by any API activity.
    #[arg(long, value_name = "SECS")]
    pub ttl: Option<i64>,
    /// Metadata echoed back on the sandbox; repeatable.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse::key_value)]
    pub metadata: Vec<KeyValue>,
    /// Ignore the TTL; the idle sweeper hibernates the sandbox instead.
    #[arg(long)]
    pub persistent: bool,
    /// Restore this snapshot (`snap-...`) into the new sandbox.
    #[arg(long, value_name = "SNAPSHOT_ID")]
    pub from_snapshot: Option<String>,
    /// Environment for every command and kernel of the sandbox; repeatable.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse::key_value)]
    pub env: Vec<KeyValue>,
    /// No egress to public addresses (`allow_internet_access: false`); `--allow-out` entries
    /// stay reachable.
    #[arg(long)]
    pub no_internet: bool,
    /// A destination the sandbox may always reach, even a private one (never the host or
    /// another sandbox: 400): `A.B.C.D`, `A.B.C.D/N`, optionally `:PORT`; repeatable.
    #[arg(long = "allow-out", value_name = "CIDR[:PORT]")]
    pub allow_out: Vec<String>,
    /// A destination the sandbox may never reach (after `--allow-out`); repeatable.
    #[arg(long = "deny-out", value_name = "CIDR[:PORT]")]
    pub deny_out: Vec<String>,
    /// Attach a volume at `/mnt/NAME`, read-only with `:ro`; repeatable.
    #[arg(long = "volume", value_name = "NAME[:ro]", value_parser = volume_mount)]
    pub volumes: Vec<VolumeMount>,
}

/// `NAME` or `NAME:ro` (`NAME:rw` is the default, said explicitly).
fn volume_mount(s: &str) -> std::result::Result<VolumeMount, String> {
    let (name, mode) = s.rsplit_once(':').unwrap_or((s, "rw"));
    let read_only = match mode {
        "ro" => true,
        "rw" => false,
        _ => return Err(format!("'{s}': use NAME or NAME:ro")),
    };
    if name.is_empty() {
        return Err(format!("'{s}': the volume name is empty"));
    }
    Ok(VolumeMount {
        name: name.to_string(),
        read_only,
    })
}

impl CreateArgs {
    /// The request body for these flags.
    pub fn body(&self) -> CreateSandbox {
        CreateSandbox {
            template: self.template.clone(),
            ttl_seconds: self.ttl,
            metadata: parse::to_map(&self.metadata),
            persistent: self.persistent.then_some(true),
            from_snapshot: self.from_snapshot.clone(),
            envs: parse::to_map(&self.env),
            allow_internet_access: self.no_internet.then_some(false),
            network: (!self.allow_out.is_empty() || !self.deny_out.is_empty()).then(|| {
                SandboxNetwork {
                    allow_out: (!self.allow_out.is_empty()).then(|| self.allow_out.clone()),
                    deny_out: (!self.deny_out.is_empty()).then(|| self.deny_out.clone()),
                }
            }),
            volumes: (!self.volumes.is_empty()).then(|| self.volumes.clone()),
            ..CreateSandbox::default()
        }
    }
}

/// Creates the sandbox and prints it.
pub fn run(args: &CreateArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().create(args.body()))?;
    if ctx.json() {
        return print_json(sandbox.info());
    }
    render::print_one(sandbox.info())
}
