"""Fixtures and host-side probes shared by test_lifecycle_acceptance.py, test_events_metrics.py and
test_cli.py (the harness itself is conftest.py; this file only adds to it).

- `second_server`: a second `pandastack server` of this session with a short idle period
  (`--idle-hibernate-seconds 3 --pool-size 0`) on its own port and its own fresh data dir. Its
  `templates/base` is a copy of the main server's baked `base` (nothing is baked at start), so
  the re-bake test can re-bake *its* `base` without touching the main server's templates.
- `new_snapshots_deleted`: deletes, after the test, every snapshot of workspace A the test made
  (snapshots outlive sandboxes, so the harness's sandbox cleanup does not remove them).
- Probes of what a sandbox holds on the host: its engine instance id (read from the server's
  SQLite store, read-only), the host processes of that instance, their CPU ticks.
- `EventStream`: a raw SSE subscriber of `GET /v1/events` on a thread, stamping each event with
  the monotonic time it arrived.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

import sweep

IDLE_SECONDS = 3


# --- host-side probes ---------------------------------------------------------------------


def instance_id(data_dir: Path, sandbox_id: str) -> str | None:
    """The engine instance (`ps-<hex>`) the server's store records for a sandbox."""
    db = sqlite3.connect(f"file:{data_dir / 'store.db'}?mode=ro", uri=True, timeout=10)
    try:
        row = db.execute("SELECT instance_id FROM sandboxes WHERE id = ?", (sandbox_id,)).fetchone()
    finally:
        db.close()
    assert row is not None, f"sandbox {sandbox_id} is not in {data_dir}/store.db"
    return row[0]


def _proc_table() -> dict[int, tuple[str, int, int]]:
    """pid -> (command line, parent pid, utime + stime in clock ticks)."""
    out: dict[int, tuple[str, int, int]] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            stat = (p / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
        if fields[0] == "Z":
            continue
        out[int(p.name)] = (cmd, int(fields[1]), int(fields[11]) + int(fields[12]))
    return out


def processes_matching(text: str) -> dict[int, str]:
    """Live (non-zombie) host processes whose command line contains `text`."""
    return {pid: cmd for pid, (cmd, _, _) in _proc_table().items() if text in cmd}


def sandbox_process_tree(iid: str) -> tuple[set[int], int]:
    """The runsc-sandbox process of instance `iid` and all its descendants (gVisor's ptrace
    stubs, which run the sandbox's code, have an empty command line), with their summed
    utime + stime in clock ticks."""
    table = _proc_table()
    tree = {pid for pid, (cmd, _, _) in table.items() if cmd.startswith("runsc-sandbox") and iid in cmd}
    grew = True
    while grew:
        grew = False
        for pid, (_, ppid, _) in table.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return tree, sum(table[p][2] for p in tree)


def rss_kib(pids) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def wait_until(pred, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Polls `pred` until it returns a truthy value; returns it, or fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def raw_session(key: str) -> requests.Session:
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {key}"
    return s


# --- snapshots ----------------------------------------------------------------------------


def _snapshot_ids(url: str, key: str) -> set[str]:
    r = raw_session(key).get(f"{url}/v1/snapshots", timeout=60)
    r.raise_for_status()
    body = r.json()
    items = body.get("snapshots", []) if isinstance(body, dict) else body
    return {s["id"] for s in items}


def delete_new_snapshots(url: str, key: str, before: set[str]) -> None:
    s = raw_session(key)
    for snap in _snapshot_ids(url, key) - before:
        r = s.delete(f"{url}/v1/snapshots/{snap}", timeout=60)
        assert r.status_code in (200, 204, 404), f"deleting {snap}: HTTP {r.status_code} {r.text[:200]}"


@pytest.fixture
def new_snapshots_deleted(server):
    """Deletes the snapshots of workspace A that appeared during the test."""
    before = _snapshot_ids(server.url, server.admin_key())
    yield
    if server.proc is None or server.proc.poll() is not None:
        server.start()
    delete_new_snapshots(server.url, server.admin_key(), before)


# --- the second server --------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def scrub_data_dir(data_dir: Path) -> None:
    """Stops every container and process (database clusters too) a server on `data_dir` left,
    unmounts what it mounted there, then removes the dir.
    Only ever called on data dirs this file creates (`lifecycle-server-<pid>`)."""
    root = data_dir / "runsc"
    if root.is_dir():
        listed = subprocess.run(
            ["runsc", f"--root={root}", "list", "-quiet"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
        ).stdout.split()
        for c in listed:
            subprocess.run(
                ["runsc", f"--root={root}", "delete", "-force", c],
                stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
            )
    marker = f"{data_dir}/"
    for _ in range(50):
        left = processes_matching(marker)
        left.update({p: c for p, c in processes_matching(f"--data-dir {data_dir}").items()})
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    # Database storage (issue 10): unmounting frees its loop device.
    mounts = [l.split(" ")[4] for l in Path("/proc/self/mountinfo").read_text().splitlines()]
    for m in sorted((m for m in mounts if m.startswith(marker)), reverse=True):
        subprocess.run(["umount", "-l", m], stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    shutil.rmtree(data_dir, ignore_errors=True)


class SecondServer:
    """A `pandastack server` started by this file, on its own port and data dir."""

    def __init__(self, binary: Path, data_dir: Path, log: Path, extra_args: list[str]) -> None:
        self.binary = binary
        self.data_dir = data_dir
        self.log = log
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_args = extra_args
        self.proc: subprocess.Popen | None = None

    def start(self, ready_within: float = 90.0) -> None:
        with open(self.log, "ab") as log:
            log.write(f"\n--- {time.strftime('%H:%M:%S')} starting server on {self.url}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [str(self.binary), "server", "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(self.data_dir)]
                + self.extra_args,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + ready_within
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"second server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.url}/health", timeout=2).ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"second server not healthy within {ready_within} s:\n{self.log_tail()}")

    def admin_key(self) -> str:
        key = sweep.admin_key(self.data_dir / "admin.env")
        assert key, f"{self.data_dir}/admin.env has no PANDASTACK_API_KEY"
        return key

    def client(self):
        from pandastack import Client

        return Client(api_url=self.url, api_key=self.admin_key())

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)

    def teardown(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                key = sweep.admin_key(self.data_dir / "admin.env")
                if key:
                    sweep.sweep(self.url, [key])
                    try:
                        delete_new_snapshots(self.url, key, set())
                    except (requests.RequestException, AssertionError) as e:
                        print(f"second server: deleting snapshots failed: {e}")
        finally:
            self.stop()
            scrub_data_dir(self.data_dir)


def _copy_current_template(src_templates: Path, dst_templates: Path, name: str) -> None:
    """The current build of template `name`, hard-linked (a build is never changed in place:
    a re-bake writes a new build dir), so a second server costs no disk."""
    src = src_templates.resolve() / name
    current = (src / "current").read_text().strip()
    dst = dst_templates / name
    dst.mkdir(parents=True)
    subprocess.run(["cp", "-al", str(src / current), str(dst / current)], check=True, timeout=300)
    shutil.copy2(src / "current", dst / "current")


def fresh_data_dir(server, prefix: str) -> Path:
    """A fresh data dir `<prefix>-<pid>` beside the main server's, whose `templates/base` is a
    copy of the main server's; first scrubs the dirs of this prefix that runs no longer alive
    left behind (their sandboxes, mounts and files)."""
    parent = server.data_dir.parent
    for stale in parent.glob(f"{prefix}-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _pid_alive(int(pid)):
            scrub_data_dir(stale)
    data_dir = parent / f"{prefix}-{os.getpid()}"
    scrub_data_dir(data_dir)
    (data_dir / "templates").mkdir(parents=True)
    _copy_current_template(server.data_dir / "templates", data_dir / "templates", "base")
    return data_dir


@pytest.fixture(scope="module")
def second_server(server):
    """`pandastack server --idle-hibernate-seconds 3 --pool-size 0` on a fresh data dir whose
    `templates/base` is a copy of the main server's (so it can be re-baked on its own)."""
    data_dir = fresh_data_dir(server, "lifecycle-server")
    srv = SecondServer(
        server.binary,
        data_dir,
        server.log.parent / "server-lifecycle-second.log",
        ["--idle-hibernate-seconds", str(IDLE_SECONDS), "--pool-size", "0"],
    )
    try:
        srv.start()
        yield srv
    finally:
        srv.teardown()


# --- events -------------------------------------------------------------------------------


class EventStream:
    """`GET /v1/events` read on a thread; `events` holds (arrival monotonic time, event dict)."""

    def __init__(self, url: str, key: str, since: int | None = None) -> None:
        params = {} if since is None else {"since": since}
        self.resp = requests.get(
            f"{url}/v1/events",
            headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"},
            params=params,
            stream=True,
            timeout=(10, 120),
        )
        assert self.resp.status_code == 200, f"HTTP {self.resp.status_code}: {self.resp.text[:300]}"
        ctype = self.resp.headers.get("content-type", "")
        assert ctype.startswith("text/event-stream"), ctype
        self.events: list[tuple[float, dict]] = []
        self.raw: list[dict] = []
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        fields: dict[str, str] = {}
        try:
            for line in self.resp.iter_lines(decode_unicode=True):
                if line is None:
                    continue
                if line == "":
                    if "data" in fields:
                        now = time.monotonic()
                        data = json.loads(fields["data"])
                        with self._lock:
                            self.raw.append(dict(fields))
                            self.events.append((now, data))
                    fields = {}
                    continue
                if line.startswith(":"):
                    continue
                k, _, v = line.partition(":")
                v = v[1:] if v.startswith(" ") else v
                fields[k] = fields[k] + "\n" + v if k in fields else v
        except (requests.RequestException, OSError, ValueError, AttributeError) as e:
            # Closing the response from another thread ends the read with an error.
            self.error = e

    def of(self, sandbox_id: str) -> list[tuple[float, dict]]:
        with self._lock:
            return [(t, e) for t, e in self.events if e.get("sandbox_id") == sandbox_id]

    def all(self) -> list[tuple[float, dict]]:
        with self._lock:
            return list(self.events)

    def close(self) -> None:
        # A read blocked in another thread holds the response: shut the socket down first
        # (that ends the read), then release the response.
        conn = getattr(self.resp.raw, "connection", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(5)
        self.resp.close()
