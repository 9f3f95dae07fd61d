//! The OpenAPI 3.1 description of `/v1`, generated from the handlers (`#[utoipa::path]` beside
//! each one, registered through `utoipa_axum::routes!` in each module's `router()`, so a route
//! cannot exist without its description), served at `GET /v1/openapi.json` and checked into
//! `docs/openapi.json` (the test below fails when they differ).
//!
//! Adding an endpoint: annotate the handler with `#[utoipa::path(...)]` (its responses end with
//! [`Errors`]), register it with `routes!`, derive `ToSchema` for new wire types in
//! `pandastack-api`, then regenerate the file with
//! `PANDASTACK_WRITE_OPENAPI=1 cargo test -p pandastack-server openapi`.

use crate::AppState;
use axum::http::header;
use axum::response::IntoResponse;
use pandastack_api::ErrorBody;
use serde_json::{json, Value};
use std::sync::OnceLock;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Error replies every operation may give: `{"error": "<message>"}` (contract §7).
#[allow(dead_code)] // a description, never constructed
#[derive(utoipa::IntoResponses)]
pub enum Errors {
    /// The request is malformed; the message names the field or parameter.
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// No API key, or an unknown, revoked or expired one.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// No such sandbox, snapshot, context, file, template, build or database in the caller's
    /// workspace.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// The resource's state forbids the operation; the message names the state.
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// The workspace's request rate limit (`--rate-limit` requests/s, bursts of twice that;
    /// `Retry-After` says when to retry), or, for an operation that adds sandboxes, snapshots
    /// or databases, a workspace quota the message names (`--workspace-max-sandboxes`,
    /// `--workspace-max-snapshot-gb`, `--workspace-max-databases`,
    /// `--workspace-database-ports-percent`; no `Retry-After`: delete some first). README
    /// "Limits"; the SDKs retry creates on a 429 with `Retry-After` (contract §1.4).
    #[response(
        status = 429,
        headers(("Retry-After" = u64, description = "Seconds to wait; sent for the rate limit, not for a quota."))
    )]
    TooManyRequests(ErrorBody),
    /// An internal failure (its cause is logged, not sent).
    #[response(status = 500)]
    Internal(ErrorBody),
    /// The host is at capacity (`--max-sandboxes`, or the memory budget `--memory-overcommit` ×
    /// host memory) for an operation that starts an instance: a create, restore, fork or wake,
    /// including the implicit wake of a hibernated sandbox by any request to it, or a database
    /// create, clone or start whose memory does not fit (with the sandboxes', and
    /// `--database-memory-gb`); `Retry-After` is sent and the SDKs retry creates on it
    /// (contract §1.4). Or the sandbox's guest is not
    /// reachable: the message says `connection refused` so the SDKs' warm-up retry applies.
    #[response(
        status = 503,
        headers(("Retry-After" = u64, description = "Seconds to wait; sent when the host is at capacity."))
    )]
    Unavailable(ErrorBody),
}

/// The reply of an operation that writes images or starts instances on the host's disk (create,
/// restore, fork, fork-tree, snapshot, hibernate) when that disk is below its reserve
/// (`--disk-reserve-percent`, at most `--disk-reserve-max-gb`; README "Limits").
#[allow(dead_code)] // a description, never constructed
#[derive(utoipa::IntoResponses)]
pub enum HostStorage {
    /// The host's free disk is below its reserve; nothing was created or changed.
    #[response(status = 507)]
    InsufficientStorage(ErrorBody),
}

/// The replies of a file operation the guest refuses (contract §2.4, guest `ErrorCode`).
#[allow(dead_code)] // a description, never constructed
#[derive(utoipa::IntoResponses)]
pub enum FileErrors {
    /// The path is read-only or not permitted in the sandbox (e.g. under `/.pandastack`).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// The sandbox's own disk is full (its quota); the message says so.
    #[response(status = 507)]
    SandboxDiskFull(ErrorBody),
}

/// The reply of an operation taking a JSON body larger than
/// [`crate::extract::MAX_JSON_BODY_BYTES`] (8 MiB).
#[allow(dead_code)] // a description, never constructed
#[derive(utoipa::IntoResponses)]
pub enum BodyTooLarge {
    /// The JSON body is larger than 8 MiB.
    #[response(status = 413)]
    PayloadTooLarge(ErrorBody),
}

/// The reply of a command or cell killed at its timeout: a 5xx whose message says `timeout`,
/// which the SDKs raise as `SandboxTimeout` (contract §1.5, §7).
#[allow(dead_code)] // a description, never constructed
#[derive(utoipa::IntoResponses)]
pub enum CommandTimeout {
    /// The command ran past `timeout_seconds`; its process group was killed.
    #[response(status = 504)]
    Timeout(ErrorBody),
}

/// Every `/v1` route with its description.
pub fn v1() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(super::sandboxes::router())
        .merge(super::exec::router())
        .merge(super::lifecycle::router())
        .merge(super::snapshots::router())
        .merge(super::fork::router())
        .merge(super::events::router())
        .merge(super::metrics::router())
        .merge(super::logs::router())
        .merge(super::fs::router())
        .merge(super::repl::router())
        .merge(super::templates::router())
        .merge(super::template_builds::router())
        .merge(super::tokens::router())
        .merge(super::ports::router())
        .merge(super::databases::router())
        .merge(super::volumes::router())
        .merge(super::hosts::router())
        // Forwards requests of any path into the sandbox: described by hand in
        // `add_proxy_paths`, as no derive can say "any path".
        .merge(OpenApiRouter::from(super::proxy::router()))
        .routes(routes!(openapi_json))
}

/// The description of [`v1`] under `/v1`, with its title, version, bearer-key security and
/// links, as JSON.
pub fn document() -> Value {
    let (_, mut doc) = OpenApiRouter::<AppState>::new()
        .nest("/v1", v1())
        .split_for_parts();
    doc.info.title = "PandaStack API".into();
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    doc.info.description = Some(
        "Sandboxes for AI agents: gVisor sandboxes with a persistent Python kernel, exec, files, \
         pause/resume, hibernate/wake, snapshots, fork. Every operation but this description \
         needs `Authorization: Bearer <API key>`. Errors are `{\"error\": \"<message>\"}`."
            .into(),
    );
    doc.info.license = None;
    doc.info.contact = None;
    let components = doc.components.get_or_insert_with(Default::default);
    // Types only the hand-written parts (error sets, SSE events) name.
    for (name, schema) in [
        named::<ErrorBody>(),
        named::<pandastack_api::ExecChunk>(),
        named::<pandastack_api::ExecExit>(),
        named::<pandastack_api::StreamError>(),
        named::<pandastack_api::LogLine>(),
        named::<pandastack_api::Event>(),
    ] {
        components.schemas.insert(name, schema);
    }
    // The `done` event of a build log (contract §3.3).
    components.schemas.insert(
        "BuildDone".to_string(),
        utoipa::openapi::RefOr::T(
            utoipa::openapi::ObjectBuilder::new()
                .property(
                    "status",
                    utoipa::openapi::ObjectBuilder::new()
                        .schema_type(utoipa::openapi::schema::Type::String),
                )
                .required("status")
                .into(),
        ),
    );
    components.add_security_scheme(
        "api_key",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .bearer_format("pds_...")
                .build(),
        ),
    );
    doc.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
        "api_key",
        Vec::<String>::new(),
    )]);
    let mut doc = serde_json::to_value(&doc).unwrap_or_default();
    add_links(&mut doc);
    add_event_schemas(&mut doc);
    add_proxy_paths(&mut doc);
    doc
}

/// `/v1/sandboxes/{id}/proxy/{port}/{path}` (`api/proxy.rs`): every method OpenAPI names and any
/// path, forwarded to the sandbox's port with the API key stripped. The reply is the sandbox's;
/// 502 means nothing answers on that port. Previews are not under the workspace request rate
/// limit (a browser loads many assets), so no 429.
fn add_proxy_paths(doc: &mut Value) {
    let reply = |what: &str| json!({"description": what});
    let mut responses = json!({
        "default": reply("Whatever the sandbox's server answers, as it answers it."),
        "502": {
            "description": "Nothing listens on that port in the sandbox, or it broke off.",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
        },
    });
    for (code, what) in [
        ("400", "The port is not a TCP port (1-65535)."),
        ("401", "No API key, or an unknown, revoked or expired one."),
        ("404", "No such sandbox in the caller's workspace."),
        (
            "400",
            "The path holds a control character; the message names `path`.",
        ),
        (
            "409",
            "The sandbox is not running; the message names its state.",
        ),
        (
            "500",
            "An internal failure (its cause is logged, not sent).",
        ),
        (
            "503",
            "The sandbox was hibernated and the host has no room to wake it (with Retry-After), \
             or its guest is not reachable.",
        ),
    ] {
        responses[code] = json!({
            "description": what,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
        });
    }
    let param = |name: &str, what: &str, schema: Value| json!({"name": name, "in": "path", "required": true, "description": what, "schema": schema});
    let mut item = json!({});
    for method in [
        "get", "post", "put", "patch", "delete", "head", "options", "trace",
    ] {
        item[method] = json!({
            "tags": ["network"],
            "summary": "Forward a request to a port of the sandbox (any method, bodies and replies streamed, SSE and WebSocket upgrades).",
            "operationId": format!("proxy_{method}"),
            "parameters": [
                param("id", "The sandbox id.", json!({"type": "string", "format": "uuid"})),
                param("port", "A TCP port in the sandbox.", json!({"type": "integer", "minimum": 1, "maximum": 65535})),
                param(
                    "path",
                    "The path to forward (may be empty). Control characters (below 0x20, 0x7F), raw or \
                     percent-encoded, are refused with 400 naming `path` (issue 23 finding 12).",
                    json!({"type": "string", "pattern": "^[^\\u0000-\\u001F\\u007F]*$"}),
                ),
            ],
            "responses": responses.clone(),
        });
    }
    if let Some(paths) = doc["paths"].as_object_mut() {
        paths.insert("/v1/sandboxes/{id}/proxy/{port}/{path}".into(), item);
    }
}

fn named<T: utoipa::ToSchema>() -> (
    String,
    utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
) {
    (T::name().into_owned(), T::schema())
}

/// One Server-Sent Event as the description states it: an object with the event's name (when
/// it has one), its `data` (JSON of `data_schema`) and optionally its `id` (contract §3).
fn sse_event(name: Option<&str>, data_schema: &str) -> Value {
    let mut required = vec!["data"];
    let mut properties = json!({
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": format!("#/components/schemas/{data_schema}")},
        },
        "id": {"type": "string"},
    });
    if let Some(n) = name {
        required.push("event");
        properties["event"] = json!({"const": n});
    }
    json!({"type": "object", "required": required, "properties": properties})
}

/// The events of the three streams, in place of the derive's bare `string`: exec output
/// (contract §3.1), workspace transitions of sandboxes (seed 003) and databases (issue 10),
/// followed logs (contract §3.2).
fn add_event_schemas(doc: &mut Value) {
    let exec = json!({"oneOf": [
        sse_event(Some("stdout"), "ExecChunk"),
        sse_event(Some("stderr"), "ExecChunk"),
        sse_event(Some("exit"), "ExecExit"),
        sse_event(Some("error"), "StreamError"),
    ]});
    let events = json!({"oneOf": [
        sse_event(Some("transition"), "Event"),
        sse_event(Some("database"), "DatabaseEvent"),
    ]});
    for (path, method, schema) in [
        ("/v1/sandboxes/{id}/exec/stream", "post", exec),
        ("/v1/events", "get", events),
        ("/v1/sandboxes/{id}/logs", "get", sse_event(None, "LogLine")),
        (
            "/v1/templates/builds/{id}/logs",
            "get",
            json!({"oneOf": [
                // A log line, then `data: end` (Python SDK).
                {"type": "object", "required": ["data"], "properties": {
                    "data": {"type": "string"}, "event": {"const": "message"}}},
                // Then `event: done` with the build's status (TypeScript SDK).
                sse_event(Some("done"), "BuildDone"),
            ]}),
        ),
    ] {
        let content = &mut doc["paths"][path][method]["responses"]["200"]["content"];
        if let Some(stream) = content.get_mut("text/event-stream") {
            stream["schema"] = schema;
        }
    }
}

/// [`document`] as pretty JSON with a final newline (the form of `docs/openapi.json`).
pub fn document_json() -> String {
    let mut text = serde_json::to_string_pretty(&document()).unwrap_or_default();
    text.push('\n');
    text
}

/// Operations that stream until the sandbox is gone, left out of the links (a client following
/// links from a create would wait on them forever).
const ENDLESS: [&str; 1] = ["sandbox_logs"];

/// OpenAPI links from the replies that create things to the operations on them: a new sandbox
/// (create, fork) to every `/v1/sandboxes/{id}/...` operation taking no other path parameter, a
/// new code context to its run and close, a new snapshot to its get and delete. Clients (and the
/// fuzzer's stateful phase) follow them to chain calls on real resources.
fn add_links(doc: &mut Value) {
    let mut ops: Vec<(String, String)> = Vec::new(); // (path, operationId)
    if let Some(paths) = doc["paths"].as_object() {
        for (path, item) in paths {
            for op in item.as_object().into_iter().flat_map(|m| m.values()) {
                if let Some(id) = op["operationId"].as_str() {
                    ops.push((path.clone(), id.to_string()));
                }
            }
        }
    }
    let links_to = |params: &[(&str, &str)]| -> Value {
        let mut out = serde_json::Map::new();
        for (path, id) in &ops {
            let wanted: Vec<&str> = path
                .split('/')
                .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
                .collect();
            let given: Vec<&str> = params.iter().map(|(n, _)| *n).collect();
            if wanted.is_empty() || wanted != given || ENDLESS.contains(&id.as_str()) {
                continue;
            }
            let parameters: serde_json::Map<String, Value> = params
                .iter()
                .map(|(n, v)| (n.to_string(), Value::from(*v)))
                .collect();
            out.insert(
                id.clone(),
                json!({"operationId": id, "parameters": parameters}),
            );
        }
        Value::Object(out)
    };
    let sandbox = links_to(&[("id", "$response.body#/id")]);
    let context = links_to(&[("id", "$request.path.id"), ("ctx", "$response.body#/id")]);
    let snapshot = links_to(&[("snap", "$response.body#/id")]);
    for (path, method, links) in [
        ("/v1/sandboxes", "post", &sandbox),
        ("/v1/sandboxes/{id}/fork", "post", &sandbox),
        ("/v1/sandboxes/{id}/repl/sessions", "post", &context),
        ("/v1/sandboxes/{id}/snapshots", "post", &snapshot),
    ] {
        if let Some(reply) = doc["paths"][path][method]["responses"]["201"].as_object_mut() {
            reply.insert("links".into(), links.clone());
        }
    }
}

/// This description, as JSON (no API key needed).
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    security(()),
    responses((status = 200, description = "The OpenAPI 3.1 description of /v1.", content_type = "application/json", body = Object))
)]
async fn openapi_json() -> impl IntoResponse {
    static DOC: OnceLock<String> = OnceLock::new();
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOC.get_or_init(document_json).clone(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/openapi.json` is the generated description; regenerate it with
    /// `PANDASTACK_WRITE_OPENAPI=1 cargo test -p pandastack-server openapi`.
    #[test]
    fn checked_in_openapi_json_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
        let generated = document_json();
        if std::env::var("PANDASTACK_WRITE_OPENAPI").as_deref() == Ok("1") {
            std::fs::write(&path, &generated).expect("write docs/openapi.json");
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "docs/openapi.json differs from the description the code generates; run \
             PANDASTACK_WRITE_OPENAPI=1 cargo test -p pandastack-server openapi and commit it"
        );
    }

    #[test]
    fn every_operation_documents_its_errors_and_auth() {
        let doc = document();
        let paths = doc["paths"].as_object().expect("paths");
        assert!(paths.len() >= 30, "{} paths", paths.len());
        let mut ids = std::collections::BTreeSet::new();
        for (path, item) in paths {
            for (method, op) in item.as_object().expect("path item") {
                let codes: Vec<&String> = op["responses"]
                    .as_object()
                    .expect("responses")
                    .keys()
                    .collect();
                assert!(
                    codes.iter().any(|c| c.starts_with('2') || *c == "default"),
                    "{method} {path}: no 2xx"
                );
                if path != "/v1/openapi.json" {
                    let authed = if path.contains("/proxy/") {
                        &["400", "401", "404", "500", "503"][..]
                    } else {
                        &["400", "401", "404", "429", "500", "503"][..]
                    };
                    for code in authed {
                        assert!(
                            codes.iter().any(|c| *c == code),
                            "{method} {path}: no {code}"
                        );
                    }
                }
                let id = op["operationId"].as_str().expect("operationId");
                assert!(ids.insert(id.to_string()), "duplicate operationId {id}");
            }
        }
        // Issue 8's disk reserve answers 507 exactly where images are written, instances start or
        // databases take disk (issue 10).
        for (path, method) in [
            ("/v1/sandboxes", "post"),
            ("/v1/sandboxes/{id}/fork", "post"),
            ("/v1/sandboxes/{id}/fork-tree", "post"),
            ("/v1/sandboxes/{id}/snapshots", "post"),
            ("/v1/sandboxes/{id}/hibernate", "post"),
            ("/v1/sandboxes/{id}/fs", "put"),
            ("/v1/databases", "post"),
            ("/v1/databases/{id}/clone", "post"),
            ("/v1/databases/{id}", "patch"),
        ] {
            let op = &doc["paths"][path][method]["responses"];
            assert!(op.get("507").is_some(), "{method} {path}: no 507");
        }
        assert!(doc["paths"]["/v1/sandboxes"]["get"]["responses"]
            .get("507")
            .is_none());
        // Issue 10's failover on one host, issue 12's operator-only host list.
        let failover = &doc["paths"]["/v1/databases/{id}/failover"]["post"]["responses"];
        assert!(failover.get("501").is_some(), "{failover}");
        assert!(doc["paths"]["/v1/hosts"]["get"]["responses"]
            .get("403")
            .is_some());
        let retry = &doc["paths"]["/v1/sandboxes"]["post"]["responses"]["429"]["headers"];
        assert!(retry.get("Retry-After").is_some(), "{retry}");
        let links = doc["paths"]["/v1/sandboxes"]["post"]["responses"]["201"]["links"]
            .as_object()
            .expect("links from create");
        assert!(
            links.contains_key("exec") && !links.contains_key("sandbox_logs"),
            "{links:?}"
        );
        assert!(
            !links.contains_key("run_code"),
            "run_code needs a context id too"
        );
    }
}
