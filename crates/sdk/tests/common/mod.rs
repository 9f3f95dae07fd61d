//! A real `pandastack server` for the SDK's end-to-end tests: the built binary
//! (`PANDASTACK_TEST_BIN`) on a free port of 127.0.0.1 with the data dir whose templates are
//! baked (`PANDASTACK_TEST_SERVER_DATA`), its output in `PANDASTACK_TEST_LOG_DIR`. scripts/test.sh
//! sets all three. Without them a test prints `SKIPPED:` and passes, unless
//! `PANDASTACK_REQUIRE_SANDBOX_TESTS=1` (test.sh sets it), where that is a failure.
//!
//! [`run`] starts the server, runs the test body, then deletes every sandbox and snapshot the
//! workspace has (whether the body passed or panicked) and stops the server.

#![allow(dead_code)] // each test binary uses part of it

use futures::FutureExt;
use pandastack_sdk::Client;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server process this test owns.
pub struct TestServer {
    child: Child,
    pub url: String,
    pub key: String,
    pub data_dir: PathBuf,
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .filter(|p| p.exists())
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

fn admin_key(data_dir: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(data_dir.join("admin.env")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("export PANDASTACK_API_KEY="))
        .map(|k| k.trim().to_string())
}

impl TestServer {
    /// Starts the server and waits for `/health` (90 s at most). `None` when the environment
    /// does not provide a binary and a baked data dir (and the tests are not required).
    pub async fn start(name: &str) -> Option<TestServer> {
        let (bin, data_dir) = match (
            env_path("PANDASTACK_TEST_BIN"),
            env_path("PANDASTACK_TEST_SERVER_DATA"),
        ) {
            (Some(b), Some(d)) => (b, d),
            _ => {
                if std::env::var("PANDASTACK_REQUIRE_SANDBOX_TESTS").as_deref() == Ok("1") {
                    panic!("PANDASTACK_TEST_BIN / PANDASTACK_TEST_SERVER_DATA are required");
                }
                println!(
                    "SKIPPED: {name}: set PANDASTACK_TEST_BIN and PANDASTACK_TEST_SERVER_DATA"
                );
                return None;
            }
        };
        let logs = env_path("PANDASTACK_TEST_LOG_DIR").unwrap_or_else(std::env::temp_dir);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(format!("server-sdk-{name}.log")))
            .expect("open the server log");
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let child = Command::new(&bin)
            .args([
                "server",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--pool-size",
                "1",
            ])
            .arg("--data-dir")
            .arg(&data_dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log"))
            .stderr(log)
            .spawn()
            .expect("start pandastack server");
        let mut server = TestServer {
            child,
            url,
            key: String::new(),
            data_dir,
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("server exited with {status}; see server-sdk-{name}.log");
            }
            let up = reqwest::get(format!("{}/health", server.url))
                .await
                .map(|r| r.status().is_success())
                .unwrap_or(false);
            if up {
                break;
            }
            assert!(Instant::now() < deadline, "server not healthy within 90 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        server.key = admin_key(&server.data_dir).expect("admin.env holds the admin key");
        Some(server)
    }

    /// An SDK client for the admin key.
    pub fn client(&self) -> Client {
        Client::new(&self.url, &self.key).expect("client")
    }

    /// The ids of the admin workspace's snapshots.
    pub async fn snapshot_ids(&self) -> Vec<String> {
        let snaps = self.client().snapshots().list(None).await;
        snaps
            .map(|s| s.into_iter().map(|s| s.id).collect())
            .unwrap_or_default()
    }

    /// Deletes every sandbox of the admin workspace, and the snapshots not in `keep`.
    pub async fn sweep(&self, keep: &[String]) {
        let client = self.client();
        if let Ok(all) = client.sandboxes().list().await {
            for sb in all {
                // A fork child may already be gone with its parent.
                let _ = client.sandboxes().delete(&sb.id).await;
            }
        }
        for id in self.snapshot_ids().await {
            if !keep.contains(&id) {
                let _ = client.snapshots().delete(&id).await;
            }
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a server, runs `body` with it, sweeps the workspace and stops the server; a panic in
/// `body` is re-raised after the sweep.
pub async fn run<F, Fut>(name: &str, body: F)
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(server) = TestServer::start(name).await else {
        return;
    };
    let before = server.snapshot_ids().await;
    server.sweep(&before).await;
    let outcome = AssertUnwindSafe(body(server.client())).catch_unwind().await;
    server.sweep(&before).await;
    drop(server);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// A `code-interpreter` create body with a TTL, as the seeds write it.
pub fn code_interpreter() -> pandastack_sdk::api::CreateSandbox {
    pandastack_sdk::api::CreateSandbox {
        template: Some("code-interpreter".into()),
        ttl_seconds: Some(3600),
        ..Default::default()
    }
}

/// A `base` create body.
pub fn base() -> pandastack_sdk::api::CreateSandbox {
    pandastack_sdk::api::CreateSandbox {
        template: Some("base".into()),
        ..Default::default()
    }
}
