#!/usr/bin/env python3
"""Benchmark of user-built templates (issue 13 "Speed") through the published Python SDK.

Measures and prints as a markdown table with P50/P99 in ms:
  - a full Dockerfile build, submit -> `done` (`--builds` runs, default 5; each run changes a
    comment so it is never a cache hit): `FROM base` plus `--run` (default a small local step;
    pass `--run 'pip install six'` where the sandboxes have network egress)
  - an unchanged rebuild (cache hit), submit -> `done` (`--runs`, default 50)
  - create -> first exec answered from the built template (`--runs`; the first create restores
    the template snapshot, later ones claim warm-pool instances as for the built-ins)

Runs against $PANDASTACK_API with $PANDASTACK_API_KEY; deletes the template and sandboxes it made.
Numbers, not assertions (goal of issue 13: an unchanged rebuild under 1 s).

    python3 scripts/bench_templates.py [--runs 50] [--builds 5] [--run 'pip install six']
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import List

sys.path.insert(0, str(Path(__file__).parent))
from benchlib import percentile  # noqa: E402


def wait_done(client, build_id: str) -> None:
    while True:
        b = client.templates.get_build(build_id)
        if b.status == "done":
            return
        if b.status == "failed":
            raise RuntimeError(f"build {build_id} failed: {b.error}")
        time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description="PandaStack template build benchmark (Python SDK)")
    ap.add_argument("--runs", type=int, default=50, help="cache-hit rebuilds and creates")
    ap.add_argument("--builds", type=int, default=5, help="full builds")
    ap.add_argument("--run", default="python3 -c 'print(42)' > /answer", help="the RUN step")
    ap.add_argument("--name", default="bench-template")
    a = ap.parse_args()
    if not os.environ.get("PANDASTACK_API") or not os.environ.get("PANDASTACK_API_KEY"):
        print("set PANDASTACK_API and PANDASTACK_API_KEY (source DATA_DIR/admin.env)", file=sys.stderr)
        return 2
    from pandastack import Client

    client = Client()
    full: List[float] = []
    dockerfile = ""
    try:
        for i in range(a.builds):
            dockerfile = f"# run {i} {time.time()}\nFROM base\nRUN {a.run}\n"
            print(f"bench: full build {i + 1}/{a.builds}", file=sys.stderr)
            start = time.perf_counter()
            wait_done(client, client.templates.build_from_dockerfile(a.name, dockerfile).id)
            full.append((time.perf_counter() - start) * 1000)
        cached: List[float] = []
        print(f"bench: unchanged rebuild x{a.runs}", file=sys.stderr)
        for _ in range(a.runs):
            start = time.perf_counter()
            b = client.templates.build_from_dockerfile(a.name, dockerfile)
            if b.status != "done":
                wait_done(client, b.id)
            cached.append((time.perf_counter() - start) * 1000)
        creates: List[float] = []
        print(f"bench: create -> first exec x{a.runs}", file=sys.stderr)
        for _ in range(a.runs):
            start = time.perf_counter()
            sb = client.sandboxes.create(template=a.name)
            try:
                r = sb.exec("true")
                creates.append((time.perf_counter() - start) * 1000)
                if r.exit_code != 0:
                    raise RuntimeError(f"exec true exited {r.exit_code}")
            finally:
                sb.kill()
    finally:
        try:
            client.templates.delete(a.name)
        except Exception as e:  # noqa: BLE001 - report, do not mask the benchmark's own error
            print(f"bench: deleting {a.name}: {e}", file=sys.stderr)

    print(f"\nTemplate builds through the Python SDK, {os.environ['PANDASTACK_API']}\n")
    print("| operation | runs | P50 (ms) | P99 (ms) |")
    print("|---|---:|---:|---:|")
    for name, samples in [
        (f"build `FROM base` + `RUN {a.run}`, submit -> done", full),
        ("unchanged rebuild (cache hit), submit -> done", cached),
        ("create -> first exec answered (user template)", creates),
    ]:
        print(f"| {name} | {len(samples)} | {percentile(samples, 50):.1f} | {percentile(samples, 99):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
