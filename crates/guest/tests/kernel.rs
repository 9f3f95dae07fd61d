//! End-to-end kernel tests, run under chroot in the baked CI rootfs (python3, IPython, pandas,
//! matplotlib). Skipped with a printed reason where that rootfs is missing.

mod common;

use base64::Engine;
use common::Guest;
use pandastack_guest_protocol::{ErrorCode, Execution, GuestMsg, HostMsg};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn start(g: &Guest, kernel_id: &str) {
    let id = g.id();
    let msg = HostMsg::KernelStart {
        id,
        kernel_id: kernel_id.into(),
        language: "python".into(),
        env: BTreeMap::new(),
    };
    g.send(&msg, vec![]);
    let r = g.wait(id, Duration::from_secs(60));
    assert!(matches!(&r[0].0, GuestMsg::KernelStarted { .. }), "{r:?}");
}

fn run(
    g: &Guest,
    kernel_id: &str,
    code: &str,
    timeout_ms: Option<u64>,
) -> Result<Execution, (ErrorCode, String)> {
    let id = g.id();
    g.send(
        &HostMsg::KernelRun {
            id,
            kernel_id: kernel_id.into(),
            code: code.into(),
            timeout_ms,
        },
        vec![],
    );
    match g.wait(id, Duration::from_secs(60)).remove(0).0 {
        GuestMsg::KernelResult { execution, .. } => Ok(execution),
        GuestMsg::Error { code, message, .. } => Err((code, message)),
        other => panic!("unexpected {other:?}"),
    }
}

fn ok(g: &Guest, kernel_id: &str, code: &str) -> Execution {
    let e = run(g, kernel_id, code, Some(30_000)).unwrap();
    assert_eq!(e.error, None, "{code}: {e:?}");
    e
}

#[test]
fn ipython_kernel_results_state_and_errors() {
    let Some(rootfs) = common::ci_rootfs() else {
        return;
    };
    let g = Guest::start_in(rootfs);
    start(&g, "k1");

    let e = ok(&g, "k1", "1+1");
    assert_eq!(
        e.results,
        vec![BTreeMap::from([(
            "text/plain".to_string(),
            "2".to_string()
        )])]
    );
    ok(&g, "k1", "total = sum([1, 2, 3])");
    let e = ok(&g, "k1", "print(total)");
    assert_eq!(e.stdout, "6\n");
    assert_eq!(
        e.results,
        vec![BTreeMap::from([(
            "text/plain".to_string(),
            "6".to_string()
        )])]
    );

    let e = ok(
        &g,
        "k1",
        "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})",
    );
    assert!(e.results[0]["text/html"].contains("<table"), "{e:?}");
    assert!(e.results[0].contains_key("text/plain"));

    let e = ok(
        &g,
        "k1",
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()",
    );
    let png = e
        .results
        .iter()
        .find_map(|r| r.get("image/png"))
        .expect("a png result");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(png)
        .unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    // A figure left open at the end of the cell is displayed too.
    let e = ok(&g, "k1", "plt.figure(); plt.bar([1], [2]);");
    assert!(
        e.results.iter().any(|r| r.contains_key("image/png")),
        "{e:?}"
    );

    let e = run(
        &g,
        "k1",
        "def f():\n    raise ValueError('boom')\nf()",
        None,
    )
    .unwrap();
    assert_eq!(e.exit_code, 1);
    let tb = e.error.unwrap();
    assert!(
        tb.contains("ValueError: boom") && tb.contains("Traceback") && !tb.contains('\x1b'),
        "{tb}"
    );

    let e = ok(
        &g,
        "k1",
        "import sys, os; print('err', file=sys.stderr); os.write(1, b'fd1 write'); 'after'",
    );
    assert_eq!(e.stderr, "err\n");
    assert_eq!(e.results[0]["text/plain"], "'after'");
}

#[test]
fn timeout_interrupts_and_keeps_state() {
    let Some(rootfs) = common::ci_rootfs() else {
        return;
    };
    let g = Guest::start_in(rootfs);
    start(&g, "t");
    ok(&g, "t", "kept = 41");
    let started = Instant::now();
    let e = run(&g, "t", "while True: pass", Some(1000)).unwrap();
    let took = started.elapsed();
    assert!(e.timed_out, "{e:?}");
    assert_eq!(e.exit_code, 1);
    let err = e.error.unwrap();
    assert!(
        err.contains("TimeoutError: execution exceeded 1000 ms")
            && err.contains("KeyboardInterrupt"),
        "{err}"
    );
    assert!(took < Duration::from_millis(2000), "took {took:?}");
    assert_eq!(ok(&g, "t", "kept + 1").results[0]["text/plain"], "42");
}

#[test]
fn kernels_are_independent_listed_and_stoppable() {
    let Some(rootfs) = common::ci_rootfs() else {
        return;
    };
    let g = Guest::start_in(rootfs);
    start(&g, "a");
    start(&g, "b");
    ok(&g, "a", "x = 'in a'");
    let e = run(&g, "b", "x", None).unwrap();
    assert!(e.error.unwrap().contains("NameError"));
    let id = g.id();
    match &g.call(HostMsg::KernelList { id })[0].0 {
        GuestMsg::Kernels { kernels, .. } => {
            let ids: Vec<&str> = kernels.iter().map(|k| k.kernel_id.as_str()).collect();
            assert_eq!(ids, ["a", "b"]);
            assert!(kernels.iter().all(|k| k.last_used_ms > 0 && k.pid > 0));
        }
        other => panic!("{other:?}"),
    }
    let id = g.id();
    assert_eq!(
        g.call(HostMsg::KernelStop {
            id,
            kernel_id: "b".into()
        })[0]
            .0,
        GuestMsg::Done { id }
    );
    assert_eq!(run(&g, "b", "1", None).unwrap_err().0, ErrorCode::NotFound);

    // A kernel that dies answers Error{Kernel} from then on.
    let err = run(&g, "a", "import os; os._exit(3)", None).unwrap_err();
    assert_eq!(err.0, ErrorCode::Kernel, "{err:?}");
    assert!(err.1.contains("kernel died"), "{err:?}");
    assert_eq!(run(&g, "a", "1", None).unwrap_err().0, ErrorCode::Kernel);
}

#[test]
fn queued_runs_are_serialized_in_order() {
    let Some(rootfs) = common::ci_rootfs() else {
        return;
    };
    let g = Guest::start_in(rootfs);
    start(&g, "q");
    ok(&g, "q", "log = []");
    let ids: Vec<u64> = (0..5)
        .map(|i| {
            let id = g.id();
            let code = format!("import time; time.sleep(0.05); log.append({i}); len(log)");
            g.send(
                &HostMsg::KernelRun {
                    id,
                    kernel_id: "q".into(),
                    code,
                    timeout_ms: None,
                },
                vec![],
            );
            id
        })
        .collect();
    for (i, id) in ids.into_iter().enumerate() {
        match &g.wait(id, Duration::from_secs(30))[0].0 {
            GuestMsg::KernelResult { execution, .. } => {
                assert_eq!(execution.results[0]["text/plain"], (i + 1).to_string())
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        ok(&g, "q", "log").results[0]["text/plain"],
        "[0, 1, 2, 3, 4]"
    );
}

#[test]
fn plain_kernel_without_ipython() {
    if common::host_has_ipython() {
        eprintln!("SKIPPED: this host's python3 has IPython; the plain fallback is not reachable");
        return;
    }
    let g = Guest::start_with_driver();
    start(&g, "p");
    let e = ok(&g, "p", "x = 20\nx + 22");
    assert_eq!(
        e.results,
        vec![BTreeMap::from([(
            "text/plain".to_string(),
            "42".to_string()
        )])]
    );
    let e = ok(&g, "p", "print(x)");
    assert_eq!(
        (e.stdout.as_str(), e.results[0]["text/plain"].as_str()),
        ("20\n", "20")
    );
    let e = run(&g, "p", "1/0", None).unwrap();
    let err = e.error.unwrap();
    assert!(
        err.contains("ZeroDivisionError") && err.contains("1/0"),
        "{err}"
    );
    assert_eq!(e.exit_code, 1);
    let e = run(
        &g,
        "p",
        "import time\nwhile True: time.sleep(0.01)",
        Some(500),
    )
    .unwrap();
    assert!(e.timed_out && e.error.unwrap().contains("TimeoutError"));
    assert_eq!(ok(&g, "p", "x").results[0]["text/plain"], "20");
}

/// Issue 8: results can only come from the driver. A cell writes forged replies, for this run
/// and the next ones (its own token copied from the driver's frames, and guessed sequence
/// numbers), on every socket and pipe it holds, plus half a line; a process it forks keeps
/// trying; a separate process tries to reopen the kernel's descriptors through /proc. The
/// later honest runs still return their own results.
#[test]
fn forged_replies_never_become_a_later_runs_result() {
    let Some(rootfs) = common::ci_rootfs() else {
        return;
    };
    let g = Guest::start_in(rootfs);
    start(&g, "k1");
    let forge = r#"
import os, sys, json, stat
req = None
for f in sys._current_frames().values():
    while f is not None:
        if isinstance(f.f_locals.get("request"), dict):
            req = f.f_locals["request"]
        f = f.f_back
assert req is not None, "no request found"
seq, nonce = req["seq"], req.get("nonce")
lines = b"".join(
    json.dumps({"seq": s, "nonce": nonce, "results": [{"text/plain": "'forged'"}], "stdout": "", "stderr": "", "error": None, "exit_code": 0, "duration_ms": 0}).encode() + b"\n"
    for s in range(seq + 1, seq + 6)
)
wrote = 0
for fd in range(3, 256):
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        continue
    if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
        try:
            os.write(fd, lines + b'{"seq": ')
            wrote += 1
        except OSError:
            pass
def keep_forging():
    import time
    end = time.monotonic() + 3
    while time.monotonic() < end:
        for fd in range(3, 256):
            try:
                os.write(fd, lines)
            except OSError:
                pass
        time.sleep(0.01)
if os.fork() == 0:
    keep_forging()
    os._exit(0)
wrote
"#;
    let e = ok(&g, "k1", forge);
    assert_ne!(
        e.results[0]["text/plain"], "0",
        "the cell found no channel to forge on"
    );
    // The forked child writes forged replies for the next runs while they run.
    for i in 1..6 {
        let e = ok(&g, "k1", &format!("import time; time.sleep(0.3); {i} * 10"));
        assert_eq!(
            e.results[0]["text/plain"],
            (i * 10).to_string(),
            "run {i}: {e:?}"
        );
    }
    // Another process cannot reopen the kernel's channel through /proc.
    let kernels = g.call(HostMsg::KernelList { id: g.id() });
    let pid = match &kernels[0].0 {
        GuestMsg::Kernels { kernels, .. } => kernels[0].pid,
        other => panic!("{other:?}"),
    };
    let probe = format!(
        "import os\nopened = []\ntry:\n    names = os.listdir('/proc/{pid}/fd')\nexcept OSError as e:\n    names = []\n    print('denied', e)\nfor n in names:\n    try:\n        fd = os.open('/proc/{pid}/fd/' + n, os.O_WRONLY)\n        opened.append(os.readlink('/proc/{pid}/fd/' + n))\n        os.close(fd)\n    except OSError:\n        pass\nprint('listed', len(names), 'opened', opened)\n"
    );
    let id = g.id();
    let out = g.call(HostMsg::Exec {
        id,
        cmd: format!("python3 -c \"{}\"", probe.replace('"', "\\\"")),
        env: BTreeMap::new(),
        cwd: None,
        timeout_ms: Some(30_000),
    });
    let stdout: Vec<u8> = out
        .iter()
        .filter(|(m, _)| matches!(m, GuestMsg::Output { .. }))
        .flat_map(|(_, b)| b.clone())
        .collect();
    let stdout = String::from_utf8_lossy(&stdout);
    assert!(
        stdout.starts_with("listed ") || stdout.starts_with("denied "),
        "the probe did not run: {out:?}"
    );
    assert!(
        !stdout.contains("socket:") && !stdout.contains("pipe:"),
        "reopened the kernel's channel: {stdout}"
    );
    let e = ok(&g, "k1", "'still honest'");
    assert_eq!(e.results[0]["text/plain"], "'still honest'");
}
