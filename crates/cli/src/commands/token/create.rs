//! `token create [--label L] [--expires-in-days N]`: `POST /v1/me/tokens` with `{"label",
//! "expires_in_days"?}`. Prints `token  <secret>` first, then prefix, label and expiry; the
//! secret cannot be shown again.

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;
use clap::Args;

/// Flags of `token create`.
#[derive(Debug, Clone, Args)]
pub struct CreateArgs {
    /// A name for the key (server default `token`).
    #[arg(long)]
    pub label: Option<String>,
    /// Expire the key after this many days (1-3650); never when omitted.
    #[arg(long, value_name = "DAYS")]
    pub expires_in_days: Option<i64>,
}

/// Creates the key and prints it.
pub fn run(args: &CreateArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let label = args.label.as_deref().unwrap_or("token");
    let t = ctx.block(client.tokens().create(label, args.expires_in_days))?;
    if ctx.json() {
        return print_json(&t);
    }
    output::pairs(&[
        ("token", t.token.unwrap_or_else(|| "-".into())),
        ("prefix", t.prefix),
        ("label", t.label),
        ("created_at", t.created_at),
        ("expires_at", t.expires_at.unwrap_or_else(|| "never".into())),
    ])?;
    eprintln!("note: the token is shown only once; store it now");
    Ok(())
}
