"""What a sandbox (or a database's tenant) can make the host write is bounded (issue 23
finding 3).

PID 1's stderr inside a sandbox is runsc's stderr on the host: it went straight into the
instance's `shim.log`, so `head -c 20000000 /dev/zero | tr '\\0' X > /proc/1/fd/2` put 20 MB on
the host's disk in under a second. Now the shim drains it under a rate limit (1 MiB burst, then
64 KiB/s) into a log rotated at 4 MiB with one `.1`: at most 8 MiB per sandbox, and the writer
inside is never blocked by it.

A database's `postgres.log` was in the host's data dir and grew with every `RAISE WARNING` a
tenant sent; now it lives on the database's own storage and is emptied past 16 MiB.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from db_fixtures import databases_deleted  # noqa: F401
from lifecycle_fixtures import instance_id, wait_until

MIB = 1024 * 1024
# What the shim's log of one sandbox may take on the host: 4 MiB and one rotated 4 MiB file.
MAX_LOG_BYTES = 8 * MIB
FLOOD_BYTES = 20_000_000


@pytest.fixture
def sb():
    from pandastack import Sandbox

    s = Sandbox.create(template="base")
    yield s
    s.kill()


def _logs(server, sandbox_id: str) -> dict[str, int]:
    """The shim's log files of the sandbox's instance and their sizes, bytes."""
    d = Path(server.data_dir) / "instances" / instance_id(server.data_dir, sandbox_id)
    return {p.name: p.stat().st_size for p in d.glob("shim.log*") if p.is_file()}


def _flood(sb, fd: int) -> int:
    """Writes FLOOD_BYTES of `X` to PID 1's `fd` from inside the sandbox; the shell's status."""
    cmd = f"head -c {FLOOD_BYTES} /dev/zero | tr '\\0' X > /proc/1/fd/{fd}"
    return sb.exec(cmd, timeout_seconds=120).exit_code


def test_pid1_output_flood_leaves_at_most_8_mib_on_the_host_and_the_sandbox_answers(server, sb):
    assert sb.exec("echo up").stdout == "up\n"
    before = sum(_logs(server, sb.id).values())

    started = time.monotonic()
    # The writer is not held up by the limit: all 20 MB are taken (and mostly dropped).
    assert _flood(sb, 2) == 0, "writing to PID 1's stderr failed"
    took = time.monotonic() - started
    logs = _logs(server, sb.id)
    assert sum(logs.values()) <= MAX_LOG_BYTES, (
        f"a {FLOOD_BYTES}-byte write to PID 1's stderr left {logs} on the host (was {before} bytes)"
    )
    # The shim says what it dropped (a note follows the end of a flood within a second or so).
    main = Path(server.data_dir) / "instances" / instance_id(server.data_dir, sb.id) / "shim.log"
    wait_until(lambda: b"bytes of output" in main.read_bytes()[-64 * 1024:], 30,
               what="the shim's note of what it dropped")

    # PID 1's stdout is the guest channel (a socket): writing there may fail to open, but
    # whatever it does, nothing of it may land on the host's disk beyond the same bound and
    # the sandbox must still answer.
    stdout_status = _flood(sb, 1)
    logs = _logs(server, sb.id)
    assert sum(logs.values()) <= MAX_LOG_BYTES, f"after the stdout flood: {logs}"

    # A second flood right after the first: the rotation keeps the bound.
    assert _flood(sb, 2) == 0
    logs = _logs(server, sb.id)
    assert sum(logs.values()) <= MAX_LOG_BYTES, f"after two floods: {logs}"

    assert sb.exec("echo still here").stdout == "still here\n"
    print(f"first flood took {took:.1f} s; the stdout flood exited {stdout_status}; logs {logs}")


def test_what_a_tenant_makes_postgres_log_stays_off_the_host_disk(server, databases_deleted):
    from pandastack import Client

    db = Client().databases.create(label="chatty")
    url = db["connection_url"]
    # 2000 warnings of 10 kB: ~20 MB that PostgreSQL writes to its log (log_min_messages is
    # `warning`); the client is spared them.
    flood = (
        "SET client_min_messages = error; "
        "DO $$ BEGIN FOR i IN 1..2000 LOOP RAISE WARNING '%', repeat('x', 10000); END LOOP; END $$"
    )
    r = subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-At", "-c", flood],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    home = Path(server.data_dir) / "databases" / db["id"]
    on_host = home / "postgres.log"
    size = on_host.stat().st_size if on_host.exists() else 0
    assert size < MIB, f"the tenant's warnings put {size} bytes into {on_host} on the host's disk"
    # On the database's storage, and emptied past 16 MiB by the sweep (every second).
    on_storage = home / "mnt" / "postgres.log"
    wait_until(lambda: on_storage.exists() and on_storage.stat().st_size <= 16 * MIB, 30,
               what=f"{on_storage} to be at most 16 MiB")
    r = subprocess.run(["psql", url, "-At", "-c", "SELECT 1"], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "1", r.stderr
