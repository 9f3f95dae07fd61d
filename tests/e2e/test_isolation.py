"""Isolation: sandboxes cannot see each other's files or processes, and a key of another
workspace gets 404 for everything about a sandbox that is not its own."""

from __future__ import annotations

import uuid

import pytest

from helpers import PS


def test_sandboxes_cannot_see_each_others_files_or_processes():
    from pandastack import NotFoundError, Sandbox

    a = Sandbox.create(template="base")
    b = Sandbox.create(template="base")
    marker = uuid.uuid4().hex
    a.filesystem.write(f"/workspace/secret-{marker}", b"from a")
    assert a.exec(f"echo {marker} > /tmp/tmp-{marker} && echo {marker} >> /etc/motd").exit_code == 0
    sleeper = f"sleep {4_000_000 + int(marker[:5], 16)}"
    started = a.exec(f"nohup setsid {sleeper} >/dev/null 2>&1 & echo ok")
    assert started.stdout == "ok\n", started

    # Positive controls: A sees its own file and process.
    assert a.filesystem.read(f"/workspace/secret-{marker}") == b"from a"
    assert sleeper in a.exec(PS).stdout

    # B sees neither, by path or by search.
    with pytest.raises(NotFoundError):
        b.filesystem.read(f"/workspace/secret-{marker}")
    assert not b.filesystem.exists(f"/tmp/tmp-{marker}")
    found = b.exec(f"grep -rl {marker} /workspace /tmp /etc /root /home 2>/dev/null; true")
    assert found.stdout == "", found.stdout
    assert sleeper not in b.exec(PS).stdout
    # "[4]" keeps the hunting shell's own command line from matching.
    pattern = sleeper.replace("sleep 4", "sleep [4]")
    hunt = f"for p in /proc/[0-9]*; do grep -qa '{pattern}' $p/cmdline 2>/dev/null && kill -9 ${{p#/proc/}}; done; true"
    assert b.exec(hunt).exit_code == 0
    assert sleeper in a.exec(PS).stdout, "B's kill reached A's process"


def test_other_workspace_gets_404_on_everything(client_b):
    from pandastack import NotFoundError, Sandbox

    a = Sandbox.create(template="base")
    a.filesystem.write("/workspace/mine.txt", b"workspace A")
    ctx_id = "ctx-" + uuid.uuid4().hex  # only the sandbox id matters for the 404

    # The same sandbox object, but speaking with workspace B's key.
    as_b = Sandbox(id=a.id, template=a.template, cpu=a.cpu, memory_mb=a.memory_mb, status=a.status, _client=client_b)
    calls = {
        "get": lambda: client_b.sandboxes.get(a.id),
        "exec": lambda: as_b.exec("echo hi"),
        "exec_stream": lambda: as_b.exec_stream("echo hi"),
        "fs read": lambda: as_b.filesystem.read("/workspace/mine.txt"),
        "fs write": lambda: as_b.filesystem.write("/workspace/evil.txt", b"x"),
        "fs listdir": lambda: as_b.filesystem.listdir("/workspace"),
        "fs stat": lambda: as_b.filesystem.stat("/workspace/mine.txt"),
        "code context": lambda: as_b.create_code_context(),
        "lifecycle": lambda: as_b.lifecycle(),
        "set_ttl": lambda: as_b.set_ttl(5),
        "delete": lambda: client_b.sandboxes.delete(a.id),
    }
    for name, call in calls.items():
        with pytest.raises(NotFoundError):
            call()
            pytest.fail(f"{name} with workspace B's key did not raise")
    from pandastack import CodeContext

    with pytest.raises(NotFoundError):
        CodeContext(as_b, ctx_id).run_code("1")
    assert a.id not in [s.id for s in client_b.sandboxes.list()]

    # A is untouched: still there, TTL unchanged, no file written by B.
    assert Sandbox.get(a.id).status == "running"
    assert a.lifecycle()["ttl_seconds"] != 5
    assert a.filesystem.read("/workspace/mine.txt") == b"workspace A"
    assert not a.filesystem.exists("/workspace/evil.txt")
