#!/usr/bin/env python3
"""Cluster image benchmark (issue 12) through the published Python SDK (pandastack==0.10.0)
and REST (the placement hint). Starts two hosts of its own ("a" and "b", fresh data dirs with
templates hard-linked from --data-dir, nothing baked) on one PostgreSQL database (made in
--store's cluster) and one object store, and prints, as markdown, P50/P99 over --runs of a
code-interpreter sandbox on a holding a 1e5-row DataFrame:

  - snapshot upload: from the snapshot reply to the snapshot JSON saying `uploaded` (the
    background upload; polled every 20 ms), with the image size;
  - cross-host from_snapshot -> first run_code: `POST /v1/sandboxes {from_snapshot, host: b}`
    (b fetches the image from the object store, checks it, restores) through the first
    `run_code` that reads the DataFrame on a context of the restored sandbox;
  - cross-host fork -> child answers: `POST .../fork {host: b}` (capture on a, upload, fetch
    and restore on b) through the child's first `run_code` reading the DataFrame;
  - live drain of host a holding that sandbox (`POST /v1/hosts/a/drain`): the time the
    sandbox did not answer (the report's `ms`: checkpoint on a to running on b) and the whole
    call; a is activated again after each run;
  - create -> first exec of a `base` sandbox placed on a (the hint), asked through a (the
    owning host) and through b (which relays it), --create-runs each, interleaved;
  - lease expiry -> failed: a sandbox on b, `kill -9` of b, then GET through a every 100 ms
    until it says `failed` (lease 30 s, expired by a's sweep); b restarts between the
    --lease-runs runs.

    python3 scripts/bench_cluster.py --bin dist/pandastack --data-dir /var/lib/pandastack-ci/server \\
        --store postgres://postgres@127.0.0.1:5432/postgres \\
        [--s3-endpoint http://127.0.0.1:3900 --s3-bucket B --s3-key-id GK... --s3-secret ...]

Without --s3-* the object store is a directory (`file://`) under the benchmark's root. Needs
root, a baked code-interpreter template in --data-dir and a PostgreSQL it may create a
database in.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import List

sys.path.insert(0, str(Path(__file__).parent))
from benchlib import BenchServer, bench_root, percentile, table  # noqa: E402

DATAFRAME = "import pandas as pd\ndf = pd.DataFrame({'v': range(100000), 'w': [float(i) for i in range(100000)]})"


def first_run_code(srv: BenchServer, sid: str) -> str:
    return srv.client.sandboxes.get(sid).create_code_context().run_code("len(df)").text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, required=True)
    ap.add_argument("--data-dir", type=Path, required=True, help="a server data dir with baked templates")
    ap.add_argument("--store", required=True, help="postgres://USER@HOST:PORT/DB of a cluster to make a database in")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--create-runs", type=int, default=30)
    ap.add_argument("--lease-runs", type=int, default=3)
    ap.add_argument("--s3-endpoint")
    ap.add_argument("--s3-bucket")
    ap.add_argument("--s3-key-id")
    ap.add_argument("--s3-secret")
    a = ap.parse_args()

    root = bench_root(a.data_dir, "cluster")
    db = f"bench_cluster_{uuid.uuid4().hex[:8]}"
    subprocess.run(["psql", a.store, "-qc", f"CREATE DATABASE {db}"], check=True, stdin=subprocess.DEVNULL)
    store = f"{a.store.rsplit('/', 1)[0]}/{db}"
    env = {}
    if a.s3_endpoint:
        objects = f"s3://{a.s3_bucket}"
        env = {"AWS_ENDPOINT_URL": a.s3_endpoint, "AWS_REGION": "garage", "AWS_ALLOW_HTTP": "true",
               "AWS_ACCESS_KEY_ID": a.s3_key_id, "AWS_SECRET_ACCESS_KEY": a.s3_secret}
    else:
        objects = f"file://{root}/objects"
    hosts: dict = {}
    try:
        for name in ("a", "b"):
            if name == "b":
                # The first host made the workspace; the second serves it with the same key.
                (root / "b").mkdir()
                shutil.copy(root / "a" / "admin.env", root / "b" / "admin.env")
            hosts[name] = BenchServer(a.bin, a.data_dir / "templates", root, name,
                                      ["--store", store, "--host-name", name, "--object-store", objects],
                                      env=env, wait_images=False)
        srv_a = hosts["a"]
        upload: List[float] = []
        restore: List[float] = []
        fork: List[float] = []
        drain_stopped: List[float] = []
        drain_total: List[float] = []
        sizes: List[int] = []
        for _ in range(a.runs):
            r = srv_a.http.post(f"{srv_a.url}/v1/sandboxes", json={"template": "code-interpreter", "host": "a"}, timeout=120)
            r.raise_for_status()
            sid = r.json()["id"]
            ctx = srv_a.client.sandboxes.get(sid).create_code_context()
            ctx.run_code(DATAFRAME)
            snap = srv_a.client.sandboxes.get(sid).snapshot()
            t = time.perf_counter()
            while True:
                s = srv_a.http.get(f"{srv_a.url}/v1/snapshots/{snap}", timeout=30).json()
                if s["uploaded"]:
                    break
                if time.perf_counter() - t > 300:
                    raise RuntimeError("snapshot not uploaded in 300 s")
                time.sleep(0.02)
            upload.append((time.perf_counter() - t) * 1000)
            sizes.append(s["size_bytes"])

            t = time.perf_counter()
            r = srv_a.http.post(f"{srv_a.url}/v1/sandboxes", json={"from_snapshot": snap, "host": "b"}, timeout=300)
            r.raise_for_status()
            assert r.json()["host"] == "b", r.json()
            assert first_run_code(srv_a, r.json()["id"]) == "100000"
            restore.append((time.perf_counter() - t) * 1000)
            restored = r.json()["id"]

            t = time.perf_counter()
            r = srv_a.http.post(f"{srv_a.url}/v1/sandboxes/{sid}/fork", json={"host": "b"}, timeout=300)
            r.raise_for_status()
            assert r.json()["host"] == "b", r.json()
            assert first_run_code(srv_a, r.json()["id"]) == "100000"
            fork.append((time.perf_counter() - t) * 1000)
            child = r.json()["id"]

            t = time.perf_counter()
            r = srv_a.http.post(f"{srv_a.url}/v1/hosts/a/drain", timeout=600)
            r.raise_for_status()
            drain_total.append((time.perf_counter() - t) * 1000)
            moved = [m for m in r.json()["moved"] if m["sandbox_id"] == sid]
            assert moved and moved[0]["to"] == "b", r.json()
            drain_stopped.append(float(moved[0]["ms"]))
            # The same context handle answers on b, with the DataFrame.
            assert ctx.run_code("len(df)").text == "100000"
            srv_a.http.post(f"{srv_a.url}/v1/hosts/a/activate", timeout=60).raise_for_status()

            for x in (child, restored, sid):
                srv_a.http.delete(f"{srv_a.url}/v1/sandboxes/{x}", timeout=120)
            srv_a.http.delete(f"{srv_a.url}/v1/snapshots/{snap}", timeout=120)
            time.sleep(1)
        owning: List[float] = []
        relayed: List[float] = []
        srv_b = hosts["b"]
        for _ in range(a.create_runs):
            for via, out in ((srv_a, owning), (srv_b, relayed)):
                t = time.perf_counter()
                r = via.http.post(f"{via.url}/v1/sandboxes", json={"template": "base", "host": "a"}, timeout=120)
                r.raise_for_status()
                assert r.json()["host"] == "a", r.json()
                x = via.http.post(f"{via.url}/v1/sandboxes/{r.json()['id']}/exec", json={"cmd": "true"}, timeout=60)
                x.raise_for_status()
                out.append((time.perf_counter() - t) * 1000)
                via.http.delete(f"{via.url}/v1/sandboxes/{r.json()['id']}", timeout=120)
            time.sleep(0.3)  # the warm pool refills
        lease: List[float] = []
        answers: set = set()  # what a GET through a said while b was dead, other than 200
        for _ in range(a.lease_runs):
            r = srv_a.http.post(f"{srv_a.url}/v1/sandboxes", json={"template": "base", "host": "b"}, timeout=120)
            r.raise_for_status()
            victim = r.json()["id"]
            srv_b.proc.kill()
            srv_b.proc.wait()
            t = time.perf_counter()
            while True:
                r = srv_a.http.get(f"{srv_a.url}/v1/sandboxes/{victim}", timeout=30)
                if r.status_code == 200 and r.json()["status"] == "failed":
                    break
                if r.status_code != 200:
                    answers.add(f"{r.status_code} {r.text[:120]!r}")
                if time.perf_counter() - t > 120:
                    raise RuntimeError("the killed host's sandbox was not failed in 120 s")
                time.sleep(0.1)
            lease.append((time.perf_counter() - t) * 1000)
            srv_b.restart()
            srv_a.http.delete(f"{srv_a.url}/v1/sandboxes/{victim}", timeout=120)
        print(f"object store: {objects.split(':')[0]} ({'Garage' if a.s3_endpoint else 'local directory'}), "
              f"snapshot image P50 {percentile(sizes, 50) / 2**20:.0f} MiB, {a.runs} runs\n")
        print(table([
            ("snapshot upload (reply -> uploaded)", upload),
            ("cross-host from_snapshot -> first run_code", restore),
            ("cross-host fork -> child's first run_code", fork),
            ("live drain: the sandbox not answering (checkpoint on a -> running on b)", drain_stopped),
            ("live drain: the whole call (one sandbox)", drain_total),
            ("create -> first exec on a, asked through a (owning host)", owning),
            ("create -> first exec on a, asked through b (relayed)", relayed),
            ("kill -9 of a host -> its sandbox `failed` (lease expiry)", lease),
        ]))
        if answers:
            print("\nGET of the dead host's sandbox through a meanwhile answered: " + "; ".join(sorted(answers)))
    finally:
        # A stopped server leaves its sandboxes running (by design): a failed run deletes
        # them first, so it leaves no instance, mount or disk behind.
        if "a" in hosts:
            try:
                for sb in hosts["a"].client.sandboxes.list():
                    hosts["a"].http.delete(f"{hosts['a'].url}/v1/sandboxes/{sb.id}", timeout=120)
            except Exception as e:  # noqa: BLE001 - best effort; the run already failed
                print(f"bench: deleting the run's sandboxes: {e}", file=sys.stderr)
        for h in hosts.values():
            h.stop()
        subprocess.run(["psql", a.store, "-qc", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)"],
                       stdin=subprocess.DEVNULL, check=False)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
