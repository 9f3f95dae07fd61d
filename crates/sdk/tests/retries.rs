//! The retries of contract §1.4 and the error mapping of §1.5, against a scripted HTTP server on
//! 127.0.0.1. This is a stand-in on purpose: the real server cannot be made to refuse a create
//! for capacity, answer a read with a replication 404, or report a guest still starting, on
//! demand. Each route answers from a script of (status, headers, body) and counts its calls.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use pandastack_sdk::{Client, Error};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Reply = (u16, Option<&'static str>, &'static str);

#[derive(Clone, Default)]
struct Script {
    replies: Arc<Mutex<HashMap<&'static str, Vec<Reply>>>>,
    calls: Arc<Mutex<HashMap<&'static str, usize>>>,
}

impl Script {
    fn set(&self, route: &'static str, replies: Vec<Reply>) {
        self.replies.lock().unwrap().insert(route, replies);
        self.calls.lock().unwrap().insert(route, 0);
    }

    fn calls(&self, route: &'static str) -> usize {
        self.calls.lock().unwrap().get(route).copied().unwrap_or(0)
    }

    /// The next scripted reply of `route`; the last one repeats.
    fn answer(&self, route: &'static str) -> Response {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry(route).or_default();
            *n += 1;
            *n - 1
        };
        let replies = self.replies.lock().unwrap();
        let list = &replies[route];
        let (status, retry_after, body) = list[n.min(list.len() - 1)];
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        if let Some(ra) = retry_after {
            headers.insert("retry-after", HeaderValue::from_static(ra));
        }
        (StatusCode::from_u16(status).unwrap(), headers, body).into_response()
    }
}

const SANDBOX: &str = r#"{"id":"0b0e6f0a-0000-4000-8000-000000000000","template":"base","status":"running","cpu":1,"memory_mb":512,"metadata":{},"guest_ip":null,"boot_ms":1,"boot_mode":"snapshot","created_at":"2026-12-01T00:00:00Z","persistent":false,"ttl_seconds":3600,"from_snapshot":null}"#;
const EXEC_OK: &str = r#"{"stdout":"ok\n","stderr":"","exit_code":0,"duration_ms":3}"#;
const ID: &str = "0b0e6f0a-0000-4000-8000-000000000000";

async fn serve(script: Script) -> String {
    let app = Router::new()
        .route(
            "/v1/sandboxes",
            post(|State(s): State<Script>| async move { s.answer("create") }),
        )
        .route(
            "/v1/sandboxes/:id",
            get(|State(s): State<Script>| async move { s.answer("get") }),
        )
        .route(
            "/v1/sandboxes/:id/exec",
            post(|State(s): State<Script>| async move { s.answer("exec") }),
        )
        .route(
            "/v1/sandboxes/:id/pause",
            post(|State(s): State<Script>| async move { s.answer("pause") }),
        )
        .with_state(script);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn client(url: &str) -> Client {
    Client::builder()
        .api_url(url)
        .api_key("pds_test")
        .ready_timeout(Duration::from_secs(5))
        .max_create_retry(Duration::from_secs(20))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_404_on_a_read_is_resent_once_and_not_on_a_post() {
    let script = Script::default();
    let c = client(&serve(script.clone()).await);
    script.set(
        "get",
        vec![
            (404, None, r#"{"error":"sandbox not found"}"#),
            (200, None, SANDBOX),
        ],
    );
    let sb = c.sandboxes().get(ID).await.expect("second try succeeds");
    assert_eq!((sb.id(), script.calls("get")), (ID, 2));

    script.set(
        "get",
        vec![(404, None, r#"{"error":"sandbox x not found"}"#)],
    );
    let e = c.sandboxes().get(ID).await;
    assert!(
        matches!(&e, Err(Error::NotFound { message }) if message == "sandbox x not found"),
        "{e:?}"
    );
    assert_eq!(script.calls("get"), 2, "resent once only");

    script.set(
        "pause",
        vec![(404, None, r#"{"error":"gone"}"#), (200, None, SANDBOX)],
    );
    let sb = pandastack_sdk::Sandbox::from_info(c.clone(), serde_json::from_str(SANDBOX).unwrap());
    assert!(matches!(sb.pause().await, Err(Error::NotFound { .. })));
    assert_eq!(script.calls("pause"), 1);
}

#[tokio::test]
async fn warm_up_errors_of_exec_are_retried_until_the_deadline() {
    let script = Script::default();
    let c = client(&serve(script.clone()).await);
    let sb = pandastack_sdk::Sandbox::from_info(c.clone(), serde_json::from_str(SANDBOX).unwrap());
    script.set(
        "exec",
        vec![
            (
                503,
                None,
                r#"{"error":"dial tcp: connect: connection refused"}"#,
            ),
            (502, None, r#"{"error":"no route to host"}"#),
            (200, None, EXEC_OK),
        ],
    );
    let started = Instant::now();
    assert_eq!(sb.exec("true").await.expect("third try").stdout, "ok\n");
    assert_eq!(script.calls("exec"), 3);
    // Waits of 0.5 s then 0.75 s.
    assert!(
        started.elapsed() >= Duration::from_millis(1200),
        "{:?}",
        started.elapsed()
    );

    script.set(
        "exec",
        vec![(503, None, r#"{"error":"connection refused"}"#)],
    );
    let started = Instant::now();
    let e = sb.exec("true").await;
    assert!(matches!(e, Err(Error::Server { status: 503, .. })), "{e:?}");
    let took = started.elapsed();
    assert!(
        took <= Duration::from_secs(6) && script.calls("exec") >= 4,
        "{took:?}, {} calls",
        script.calls("exec")
    );

    // Not a warm-up message: no retry; a command timeout is Error::Timeout.
    script.set(
        "exec",
        vec![
            (500, None, r#"{"error":"kernel died"}"#),
            (200, None, EXEC_OK),
        ],
    );
    assert!(matches!(
        sb.exec("true").await,
        Err(Error::Server { status: 500, .. })
    ));
    assert_eq!(script.calls("exec"), 1);
    script.set(
        "exec",
        vec![(504, None, r#"{"error":"command timeout after 1 s"}"#)],
    );
    assert!(matches!(
        sb.exec("sleep 9").await,
        Err(Error::Timeout { .. })
    ));
    assert_eq!(script.calls("exec"), 1);
}

#[tokio::test]
async fn capacity_refusals_of_creates_are_retried_with_retry_after() {
    let script = Script::default();
    let url = serve(script.clone()).await;
    let c = client(&url);
    script.set(
        "create",
        vec![
            (503, Some("0"), r#"{"error":"no capacity, try again"}"#),
            (507, None, r#"{"error":"host disk full"}"#),
            (429, Some("0"), r#"{"error":"too many creates"}"#),
            (201, None, SANDBOX),
        ],
    );
    let sb = c
        .sandboxes()
        .create(Default::default())
        .await
        .expect("fourth try");
    assert_eq!((sb.id(), script.calls("create")), (ID, 4));

    // Not capacity refusals: 429 without Retry-After, 503 without an error, 500.
    for (status, ra, body) in [
        (429, None, r#"{"error":"quota"}"#),
        (503, Some("0"), "{}"),
        (500, Some("0"), r#"{"error":"boot failed"}"#),
    ] {
        script.set("create", vec![(status, ra, body), (201, None, SANDBOX)]);
        let e = c.sandboxes().create(Default::default()).await;
        assert_eq!(
            e.as_ref().err().and_then(Error::status),
            Some(status),
            "{e:?}"
        );
        assert_eq!(script.calls("create"), 1, "{status} is not retried");
    }
    let e = {
        script.set("create", vec![(429, Some("7"), r#"{"error":"slow down"}"#)]);
        let no_budget = Client::builder()
            .api_url(&url)
            .api_key("pds_test")
            .max_create_retry(Duration::ZERO)
            .build()
            .unwrap();
        no_budget.sandboxes().create(Default::default()).await
    };
    assert!(
        matches!(&e, Err(Error::RateLimited { retry_after: Some(d), .. }) if *d == Duration::from_secs(7)),
        "{e:?}"
    );
    assert_eq!(
        script.calls("create"),
        1,
        "a zero budget disables the retry"
    );
}
