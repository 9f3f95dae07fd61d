"""Shared pieces of the benchmark scripts: percentiles, timing, markdown tables, and the raw
guest channel (the frames of crates/guest-protocol) for measuring runsc without the server."""

from __future__ import annotations

import json
import math
import socket
import struct
import time
from typing import Callable, Iterable, List, Sequence, Tuple


def percentile(samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (P99 of fewer than 100 samples is the largest)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def timed(fn: Callable[[], object]) -> float:
    """Milliseconds `fn()` took."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def table(rows: Iterable[Tuple[str, Sequence[float]]], extra: Sequence[str] = ()) -> str:
    """A markdown table of `(name, samples)` with runs, P50 and P99 in ms, plus the columns in
    `extra` given per row as a trailing element (`(name, samples, *cells)`)."""
    head = "| operation | runs | P50 (ms) | P99 (ms) |" + "".join(f" {e} |" for e in extra)
    sep = "|---|---:|---:|---:|" + "---:|" * len(extra)
    lines = [head, sep]
    for row in rows:
        name, samples, *cells = row
        lines.append(
            f"| {name} | {len(samples)} | {percentile(samples, 50):.1f} | {percentile(samples, 99):.1f} |"
            + "".join(f" {c} |" for c in cells)
        )
    return "\n".join(lines)


class GuestChannel:
    """The host end of a guest daemon's stdio socket pair, speaking just enough of the guest
    protocol (frames `[u32 header][u32 body][JSON][bytes]`, big-endian) to handshake and run a
    command."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.next_id = 1

    def _send(self, msg: dict) -> None:
        h = json.dumps(msg).encode()
        self.sock.sendall(struct.pack(">II", len(h), 0) + h)

    def _read(self, n: int) -> bytes:
        b = b""
        while len(b) < n:
            chunk = self.sock.recv(n - len(b))
            if not chunk:
                raise EOFError("guest channel closed")
            b += chunk
        return b

    def _recv(self) -> Tuple[dict, bytes]:
        hl, bl = struct.unpack(">II", self._read(8))
        return json.loads(self._read(hl)), self._read(bl)

    def hello(self, version: int = 1) -> dict:
        self._send({"type": "hello", "id": self.next_id, "version": version})
        self.next_id += 1
        return self._recv()[0]

    def exec(self, cmd: str) -> List[dict]:
        rid = self.next_id
        self.next_id += 1
        self._send({"type": "exec", "id": rid, "cmd": cmd})
        out = []
        while True:
            m, _ = self._recv()
            out.append(m)
            if m.get("type") in ("exited", "error"):
                return out


class BenchServer:
    """A `pandastack server` of a benchmark's own on a fresh data dir `root/name` whose baked
    templates are hard links of those in `templates` (nothing is baked, nothing copied). It
    waits until `/health` answers and creates from `base` restore its template image (made in
    the background at start), and offers `client` (the published Python SDK) and `http`
    (requests with the key)."""

    def __init__(self, binary, templates, root, name: str = "server", args: Sequence[str] = ()) -> None:
        import os
        import re
        import shutil
        import subprocess

        import requests
        from pandastack import Client

        self.data = root / name
        (self.data / "templates").mkdir(parents=True)
        for t in templates.iterdir():
            if t.is_dir() and (t / "current").exists():
                cur = (t / "current").read_text().strip()
                (self.data / "templates" / t.name).mkdir()
                subprocess.run(["cp", "-al", str(t / cur), str(self.data / "templates" / t.name / cur)], check=True)
                shutil.copy2(t / "current", self.data / "templates" / t.name / "current")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / f"{name}.log"
        self.proc = subprocess.Popen(
            [str(binary), "server", "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(self.data), *args],
            stdin=subprocess.DEVNULL, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
            env=dict(os.environ), start_new_session=True,
        )
        for _ in range(300):
            try:
                if requests.get(f"{self.url}/health", timeout=1).ok:
                    break
            except requests.RequestException:
                time.sleep(0.2)
        self.key = re.search(r"PANDASTACK_API_KEY=(\S+)", (self.data / "admin.env").read_text()).group(1)
        self.client = Client(api_url=self.url, api_key=self.key, timeout=120)
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {self.key}"
        for _ in range(120):
            sb = self.client.sandboxes.create(template="base")
            mode = sb.boot_mode
            sb.kill()
            if mode == "snapshot":
                break
            time.sleep(1)

    def stop(self) -> None:
        import subprocess

        self.proc.terminate()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
