#!/usr/bin/env python3
"""Lifecycle speed of a PandaStack server (issue 11) through the published Python SDK
(pandastack==0.10.0), with the raw runsc floor measured in the same run for the same image.

Prints markdown tables (P50/P99 ms over --runs runs, default 30) of:
  - create -> first exec, 50 back to back (`code-interpreter`), after one warm-up burst (the
    warm pool sizes itself from recent bursts), with the host CPU one create costs in all;
    and paced (the server quiet before each create);
  - exec `true` (its floor: the same exec straight over the guest channel), run_code("1");
  - with a code-interpreter sandbox whose kernel holds a 1e5-row DataFrame: snapshot,
    from_snapshot -> first run_code, fork -> child answers (a quiet parent), the parent's
    longest stall during a fork (another fork, while a thread keeps running exec `true` on
    it), fork_tree(3) and fork_tree(8) until every child answered (all asked at once),
    hibernate, wake -> first exec;
  - the floor: `runsc checkpoint --leave-running` of that sandbox, `runsc restore` of the image
    into a new container and onto one made in advance with `runsc create`, and 3 and 8 such
    restores at once (a fork tree's children share the host's cores), each until every guest
    answers its handshake; and each figure's ratio to the floor it is made of;
  - density: --density idle code-interpreter sandboxes (stopping early when MemAvailable falls
    under 4 GiB): host memory per idle sandbox (MemAvailable drop / N), exec P50/P99 across them,
    idle CPU per sandbox over 20 s, and its floors (CPU and memory each): 3 runsc sandboxes
    running only `sleep`, and 10 copies of the code-interpreter template image restored by runsc
    alone.

Runs against $PANDASTACK_API with $PANDASTACK_API_KEY; --data-dir is that server's data dir (the
floor reads its store and runsc root; nothing there is changed). Needs root (runsc, ip).

    python3 scripts/bench_lifecycle.py --data-dir /var/lib/pandastack [--runs 30] [--density 100]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
import uuid
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).parent))
from benchlib import GuestChannel, percentile, table, timed  # noqa: E402


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable")


class Floor:
    """Raw runsc on the server's images: a bundle copied from a live instance of the server
    (same rootfs, guest dir, limits), its own runsc root and network namespace."""

    def __init__(self, data_dir: Path, instance_dir: Path) -> None:
        self.data_dir = data_dir
        self.work = Path(tempfile.mkdtemp(prefix="pandastack-floor-", dir="/dev/shm"))
        self.root = self.work / "runsc"
        self.root.mkdir()
        self.template = json.loads((instance_dir / "bundle" / "config.json").read_text())
        ns = self.template["linux"]["namespaces"]
        self.networked = any(n.get("type") == "network" and n.get("path") for n in ns)

    def _netns(self, name: str) -> Optional[str]:
        if not self.networked:
            return None
        cmds = [
            ["ip", "netns", "add", name],
            ["ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
             "net.ipv6.conf.default.disable_ipv6=1"],
            ["ip", "-n", name, "link", "set", "lo", "up"],
            # The sandbox side of the server's layout: eth0 with the fixed address, its peer
            # address-less (gVisor takes over only interfaces that have an address).
            ["ip", "-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", "gw0"],
            ["ip", "-n", name, "addr", "add", "10.0.2.100/24", "dev", "eth0"],
            ["ip", "-n", name, "link", "set", "eth0", "up"],
            ["ip", "-n", name, "link", "set", "gw0", "up"],
            ["ip", "-n", name, "route", "add", "default", "via", "10.0.2.2", "dev", "eth0"],
        ]
        for c in cmds:
            subprocess.run(c, check=True, capture_output=True)
        return name

    def _bundle(self, cid: str, netns: Optional[str]) -> Path:
        d = self.work / cid
        (d / "bundle").mkdir(parents=True)
        (d / "overlay").mkdir()
        cfg = json.loads(json.dumps(self.template))
        cfg["linux"]["cgroupsPath"] = f"pandastack-floor/{cid}"
        cfg["linux"]["namespaces"] = [
            ({"type": "network", "path": f"/run/netns/{netns}"} if netns else {"type": "network"})
            if n.get("type") == "network" else n
            for n in cfg["linux"]["namespaces"]
        ]
        (d / "bundle" / "config.json").write_text(json.dumps(cfg))
        return d

    def _runsc(self, d: Path, *args: str) -> List[str]:
        net = ["--network=sandbox", "--net-disconnect-ok"] if self.networked else ["--network=none"]
        base = ["runsc", f"--root={self.root}", "--platform=ptrace", *net, f"--overlay2=root:dir={d / 'overlay'}"]
        if self.networked:
            # The workaround the shim applies (notes, pitfall 1).
            return ["unshare", "-m", "sh", "-c", 'mount -t tmpfs none /proc/sys/net && exec "$@"', "sh", *base, *args]
        return [*base, *args]

    def _new(self) -> tuple:
        """A fresh container id, its network namespace (None without networking) and its
        directory with the bundle; what was made before a failure is removed."""
        cid = "ps-floor" + uuid.uuid4().hex[:27]
        name = f"psfloor-{cid[-8:]}"
        try:
            netns = self._netns(name)
            return cid, netns, self._bundle(cid, netns)
        except BaseException:
            # A no-op for what was not made.
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            shutil.rmtree(self.work / cid, ignore_errors=True)
            raise

    def _remove(self, cid: str, netns: Optional[str], d: Path) -> None:
        """Removes what `_new` made and the container runsc made of it."""
        subprocess.run(["runsc", f"--root={self.root}", "delete", "-force", cid], capture_output=True)
        if netns:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)

    def restore(self, image: Path, precreate: bool) -> float:
        """ms from starting `runsc restore` to the guest's handshake answer."""
        return self.restore_many(image, 1, precreate)

    def restore_many(self, image: Path, n: int, precreate: bool = True) -> float:
        """ms from starting `n` restores of `image` at once (onto containers made in advance
        with `runsc create` when `precreate`) until every guest answered its handshake: the
        floor of a fork tree of `n` children on this many cores."""
        made = []  # (cid, netns, dir, host socket, guest socket)
        procs: List[subprocess.Popen] = []
        try:
            for _ in range(n):
                cid, netns, d = self._new()
                host, guest = socket.socketpair()
                made.append((cid, netns, d, host, guest))
                if precreate:
                    subprocess.run(self._runsc(d, "create", f"--bundle={d / 'bundle'}", cid), stdin=guest.fileno(),
                                   stdout=guest.fileno(), stderr=subprocess.DEVNULL, check=True)
            start = time.perf_counter()
            for cid, _, d, _, guest in made:
                cmd = self._runsc(d, "restore", f"--image-path={image}", f"--bundle={d / 'bundle'}", cid)
                if precreate:
                    procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL))
                else:
                    procs.append(subprocess.Popen(cmd, stdin=guest.fileno(), stdout=guest.fileno(),
                                                  stderr=subprocess.DEVNULL))
                guest.close()
            replies: List[dict] = [{} for _ in made]

            def hello(i: int, host: socket.socket) -> None:
                host.settimeout(60)
                replies[i] = GuestChannel(host).hello()

            waiters = [threading.Thread(target=hello, args=(i, m[3])) for i, m in enumerate(made)]
            for w in waiters:
                w.start()
            for w in waiters:
                w.join()
            took = (time.perf_counter() - start) * 1000
            bad = [r for r in replies if r.get("type") != "hello_ok"]
            if bad:
                raise RuntimeError(f"floor restore: {bad[0]}")
            return took
        finally:
            for cid, netns, d, host, guest in made:
                self._remove(cid, netns, d)
                host.close()
                guest.close()
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except Exception:  # noqa: BLE001
                    pass

    def exec_floor(self, image: Path, runs: int) -> List[float]:
        """ms of each of `runs` exec `true` straight over the guest channel of a copy of
        `image` restored here (the guest's spawn under ptrace, without HTTP and the server)."""
        cid, netns, d = self._new()
        host, guest = socket.socketpair()
        proc: Optional[subprocess.Popen] = None
        try:
            proc = subprocess.Popen(
                self._runsc(d, "restore", f"--image-path={image}", f"--bundle={d / 'bundle'}", cid),
                stdin=guest.fileno(), stdout=guest.fileno(), stderr=subprocess.DEVNULL)
            guest.close()
            host.settimeout(60)
            channel = GuestChannel(host)
            if channel.hello().get("type") != "hello_ok":
                raise RuntimeError("floor exec: no handshake")

            def run() -> None:
                last = channel.exec("true")[-1]
                if (last.get("type"), last.get("exit_code")) != ("exited", 0):
                    raise RuntimeError(f"floor exec: {last}")

            for _ in range(3):
                run()
            return [timed(run) for _ in range(runs)]
        finally:
            self._remove(cid, netns, d)
            host.close()
            guest.close()
            if proc:
                try:
                    proc.wait(timeout=10)
                except Exception:  # noqa: BLE001
                    pass

    def idle(self, image: Optional[Path], n: int = 3, seconds: float = 20.0) -> tuple:
        """(% of a core, host MiB) each of `n` idle sandboxes costs: CPU over `seconds`
        (cpuacct of their cgroups), memory as the MemAvailable drop / `n` once they are all up
        and settled. The sandboxes are copies of `image` restored here (our guest daemon and
        kernel, no server talking to them), or with `image` None fresh runsc sandboxes of the
        same bundle running only `sleep` (gVisor's own idle cost)."""
        made = []  # (cid, netns, dir, host socket)
        procs: List[subprocess.Popen] = []
        try:
            time.sleep(3)
            before = mem_available()
            for _ in range(n):
                cid, netns, d = self._new()
                host, guest = socket.socketpair()
                made.append((cid, netns, d, host))
                if image is None:
                    cfg_path = d / "bundle" / "config.json"
                    cfg = json.loads(cfg_path.read_text())
                    cfg["process"]["args"] = ["/bin/sleep", "infinity"]
                    cfg_path.write_text(json.dumps(cfg))
                    args = ["run", f"--bundle={d / 'bundle'}", cid]
                else:
                    args = ["restore", f"--image-path={image}", f"--bundle={d / 'bundle'}", cid]
                procs.append(subprocess.Popen(self._runsc(d, *args), stdin=guest.fileno(), stdout=guest.fileno(),
                                              stderr=subprocess.DEVNULL))
                guest.close()
                if image is not None:
                    host.settimeout(60)
                    if GuestChannel(host).hello().get("type") != "hello_ok":
                        raise RuntimeError("floor idle: no handshake")

            def usage() -> int:
                total = 0
                for cid, *_ in made:
                    files = glob.glob(f"/sys/fs/cgroup/cpuacct/**/pandastack-floor/{cid}/cpuacct.usage", recursive=True)
                    if not files:
                        raise RuntimeError(f"floor idle: no cpuacct cgroup for {cid}")
                    total += int(Path(files[0]).read_text())
                return total

            time.sleep(5)  # past start-up
            mib = (before - mem_available()) / n / 2**20
            c0, t0 = usage(), time.perf_counter()
            time.sleep(seconds)
            c1, t1 = usage(), time.perf_counter()
            return (c1 - c0) / 1e9 / (t1 - t0) / n * 100, mib
        finally:
            for cid, netns, d, host in made:
                self._remove(cid, netns, d)
                host.close()
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except Exception:  # noqa: BLE001
                    pass

    def checkpoint(self, iid: str, image: Path) -> float:
        return timed(lambda: subprocess.run(
            ["runsc", f"--root={self.data_dir / 'runsc'}", "checkpoint", "--leave-running", "--compression=none",
             f"--image-path={image}", iid], check=True, capture_output=True))

    def close(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)


def stock() -> tuple:
    """(warm-pool instances ready, warm-pool restores in flight, restore targets) of the server
    now, summed over templates, from its /metrics."""
    import requests

    text = requests.get(f"{os.environ['PANDASTACK_API']}/metrics",
                        headers={"Authorization": f"Bearer {os.environ['PANDASTACK_API_KEY']}"}, timeout=30).text
    ready, in_flight, targets = 0.0, 0.0, 0.0
    for line in text.splitlines():
        if line.startswith("pandastack_pool_instances{"):
            value = float(line.rsplit(" ", 1)[1])
            if 'state="ready"' in line:
                ready += value
            elif 'state="in_flight"' in line:
                in_flight += value
        elif line.startswith("pandastack_restore_targets "):
            targets = float(line.rsplit(" ", 1)[1])
    return int(ready), int(in_flight), int(targets)


def settle(limit_s: float = 90.0, quiet_s: float = 3.0) -> None:
    """Waits until the server has stopped making things ahead of time (no warm-pool restore in
    flight, the restore-target count unchanged for `quiet_s`), so the next rows do not share
    the cores with refills a burst started. Gives up after `limit_s`."""
    deadline, last, since = time.monotonic() + limit_s, None, time.monotonic()
    while time.monotonic() < deadline:
        _, in_flight, targets = stock()
        state = (in_flight, targets)
        if state != last:
            last, since = state, time.monotonic()
        elif in_flight == 0 and time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.5)
    print("bench: the server did not settle", file=sys.stderr)


def host_busy_s() -> float:
    """Seconds of CPU the whole host has spent busy since boot (/proc/stat: every state but
    idle and iowait, all cores)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def ours_busy_s() -> Dict[int, float]:
    """CPU seconds so far of every live process running the `pandastack` or `runsc` binary
    (the server, shims, sandboxes' sentries and gofers, runsc commands), by pid: the host's
    cost of sandboxes without the machine's other processes."""
    out: Dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.path.basename(os.readlink(proc / "exe")).split(" ")[0] not in ("pandastack", "runsc"):
                continue
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(proc.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def template_image(data_dir: Path, template: str) -> Path:
    """The newest ready checkpoint of `template`'s template image in the server's data dir
    (what its creates restore)."""
    ready = [p.parent for p in (data_dir / "template-images" / template).glob("*/ready")]
    if not ready:
        raise RuntimeError(f"no ready template image of {template} under {data_dir}")
    return max(ready, key=lambda p: p.stat().st_mtime)


def instance_of(data_dir: Path, sandbox_id: str) -> tuple[str, Path]:
    db = sqlite3.connect(f"file:{data_dir / 'store.db'}?mode=ro", uri=True, timeout=10)
    try:
        iid, idir = db.execute("SELECT instance_id, instance_dir FROM sandboxes WHERE id = ?", (sandbox_id,)).fetchone()
    finally:
        db.close()
    return iid, Path(idir)


def main() -> int:
    ap = argparse.ArgumentParser(description="PandaStack lifecycle speed and the runsc floor")
    ap.add_argument("--data-dir", required=True, help="the server's data dir (for the floor)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--density", type=int, default=100, help="idle sandboxes for the density rows (0: skip)")
    a = ap.parse_args()
    from pandastack import Client, Sandbox, ServerError

    data_dir = Path(a.data_dir)
    client = Client(timeout=120)
    rows: List[tuple] = []
    made: List[Sandbox] = []

    def burst(n: int) -> List[float]:
        out = []
        for _ in range(n):
            start = time.perf_counter()
            sb = Sandbox.create(template="code-interpreter")
            sb.exec("true")
            out.append((time.perf_counter() - start) * 1000)
            sb.kill()
        return out

    print("bench: create bursts", file=sys.stderr)
    burst(50)
    settle()  # the pool refills to the size the first burst asked for
    busy0 = host_busy_s()
    rows.append(("create -> first exec, 50 back to back (`code-interpreter`)", burst(50)))
    settle()
    # Everything one create sets off: its refill restore, the target that restore used, the
    # teardown of its kill, the client and the server. Back-to-back creates cannot come faster
    # than the host's cores do this work once the pool's stock is spent.
    per_create_ms = (host_busy_s() - busy0) / 50 * 1000
    paced: List[float] = []
    for _ in range(a.runs):
        settle(quiet_s=1.0)
        paced.extend(burst(1))
    rows.append(("create -> first exec, paced (the server quiet before each)", paced))

    results: Dict[str, List[float]] = {}
    add = lambda k, v: results.setdefault(k, []).append(v)  # noqa: E731
    probe = Sandbox.create(template="code-interpreter")
    for _ in range(3):
        probe.exec("true")
    results["exec `true`"] = [timed(lambda: probe.exec("true")) for _ in range(50)]
    ctx0 = probe.create_code_context()
    ctx0.run_code("1")
    rows.append(("run_code(\"1\")", [timed(lambda: ctx0.run_code("1")) for _ in range(50)]))
    probe.kill()

    warm = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
    floor = None
    idle_floor: Dict[str, tuple] = {}  # what -> (% of a core, MiB or None) per idle sandbox
    try:
        ctx = warm.create_code_context()
        ctx.run_code("import pandas as pd, numpy as np; df = pd.DataFrame({'a': np.arange(100000)})")
        print("bench: lifecycle", file=sys.stderr)
        for i in range(a.runs):
            snap: List[str] = []
            add("snapshot", timed(lambda: snap.append(warm.snapshot())))

            def restore() -> None:
                sb = Sandbox.create(from_snapshot=snap[0])
                made.append(sb)
                assert sb.create_code_context().run_code("len(df)").text == "100000"

            add("from_snapshot -> first run_code", timed(restore))
            client.snapshots.delete(snap[0])

            def fork() -> None:
                child = warm.fork()
                made.append(child)
                assert child.create_code_context().run_code("len(df)").text == "100000"

            # A quiet parent, as the floor's checkpoint has.
            add("fork -> child answers", timed(fork))

            # The stall, in a fork of its own: a thread runs exec `true` on the parent
            # throughout (about a core of load, so this fork is not timed).
            stalls: List[float] = []
            stop = threading.Event()

            def ping() -> None:
                while not stop.is_set():
                    stalls.append(timed(lambda: warm.exec("true")))

            pinger = threading.Thread(target=ping)
            pinger.start()
            time.sleep(0.05)
            fork()
            stop.set()
            pinger.join()
            add("parent's longest stall during a fork", max(stalls))

            def answers(k: Sandbox) -> None:
                assert k.create_code_context().run_code("len(df)").text == "100000"

            def tree(n: int) -> None:
                kids = warm.fork_tree(n)
                made.extend(kids)
                # Every child asked at once, as the floor waits for every handshake at once.
                with ThreadPoolExecutor(n) as pool:
                    list(pool.map(answers, kids))

            add("fork_tree(3), all answering", timed(lambda: tree(3)))
            if i % 3 == 0:
                add("fork_tree(8), all answering", timed(lambda: tree(8)))
            for sb in made:
                sb.kill()
            made.clear()
            add("hibernate", timed(warm.hibernate))
            add("wake -> first exec", timed(lambda: warm.exec("true")))
        print("bench: runsc floor", file=sys.stderr)
        iid, idir = instance_of(data_dir, warm.id)
        floor = Floor(data_dir, idir)
        image = floor.work / "image"
        for _ in range(a.runs):
            shutil.rmtree(image, ignore_errors=True)
            add("floor: runsc checkpoint --leave-running", floor.checkpoint(iid, image))
        for _ in range(a.runs):
            add("floor: runsc restore into a new container", floor.restore(image, precreate=False))
            add("floor: runsc restore onto a created container", floor.restore(image, precreate=True))
        for i in range(a.runs):
            add("floor: 3 restores at once onto created containers", floor.restore_many(image, 3))
            if i % 3 == 0:
                add("floor: 8 restores at once onto created containers", floor.restore_many(image, 8))
        results["floor: exec `true` over the guest channel"] = floor.exec_floor(image, 50)
        # Its memory is left out: three sandboxes this small vanish in MemAvailable's noise.
        idle_floor["runsc running only `sleep`"] = (floor.idle(None)[0], None)
        # The image density's sandboxes are restored from, by runsc alone: 10 copies, so the
        # MemAvailable drop is well above its noise.
        idle_floor["the code-interpreter template image restored by runsc alone (no server)"] = floor.idle(
            template_image(data_dir, "code-interpreter"), n=10)
    finally:
        for sb in made:
            try:
                sb.kill()
            except Exception:  # noqa: BLE001
                pass
        warm.kill()
        if floor:
            floor.close()

    p50 = lambda k: percentile(results[k], 50)  # noqa: E731
    ckpt, pre = p50("floor: runsc checkpoint --leave-running"), p50("floor: runsc restore onto a created container")
    floors = {
        "exec `true`": p50("floor: exec `true` over the guest channel"),
        "snapshot": ckpt,
        "from_snapshot -> first run_code": pre,
        "fork -> child answers": ckpt + pre,
        "parent's longest stall during a fork": ckpt,
        "fork_tree(3), all answering": ckpt + p50("floor: 3 restores at once onto created containers"),
        "fork_tree(8), all answering": ckpt + p50("floor: 8 restores at once onto created containers"),
        "wake -> first exec": pre,
    }
    life = [(k, v, f"{p50(k) / floors[k]:.2f}x" if k in floors else "") for k, v in results.items()]

    density_rows: List[tuple] = []
    notes: List[str] = []
    if a.density:
        print("bench: density", file=sys.stderr)
        settle()
        ahead_before = stock()
        before = mem_available()
        idle: List[Sandbox] = []
        try:
            while len(idle) < a.density and mem_available() > 4 << 30:
                try:
                    idle.append(Sandbox.create(template="code-interpreter", ttl_seconds=3600))
                except ServerError as e:
                    # The host's admission limit (memory committed vs host memory) ends the
                    # run as MemAvailable would: measure what fits.
                    if "capacity" not in str(e):
                        raise
                    print(f"bench: density stops at {len(idle)}: {e}", file=sys.stderr)
                    break
            # The create burst raised the warm pool and the restore targets: wait for their
            # refills, and report the stock on both sides of the drop.
            settle()
            time.sleep(5)
            after = mem_available()
            ahead_after = stock()
            per = (before - after) / len(idle)
            density_rows.append((f"exec `true` with {len(idle)} idle sandboxes", [timed(lambda s=s: s.exec("true")) for s in idle]))
            key = os.environ["PANDASTACK_API_KEY"]
            import requests

            def cpu() -> int:
                total = 0
                for s in idle:
                    m = requests.get(f"{os.environ['PANDASTACK_API']}/v1/sandboxes/{s.id}/metrics",
                                     headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
                    total += int(m.get("cpu_ns", 0))
                return total

            c0, t0 = cpu(), time.perf_counter()
            h0 = ours_busy_s()
            time.sleep(20)
            h1 = ours_busy_s()
            c1, t1 = cpu(), time.perf_counter()
            idle_pct = (c1 - c0) / 1e9 / (t1 - t0) / len(idle) * 100
            host_s = sum(v - h0[pid] for pid, v in h1.items() if pid in h0)
            host_pct = host_s / (t1 - t0) / len(idle) * 100
            floor_text = "; ".join(f"{k}: {c:.3f} %" + (f" and {m:.0f} MiB" if m is not None else "")
                                   for k, (c, m) in idle_floor.items())
            mem_floor = [m for k, (_, m) in idle_floor.items() if "template image" in k]
            ratio = f" ({per / 2**20 / mem_floor[0]:.2f}x its floor)" if mem_floor else ""
            notes.append(f"density: {len(idle)} idle `code-interpreter` sandboxes, host memory "
                         f"{per / 2**20:.0f} MiB each{ratio} (MemAvailable drop / N; warm-pool instances and "
                         f"restore targets {ahead_before[0]} and {ahead_before[2]} before, {ahead_after[0]} and "
                         f"{ahead_after[2]} after), idle CPU {idle_pct:.3f} % of a core each in its own cgroup, "
                         f"{host_pct:.3f} % counting every process of ours on the host (server, shims, warm pool and restore "
                         f"targets included) / N. Floors, each idle "
                         f"sandbox over 20 s (CPU) and MemAvailable drop / N (memory): {floor_text}")
        finally:
            for s in idle:
                try:
                    s.kill()
                except Exception:  # noqa: BLE001
                    pass

    print(f"\nPandaStack lifecycle through the Python SDK, {os.environ.get('PANDASTACK_API')}\n")
    print(table(rows))
    print()
    print(table(life, extra=["P50 / floor"]))
    if density_rows:
        print()
        print(table(density_rows))
    print(f"\ncreate burst: {per_create_ms:.0f} ms of host CPU per create (the whole host's busy time over the "
          f"burst and its settle / 50: its refill restore, the restore target that used, the teardown of its kill, "
          f"client, server and the machine's own processes), so {os.cpu_count()} cores sustain at "
          f"most {os.cpu_count() * 1000 / per_create_ms:.1f} creates per second once the warm pool's stock is spent")
    for n in notes:
        print(f"\n{n}")
    print("\nfloor: exec `true` = the same exec sent straight over the guest channel of a copy restored by runsc "
          "(no HTTP, no server); fork = checkpoint + restore onto a created container; fork_tree(N) = checkpoint + N "
          "restores at once onto created containers; snapshot = checkpoint; from_snapshot and wake = restore "
          "onto a created container.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
