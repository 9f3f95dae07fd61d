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
