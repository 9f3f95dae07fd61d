//! Seed 000 ("Persistent sandbox sessions across agent turns") with the Rust SDK: one kernel
//! across turns, snapshot -> kill -> restore with the kernel's memory intact, then a fork_tree
//! of the warmed state. Prints each step.
//!
//! ```sh
//! export PANDASTACK_API=http://127.0.0.1:7700 PANDASTACK_API_KEY=pds_...
//! cargo run -p pandastack-sdk --example persistent_session
//! ```

use pandastack_sdk::api::CreateSandbox;
use pandastack_sdk::{Client, Result};
use std::collections::BTreeMap;

#[tokio::main]
async fn main() -> Result<()> {
    let client = Client::from_env()?;

    // 1. State across turns: one sandbox, one kernel.
    let sandbox = client
        .sandboxes()
        .create(CreateSandbox {
            template: Some("code-interpreter".into()),
            ttl_seconds: Some(3600),
            ..Default::default()
        })
        .await?;
    println!(
        "sandbox {} ({}, {:?} ms)",
        sandbox.id(),
        sandbox.info().boot_mode,
        sandbox.info().boot_ms
    );
    let ctx = sandbox.create_code_context().await?;
    ctx.run_code("import pandas as pd; df = pd.DataFrame({'a': [1, 2, 3]})")
        .await?;
    let ex = ctx.run_code("total = int(df['a'].sum()); total").await?;
    println!("turn 2: {}", ex.text().unwrap_or("-")); // 6

    // 2. State across restarts: snapshot, kill, restore (a new id; the kernel survived).
    let snap = sandbox.snapshot().await?;
    sandbox.kill().await?;
    println!(
        "snapshot {} ({} bytes); sandbox killed",
        snap.id, snap.size_bytes
    );
    let restored = client
        .sandboxes()
        .create(CreateSandbox {
            from_snapshot: Some(snap.id.clone()),
            ttl_seconds: Some(3600),
            ..Default::default()
        })
        .await?;
    let ctx = restored.create_code_context().await?;
    println!(
        "restored {}: print(total) -> {}",
        restored.id(),
        ctx.run_code("print(total)").await?.stdout.trim()
    );

    // 3. Branch the warmed state.
    let metadata = BTreeMap::from([("search".to_string(), "tree-of-thought".to_string())]);
    let branches = restored.fork_tree(3, Some(metadata)).await?;
    for (i, branch) in branches.iter().enumerate() {
        let bctx = branch.create_code_context().await?;
        let out = bctx.run_code(&format!("total * {}", i + 1)).await?;
        println!("branch {i} {}: {}", branch.id(), out.text().unwrap_or("-"));
    }
    for branch in &branches {
        branch.kill().await?;
    }
    restored.kill().await?;
    client.snapshots().delete(&snap.id).await?;
    println!("done: every sandbox killed, snapshot deleted");
    Ok(())
}
