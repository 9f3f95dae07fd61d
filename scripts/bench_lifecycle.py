#!/usr/bin/env python3
"""Lifecycle latency of a PandaStack server through the published Python SDK (pandastack==0.10.0).

Prints a markdown table of P50/P99 (ms) over --runs runs (default 20) of: pause, resume,
snapshot (code-interpreter with a kernel holding a 1e5-row DataFrame), restore -> first
run_code answered, fork, fork_tree(3), hibernate, wake -> first exec answered. Numbers, not
assertions (seed 003's table lists the targets). Runs against $PANDASTACK_API with
$PANDASTACK_API_KEY and deletes what it creates.

    python3 scripts/bench_lifecycle.py [--runs 20]
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Callable, Dict, List


def percentile(samples: List[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    from pandastack import Sandbox

    results: Dict[str, List[float]] = {}
    add = lambda name, ms: results.setdefault(name, []).append(ms)  # noqa: E731
    warm = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
    made: List[Sandbox] = []
    try:
        ctx = warm.create_code_context()
        ctx.run_code("import pandas as pd, numpy as np; df = pd.DataFrame({'a': np.arange(100000)})")
        for _ in range(args.runs):
            add("pause", timed(warm.pause))
            add("resume", timed(warm.resume))
            snap: List[str] = []
            add("snapshot", timed(lambda: snap.append(warm.snapshot())))

            def restore() -> None:
                sb = Sandbox.create(from_snapshot=snap[0])
                made.append(sb)
                sb.create_code_context().run_code("len(df)")

            add("restore -> first run_code", timed(restore))
            add("fork", timed(lambda: made.append(warm.fork())))
            add("fork_tree(3)", timed(lambda: made.extend(warm.fork_tree(3))))
            add("hibernate", timed(warm.hibernate))
            add("wake -> first exec", timed(lambda: warm.exec("true")))
            for sb in made:
                sb.kill()
            made.clear()
            warm._client.snapshots.delete(snap[0])
    finally:
        for sb in made:
            try:
                sb.kill()
            except Exception:  # noqa: BLE001 - best-effort cleanup
                pass
        warm.kill()
    print(f"\n| operation | runs | P50 (ms) | P99 (ms) |\n|---|---:|---:|---:|")
    for name, xs in results.items():
        print(f"| {name} | {len(xs)} | {percentile(xs, 50):.1f} | {percentile(xs, 99):.1f} |")


if __name__ == "__main__":
    main()
