#!/usr/bin/env python3
"""Volume benchmark (issue 9) through the published Python SDK (pandastack==0.10.0). Starts a
server of its own on a fresh data dir (templates hard-linked from --data-dir, nothing baked)
and prints, as markdown:

  - volume create (8 GiB, sparse ext4 with a journal) and delete, P50/P99 ms;
  - create -> first exec (`true`) from `base`, with one volume attached vs without, in the
    same run and interleaved, P50/P99 ms (the difference is what attaching costs: a loop
    mount and a bind into the sandbox's /mnt);
  - sequential write (dd, 1 MiB blocks, fsync'd) and read inside a sandbox, on the volume vs
    on the root overlay (the sandbox's own disk), MB/s. Reads come from the host's page
    cache (the file was just written): they measure the path through the gofer, not the disk.

    python3 scripts/bench_volumes.py --bin dist/pandastack --data-dir /var/lib/pandastack-ci/server

Needs root and a baked `base` template in --data-dir.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from pathlib import Path
from typing import List

sys.path.insert(0, str(Path(__file__).parent))
from benchlib import BenchServer, bench_root, percentile, table  # noqa: E402


def create_delete(srv: BenchServer, runs: int) -> tuple[List[float], List[float]]:
    creates, deletes = [], []
    for i in range(runs):
        t = time.perf_counter()
        srv.client.volumes.create(name=f"bench-{i}", size_mb=8192)
        creates.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        srv.client.volumes.delete(f"bench-{i}")
        deletes.append((time.perf_counter() - t) * 1000)
    return creates, deletes


def first_exec(srv: BenchServer, runs: int) -> tuple[List[float], List[float]]:
    srv.client.volumes.create(name="bench-attach", size_mb=1024)
    plain, attached = [], []
    for i in range(runs):
        for volumes, out in ((None, plain), ([{"name": "bench-attach"}], attached)):
            t = time.perf_counter()
            sb = srv.client.sandboxes.create(template="base", volumes=volumes)
            r = sb.exec("true")
            out.append((time.perf_counter() - t) * 1000)
            assert r.exit_code == 0, r
            sb.kill()
            time.sleep(0.5)  # let the pool refill, as between a user's creates
    srv.client.volumes.delete("bench-attach")
    return plain, attached


def throughput(srv: BenchServer, size_mb: int, runs: int) -> List[tuple[str, float, float]]:
    srv.client.volumes.create(name="bench-io", size_mb=size_mb * 2 + 256)
    sb = srv.client.sandboxes.create(template="base", volumes=[{"name": "bench-io"}])
    rows = []
    for where, path in (("volume /mnt/bench-io", "/mnt/bench-io/f"), ("root overlay /root", "/root/f")):
        writes, reads = [], []
        for _ in range(runs):
            w = sb.exec(f"dd if=/dev/zero of={path} bs=1M count={size_mb} conv=fsync 2>&1", timeout_seconds=600)
            r = sb.exec(f"dd if={path} of=/dev/null bs=1M 2>&1; rm -f {path}", timeout_seconds=600)
            writes.append(rate(w.stdout))
            reads.append(rate(r.stdout))
        rows.append((where, percentile(writes, 50), percentile(reads, 50)))
    sb.kill()
    srv.client.volumes.delete("bench-io")
    return rows


def rate(dd_output: str) -> float:
    """MB/s from dd's summary line (`... bytes ... copied, S s, R MB/s` or GB/s)."""
    m = re.search(r"copied, ([0-9.]+) s", dd_output)
    b = re.search(r"^(\d+) bytes", dd_output, re.M)
    if not (m and b):
        raise RuntimeError(f"no dd summary in: {dd_output[-300:]}")
    return int(b.group(1)) / 1e6 / max(float(m.group(1)), 1e-9)


def main() -> int:
    ap = argparse.ArgumentParser(description="PandaStack volume benchmark")
    ap.add_argument("--bin", default="dist/pandastack")
    ap.add_argument("--data-dir", default="/var/lib/pandastack", help="a data dir with baked templates")
    ap.add_argument("--runs", type=int, default=20, help="volume creates, sandbox creates of each kind")
    ap.add_argument("--io-mb", type=int, default=256, help="MB written and read per throughput run")
    ap.add_argument("--io-runs", type=int, default=3)
    a = ap.parse_args()
    root = bench_root(Path(a.data_dir), "vol")
    try:
        srv = BenchServer(Path(a.bin).resolve(), Path(a.data_dir) / "templates", root, "server")
        try:
            creates, deletes = create_delete(srv, a.runs)
            plain, attached = first_exec(srv, a.runs)
            io = throughput(srv, a.io_mb, a.io_runs)
        finally:
            srv.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(table([
        ("volume create (8 GiB)", creates),
        ("volume delete", deletes),
        ("create -> first exec, no volume", plain),
        ("create -> first exec, one volume", attached),
    ]))
    print(f"\nattach cost (P50 difference): {percentile(attached, 50) - percentile(plain, 50):.1f} ms\n")
    print(f"| where ({a.io_mb} MB, dd bs=1M, P50 of {a.io_runs}) | write MB/s (fsync) | read MB/s (cached) |")
    print("|---|---:|---:|")
    for where, w, r in io:
        print(f"| {where} | {w:.0f} | {r:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
