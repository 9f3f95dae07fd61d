//! What commands print on stdout. `--output table` (the default) prints aligned columns or
//! `key  value` blocks for people; `--output json` prints the server's JSON reply, pretty, with
//! nothing else on stdout, for scripts. Status notes for people go to stderr.

use crate::error::{CliError, Result};
use serde_json::Value;
use std::io::Write;

/// The `-o` / `--output` choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns and key/value lines.
    #[default]
    #[value(alias = "human", alias = "text")]
    Table,
    /// The server's JSON reply.
    Json,
}

/// Writes `text` and a newline to stdout.
///
/// Errors: stdout is closed ([`CliError::is_broken_pipe`]) or unwritable.
pub fn line(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|_| out.flush())
        .map_err(|e| CliError::io("writing stdout", e))
}

/// Prints a JSON value, pretty; prints nothing for `Null` (a reply with no body).
pub fn json(value: &Value) -> Result<()> {
    if value.is_null() {
        return Ok(());
    }
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Usage(format!("cannot encode JSON: {e}")))?;
    line(&text)
}

/// Prints `key  value` lines with the keys padded to one width.
pub fn pairs(rows: &[(&str, String)]) -> Result<()> {
    let width = rows
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let text: Vec<String> = rows
        .iter()
        .map(|(k, v)| format!("{k:<width$}  {v}"))
        .collect();
    if text.is_empty() {
        return Ok(());
    }
    line(&text.join("\n"))
}

/// Prints a table: upper-case headers, columns left-aligned and separated by two spaces.
/// With no rows, prints only the header line.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> Result<()> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let render = |cells: Vec<&str>| -> String {
        let last = cells.len().saturating_sub(1);
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == last {
                    c.to_string()
                } else {
                    format!("{c:<w$}", w = widths.get(i).copied().unwrap_or(0))
                }
            })
            .collect();
        parts.join("  ").trim_end().to_string()
    };
    let mut text = vec![render(headers.to_vec())];
    text.extend(
        rows.iter()
            .map(|r| render(r.iter().map(String::as_str).collect())),
    );
    line(&text.join("\n"))
}

/// A metadata map as `k=v,k2=v2` (`-` when empty).
pub fn metadata(m: &std::collections::BTreeMap<String, String>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Bytes for people: `512 B`, `1.5 KiB`, `12.0 MiB`, `1.2 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_human() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 * 1024 * 1024 * 1024), "3.0 GiB");
    }
}
