//! End-to-end: the real guest binary driven through the protocol — hello, ping, exec.

mod common;

use common::{exec_result, Guest};
use pandastack_guest_protocol::{ErrorCode, GuestMsg, HostMsg};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn exec(g: &Guest, cmd: &str) -> common::ExecResult {
    exec_with(g, cmd, BTreeMap::new(), None, None)
}

fn exec_with(
    g: &Guest,
    cmd: &str,
    env: BTreeMap<String, String>,
    cwd: Option<&str>,
    timeout_ms: Option<u64>,
) -> common::ExecResult {
    let id = g.id();
    let msg = HostMsg::Exec {
        id,
        cmd: cmd.into(),
        env,
        cwd: cwd.map(Into::into),
        timeout_ms,
    };
    exec_result(g.call(msg))
}

#[test]
fn hello_version_and_ping() {
    let g = Guest::start();
    let id = g.id();
    let r = g.call(HostMsg::Hello { id, version: 999 });
    assert!(
        matches!(
            &r[0].0,
            GuestMsg::Error {
                code: ErrorCode::Version,
                ..
            }
        ),
        "{r:?}"
    );
    let id = g.id();
    assert_eq!(
        g.call(HostMsg::Ping {
            id,
            memory_lease_ms: None,
        })[0]
            .0,
        GuestMsg::Pong {
            id,
            oom_kills: vec![]
        }
    );
}

#[test]
fn bad_frames_get_invalid_or_are_skipped() {
    let g = Guest::start();
    g.send_raw(br#"{"type":"no_such_thing","id":77}"#);
    let r = g.wait(77, Duration::from_secs(5));
    assert!(
        matches!(
            &r[0].0,
            GuestMsg::Error {
                code: ErrorCode::Invalid,
                ..
            }
        ),
        "{r:?}"
    );
    g.send_raw(b"not json at all");
    let id = g.id();
    assert_eq!(
        g.call(HostMsg::Ping {
            id,
            memory_lease_ms: None,
        })[0]
            .0,
        GuestMsg::Pong {
            id,
            oom_kills: vec![]
        }
    );
}

#[test]
fn exit_codes_and_streams() {
    let g = Guest::start();
    let r = exec(&g, "echo hello");
    assert_eq!((r.stdout.as_slice(), r.exit_code), (&b"hello\n"[..], 0));
    assert_eq!(exec(&g, "/bin/false").exit_code, 1);
    let r = exec(&g, "echo oops >&2; exit 3");
    assert_eq!((r.stderr.as_slice(), r.exit_code), (&b"oops\n"[..], 3));
    let r = exec(&g, "kill -9 $$");
    assert_eq!(r.exit_code, 137);
    let r = exec(&g, "printf '\\xff\\xfe\\x00ok'");
    assert_eq!(r.stdout, b"\xff\xfe\x00ok");
    let r = exec(&g, "echo 'a  b' \"c\"");
    assert_eq!(r.stdout, b"a  b c\n");
}

#[test]
fn command_not_found_is_bash_like() {
    let g = Guest::start();
    let r = exec(&g, "no-such-command-xyz --flag");
    assert_eq!(r.exit_code, 127);
    assert_eq!(
        String::from_utf8_lossy(&r.stderr),
        "bash: no-such-command-xyz: command not found\n"
    );
    let r = exec(&g, "/nonexistent/tool");
    assert_eq!(r.exit_code, 127);
    let r = exec(&g, "no-such-command-xyz $HOME");
    assert_eq!(r.exit_code, 127);
    assert!(String::from_utf8_lossy(&r.stderr).contains("command not found"));
}

#[test]
fn env_cwd_and_stdin() {
    let g = Guest::start();
    let env = BTreeMap::from([("GREETING".to_string(), "hi there".to_string())]);
    let r = exec_with(
        &g,
        "echo \"$GREETING $LANG $PYTHONUNBUFFERED\"",
        env,
        None,
        None,
    );
    assert_eq!(r.stdout, b"hi there C.UTF-8 1\n");
    let r = exec_with(&g, "pwd", BTreeMap::new(), Some("/tmp"), None);
    assert_eq!(r.stdout, b"/tmp\n");
    let r = exec_with(&g, "pwd", BTreeMap::new(), Some("/no/such/dir"), None);
    assert!(
        matches!(
            r.error,
            Some(GuestMsg::Error {
                code: ErrorCode::NotFound,
                ..
            })
        ),
        "{r:?}"
    );
    // stdin is /dev/null: cat ends at once.
    assert_eq!(exec(&g, "cat").exit_code, 0);
    let id = g.id();
    let r = g.call(HostMsg::ExecStdin { id });
    assert!(matches!(
        &r[0].0,
        GuestMsg::Error {
            code: ErrorCode::Invalid,
            ..
        }
    ));
}

#[test]
fn timeout_kills_the_whole_group() {
    let g = Guest::start();
    let started = Instant::now();
    let r = exec_with(
        &g,
        "sleep 100; echo never",
        BTreeMap::new(),
        None,
        Some(500),
    );
    let took = started.elapsed();
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.exit_code, 137);
    assert!(r.stdout.is_empty());
    assert!(took < Duration::from_millis(1000), "took {took:?}");
}

#[test]
fn exec_kill_stops_a_running_exec() {
    let g = Guest::start();
    let id = g.id();
    g.send(
        &HostMsg::Exec {
            id,
            cmd: "sleep 100".into(),
            env: BTreeMap::new(),
            cwd: None,
            timeout_ms: None,
        },
        vec![],
    );
    std::thread::sleep(Duration::from_millis(100));
    g.send(&HostMsg::ExecKill { id }, vec![]);
    let r = exec_result(g.wait(id, Duration::from_secs(5)));
    assert_eq!((r.exit_code, r.timed_out), (137, false));
}

#[test]
fn background_grandchild_does_not_hold_exited() {
    let g = Guest::start();
    let started = Instant::now();
    let r = exec(&g, "sleep 30 & echo started");
    assert_eq!(r.stdout, b"started\n");
    assert_eq!(r.exit_code, 0);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn streams_output_live_and_runs_concurrently() {
    let g = Guest::start();
    let slow = g.id();
    let cmd = "echo first; sleep 1; echo second".to_string();
    g.send(
        &HostMsg::Exec {
            id: slow,
            cmd,
            env: BTreeMap::new(),
            cwd: None,
            timeout_ms: None,
        },
        vec![],
    );
    let started = Instant::now();
    // A quick exec beside the slow one finishes first.
    let r = exec(&g, "echo quick");
    assert_eq!(r.stdout, b"quick\n");
    assert!(started.elapsed() < Duration::from_millis(800));
    let r = exec_result(g.wait(slow, Duration::from_secs(5)));
    assert_eq!(r.stdout, b"first\nsecond\n");
}

#[test]
fn large_output_arrives_whole_in_small_chunks() {
    let g = Guest::start();
    let id = g.id();
    let cmd = "head -c 3000000 /dev/zero".to_string();
    let replies = g.call(HostMsg::Exec {
        id,
        cmd,
        env: BTreeMap::new(),
        cwd: None,
        timeout_ms: None,
    });
    assert!(replies.iter().all(|(_, body)| body.len() <= 64 * 1024));
    assert_eq!(exec_result(replies).stdout.len(), 3_000_000);
}
