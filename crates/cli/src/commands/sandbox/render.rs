//! Human output shared by the sandbox commands: one sandbox as `key  value` lines, several as a
//! table. Keys are the JSON field names of [`pandastack_api::Sandbox`].

use crate::error::Result;
use crate::output::{self, decode};
use pandastack_api::Sandbox;
use serde_json::Value;

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(T::to_string).unwrap_or_else(|| "-".into())
}

/// Prints one sandbox reply (`what` names the call for a decode error).
pub fn print_one(value: &Value, what: &str) -> Result<()> {
    let s: Sandbox = decode(value, what)?;
    output::pairs(&[
        ("id", s.id),
        ("template", s.template),
        ("status", s.status),
        ("boot_mode", s.boot_mode),
        ("boot_ms", opt(&s.boot_ms)),
        ("ttl_seconds", s.ttl_seconds.to_string()),
        ("persistent", s.persistent.to_string()),
        ("created_at", s.created_at),
        ("from_snapshot", opt(&s.from_snapshot)),
        ("cpu", s.cpu.to_string()),
        ("memory_mb", s.memory_mb.to_string()),
        ("guest_ip", opt(&s.guest_ip)),
        ("metadata", output::metadata(&s.metadata)),
    ])
}

/// Table headers of [`row`].
pub const HEADERS: [&str; 7] = [
    "ID",
    "TEMPLATE",
    "STATUS",
    "PERSISTENT",
    "TTL",
    "CREATED",
    "METADATA",
];

/// One table row. A bare id string (some fork replies, contract §2.1) fills only the id.
pub fn row(value: &Value, what: &str) -> Result<Vec<String>> {
    if let Some(id) = value.as_str() {
        let mut r = vec![id.to_string()];
        r.resize(HEADERS.len(), "-".into());
        return Ok(r);
    }
    let s: Sandbox = decode(value, what)?;
    Ok(vec![
        s.id,
        s.template,
        s.status,
        s.persistent.to_string(),
        s.ttl_seconds.to_string(),
        s.created_at,
        output::metadata(&s.metadata),
    ])
}

/// Prints several sandboxes as a table.
pub fn print_table(items: &[Value], what: &str) -> Result<()> {
    let rows = items
        .iter()
        .map(|v| row(v, what))
        .collect::<Result<Vec<_>>>()?;
    output::table(&HEADERS, &rows)
}
