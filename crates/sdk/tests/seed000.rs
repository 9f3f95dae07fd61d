//! Seed 000 ("Persistent sandbox sessions across agent turns") through the Rust SDK against a
//! real server and real gVisor sandboxes: state across turns in one kernel, snapshot / kill /
//! restore with the kernel's memory intact, fork_tree and fork of a warmed kernel, and the
//! durable loop (snapshot-and-kill every turn). See `common` for the server.

mod common;

use pandastack_sdk::api::CreateSandbox;
use pandastack_sdk::{Client, Error};
use std::collections::BTreeMap;

fn metadata(k: &str, v: &str) -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([(k.to_string(), v.to_string())]))
}

/// Section 1: one sandbox, one kernel, state across turns.
async fn state_across_turns(client: &Client) -> pandastack_sdk::Sandbox {
    let sandbox = client
        .sandboxes()
        .create(common::code_interpreter())
        .await
        .expect("create");
    assert_eq!(sandbox.info().template, "code-interpreter");
    assert_eq!(sandbox.info().status, "running");
    let ctx = sandbox.create_code_context().await.expect("context");
    let ex = ctx
        .run_code("import pandas as pd; df = pd.DataFrame({'a': [1, 2, 3]})")
        .await
        .expect("turn 1");
    assert_eq!(ex.error, None, "{ex:?}");
    let ex = ctx
        .run_code("total = int(df['a'].sum()); total")
        .await
        .expect("turn 2");
    assert_eq!(ex.text(), Some("6"), "{ex:?}");
    assert_eq!(ex.exit_code, 0);
    sandbox
}

/// Section 2: snapshot, kill, restore with a new id; a new context sees the old kernel.
async fn state_across_restarts(client: &Client, sandbox: pandastack_sdk::Sandbox) {
    let snap = sandbox.snapshot().await.expect("snapshot");
    assert!(snap.id.starts_with("snap-"), "{snap:?}");
    assert_eq!(snap.snapshot_id, snap.id);
    assert_eq!(snap.sandbox_id, sandbox.id());
    assert!(
        !snap.kernels.is_empty(),
        "the live kernel is recorded: {snap:?}"
    );
    sandbox.kill().await.expect("kill");
    assert!(matches!(
        client.sandboxes().get(sandbox.id()).await,
        Err(Error::NotFound { .. })
    ));
    let listed = client
        .snapshots()
        .list(Some(sandbox.id()))
        .await
        .expect("list snapshots");
    assert!(listed.iter().any(|s| s.id == snap.id), "{listed:?}");

    // "template/cpu/mem inherited from snapshot": a template in the body is ignored.
    let restored = client
        .sandboxes()
        .create(CreateSandbox {
            from_snapshot: Some(snap.id.clone()),
            template: Some("base".into()),
            ttl_seconds: Some(3600),
            ..Default::default()
        })
        .await
        .expect("restore");
    assert_ne!(
        restored.id(),
        sandbox.id(),
        "a restored sandbox has a new id"
    );
    assert_eq!(restored.info().template, "code-interpreter");
    assert_eq!(
        restored.info().from_snapshot.as_deref(),
        Some(snap.id.as_str())
    );
    let ctx = restored.create_code_context().await.expect("context");
    assert!(ctx.info().adopted, "{:?}", ctx.info());
    let ex = ctx.run_code("print(total)").await.expect("run");
    assert_eq!(ex.stdout, "6\n", "{ex:?}");
    assert_eq!(ex.text(), Some("6"));
    restored.kill().await.expect("kill restored");
    client
        .snapshots()
        .delete(&snap.id)
        .await
        .expect("delete snapshot");
    assert!(matches!(
        client.snapshots().get(&snap.id).await,
        Err(Error::NotFound { .. })
    ));
}

/// Section 3: fork_tree(3) and fork of a warmed kernel; the parent is untouched.
async fn branch_the_warmed_state(client: &Client) {
    let warm = client
        .sandboxes()
        .create(common::code_interpreter())
        .await
        .expect("create warm");
    let ctx = warm.create_code_context().await.expect("context");
    let ex = ctx
        .run_code("import pandas as pd; df = pd.DataFrame({'a': list(range(10))})")
        .await
        .expect("load");
    assert_eq!(ex.error, None);

    let branches = warm
        .fork_tree(3, metadata("search", "tree-of-thought"))
        .await
        .expect("fork_tree");
    assert_eq!(branches.len(), 3);
    let tree = branches[0].info().metadata.get("fork_tree_id").cloned();
    assert!(tree.is_some(), "{:?}", branches[0].info());
    for (i, sb) in branches.iter().enumerate() {
        let md = &sb.info().metadata;
        assert_eq!(
            md.get("search").map(String::as_str),
            Some("tree-of-thought")
        );
        assert_eq!(md.get("parent_id").map(String::as_str), Some(warm.id()));
        assert_eq!(md.get("fork_tree_id"), tree.as_ref());
        let bctx = sb.create_code_context().await.expect("branch context");
        let out = bctx
            .run_code(&format!("b = {i}; int(df['a'].sum()) + b"))
            .await
            .expect("branch run");
        assert_eq!(out.text(), Some((45 + i).to_string().as_str()), "{out:?}");
    }
    // Each branch diverged on its own; the parent never saw `b`.
    let parent = ctx.run_code("'b' in globals()").await.expect("parent");
    assert_eq!(parent.text(), Some("False"));

    let branch = warm
        .fork(metadata("branch", "experiment"))
        .await
        .expect("fork");
    assert_eq!(
        branch.info().metadata.get("branch").map(String::as_str),
        Some("experiment")
    );
    let bctx = branch.create_code_context().await.expect("fork context");
    assert_eq!(
        bctx.run_code("len(df)").await.expect("fork run").text(),
        Some("10")
    );
    for sb in branches.iter().chain([&branch]) {
        sb.kill().await.expect("kill branch");
    }
    warm.kill().await.expect("kill warm");
}

/// "Putting it together": snapshot-and-kill every turn; each turn sees the previous one's state.
async fn durable_loop(client: &Client) {
    let mut saved: Option<String> = None;
    let mut answers = Vec::new();
    for code in ["x = 41", "x += 1; x", "x * 2"] {
        let sandbox = client
            .sandboxes()
            .create(match &saved {
                Some(id) => CreateSandbox {
                    from_snapshot: Some(id.clone()),
                    ttl_seconds: Some(3600),
                    ..Default::default()
                },
                None => common::code_interpreter(),
            })
            .await
            .expect("create turn sandbox");
        let ctx = sandbox.create_code_context().await.expect("context");
        let ex = ctx.run_code(code).await.expect("turn");
        answers.push(ex.error.clone().or(ex.text().map(str::to_string)));
        let snap = sandbox.snapshot().await.expect("checkpoint");
        sandbox.kill().await.expect("kill turn sandbox");
        if let Some(old) = saved.replace(snap.id) {
            client
                .snapshots()
                .delete(&old)
                .await
                .expect("drop old checkpoint");
        }
    }
    assert_eq!(answers, vec![None, Some("42".into()), Some("84".into())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_persistent_sessions() {
    common::run("seed000", |client| async move {
        let sandbox = state_across_turns(&client).await;
        state_across_restarts(&client, sandbox).await;
        branch_the_warmed_state(&client).await;
        durable_loop(&client).await;
    })
    .await;
}
