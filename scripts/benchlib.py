"""Shared pieces of the benchmark scripts: percentiles, timing, markdown tables, a server of a
benchmark's own (BenchServer), and the raw guest channel (the frames of crates/guest-protocol)
for measuring runsc without the server."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple


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


def bench_root(data_dir: Path, prefix: str) -> Path:
    """A fresh directory for a benchmark's servers: next to `data_dir` (same filesystem, so its
    templates can be hard-linked), mode 0755 (the postgres user runs database clusters inside)
    and short (an instance's sockets must fit in a unix socket address; the server refuses a
    deeper data dir)."""
    root = Path(tempfile.mkdtemp(prefix=f"psb-{prefix}-", dir=Path(data_dir).resolve().parent))
    root.chmod(0o755)
    return root


class BenchServer:
    """A `pandastack server` of a benchmark's own, on the data dir `root/name` whose templates
    are hard links of the baked ones in `templates` (nothing is baked). Waits until it answers
    and, with `wait_images`, until creates of `base` restore the template snapshot (template
    images are made in the background at start). Stops the process again if any of that fails.

    Attributes: `url`, `key` (the admin key), `client` (a `pandastack.Client`), `http` (a
    `requests.Session` with the key), `data` (its data dir), `log` (its log file)."""

    def __init__(self, binary: Path, templates: Path, root: Path, name: str, args: Sequence[str] = (),
                 env: Optional[Dict[str, str]] = None, wait_images: bool = True) -> None:
        import requests

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
        self._argv = [str(binary), "server", "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(self.data), *args]
        self._env = {**os.environ, **(env or {})}
        self.proc = self._spawn()
        try:
            self._wait_answering()
            self.key = re.search(r"PANDASTACK_API_KEY=(\S+)", (self.data / "admin.env").read_text()).group(1)
            from pandastack import Client

            self.client = Client(api_url=self.url, api_key=self.key, timeout=120)
            self.http = requests.Session()
            self.http.headers["Authorization"] = f"Bearer {self.key}"
            if wait_images:
                self._wait_images()
        except BaseException:
            self.stop()
            raise

    def _spawn(self) -> subprocess.Popen:
        return subprocess.Popen(self._argv, stdin=subprocess.DEVNULL, stdout=open(self.log, "ab"),
                                stderr=subprocess.STDOUT, env=self._env, start_new_session=True)

    def restart(self) -> None:
        """Starts the server again on the same data dir and port (after a kill)."""
        self.proc = self._spawn()
        self._wait_answering()

    def _wait_answering(self) -> None:
        import requests

        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}); see {self.log}")
            try:
                if requests.get(f"{self.url}/health", timeout=1).ok:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not answer in 120 s; see {self.log}")
            time.sleep(0.2)

    def _wait_images(self) -> None:
        for _ in range(120):
            sb = self.client.sandboxes.create(template="base")
            mode = sb.boot_mode
            sb.kill()
            if mode == "snapshot":
                time.sleep(3)  # let the warm pool fill
                return
            time.sleep(1)
        raise RuntimeError("creates never restored the template snapshot")

    def log_text(self) -> str:
        """The server's log so far, without terminal colours."""
        return re.sub(r"\x1b\[[0-9;]*m", "", self.log.read_text(errors="replace"))

    def stop(self) -> None:
        """SIGTERM (the server removes its warm pool), SIGKILL after 120 s."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
