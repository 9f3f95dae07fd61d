//! `sandbox snapshot ID`: `POST /v1/sandboxes/{id}/snapshots` with no body (contract §2.2).
//! Prints only the snapshot id, read as the Python SDK does: `id`, else `snapshot_id`, else a
//! bare string reply.

use crate::client::Timeout;
use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output;
use serde_json::Value;

/// The snapshot id in a snapshot-create reply.
pub fn snapshot_id(reply: &Value) -> Option<String> {
    if let Some(s) = reply.as_str() {
        return Some(s.to_string());
    }
    ["id", "snapshot_id"]
        .iter()
        .find_map(|k| reply.get(k).and_then(Value::as_str))
        .map(str::to_string)
}

/// Snapshots the sandbox; prints the snapshot id.
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let reply = ctx
        .client()?
        .post_json(&["sandboxes", id, "snapshots"], None, Timeout::Slow)?;
    if ctx.json() {
        return output::json(&reply);
    }
    let snap = snapshot_id(&reply).ok_or_else(|| CliError::BadReply {
        what: "POST /v1/sandboxes/{id}/snapshots".into(),
        detail: "no snapshot id in the reply".into(),
    })?;
    output::line(&snap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn id_like_the_python_sdk() {
        assert_eq!(
            snapshot_id(&json!({"id": "snap-1", "sandbox_id": "s"})).as_deref(),
            Some("snap-1")
        );
        assert_eq!(
            snapshot_id(&json!({"snapshot_id": "snap-2"})).as_deref(),
            Some("snap-2")
        );
        assert_eq!(snapshot_id(&json!("snap-3")).as_deref(), Some("snap-3"));
        assert_eq!(snapshot_id(&json!({})), None);
    }
}
