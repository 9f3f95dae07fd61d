#!/usr/bin/env python3
"""Store write latency under load (issue 23 finding 11), through the HTTP API. Starts a server
of its own on a fresh data dir (templates hard-linked from --data-dir, nothing baked; SQLite
store), creates one sandbox, and times `PATCH /v1/sandboxes/{id}/lifecycle` (one row write in
the store, the cheapest request that writes) in four conditions, printing P50/P99 ms as
markdown:

  - quiet: one client;
  - 8 clients at once (each times its own requests);
  - 8 clients, with 4 busy processes per core on the host;
  - the same, plus a disk writer (1 MiB blocks, fsync'd every 16 MiB) on the data dir's disk.

    python3 scripts/bench_store.py --bin dist/pandastack --data-dir /var/lib/pandastack-ci/server

Needs root and a baked `base` template in --data-dir. The load processes are bounded (`timeout`)
and killed at the end of each row.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator, List

sys.path.insert(0, str(Path(__file__).parent))
from benchlib import BenchServer, bench_root, table  # noqa: E402


def writes(srv: BenchServer, sid: str, clients: int, per_client: int) -> List[float]:
    """`clients` threads each PATCH `per_client` times; every request's latency, ms."""
    samples: List[float] = []
    lock = threading.Lock()

    def run(c: int) -> None:
        import requests

        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {srv.key}"
        mine = []
        for i in range(per_client):
            t = time.perf_counter()
            r = http.patch(f"{srv.url}/v1/sandboxes/{sid}/lifecycle", json={"ttl_seconds": 3600 + c * 1000 + i},
                           timeout=300)
            mine.append((time.perf_counter() - t) * 1000)
            r.raise_for_status()
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples


@contextlib.contextmanager
def load(cpu_hogs: int, disk_dir: Path | None, limit_s: int = 900) -> Iterator[None]:
    procs = [
        subprocess.Popen(["timeout", str(limit_s), "sh", "-c", "while :; do :; done"], stdin=subprocess.DEVNULL,
                         start_new_session=True)
        for _ in range(cpu_hogs)
    ]
    if disk_dir is not None:
        target = disk_dir / "bench-disk-writer"
        procs.append(subprocess.Popen(
            ["timeout", str(limit_s), "sh", "-c",
             f"while :; do dd if=/dev/zero of={target} bs=1M count=16 conv=fsync status=none; done"],
            stdin=subprocess.DEVNULL, start_new_session=True))
    try:
        time.sleep(3 if procs else 0)
        yield
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
        if disk_dir is not None:
            with contextlib.suppress(FileNotFoundError):
                (disk_dir / "bench-disk-writer").unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=Path("dist/pandastack"))
    ap.add_argument("--data-dir", type=Path, default=Path("/var/lib/pandastack-ci/server"))
    ap.add_argument("--runs", type=int, default=200, help="requests per row")
    args = ap.parse_args()
    root = bench_root(args.data_dir, "st")
    srv = BenchServer(args.bin, args.data_dir / "templates", root, "server", ["--pool-size", "0", "--rate-limit", "100000"],
                      wait_images=False)
    hogs = 4 * (os.cpu_count() or 1)
    rows = []
    try:
        sb = srv.client.sandboxes.create(template="base")
        sid = sb.id
        writes(srv, sid, 1, 10)  # warm-up
        rows.append(("PATCH lifecycle, quiet, 1 client", writes(srv, sid, 1, args.runs)))
        rows.append(("PATCH lifecycle, 8 clients", writes(srv, sid, 8, args.runs // 8)))
        with load(hogs, None):
            rows.append((f"PATCH lifecycle, 8 clients + {hogs} CPU hogs", writes(srv, sid, 8, args.runs // 8)))
        with load(hogs, srv.data):
            rows.append((f"PATCH lifecycle, 8 clients + {hogs} CPU hogs + disk writer",
                         writes(srv, sid, 8, args.runs // 8)))
        srv.client.sandboxes.delete(sid)
    finally:
        srv.stop()
    print(table(rows))


if __name__ == "__main__":
    main()
