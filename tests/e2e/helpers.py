"""Small helpers shared by the end-to-end tests (no SDK re-implementation: only host-side
inspection and assertions on raw responses)."""

from __future__ import annotations

import base64
import contextlib
import subprocess
import time
from pathlib import Path

import requests

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# Lists the command lines of every process in a sandbox (the templates have no `ps`).
PS = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"


def assert_png(b64: str | None) -> bytes:
    """Decodes a base64 PNG and checks its magic bytes; returns the raw bytes."""
    assert b64, "no PNG in the result"
    # IPython ends its base64 with a newline, as Jupyter does; anything else must be base64.
    raw = base64.b64decode(b64.strip(), validate=True)
    assert raw.startswith(PNG_MAGIC), raw[:16]
    assert len(raw) > 1000, f"PNG of only {len(raw)} bytes"
    return raw


def assert_json_error(resp: requests.Response, *words: str, status: int | None = None) -> str:
    """Checks a 4xx `{"error": "..."}` reply whose message names each of `words`."""
    assert 400 <= resp.status_code < 500, f"HTTP {resp.status_code}: {resp.text[:300]}"
    if status is not None:
        assert resp.status_code == status, f"HTTP {resp.status_code}, wanted {status}: {resp.text[:300]}"
    assert resp.headers.get("content-type", "").startswith("application/json"), resp.headers
    body = resp.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], body
    for w in words:
        assert w.lower() in body["error"].lower(), f"error {body['error']!r} does not name {w!r}"
    return body["error"]


def instance_dirs(data_dir: Path) -> set[str]:
    """Names of the per-sandbox directories the server keeps on the host."""
    d = data_dir / "instances"
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


def runsc_containers(data_dir: Path) -> set[str]:
    """Container ids runsc knows under the server's state root."""
    root = data_dir / "runsc"
    if not root.is_dir():
        return set()
    out = subprocess.run(
        ["runsc", f"--root={root}", "list", "-quiet"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}



def made_ahead(server) -> int:
    """Instances the server holds ahead of time, from its /metrics: warm-pool sandboxes (ready
    and being restored) and restore targets (containers made in advance)."""
    text = requests.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {server.admin_key()}"},
                        timeout=30).text
    total = 0
    for line in text.splitlines():
        if line.startswith("pandastack_pool_instances{") or line.startswith("pandastack_restore_targets "):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def steady_host(server, limit_s: float = 90.0, quiet_s: float = 3.0) -> tuple[set[str], set[str]]:
    """Waits until the host holds exactly one runsc container (with its instance directory)
    per running sandbox plus what the server holds ahead of time (warm pool, restore targets;
    `made_ahead`), unchanged for `quiet_s`: the server tears sandboxes down (~2 s) and refills
    in the background. Returns (sandbox ids, instance dirs without a container)."""
    from pandastack import Sandbox

    data_dir = server.data_dir
    deadline = time.monotonic() + limit_s
    last, since = None, time.monotonic()
    while True:
        boxes = Sandbox.list()
        running = [s for s in boxes if s.status in ("running", "paused")]
        ahead = made_ahead(server)
        dirs, containers = instance_dirs(data_dir), runsc_containers(data_dir)
        state = ({s.id for s in boxes}, dirs, containers, ahead)
        if state != last:
            last, since = state, time.monotonic()
        if len(containers) == len(running) + ahead and containers <= dirs:
            if time.monotonic() - since >= quiet_s:
                return state[0], dirs - containers
        if time.monotonic() > deadline:
            raise AssertionError(
                f"host not steady after {limit_s} s: {len(containers)} runsc containers for "
                f"{len(running)} running sandboxes + {ahead} held ahead; containers without an "
                f"instance dir: {containers - dirs}"
            )
        time.sleep(0.5)


@contextlib.contextmanager
def nothing_left_behind(server):
    """Asserts that the block leaves the sandbox list unchanged and the host back at its steady
    state: no runsc container beyond the sandboxes and the warm pool, no new instance directory
    without a container."""
    before_ids, before_stale = steady_host(server)
    yield
    after_ids, after_stale = steady_host(server)
    assert after_ids == before_ids, f"sandbox list changed: {after_ids ^ before_ids}"
    assert after_stale <= before_stale, f"instance dirs left without a container: {after_stale - before_stale}"
