//! `volume create NAME --size S`, `volume resize NAME --size S`, `volume delete NAME`.

use super::render;
use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;

/// Creates the volume and prints it.
pub fn create(name: &str, size_mb: u64, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let v = ctx.block(client.volumes().create(name, size_mb))?;
    if ctx.json() {
        return print_json(&v);
    }
    render::print_one(&v)
}

/// Grows the volume and prints it.
pub fn resize(name: &str, size_mb: u64, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let v = ctx.block(client.volumes().resize(name, size_mb))?;
    if ctx.json() {
        return print_json(&v);
    }
    render::print_one(&v)
}

/// Deletes the volume.
pub fn delete(name: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    ctx.block(client.volumes().delete(name))?;
    if ctx.json() {
        return print_json(&serde_json::json!({ "name": name, "deleted": true }));
    }
    output::line(&format!("deleted {name}"))
}
