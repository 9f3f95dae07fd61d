//! Human output of the database commands: one database as `key  value` lines, several as a
//! table. Keys are the JSON field names of [`pandastack_api::Database`].

use crate::error::Result;
use crate::output;
use pandastack_api::Database;

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(T::to_string).unwrap_or_else(|| "-".into())
}

/// Prints one database (with its connection URL when the reply has it).
pub fn print_one(d: &Database) -> Result<()> {
    output::pairs(&[
        ("id", d.id.clone()),
        ("label", opt(&d.label)),
        ("status", d.status.clone()),
        ("connection_url", opt(&d.connection_url)),
        ("host", d.host.clone()),
        ("port", opt(&d.port)),
        ("database", d.database.clone()),
        ("username", d.username.clone()),
        ("size", d.size.clone()),
        ("cpu", d.cpu.to_string()),
        ("storage", format!("{} MiB", d.storage_mb)),
        (
            "storage_used",
            d.storage_used_bytes
                .map(output::bytes)
                .unwrap_or_else(|| "-".into()),
        ),
        ("always_on", d.always_on.to_string()),
        ("connections", d.connections.to_string()),
        ("cloned_from", opt(&d.cloned_from)),
        ("created_at", crate::commands::fs::ls::rfc3339(d.created_at)),
        ("error", opt(&d.error)),
    ])
}

/// Table headers of [`row`].
pub const HEADERS: [&str; 8] = [
    "ID",
    "LABEL",
    "STATUS",
    "SIZE",
    "STORAGE",
    "PORT",
    "ALWAYS_ON",
    "CONNECTIONS",
];

/// One table row (no credentials).
pub fn row(d: &Database) -> Vec<String> {
    vec![
        d.id.clone(),
        opt(&d.label),
        d.status.clone(),
        d.size.clone(),
        format!("{} MiB", d.storage_mb),
        opt(&d.port),
        d.always_on.to_string(),
        d.connections.to_string(),
    ]
}
