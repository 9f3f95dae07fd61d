"""Issue 23 finding 7: databases have a per-workspace count quota (429), a per-workspace share of
the host's database port pool (429), and their memory is admitted against the host together with
the sandboxes' (503 with Retry-After; a connection that would wake a database that does not fit
is refused with SQLSTATE 57P03).

Each test restarts one server of this file (its own data dir, a copy of the baked `base`
template, no warm pool) with the limits it needs. The flags added for this finding are given as
environment variables (`PANDASTACK_WORKSPACE_MAX_DATABASES`, ...), so the same tests run against
the build before it, where they fail on what the server answers rather than on an unknown flag.

Database traffic goes to 127.0.0.1 (and from sandboxes to 10.0.2.2, an address of this host):
nothing leaves the machine.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest
import requests

from helpers import assert_json_error
from lifecycle_fixtures import SecondServer, _copy_current_template, scrub_data_dir, wait_until
from test_databases import host_psql


class DbLimitsServer:
    """A server of this file, restarted with the limits a test needs."""

    def __init__(self, main) -> None:
        self.data_dir = main.data_dir.parent / f"db-limits-server-{os.getpid()}"
        scrub_data_dir(self.data_dir)
        (self.data_dir / "templates").mkdir(parents=True)
        _copy_current_template(main.data_dir / "templates", self.data_dir / "templates", "base")
        self.srv = SecondServer(main.binary, self.data_dir, main.log.parent / "server-db-limits.log", [])
        self.keys: list[str] = []

    def restart(self, env: dict[str, str], *flags: str) -> None:
        """Restarts the server with `flags` and `env` (set for the new process only)."""
        self.srv.stop()
        self.srv.extra_args = ["--pool-size", "0", "--restore-targets", "0", "--netns-stock", "0",
                               "--database-fsync", "off", *flags]
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            self.srv.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.keys = [self.srv.admin_key()]

    @property
    def url(self) -> str:
        return self.srv.url

    def session(self, key: str | None = None) -> requests.Session:
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {key or self.srv.admin_key()}"
        return s

    def new_workspace(self, name: str) -> str:
        """A second workspace on this server; returns its key."""
        out = subprocess.run(
            [str(self.srv.binary), "admin", "workspace-create", "--name", f"{name}-{int(time.time() * 1000)}",
             "--data-dir", str(self.data_dir)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=True,
        ).stdout
        key = next(l.split("=", 1)[1].strip() for l in out.splitlines() if l.startswith("export PANDASTACK_API_KEY="))
        self.keys.append(key)
        return key

    def clean(self) -> None:
        """Deletes every database and sandbox of the workspaces used since the last restart."""
        import sweep

        if self.srv.proc is not None and self.srv.proc.poll() is None:
            sweep.sweep(self.url, self.keys)


@pytest.fixture(scope="module")
def dbl(server):
    srv = DbLimitsServer(server)
    try:
        yield srv
    finally:
        srv.srv.teardown()


@pytest.fixture
def limits(dbl):
    yield dbl
    dbl.clean()


def create(s: requests.Session, url: str, **body) -> requests.Response:
    return s.post(f"{url}/v1/databases", json=body, timeout=120)


def wait_status(s: requests.Session, url: str, db_id: str, status: str, within: float = 120) -> dict:
    def seen():
        d = s.get(f"{url}/v1/databases/{db_id}", timeout=30).json()
        assert d["status"] != "failed", d
        return d if d["status"] == status else None

    return wait_until(seen, timeout=within, interval=0.3, what=f"database {db_id} to be {status}")


def assert_busy(r: requests.Response, *words: str) -> None:
    """A 503 with `Retry-After: 10` whose error names each of `words`."""
    assert r.status_code == 503, f"HTTP {r.status_code}: {r.text[:300]}"
    assert r.headers.get("Retry-After") == "10", r.headers
    for w in words:
        assert w in r.json()["error"], f"{r.json()['error']!r} does not name {w!r}"


def free_port_run(n: int) -> int:
    """The first of `n` consecutive ports free on 127.0.0.1, below the ephemeral range and away
    from the default database ports (15432-16431) other servers on this machine use."""
    start = 27000 + (os.getpid() % 200) * 10
    for first in range(start, 32000, n):
        socks = []
        try:
            for p in range(first, first + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return first
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no run of free ports")


def startup_refusal(port: int) -> dict[str, str]:
    """Sends a PostgreSQL startup message to `port` on 127.0.0.1 and returns the fields of the
    ErrorResponse it gets (`C`: SQLSTATE, `M`: message); no password is needed to be refused."""
    body = struct.pack("!I", 3 << 16) + b"user\0nobody\0database\0nothing\0\0"
    with socket.create_connection(("127.0.0.1", port), timeout=60) as c:
        c.sendall(struct.pack("!I", len(body) + 4) + body)
        reply = b""
        while chunk := c.recv(4096):
            reply += chunk
    assert reply[:1] == b"E", f"not an ErrorResponse: {reply[:80]!r}"
    fields = {}
    for f in reply[5:].split(b"\0"):
        if f:
            fields[chr(f[0])] = f[1:].decode(errors="replace")
    return fields


def test_a_workspace_past_its_database_quota_gets_429(limits):
    # Two databases per workspace; databases' memory limits may add up to 3 GiB on this host.
    limits.restart({"PANDASTACK_WORKSPACE_MAX_DATABASES": "2", "PANDASTACK_DATABASE_MEMORY_GB": "3"})
    a = limits.session()
    for label in ("one", "two"):
        r = create(a, limits.url, label=label)
        assert r.status_code == 202, r.text
    r = create(a, limits.url, label="three")
    assert_json_error(r, "workspace quota", "at most 2 databases", status=429)
    assert "Retry-After" not in r.headers, r.headers
    labels = sorted(d["label"] for d in a.get(f"{limits.url}/v1/databases", timeout=30).json()["items"])
    assert labels == ["one", "two"], labels
    # The quota is the workspace's: another one still creates, as long as the databases' 3 GiB
    # hold it (2 GiB are taken: a 4g database does not fit, whatever the sandboxes use).
    b = limits.session(limits.new_workspace("db-quota-b"))
    assert_busy(create(b, limits.url, label="big", size="4g"), "host at capacity", "4096 MiB", "2048 of 3072 MiB")
    r = create(b, limits.url, label="b-one")
    assert r.status_code == 202, r.text


def test_one_workspace_cannot_take_the_database_port_pool(limits):
    first = free_port_run(4)
    limits.restart({"PANDASTACK_WORKSPACE_DATABASE_PORTS_PERCENT": "25"},
                   "--database-ports", f"{first}-{first + 3}")
    a = limits.session()
    r = create(a, limits.url, label="a-one")
    assert r.status_code == 202, r.text
    # 25 % of a 4-port pool is one port: a's second database would hold a second.
    r = create(a, limits.url, label="a-two")
    assert_json_error(r, "workspace quota", "database ports", "25%", status=429)
    assert "Retry-After" not in r.headers, r.headers
    b = limits.session(limits.new_workspace("db-ports-b"))
    r = create(b, limits.url, label="b-one")
    assert r.status_code == 202, r.text
    port = wait_status(b, limits.url, r.json()["id"], "running")["port"]
    assert first <= port <= first + 3, port


def test_database_memory_is_admitted_with_sandboxes(limits):
    # A memory budget of 1280 MiB: one 1g database (1024 MiB) or one 512 MiB `base` sandbox
    # fits, not both.
    total_mib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]) // 1024
    limits.restart({}, "--memory-overcommit", f"{1280 / total_mib:.8f}", "--database-idle-stop-seconds", "2")
    s = limits.session()
    r = create(s, limits.url, label="resident", always_on=True)
    assert r.status_code == 202, r.text
    db = wait_status(s, limits.url, r.json()["id"], "running")
    url = db["connection_url"]
    assert host_psql(url, "CREATE TABLE t (n int); INSERT INTO t VALUES (1)").returncode == 0

    # A second database does not fit, nor does a sandbox next to the running database.
    assert_busy(create(s, limits.url, label="second"), "host at capacity", "1024 MiB")
    r = s.post(f"{limits.url}/v1/sandboxes", json={"template": "base"}, timeout=120)
    assert r.status_code == 503 and r.headers.get("Retry-After"), (r.status_code, r.text)
    assert "host at capacity" in r.json()["error"], r.text

    # Stopped, the database holds no memory: the sandbox fits, and then the database does not.
    assert s.patch(f"{limits.url}/v1/databases/{db['id']}", json={"always_on": False}, timeout=60).ok
    wait_status(s, limits.url, db["id"], "stopped", within=60)
    r = s.post(f"{limits.url}/v1/sandboxes", json={"template": "base"}, timeout=120)
    assert r.status_code == 201, r.text
    sandbox_id = r.json()["id"]
    refusal = startup_refusal(db["port"])
    assert refusal["C"] == "57P03" and "host at capacity" in refusal["M"], refusal
    assert_busy(s.post(f"{limits.url}/v1/databases/{db['id']}/wake", timeout=60), "host at capacity", db["id"])
    assert s.get(f"{limits.url}/v1/databases/{db['id']}", timeout=30).json()["status"] == "stopped"

    # Once the sandbox is gone the next connection wakes it, data intact.
    assert s.delete(f"{limits.url}/v1/sandboxes/{sandbox_id}", timeout=120).status_code == 204
    r = host_psql(url, "SELECT count(*) FROM t")
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
