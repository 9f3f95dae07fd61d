"""Harness of the end-to-end tests: one real `pandastack server` per session, driven through
the published Python SDK (`pandastack==0.10.0`) exactly as a user drives it.

The server runs the binary at $PANDASTACK_TEST_BIN (default ./dist/pandastack) on a free port
of 127.0.0.1 with the persistent data dir $PANDASTACK_TEST_SERVER_DATA, whose templates are
baked in advance (scripts/test.sh does it; a bake is cached by recipe hash). Its stdin is
/dev/null and its output goes to a log file, so it never holds the caller's terminal or CI pipe.
PANDASTACK_API and PANDASTACK_API_KEY are put into os.environ before the SDK is first used, so
`Sandbox.create(...)` works with no arguments, as in the seed documents.

Every test ends with all sandboxes of the workspaces it used deleted. The server's pid, URL and
the keys of workspaces made here are written to $PANDASTACK_TEST_RUN_DIR, so scripts/test.sh
can clean up after a run that was killed.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).parent))
import sweep  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("PANDASTACK_TEST_BIN", REPO / "dist" / "pandastack"))
DATA = Path(os.environ.get("PANDASTACK_TEST_SERVER_DATA", "/var/lib/pandastack-ci/server"))
RUN = Path(os.environ.get("PANDASTACK_TEST_RUN_DIR", DATA.parent / "run"))
LOGS = Path(os.environ.get("PANDASTACK_TEST_LOG_DIR", RUN))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Hosts `{port}-{sandbox id}.PREVIEW_SUFFIX` are previews of that port (issue 7); the tests send
# such a Host header to 127.0.0.1, so nothing needs to resolve.
PREVIEW_SUFFIX = "preview.localhost"


class Server:
    """A `pandastack server` process this session owns, on a fixed port and data dir."""

    def __init__(self, binary: Path, data_dir: Path, port: int, log: Path, extra_args: list[str] | None = None) -> None:
        self.binary = binary
        self.data_dir = data_dir
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.extra_args = ["--preview-host-suffix", PREVIEW_SUFFIX] if extra_args is None else extra_args
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "server not started"
        return self.proc.pid

    def start(self, ready_within: float = 90.0) -> None:
        """Starts the server and waits until /health answers."""
        assert self.binary.exists(), f"{self.binary} missing: run scripts/build.sh first"
        with open(self.log, "ab") as log:
            log.write(f"\n--- {time.strftime('%H:%M:%S')} starting server on {self.url}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [str(self.binary), "server", "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(self.data_dir)]
                + self.extra_args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        (RUN / "server.pid").write_text(f"{self.proc.pid}\n")
        (RUN / "server.url").write_text(f"{self.url}\n")
        deadline = time.monotonic() + ready_within
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.url}/health", timeout=2).ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server not healthy within {ready_within} s:\n{self.log_tail()}")

    def kill9(self) -> None:
        """SIGKILL, as a crash would; sandboxes (separate processes) keep running."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def restart(self) -> None:
        """kill -9, then start again on the same port and data dir."""
        self.kill9()
        self.start()

    def stop(self) -> None:
        """SIGTERM (a graceful stop: the warm pool goes, sandboxes stay), then SIGKILL."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)

    def rss_kib(self) -> int:
        """The server's resident set size (VmRSS), KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS line")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def admin_key(self) -> str:
        key = sweep.admin_key(self.data_dir / "admin.env")
        assert key, f"{self.data_dir}/admin.env has no PANDASTACK_API_KEY"
        return key

    def create_workspace(self, name: str) -> str:
        """A new workspace through `pandastack admin workspace-create`; returns its key."""
        out = subprocess.run(
            [str(self.binary), "admin", "workspace-create", "--name", name, "--data-dir", str(self.data_dir)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        for line in out.splitlines():
            if line.startswith("export PANDASTACK_API_KEY="):
                key = line.split("=", 1)[1].strip()
                with open(RUN / "keys", "a") as f:
                    f.write(key + "\n")
                return key
        raise AssertionError(f"workspace-create printed no key: {out!r}")


def delete_all(url: str, key: str) -> None:
    """Deletes every sandbox the key can see, in parallel (a delete takes seconds)."""
    from pandastack import Client, NotFoundError

    client = Client(api_url=url, api_key=key, max_create_retry_seconds=0)

    def delete(sandbox_id: str) -> None:
        try:
            client.sandboxes.delete(sandbox_id)
        except NotFoundError:
            pass  # a fork child goes with its parent

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(delete, [sb.id for sb in client.sandboxes.list()]))


@pytest.fixture(scope="session")
def server():
    RUN.mkdir(parents=True, exist_ok=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    srv = Server(BIN, DATA, int(os.environ.get("PANDASTACK_TEST_PORT") or _free_port()), LOGS / "server-pytest.log")
    srv.start()
    os.environ["PANDASTACK_API"] = srv.url
    os.environ["PANDASTACK_API_KEY"] = srv.admin_key()
    # Sandboxes a killed earlier run left in this data dir (failures are printed, not fatal:
    # the tests that follow check their own state).
    sweep.sweep(srv.url, [srv.admin_key()])
    yield srv
    try:
        sweep.sweep(srv.url, [srv.admin_key()] + _recorded_keys())
    finally:
        srv.stop()


def _recorded_keys() -> list[str]:
    try:
        return [k.strip() for k in (RUN / "keys").read_text().splitlines() if k.strip()]
    except OSError:
        return []


@pytest.fixture(scope="session")
def workspace_b_key(server) -> str:
    """The admin key of a second workspace (for isolation tests)."""
    return server.create_workspace(f"e2e-b-{os.getpid()}-{int(time.time())}")


@pytest.fixture
def client_b(server, workspace_b_key):
    """A Python SDK client authenticated as workspace B."""
    from pandastack import Client

    return Client(api_url=server.url, api_key=workspace_b_key)


@pytest.fixture(autouse=True)
def _clean_sandboxes(request, server):
    """After each test: delete every sandbox of workspace A (and B, if the test used it)."""
    yield
    if server.proc is None or server.proc.poll() is not None:
        server.start()
    keys = [server.admin_key()]
    if "workspace_b_key" in request.fixturenames:
        keys.append(request.getfixturevalue("workspace_b_key"))
    for key in keys:
        delete_all(server.url, key)


@pytest.fixture
def api(server):
    """Raw HTTP for what the SDK has no call for (malformed bodies, status codes)."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {server.admin_key()}"

    def call(method: str, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", 60)
        return session.request(method, server.url + path, **kw)

    return call
