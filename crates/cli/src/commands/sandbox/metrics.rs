//! `sandbox metrics ID`: `GET /v1/sandboxes/{id}/metrics`, a JSON object of resource figures
//! (seed 003: RSS and vCPU usage tracked by the health monitor). The contract does not fix its
//! keys, so every key is printed as `key  value`; nested objects become `outer.inner` keys.

use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output;
use serde_json::Value;

/// The object flattened to `(dotted key, cell text)` pairs, in the reply's key order.
pub fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v.as_object() {
        Some(obj) => {
            for (k, x) in obj {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, x, out);
            }
        }
        None => out.push((prefix.to_string(), output::cell(Some(v)))),
    }
}

/// Prints the sandbox's metrics.
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let reply = ctx.client()?.get_json(&["sandboxes", id, "metrics"], &[])?;
    if ctx.json() {
        return output::json(&reply);
    }
    if !reply.is_object() {
        return Err(CliError::BadReply {
            what: "GET /v1/sandboxes/{id}/metrics".into(),
            detail: "not a JSON object".into(),
        });
    }
    let mut rows = Vec::new();
    flatten("", &reply, &mut rows);
    output::pairs(
        &rows
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_keys_are_dotted() {
        let mut out = Vec::new();
        flatten(
            "",
            &json!({"cpu": {"percent": 1.5}, "rss_bytes": 10}),
            &mut out,
        );
        assert_eq!(
            out,
            vec![
                ("cpu.percent".to_string(), "1.5".to_string()),
                ("rss_bytes".to_string(), "10".to_string())
            ]
        );
    }
}
