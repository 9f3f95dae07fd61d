//! `sandbox fork ID [--metadata k=v]...`: `POST /v1/sandboxes/{id}/fork` with
//! `{"metadata": {...}}`, or no body without metadata (contract §2.1). The child is read from
//! any reply shape the contract allows: `{"sandbox": {...}}`, `{"children": [child, ...]}`, a
//! sandbox object, or a bare id string. Prints the child (just its id for a bare string).

use super::render;
use crate::client::Timeout;
use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output;
use crate::parse::{self, KeyValue};
use clap::Args;
use serde_json::{json, Value};

/// Flags of `sandbox fork`.
#[derive(Debug, Clone, Args)]
pub struct ForkArgs {
    /// The parent sandbox id.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// Metadata of the child; repeatable.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse::key_value)]
    pub metadata: Vec<KeyValue>,
}

/// The child in a fork reply.
pub fn child(reply: &Value) -> Option<&Value> {
    if reply.is_string() {
        return Some(reply);
    }
    if let Some(sb) = reply.get("sandbox").filter(|v| v.is_object()) {
        return Some(sb);
    }
    if let Some(first) = reply
        .get("children")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
    {
        return Some(first);
    }
    reply.get("id").is_some().then_some(reply)
}

/// Forks the sandbox and prints the child.
pub fn run(args: &ForkArgs, ctx: &Ctx) -> Result<()> {
    let body = parse::to_map(&args.metadata).map(|m| json!({ "metadata": m }));
    let reply = ctx.client()?.post_json(
        &["sandboxes", &args.id, "fork"],
        body.as_ref(),
        Timeout::Slow,
    )?;
    if ctx.json() {
        return output::json(&reply);
    }
    let what = "POST /v1/sandboxes/{id}/fork";
    match child(&reply) {
        Some(Value::String(id)) => output::line(id),
        Some(sb) => render::print_one(sb, what),
        None => Err(CliError::BadReply {
            what: what.into(),
            detail: "no child sandbox in the reply".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reply_shape() {
        assert_eq!(child(&json!("abc")), Some(&json!("abc")));
        assert_eq!(
            child(&json!({"sandbox": {"id": "a"}})),
            Some(&json!({"id": "a"}))
        );
        assert_eq!(
            child(&json!({"children": [{"id": "b"}, {"id": "c"}]})),
            Some(&json!({"id": "b"}))
        );
        assert_eq!(child(&json!({"id": "d"})), Some(&json!({"id": "d"})));
        assert_eq!(child(&json!({"x": 1})), None);
    }
}
