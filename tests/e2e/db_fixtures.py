"""Helpers of the database tests (test_databases.py): host-side inspection of what a
database leaves on the host (processes, mounts, loop devices, directories, listening ports) and
a fixture that deletes every database a test made.

Database traffic goes to 127.0.0.1 and, from sandboxes, to 10.0.2.2 (every sandbox's gateway,
an address of this host): nothing leaves the machine.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


def cluster_processes(database_id: str) -> list[str]:
    """Command lines of the processes of a database's cluster (postmaster and backends: the
    postmaster's names the data dir under the database id, the others carry it as their
    cluster name)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if database_id in cmd and ("postgres" in cmd):
            out.append(cmd)
    return out


def mounts_of(database_id: str) -> list[str]:
    return [l for l in Path("/proc/self/mountinfo").read_text().splitlines() if database_id in l]


def loop_devices_of(database_id: str) -> list[str]:
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True, timeout=30, check=True).stdout
    return [l for l in out.splitlines() if database_id in l]


def listening(port: int) -> bool:
    """True when something listens on TCP `port` on any address of this host."""
    out = subprocess.run(["ss", "-Htln", f"sport = :{port}"], capture_output=True, text=True, timeout=30, check=True)
    return bool(out.stdout.strip())


def leftovers(data_dir: Path, db: dict) -> dict[str, object]:
    """Everything of database `db` (a GET reply) still on the host; empty when it is gone."""
    found: dict[str, object] = {}
    if cluster_processes(db["id"]):
        found["processes"] = cluster_processes(db["id"])
    if mounts_of(db["id"]):
        found["mounts"] = mounts_of(db["id"])
    if loop_devices_of(db["id"]):
        found["loop devices"] = loop_devices_of(db["id"])
    if (data_dir / "databases" / db["id"]).exists():
        found["directory"] = str(data_dir / "databases" / db["id"])
    if db.get("port") and listening(int(db["port"])):
        found["port"] = db["port"]
    return found


def delete_databases(url: str, key: str) -> None:
    """Deletes every database the key can see."""
    from pandastack import Client, NotFoundError

    client = Client(api_url=url, api_key=key)
    for db in client.databases.list():
        try:
            client.databases.delete(db["id"])
        except NotFoundError:
            pass


@pytest.fixture
def databases_deleted(server):
    """After the test: every database of the session's workspace is deleted."""
    yield
    if server.proc is None or server.proc.poll() is not None:
        server.start()
    delete_databases(server.url, server.admin_key())


def psql(sb, url: str, sql: str, timeout_s: int = 60):
    """Runs `sql` with psql inside sandbox `sb` (the base template has the client); errors
    carry their SQLSTATE (`ERROR:  42501: ...`)."""
    return sb.exec(
        f"psql '{url}' -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -At -c \"{sql}\"", timeout_seconds=timeout_s
    )
