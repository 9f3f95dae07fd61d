//! Streaming and errors through the Rust SDK against a real server: exec output arrives live and
//! ends with the exit code; timeouts are [`Error::Timeout`] in both exec forms; files of several
//! MiB stream both ways byte for byte; the event stream reports transitions; lifecycle and
//! fork calls; every error variant the server can produce here maps as documented.

mod common;

use futures::StreamExt;
use pandastack_sdk::api::{CreateSandbox, PromoteRequest};
use pandastack_sdk::{Client, Error, ExecEvent, ExecOptions, LogStream};
use std::time::{Duration, Instant};

async fn exec_streams_live(client: &Client) {
    let sb = client
        .sandboxes()
        .create(common::base())
        .await
        .expect("create");
    let started = Instant::now();
    let mut stream = sb
        .exec_stream(
            "for i in 1 2 3; do echo $i; sleep 1; done; echo oops >&2; exit 7",
            &ExecOptions::default(),
        )
        .await
        .expect("stream");
    let mut seen = Vec::new();
    while let Some(ev) = stream.next().await {
        seen.push((started.elapsed(), ev.expect("event")));
    }
    let stdout: String = seen
        .iter()
        .filter_map(|(_, e)| match e {
            ExecEvent::Stdout(c) => Some(c.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(stdout, "1\n2\n3\n");
    assert!(
        seen.iter()
            .any(|(_, e)| *e == ExecEvent::Stderr("oops\n".into())),
        "{seen:?}"
    );
    assert_eq!(
        seen.last().map(|(_, e)| e.clone()),
        Some(ExecEvent::Exit(7))
    );
    let first = seen.first().map(|(t, _)| *t).unwrap_or_default();
    assert!(
        first < Duration::from_millis(1500),
        "first chunk after {first:?}: not live"
    );

    let out = sb
        .exec_stream(
            "printf 'h\\303\\251llo \\342\\234\\223'",
            &ExecOptions::default(),
        )
        .await
        .expect("stream")
        .finish()
        .await
        .expect("finish");
    assert_eq!((out.stdout.as_str(), out.exit_code), ("héllo ✓", 0));

    // Timeouts: 504 for exec, an `error` event for the stream; both are Error::Timeout.
    let t = sb.exec_with("sleep 30", &ExecOptions::timeout(1)).await;
    assert!(
        matches!(&t, Err(Error::Timeout { message }) if message.contains("timeout")),
        "{t:?}"
    );
    let t = sb
        .exec_stream("sleep 30", &ExecOptions::timeout(1))
        .await
        .expect("stream")
        .finish()
        .await;
    assert!(matches!(t, Err(Error::Timeout { .. })), "{t:?}");

    let failed = sb
        .exec_with(
            "echo partial; exit 3",
            &ExecOptions {
                check: true,
                ..Default::default()
            },
        )
        .await;
    assert!(
        matches!(&failed, Err(Error::CommandFailed { exit_code: 3, stdout, .. }) if stdout == "partial\n"),
        "{failed:?}"
    );
    let logs = sb.logs(LogStream::Stdout).await.expect("logs");
    assert!(logs.contains("partial"), "{logs:?}");
    sb.kill().await.expect("kill");
}

async fn files_stream_both_ways(client: &Client) {
    let sb = client
        .sandboxes()
        .create(common::base())
        .await
        .expect("create");
    // 6 MiB + 17 bytes of every byte value, in uneven chunks.
    let blob: Vec<u8> = (0..6 * 1024 * 1024 + 17)
        .map(|i| (i * 7 + i / 251) as u8)
        .collect();
    let chunks: Vec<std::io::Result<bytes::Bytes>> = blob
        .chunks(300_001)
        .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
        .collect();
    let w = sb
        .files()
        .write_stream("/workspace/deep/blob.bin", futures::stream::iter(chunks))
        .await
        .expect("write_stream");
    assert_eq!(w.bytes, blob.len() as u64);
    let (len, mut body) = sb
        .files()
        .read_stream("/workspace/deep/blob.bin")
        .await
        .expect("read_stream");
    let mut back = Vec::new();
    while let Some(chunk) = body.next().await {
        back.extend_from_slice(&chunk.expect("chunk"));
    }
    assert!(len.is_none() || len == Some(blob.len() as u64), "{len:?}");
    assert!(
        back == blob,
        "round trip differs ({} vs {} bytes)",
        back.len(),
        blob.len()
    );

    assert!(sb.files().exists("/workspace/deep").await.expect("exists"));
    sb.files().remove("/workspace/deep").await.expect("remove");
    assert!(!sb
        .files()
        .exists("/workspace/deep/blob.bin")
        .await
        .expect("exists"));
    assert!(matches!(
        sb.files().read("/workspace/nope").await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        sb.files().read("relative/path").await,
        Err(Error::BadRequest { status: 400, .. })
    ));
    sb.files().mkdir("/workspace/a/b").await.expect("mkdir");
    assert!(
        sb.files()
            .stat("/workspace/a/b")
            .await
            .expect("stat")
            .is_dir
    );
    sb.kill().await.expect("kill");
}

async fn lifecycle_events_and_errors(client: &Client) {
    let mut events = client.events(None).await.expect("event stream");
    let sb = client
        .sandboxes()
        .create(CreateSandbox {
            template: Some("base".into()),
            metadata: Some([("job".to_string(), "sdk".to_string())].into()),
            ..Default::default()
        })
        .await
        .expect("create");
    assert_eq!(
        sb.info().metadata.get("job").map(String::as_str),
        Some("sdk")
    );
    assert_eq!(sb.pause().await.expect("pause").status, "paused");
    let busy = sb.exec("true").await;
    assert!(
        matches!(&busy, Err(Error::Conflict { message }) if message.contains("paused")),
        "{busy:?}"
    );
    assert_eq!(sb.resume().await.expect("resume").status, "running");
    assert_eq!(
        sb.hibernate().await.expect("hibernate").status,
        "hibernated"
    );
    // Any request wakes a hibernated sandbox.
    assert_eq!(
        sb.exec("echo awake").await.expect("exec wakes").stdout,
        "awake\n"
    );

    let mut transitions = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while transitions.len() < 5 {
        let ev = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("events within 30 s")
            .expect("stream open")
            .expect("event");
        if ev.sandbox_id == sb.id() {
            transitions.push(format!("{}->{}", ev.from, ev.to));
        }
    }
    assert_eq!(
        transitions,
        [
            "creating->running",
            "running->paused",
            "paused->running",
            "running->hibernated",
            "hibernated->running"
        ],
    );
    let history = sb.events().await.expect("history");
    assert!(history.len() >= 5, "{history:?}");

    let child = sb.fork(None).await.expect("fork");
    let promoted = child
        .promote(PromoteRequest {
            tree_id: None,
            cleanup_siblings: false,
        })
        .await
        .expect("promote");
    assert_eq!(promoted.winner, child.id());
    assert!(matches!(
        sb.promote(PromoteRequest::default()).await,
        Err(Error::Conflict { .. })
    ));
    sb.exec("setsid python3 -m http.server 8000 --bind 0.0.0.0 > /dev/null 2>&1 &")
        .await
        .expect("start a listener");
    let mut ports = Vec::new();
    for _ in 0..50 {
        ports = sb.ports().await.expect("ports");
        if ports.iter().any(|p| p.port == 8000) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let p = ports
        .iter()
        .find(|p| p.port == 8000)
        .expect("port 8000 listed");
    assert!(
        p.listening && p.proxy_url.ends_with("/proxy/8000/"),
        "{p:?}"
    );
    let token = sb
        .preview_token(8000, Some(60))
        .await
        .expect("preview token");
    assert!(token.url.contains(&token.token), "{token:?}");
    assert!(matches!(
        sb.preview_token(0, None).await,
        Err(Error::BadRequest { .. })
    ));
    let m = sb.metrics().await.expect("metrics");
    assert_eq!(m.sandbox_id, sb.id());
    assert!(m.memory_bytes > 0, "{m:?}");
    sb.kill().await.expect("kill");
    // The promoted child outlives its parent.
    let mut child = child;
    assert_eq!(
        child.refresh().await.expect("child alive").status,
        "running"
    );
    child.kill().await.expect("kill child");

    let ghost = uuid::Uuid::new_v4().to_string();
    let e = client.sandboxes().get(&ghost).await;
    assert!(
        matches!(&e, Err(Error::NotFound { message }) if message.contains("not found")),
        "{e:?}"
    );
    let e = client
        .sandboxes()
        .create(CreateSandbox {
            ttl_seconds: Some(-5),
            ..Default::default()
        })
        .await;
    assert!(
        matches!(&e, Err(Error::BadRequest { status: 400, message }) if message.contains("ttl_seconds")),
        "{e:?}"
    );
    let e = client
        .sandboxes()
        .create(CreateSandbox {
            template: Some("no-such-template".into()),
            ..Default::default()
        })
        .await;
    assert!(
        matches!(e, Err(Error::NotFound { .. } | Error::BadRequest { .. })),
        "{e:?}"
    );

    let bad = Client::new(client.base_url().as_str(), "pds_not_a_real_key_at_all").expect("client");
    assert!(matches!(
        bad.sandboxes().list().await,
        Err(Error::Auth { status: 401, .. })
    ));
    let nobody = Client::new("http://127.0.0.1:9", "pds_x").expect("client");
    assert!(matches!(nobody.me().await, Err(Error::Connection { .. })));

    let me = client.me().await.expect("me");
    assert!(me.workspace_id.starts_with("ws-"), "{me:?}");
    let token = client
        .tokens()
        .create("sdk-test", Some(1))
        .await
        .expect("token");
    let secret = token
        .token
        .clone()
        .expect("the secret is in the create reply");
    let other = Client::new(client.base_url().as_str(), &secret).expect("client");
    assert_eq!(
        other.me().await.expect("new key works").workspace_id,
        me.workspace_id
    );
    assert!(client
        .tokens()
        .list()
        .await
        .expect("tokens")
        .iter()
        .any(|t| t.prefix == token.prefix));
    assert!(
        matches!(
            other.tokens().revoke(&token.prefix).await,
            Err(Error::Conflict { .. })
        ),
        "a key cannot revoke itself"
    );
    client.tokens().revoke(&token.prefix).await.expect("revoke");
    assert!(matches!(other.me().await, Err(Error::Auth { .. })));
    let templates = client.templates().list().await.expect("templates");
    assert!(
        templates.iter().any(|t| t.name == "code-interpreter"),
        "{templates:?}"
    );
    assert_eq!(
        client.templates().get("base").await.expect("base").name,
        "base"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_files_lifecycle_and_errors() {
    common::run("streams", |client| async move {
        exec_streams_live(&client).await;
        files_stream_both_ways(&client).await;
        lifecycle_events_and_errors(&client).await;
    })
    .await;
}
