#!/usr/bin/env python3
"""Networking benchmark (issue 7) through the published Python SDK (pandastack==0.10.0).

Starts two servers of its own on copies of a baked data dir (templates hard-linked, nothing
baked): one with sandbox networking (the default) and one with `--sandbox-network none`, and
prints, as markdown tables with P50/P99 in ms:

  - create -> first exec answered (`base`), paced (the warm pool refilled between creates) and
    back to back (the pool drains), on both servers: the cost networking adds to a create;
  - proxy round trip: GET of a small file from `python3 -m http.server` in a sandbox through
    `/v1/sandboxes/{id}/proxy/8000/`, over one keep-alive connection;
  - egress throughput: a sandbox whose policy allows exactly one host address downloads a
    100 MB file from an HTTP server of this script on the host (MB/s, 3 runs);
  - network namespace setup: the server's own timing of each namespace it made (debug log).

    python3 scripts/bench_network.py --bin dist/pandastack --data-dir /var/lib/pandastack-ci/server
"""

from __future__ import annotations

import argparse
import http.server
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import List

sys.path.insert(0, str(Path(__file__).parent))
from benchlib import BenchServer, bench_root, percentile  # noqa: E402


def namespace_ms(srv: BenchServer) -> List[float]:
    """The server's own timing of each network namespace it made (its debug log)."""
    return [float(m) for m in re.findall(r"network namespace ready.*?ms=(\d+)", srv.log_text())]


def bench_create(srv: BenchServer, runs: int, pace_s: float) -> List[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        sb = srv.client.sandboxes.create(template="base")
        r = sb.exec("true")
        out.append((time.perf_counter() - start) * 1000)
        assert r.exit_code == 0, r
        sb.kill()
        time.sleep(pace_s)
    return out


def bench_proxy(srv: BenchServer, runs: int) -> List[float]:
    import requests

    sb = srv.client.sandboxes.create(template="base")
    try:
        sb.exec("mkdir -p /srv && echo ok > /srv/ping")
        sb.exec("setsid python3 -m http.server 8000 --bind 0.0.0.0 --directory /srv > /dev/null 2>&1 < /dev/null &")
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {srv.key}"
        url = f"{srv.url}/v1/sandboxes/{sb.id}/proxy/8000/ping"
        for _ in range(100):
            try:
                if session.get(url, timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.2)
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            r = session.get(url, timeout=10)
            samples.append((time.perf_counter() - start) * 1000)
            assert r.status_code == 200 and r.text == "ok\n", r.text
        return samples
    finally:
        sb.kill()


def host_address() -> str:
    out = subprocess.run(["ip", "-4", "-o", "route", "get", "1.1.1.1"], capture_output=True, text=True).stdout
    return re.search(r"src (\S+)", out).group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def bench_egress(srv: BenchServer, size_mb: int, runs: int, port: int) -> List[float]:
    import requests

    tmp = Path(tempfile.mkdtemp(prefix="pandastack-bench-egress-"))
    (tmp / "blob").write_bytes(os.urandom(size_mb * 1024 * 1024))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a) -> None:
            pass

    # The server was started with `--allow-host-service <host>:<port>`: no tenant policy opens
    # the host (issue 23 finding 2).
    httpd = http.server.ThreadingHTTPServer(("0.0.0.0", port), lambda *a, **k: Quiet(*a, directory=str(tmp), **k))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    addr = f"{host_address()}:{httpd.server_address[1]}"
    resp = requests.post(
        f"{srv.url}/v1/sandboxes", headers={"Authorization": f"Bearer {srv.key}"}, timeout=120,
        json={"template": "base", "allow_internet_access": False},
    )
    resp.raise_for_status()
    sb = srv.client.sandboxes.get(resp.json()["id"])
    try:
        speeds = []
        for _ in range(runs):
            r = sb.exec(f"curl -s -o /dev/null -w '%{{speed_download}}' http://{addr}/blob", timeout_seconds=300)
            assert r.exit_code == 0, r
            speeds.append(float(r.stdout.strip()) / 1e6)
        return speeds
    finally:
        sb.kill()
        httpd.shutdown()
        shutil.rmtree(tmp)


def main() -> int:
    ap = argparse.ArgumentParser(description="PandaStack networking benchmark (Python SDK)")
    ap.add_argument("--bin", default="dist/pandastack")
    ap.add_argument("--data-dir", default="/var/lib/pandastack", help="a data dir with baked templates")
    ap.add_argument("--runs", type=int, default=30, help="creates per variant")
    ap.add_argument("--proxy-runs", type=int, default=200)
    ap.add_argument("--egress-mb", type=int, default=100)
    a = ap.parse_args()
    root = bench_root(Path(a.data_dir), "net")
    templates = Path(a.data_dir) / "templates"
    log = {"PANDASTACK_LOG": "info,pandastack_gvisor::net=debug"}
    servers = []
    try:
        egress_port = free_port()
        net = BenchServer(Path(a.bin), templates, root, "net",
                          ["--allow-host-service", f"{host_address()}:{egress_port}"], env=log)
        servers.append(net)
        plain = BenchServer(Path(a.bin), templates, root, "plain", ["--sandbox-network", "none"], env=log)
        servers.append(plain)
        rows = []
        for label, srv in [("with networking", net), ("without networking", plain)]:
            print(f"bench: create -> first exec {label}", file=sys.stderr)
            rows.append((f"create -> first exec, paced (`base`, {label})", bench_create(srv, a.runs, 1.0)))
            rows.append((f"create -> first exec, back to back (`base`, {label})", bench_create(srv, a.runs, 0.0)))
        print("bench: proxy round trip", file=sys.stderr)
        rows.append(("proxy round trip (GET through `/proxy/8000/`)", bench_proxy(net, a.proxy_runs)))
        rows.append(("network namespace setup (server's own timing)", namespace_ms(net)))
        print("bench: egress", file=sys.stderr)
        speeds = bench_egress(net, a.egress_mb, 3, egress_port)
        print("\nPandaStack networking through the Python SDK\n")
        print("| operation | runs | P50 (ms) | P99 (ms) |")
        print("|---|---:|---:|---:|")
        for name, samples in rows:
            print(f"| {name} | {len(samples)} | {percentile(samples, 50):.1f} | {percentile(samples, 99):.1f} |")
        print(f"\negress throughput, {a.egress_mb} MB from a host HTTP server opened by `--allow-host-service`: "
              f"median {sorted(speeds)[1]:.0f} MB/s (runs: {', '.join(f'{s:.0f}' for s in speeds)})")
        return 0
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
