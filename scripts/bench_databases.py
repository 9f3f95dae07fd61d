#!/usr/bin/env python3
"""Database benchmark (issue 10) through the published Python SDK (pandastack==0.10.0) and the
REST API. Starts a server of its own on a copy of a baked data dir (templates hard-linked,
nothing baked) with `--database-idle-stop-seconds 1`, and prints, as markdown, P50/P99 in ms:

  - create -> running: `POST /v1/databases`, then `GET` every 20 ms until `running` with a
    `connection_url` (the server side of `databases.create()`; the SDKs poll every 1-5 s);
  - delete;
  - wake on connect: a stopped database's first `psycopg2.connect()` + `SELECT 1`, timed inside
    a `code-interpreter` sandbox;
  - connect + `SELECT 1` + close from a sandbox (psycopg2 in the sandbox's kernel);
  - pgbench TPS, select-only, 4 clients, 30 s, on one cluster: from a sandbox (the host's
    pgbench binary uploaded into a `base` sandbox), from the host through the same front end,
    and from the host on the cluster's unix socket (no front end). The sandbox/host ratio is
    what the sandbox network costs; host front end/socket what the splice costs.

    python3 scripts/bench_databases.py --bin dist/pandastack --data-dir /var/lib/pandastack-ci/server

Needs root, PostgreSQL 15 on the host (scripts/setup.sh) and baked `base` and
`code-interpreter` templates in --data-dir.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List


sys.path.insert(0, str(Path(__file__).parent))
from benchlib import BenchServer, bench_root, percentile  # noqa: E402

PGBENCH = "/usr/lib/postgresql/15/bin/pgbench"


def get_database(srv: BenchServer, db_id: str) -> dict:
    """`GET /v1/databases/{id}`, waiting out the workspace rate limit (429 + Retry-After, which
    a fast poll can reach) as the SDKs do."""
    while True:
        r = srv.http.get(f"{srv.url}/v1/databases/{db_id}", timeout=60)
        if r.status_code == 429:
            time.sleep(float(r.headers.get("Retry-After", "1")))
            continue
        r.raise_for_status()
        return r.json()


def create_ms(srv: BenchServer) -> tuple[float, str]:
    start = time.perf_counter()
    r = srv.http.post(f"{srv.url}/v1/databases", json={"label": "bench"}, timeout=60)
    r.raise_for_status()
    db_id = r.json()["id"]
    while True:
        d = get_database(srv, db_id)
        if d["status"] == "running" and d.get("connection_url"):
            return (time.perf_counter() - start) * 1000, db_id
        if d["status"] == "failed":
            raise RuntimeError(d)
        time.sleep(0.02)


def wait_stopped(srv: BenchServer, db_id: str) -> None:
    for _ in range(600):
        if get_database(srv, db_id)["status"] == "stopped":
            return
        time.sleep(0.05)
    raise RuntimeError("the database never went idle")


def kernel_ms(ctx, code: str) -> List[float]:
    """Runs `code` (which prints a JSON list of ms) in the sandbox's kernel."""
    ex = ctx.run_code(code, timeout_seconds=600)
    if ex.error:
        raise RuntimeError(ex.error)
    return json.loads(ex.stdout.strip().splitlines()[-1])


def pgbench_tps(args: List[str], env: dict | None = None) -> float:
    out = subprocess.run([PGBENCH, *args], capture_output=True, text=True, timeout=300, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return tps_of(out.stdout)


def tps_of(text: str) -> float:
    m = re.search(r"tps = ([0-9.]+)", text)
    if not m:
        raise RuntimeError(f"no tps in pgbench output: {text[-500:]}")
    return float(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description="PandaStack database benchmark")
    ap.add_argument("--bin", default="dist/pandastack")
    ap.add_argument("--data-dir", default="/var/lib/pandastack", help="a data dir with baked templates")
    ap.add_argument("--runs", type=int, default=20, help="creates and wakes")
    ap.add_argument("--connects", type=int, default=200, help="connect + select 1 from a sandbox")
    ap.add_argument("--pgbench-seconds", type=int, default=30)
    a = ap.parse_args()
    root = bench_root(Path(a.data_dir), "db")
    srv = None
    try:
        srv = BenchServer(Path(a.bin), Path(a.data_dir) / "templates", root, "server",
                          # No rate limit: the create poll (every 20 ms) is measurement.
                          ["--database-idle-stop-seconds", "1", "--rate-limit", "0"],
                          wait_images=False)
        rows = []
        print("bench: create -> running, delete", file=sys.stderr)
        creates, deletes = [], []
        for _ in range(a.runs):
            ms, db_id = create_ms(srv)
            creates.append(ms)
            t0 = time.perf_counter()
            srv.http.delete(f"{srv.url}/v1/databases/{db_id}", timeout=60).raise_for_status()
            deletes.append((time.perf_counter() - t0) * 1000)
        rows += [("create -> running", creates), ("delete", deletes)]

        db = srv.client.databases.create(label="bench")
        url = db["connection_url"]
        sb = srv.client.sandboxes.create(template="code-interpreter")
        ctx = sb.create_code_context()
        ctx.run_code(f"import json, time, psycopg2\nURL = {url!r}")
        print("bench: wake on connect", file=sys.stderr)
        wakes = []
        for _ in range(a.runs):
            wait_stopped(srv, db["id"])
            wakes += kernel_ms(ctx, "t = time.perf_counter()\nc = psycopg2.connect(URL); k = c.cursor(); k.execute('SELECT 1'); k.fetchone(); c.close()\nprint(json.dumps([(time.perf_counter() - t) * 1000]))")
        rows.append(("wake on connect (stopped -> first SELECT 1, from a sandbox)", wakes))
        print("bench: connect + select 1", file=sys.stderr)
        connects = kernel_ms(ctx, f"""
out = []
for _ in range({a.connects}):
    t = time.perf_counter()
    c = psycopg2.connect(URL); k = c.cursor(); k.execute('SELECT 1'); k.fetchone(); c.close()
    out.append((time.perf_counter() - t) * 1000)
print(json.dumps(out))""")
        rows.append(("connect + SELECT 1 + close (from a sandbox)", connects))
        sb.kill()

        print("bench: pgbench", file=sys.stderr)
        srv.client.databases.update(db["id"], always_on=True)
        subprocess.run([PGBENCH, "-i", "-s", "10", "-q", url], check=True, capture_output=True, timeout=600)
        box = srv.client.sandboxes.create(template="base")
        box.filesystem.write("/usr/local/bin/pgbench", Path(PGBENCH).read_bytes())
        box.exec("chmod 755 /usr/local/bin/pgbench", check=True)
        common = ["-S", "-c", "4", "-j", "2", "-T", str(a.pgbench_seconds), "-n"]
        r = box.exec(f"pgbench {' '.join(common)} '{url}'", timeout_seconds=a.pgbench_seconds + 120)
        sandbox_tps = tps_of(r.stdout + r.stderr)
        box.kill()
        host_tps = pgbench_tps(common + [url])
        socket_dir = f"/run/pandastack/pg-{tag(srv.data)}/{db['id']}"
        env = {**os.environ, "PGPASSWORD": db["password"]}
        socket_tps = pgbench_tps(common + ["-h", socket_dir, "-p", "5432", "-U", db["username"], db["database"]], env)

        print("\nPandaStack databases (PostgreSQL 15), this host\n")
        print("| operation | runs | P50 (ms) | P99 (ms) |")
        print("|---|---:|---:|---:|")
        for name, samples in rows:
            print(f"| {name} | {len(samples)} | {percentile(samples, 50):.1f} | {percentile(samples, 99):.1f} |")
        print(f"\npgbench select-only, 4 clients, {a.pgbench_seconds} s, scale 10, one cluster:\n")
        print("| from | TPS | vs host |")
        print("|---|---:|---:|")
        print(f"| a sandbox, through the front end (`10.0.2.2`) | {sandbox_tps:.0f} | {sandbox_tps / host_tps:.2f} |")
        print(f"| the host, through the front end (`10.0.2.2`) | {host_tps:.0f} | 1.00 |")
        print(f"| the host, the cluster's unix socket (no front end) | {socket_tps:.0f} | {socket_tps / host_tps:.2f} |")
        srv.client.databases.delete(db["id"])
        return 0
    except Exception:
        if srv is not None:
            print("server log (last lines):\n" + "\n".join(srv.log.read_text(errors="replace").splitlines()[-30:]), file=sys.stderr)
        raise
    finally:
        if srv is not None:
            srv.stop()
        shutil.rmtree(root, ignore_errors=True)


def tag(data_dir: Path) -> str:
    import hashlib

    return hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:6]


if __name__ == "__main__":
    sys.exit(main())
