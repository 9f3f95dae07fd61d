//! `sandbox ports ID`: `GET /v1/sandboxes/{id}/ports` (issue 7), one row per listening port.

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;

/// Prints the sandbox's listening ports.
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(id))?;
    let ports = ctx.block(sandbox.ports())?;
    if ctx.json() {
        return print_json(&pandastack_api::Ports { ports });
    }
    let rows: Vec<Vec<String>> = ports
        .into_iter()
        .map(|p| vec![p.port.to_string(), p.address, p.proxy_url])
        .collect();
    output::table(&["PORT", "ADDRESS", "PROXY"], &rows)
}
