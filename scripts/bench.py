#!/usr/bin/env python3
"""Latency benchmark of a PandaStack server through the published Python SDK (pandastack==0.10.0).

Measures, over --runs runs each (default 50), and prints as a markdown table with P50/P99 in ms:
  - create -> first exec answered, per template (`Sandbox.create(...)` then `exec("true")`)
  - exec round trip (`exec("true")` on a running sandbox)
  - code context round trip (`run_code("1")` in one kernel)
  - kill (`sandbox.kill()`, i.e. DELETE /v1/sandboxes/{id})

It runs against $PANDASTACK_API with $PANDASTACK_API_KEY (e.g. `source DATA/admin.env`), and
deletes only the sandboxes it created. Numbers, not assertions: compare them with the targets
of issue 2 yourself (exec and run_code("1") P50 <= 15 ms, create -> first exec P50 <= 300 ms).

    python3 scripts/bench.py [--runs 50] [--templates code-interpreter,base]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import List

sys.path.insert(0, str(Path(__file__).parent))
from benchlib import percentile, timed  # noqa: E402


def bench_create(template: str, runs: int) -> tuple[List[float], List[float]]:
    """create -> first exec answered, and kill, for `runs` fresh sandboxes."""
    from pandastack import Sandbox

    create_ms, kill_ms = [], []
    for _ in range(runs):
        start = time.perf_counter()
        sb = Sandbox.create(template=template)
        try:
            result = sb.exec("true")
            create_ms.append((time.perf_counter() - start) * 1000)
            if result.exit_code != 0:
                raise RuntimeError(f"exec true exited {result.exit_code}: {result.stderr}")
        finally:
            kill_ms.append(timed(sb.kill))
    return create_ms, kill_ms


def bench_exec(runs: int) -> List[float]:
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    try:
        for _ in range(3):
            sb.exec("true")
        return [timed(lambda: sb.exec("true")) for _ in range(runs)]
    finally:
        sb.kill()


def bench_run_code(runs: int) -> List[float]:
    from pandastack import Sandbox

    sb = Sandbox.create(template="code-interpreter")
    try:
        ctx = sb.create_code_context()
        for _ in range(3):
            ctx.run_code("1")

        def one() -> None:
            ex = ctx.run_code("1")
            if ex.text != "1":
                raise RuntimeError(f"run_code('1') gave {ex!r}")

        return [timed(one) for _ in range(runs)]
    finally:
        sb.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description="PandaStack latency benchmark (Python SDK)")
    ap.add_argument("--runs", type=int, default=50, help="runs per measurement (>= 50 for the README)")
    ap.add_argument("--templates", default="code-interpreter,base", help="templates for create -> first exec")
    a = ap.parse_args()
    if not os.environ.get("PANDASTACK_API") or not os.environ.get("PANDASTACK_API_KEY"):
        print("set PANDASTACK_API and PANDASTACK_API_KEY (source DATA_DIR/admin.env)", file=sys.stderr)
        return 2

    rows: List[tuple[str, List[float]]] = []
    kills: List[float] = []
    for template in [t for t in a.templates.split(",") if t]:
        print(f"bench: create -> first exec ({template}) x{a.runs}", file=sys.stderr)
        create_ms, kill_ms = bench_create(template, a.runs)
        rows.append((f"create -> first exec answered (`{template}`)", create_ms))
        kills += kill_ms
    print(f"bench: exec round trip x{a.runs}", file=sys.stderr)
    rows.append(("exec round trip (`true`)", bench_exec(a.runs)))
    print(f"bench: run_code('1') x{a.runs}", file=sys.stderr)
    rows.append(("code context `run_code(\"1\")` round trip", bench_run_code(a.runs)))
    rows.append(("kill (`sandbox.kill()`)", kills))

    print(f"\nPandaStack latency through the Python SDK, {os.environ['PANDASTACK_API']}\n")
    print("| operation | runs | P50 (ms) | P99 (ms) |")
    print("|---|---:|---:|---:|")
    for name, samples in rows:
        print(f"| {name} | {len(samples)} | {percentile(samples, 50):.1f} | {percentile(samples, 99):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
