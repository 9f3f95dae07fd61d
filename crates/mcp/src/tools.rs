//! The tools: one entry per tool in [`definitions`] (name, description, input schema from
//! [`crate::inputs`]) and one arm per tool in [`call`], each a few SDK calls. An SDK error becomes
//! the tool's error result with the API's message (`sandbox ... not found`), never a protocol
//! error.

use crate::contexts::ContextCache;
use crate::inputs;
use crate::render;
use base64::Engine as _;
use pandastack_sdk::api::CreateSandbox;
use pandastack_sdk::{Client, ExecOptions, Sandbox};
use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde::de::DeserializeOwned;
use std::time::Duration;

/// Cell timeout when `run_code` gives none, seconds.
const DEFAULT_CELL_TIMEOUT_SECONDS: u64 = 300;
/// Largest file `read_file` returns, bytes (the model's context is the limit, not ours).
pub const MAX_READ_BYTES: usize = 10 * 1024 * 1024;

/// A tool's failure: its message is what the caller sees.
#[derive(Debug)]
pub struct ToolError(pub String);

impl From<pandastack_sdk::Error> for ToolError {
    fn from(e: pandastack_sdk::Error) -> Self {
        ToolError(match e.status() {
            Some(status) => format!("{e} (HTTP {status})"),
            None => e.to_string(),
        })
    }
}

type ToolResult = Result<CallToolResult, ToolError>;

fn tool<T: rmcp::schemars::JsonSchema + 'static>(
    name: &'static str,
    description: &'static str,
) -> Tool {
    Tool::new(name, description, schema_for_type::<T>())
}

/// Every tool, as `tools/list` shows it.
pub fn definitions() -> Vec<Tool> {
    use inputs::*;
    vec![
        tool::<CreateSandbox>("create_sandbox", "Create an isolated Linux sandbox (gVisor) and return it as JSON (its `id` is what the other tools take). `code-interpreter` has a persistent Python kernel with pandas, numpy and matplotlib."),
        tool::<Nothing>("list_sandboxes", "List this workspace's live sandboxes as JSON (id, template, status, metadata, ttl)."),
        tool::<SandboxId>("kill_sandbox", "Delete a sandbox with its processes and files. Irreversible: snapshot it first to keep its state."),
        tool::<RunCode>("run_code", "Run Python in the sandbox's persistent kernel (state is kept between calls, like a notebook). Returns stdout, stderr, the last expression's value (DataFrames as HTML tables, charts as PNG images) and the traceback if the cell raised."),
        tool::<Exec>("exec", "Run a shell command in a fresh process in the sandbox and wait for it. Returns JSON {stdout, stderr, exit_code, duration_ms}."),
        tool::<ReadFile>("read_file", "Read a file from the sandbox: text as text, PNG/JPEG as an image, other bytes as a base64 resource (at most 10 MiB)."),
        tool::<WriteFile>("write_file", "Write a file in the sandbox (atomically; parent directories are created)."),
        tool::<ListFiles>("list_files", "List a directory in the sandbox as JSON entries (name, path, is_dir, size, mode, mtime)."),
        tool::<SandboxId>("snapshot", "Capture the sandbox's memory, processes and files into a snapshot that outlives it; returns the snapshot as JSON (`id` for restore)."),
        tool::<Restore>("restore", "Create a new sandbox from a snapshot, with its kernel state intact (variables, imports, loaded data); returns the sandbox as JSON."),
        tool::<Fork>("fork", "Copy a running sandbox (memory and files) into 1-16 independent children, e.g. to try several approaches from one state; the parent keeps running. Returns the children as JSON."),
        tool::<SandboxId>("pause", "Pause a running sandbox: no CPU, memory kept; resume continues exactly where it was."),
        tool::<SandboxId>("resume", "Resume a paused sandbox."),
        tool::<SandboxId>("list_ports", "List the TCP ports servers listen on in the sandbox (e.g. after starting a web app), with their proxy paths."),
        tool::<PreviewUrl>("preview_url", "Get a signed URL a browser can open for a port of the sandbox (a web app or notebook the sandbox serves)."),
        tool::<CreateDatabase>("create_database", "Create a PostgreSQL database that this workspace's sandboxes (and nothing else) can reach, and wait until it runs. Returns it as JSON; pass its `connection_url` to a sandbox (e.g. as the env DATABASE_URL of exec) so data outlives the sandbox."),
        tool::<Nothing>("list_databases", "List this workspace's databases as JSON (id, label, status, size, port), without credentials."),
        tool::<DatabaseId>("database_connection", "The connection URL of a database: postgres://USER:PASSWORD@HOST:PORT/DATABASE, reachable from the workspace's sandboxes."),
        tool::<DatabaseId>("delete_database", "Delete a database and all its data. Irreversible."),
        tool::<CreateVolume>("create_volume", "Create a named disk (ext4) that outlives sandboxes: pass it to create_sandbox's `volumes` to mount it at /mnt/{name}, e.g. as a working directory many runs share. Returns it as JSON."),
        tool::<Nothing>("list_volumes", "List this workspace's volumes as JSON (name, size_mb, used bytes, the sandbox holding it)."),
        tool::<VolumeName>("delete_volume", "Delete a volume and its files. Irreversible; refused while a sandbox holds it."),
    ]
}

fn args<T: DeserializeOwned>(raw: Option<JsonObject>) -> Result<T, ToolError> {
    serde_json::from_value(serde_json::Value::Object(raw.unwrap_or_default()))
        .map_err(|e| ToolError(format!("invalid arguments: {e}")))
}

fn ok(block: ContentBlock) -> ToolResult {
    Ok(CallToolResult::success(vec![block]))
}

async fn sandbox(client: &Client, id: &str) -> Result<Sandbox, ToolError> {
    Ok(client.sandboxes().get(id).await?)
}

/// Runs tool `name` with `raw` arguments for `workspace` through `client`.
pub async fn call(
    name: &str,
    raw: Option<JsonObject>,
    client: &Client,
    workspace: &str,
    contexts: &ContextCache,
) -> ToolResult {
    match name {
        "create_sandbox" => {
            let a: inputs::CreateSandbox = args(raw)?;
            let sb = client
                .sandboxes()
                .create(CreateSandbox {
                    template: Some(a.template.unwrap_or_else(|| "code-interpreter".into())),
                    ttl_seconds: a.ttl_seconds,
                    metadata: a.metadata,
                    persistent: a.persistent,
                    allow_internet_access: a.allow_internet_access,
                    volumes: a.volumes.map(|v| {
                        v.into_iter()
                            .map(|m| pandastack_sdk::api::VolumeMount {
                                name: m.name,
                                read_only: m.read_only,
                            })
                            .collect()
                    }),
                    ..Default::default()
                })
                .await?;
            ok(render::json(sb.info()))
        }
        "list_sandboxes" => {
            let _: inputs::Nothing = args(raw)?;
            ok(render::json(&client.sandboxes().list().await?))
        }
        "kill_sandbox" => {
            let a: inputs::SandboxId = args(raw)?;
            client.sandboxes().delete(&a.sandbox_id).await?;
            contexts.forget(workspace, &a.sandbox_id);
            ok(ContentBlock::text(format!(
                "killed sandbox {}",
                a.sandbox_id
            )))
        }
        "run_code" => run_code(args(raw)?, client, workspace, contexts).await,
        "exec" => {
            let a: inputs::Exec = args(raw)?;
            let opts = ExecOptions {
                timeout_seconds: a.timeout_seconds,
                env: a.env.unwrap_or_default(),
                cwd: a.cwd,
                check: false,
            };
            let result = sandbox(client, &a.sandbox_id)
                .await?
                .exec_with(&a.command, &opts)
                .await?;
            ok(render::json(&result))
        }
        "read_file" => {
            let a: inputs::ReadFile = args(raw)?;
            let sb = sandbox(client, &a.sandbox_id).await?;
            let info = sb.files().stat(&a.path).await?;
            if info.is_dir {
                return Err(ToolError(format!(
                    "{} is a directory; use list_files",
                    a.path
                )));
            }
            if info.size > MAX_READ_BYTES as u64 {
                return Err(ToolError(format!(
                    "{} is {} bytes; read_file returns at most {MAX_READ_BYTES}",
                    a.path, info.size
                )));
            }
            let bytes = sb.files().read(&a.path).await?;
            ok(render::file(&a.path, &bytes))
        }
        "write_file" => {
            let a: inputs::WriteFile = args(raw)?;
            let bytes = match a.encoding {
                inputs::Encoding::Utf8 => a.content.into_bytes(),
                inputs::Encoding::Base64 => base64::engine::general_purpose::STANDARD
                    .decode(a.content.trim())
                    .map_err(|e| ToolError(format!("content is not base64: {e}")))?,
            };
            let w = sandbox(client, &a.sandbox_id)
                .await?
                .files()
                .write(&a.path, bytes)
                .await?;
            ok(ContentBlock::text(format!(
                "wrote {} bytes to {}",
                w.bytes, w.path
            )))
        }
        "list_files" => {
            let a: inputs::ListFiles = args(raw)?;
            let path = a.path.unwrap_or_else(|| "/workspace".into());
            let entries = sandbox(client, &a.sandbox_id)
                .await?
                .files()
                .list(&path)
                .await?;
            ok(render::json(&entries))
        }
        "snapshot" => {
            let a: inputs::SandboxId = args(raw)?;
            ok(render::json(
                &sandbox(client, &a.sandbox_id).await?.snapshot().await?,
            ))
        }
        "restore" => {
            let a: inputs::Restore = args(raw)?;
            let sb = client
                .sandboxes()
                .create(CreateSandbox {
                    from_snapshot: Some(a.snapshot_id),
                    ttl_seconds: a.ttl_seconds,
                    ..Default::default()
                })
                .await?;
            ok(render::json(sb.info()))
        }
        "fork" => {
            let a: inputs::Fork = args(raw)?;
            let parent = sandbox(client, &a.sandbox_id).await?;
            let children = parent.fork_tree(a.count.unwrap_or(1), a.metadata).await?;
            let infos: Vec<_> = children.iter().map(|c| c.info().clone()).collect();
            ok(render::json(&infos))
        }
        "pause" | "resume" => {
            let a: inputs::SandboxId = args(raw)?;
            let sb = sandbox(client, &a.sandbox_id).await?;
            let after = if name == "pause" {
                sb.pause().await?
            } else {
                sb.resume().await?
            };
            ok(render::json(&after))
        }
        "list_ports" => {
            let a: inputs::SandboxId = args(raw)?;
            ok(render::json(
                &sandbox(client, &a.sandbox_id).await?.ports().await?,
            ))
        }
        "preview_url" => {
            let a: inputs::PreviewUrl = args(raw)?;
            let t = sandbox(client, &a.sandbox_id)
                .await?
                .preview_token(a.port, a.ttl_seconds)
                .await?;
            ok(render::json(&t))
        }
        "create_database" => {
            let a: inputs::CreateDatabase = args(raw)?;
            let db = client
                .databases()
                .create(pandastack_sdk::api::CreateDatabase {
                    label: a.label,
                    size: a.size,
                    always_on: a.always_on,
                    ..Default::default()
                })
                .await?;
            ok(render::json(&db))
        }
        "list_databases" => {
            let _: inputs::Nothing = args(raw)?;
            ok(render::json(&client.databases().list().await?))
        }
        "database_connection" => {
            let a: inputs::DatabaseId = args(raw)?;
            ok(ContentBlock::text(
                client.databases().connection(&a.database_id).await?,
            ))
        }
        "delete_database" => {
            let a: inputs::DatabaseId = args(raw)?;
            client.databases().delete(&a.database_id).await?;
            ok(ContentBlock::text(format!(
                "deleted database {}",
                a.database_id
            )))
        }
        "create_volume" => {
            let a: inputs::CreateVolume = args(raw)?;
            ok(render::json(
                &client.volumes().create(&a.name, a.size_mb).await?,
            ))
        }
        "list_volumes" => {
            let _: inputs::Nothing = args(raw)?;
            ok(render::json(&client.volumes().list().await?))
        }
        "delete_volume" => {
            let a: inputs::VolumeName = args(raw)?;
            client.volumes().delete(&a.name).await?;
            ok(ContentBlock::text(format!("deleted volume {}", a.name)))
        }
        other => Err(ToolError(format!("unknown tool '{other}'"))),
    }
}

/// `run_code` in the sandbox's code context, opened on first use and kept in `contexts`; a
/// context that is gone (closed, or the sandbox restarted from elsewhere) is opened again once.
async fn run_code(
    a: inputs::RunCode,
    client: &Client,
    workspace: &str,
    contexts: &ContextCache,
) -> ToolResult {
    let timeout = Duration::from_secs(a.timeout_seconds.unwrap_or(DEFAULT_CELL_TIMEOUT_SECONDS));
    for attempt in 0..2 {
        let ctx = match contexts.get(workspace, &a.sandbox_id) {
            Some(c) => c.with_client(client.clone()),
            None => {
                let ctx = sandbox(client, &a.sandbox_id)
                    .await?
                    .create_code_context()
                    .await?;
                contexts.put(workspace, &a.sandbox_id, ctx.clone());
                ctx
            }
        };
        match ctx.run_code_with_timeout(&a.code, timeout).await {
            Ok(ex) => {
                let (blocks, failed) = render::execution(&ex);
                return Ok(if failed {
                    CallToolResult::error(blocks)
                } else {
                    CallToolResult::success(blocks)
                });
            }
            Err(pandastack_sdk::Error::NotFound { .. }) if attempt == 0 => {
                contexts.forget(workspace, &a.sandbox_id);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(ToolError(format!(
        "sandbox {} has no usable code context",
        a.sandbox_id
    )))
}
