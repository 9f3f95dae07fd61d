//! Human output shared by the sandbox commands: one sandbox as `key  value` lines, several as a
//! table. Keys are the JSON field names of [`pandastack_api::Sandbox`].

use crate::error::Result;
use crate::output;
use pandastack_api::Sandbox;

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(T::to_string).unwrap_or_else(|| "-".into())
}

/// Prints one sandbox.
pub fn print_one(s: &Sandbox) -> Result<()> {
    output::pairs(&[
        ("id", s.id.clone()),
        ("template", s.template.clone()),
        ("status", s.status.clone()),
        ("boot_mode", s.boot_mode.clone()),
        ("boot_ms", opt(&s.boot_ms)),
        ("ttl_seconds", s.ttl_seconds.to_string()),
        ("persistent", s.persistent.to_string()),
        ("created_at", s.created_at.clone()),
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

/// One table row.
pub fn row(s: &Sandbox) -> Vec<String> {
    vec![
        s.id.clone(),
        s.template.clone(),
        s.status.clone(),
        s.persistent.to_string(),
        s.ttl_seconds.to_string(),
        s.created_at.clone(),
        output::metadata(&s.metadata),
    ]
}

/// Prints several sandboxes as a table.
pub fn print_table<'a>(items: impl IntoIterator<Item = &'a Sandbox>) -> Result<()> {
    let rows: Vec<Vec<String>> = items.into_iter().map(row).collect();
    output::table(&HEADERS, &rows)
}
