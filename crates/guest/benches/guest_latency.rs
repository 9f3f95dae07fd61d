//! Latency numbers of the guest daemon on the host (not assertions):
//! `cargo bench -p pandastack-guest`. P50 over 50 runs each, on whatever machine runs it;
//! the numbers under gVisor come from `scripts/bench.py` against a server.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{exec_result, Guest};
use pandastack_guest_protocol::{GuestMsg, HostMsg};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const RUNS: usize = 50;

fn exec_true_fast_path() {
    let g = Guest::start();
    for (label, cmd) in [
        ("fast path /bin/true", "/bin/true"),
        ("bash -c 'true;'", "true;"),
    ] {
        let samples: Vec<Duration> = (0..RUNS)
            .map(|_| {
                let id = g.id();
                let t = Instant::now();
                let msg = HostMsg::Exec {
                    id,
                    cmd: cmd.into(),
                    env: BTreeMap::new(),
                    cwd: None,
                    timeout_ms: None,
                };
                assert_eq!(exec_result(g.call(msg)).exit_code, 0);
                t.elapsed()
            })
            .collect();
        println!(
            "BENCH exec {label}: p50 {} us over {RUNS} runs",
            common::p50_us(samples)
        );
    }
}

fn kernel_run_one() {
    let Some(rootfs) = common::ci_rootfs() else {
        return;
    };
    let g = Guest::start_in(rootfs);
    let id = g.id();
    let t = Instant::now();
    let msg = HostMsg::KernelStart {
        id,
        kernel_id: "b".into(),
        language: "python".into(),
        env: BTreeMap::new(),
    };
    assert!(matches!(g.call(msg)[0].0, GuestMsg::KernelStarted { .. }));
    println!(
        "BENCH kernel start (IPython): {} ms",
        t.elapsed().as_millis()
    );
    let samples: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let id = g.id();
            let t = Instant::now();
            let msg = HostMsg::KernelRun {
                id,
                kernel_id: "b".into(),
                code: "1".into(),
                timeout_ms: None,
            };
            assert!(matches!(g.call(msg)[0].0, GuestMsg::KernelResult { .. }));
            t.elapsed()
        })
        .collect();
    println!(
        "BENCH kernel run \"1\" (IPython): p50 {} us over {RUNS} runs",
        common::p50_us(samples)
    );
}

fn main() {
    exec_true_fast_path();
    kernel_run_one();
}
