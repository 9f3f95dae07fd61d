"""Lifecycle through the Python SDK: pause/resume, hibernate/wake, snapshots and restore,
fork and fork-tree (the Python snippets of sections 2 and 3 of seed 000), logs and metrics.
State must survive each transition: kernel variables, files, running processes."""

from __future__ import annotations

import time

import pytest
import requests

from helpers import PS, steady_host

_db: dict[str, str] = {}


def save_to_db(conversation_id: str, snap_id: str) -> None:
    """The seed's stand-in for the caller's own storage."""
    _db[conversation_id] = snap_id


def load_from_db(conversation_id: str) -> str | None:
    return _db.get(conversation_id)


@pytest.fixture
def warm():
    """A code-interpreter sandbox whose kernel holds df and total (seed 000 §1)."""
    from pandastack import Sandbox

    sandbox = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
    ctx = sandbox.create_code_context()
    ctx.run_code("import pandas as pd; df = pd.DataFrame({'a': [1, 2, 3]})")
    assert ctx.run_code("total = int(df['a'].sum()); total").text == "6"
    sandbox.filesystem.write("/workspace/state.txt", b"on disk")
    return sandbox, ctx


def test_pause_and_resume_keep_everything(warm):
    from pandastack import Sandbox

    sandbox, ctx = warm
    sandbox.pause()
    assert Sandbox.get(sandbox.id).status == "paused"
    sandbox.resume()
    assert Sandbox.get(sandbox.id).status == "running"
    assert ctx.run_code("total").text == "6"
    assert sandbox.filesystem.read("/workspace/state.txt") == b"on disk"
    assert sandbox.exec("echo up").stdout == "up\n"


def test_hibernate_then_any_request_wakes(warm):
    from pandastack import Sandbox

    sandbox, ctx = warm
    sandbox.hibernate()
    assert Sandbox.get(sandbox.id).status == "hibernated"
    assert sandbox.exec("cat /workspace/state.txt").stdout == "on disk"
    assert Sandbox.get(sandbox.id).status == "running"
    assert ctx.run_code("total + 1").text == "7"

    sandbox.hibernate()
    sandbox.wake()
    assert Sandbox.get(sandbox.id).status == "running"
    assert ctx.run_code("total").text == "6"


def test_seed_000_snapshot_and_resume(warm):
    from pandastack import Sandbox

    sandbox, _ = warm
    conversation_id = "conv-1"

    # --- End of a session, or right before a planned shutdown ---
    snap_id = sandbox.snapshot()   # str: capture vm.mem + vm.state + rootfs to storage
    save_to_db(conversation_id, snap_id)   # persist the id wherever you keep session state
    sandbox.kill()                 # free the VM; the snapshot outlives it
    assert isinstance(snap_id, str) and snap_id  # check:

    # --- New process / next turn: resume the exact memory + disk state ---
    snap_id = load_from_db(conversation_id)
    sandbox = Sandbox.create(from_snapshot=snap_id)  # template/cpu/mem inherited from snapshot

    # The restored VM has a NEW id, so the old CodeContext handle is NOT portable.
    # Re-open a context on the restored sandbox — the KERNEL state behind it survived.
    ctx = sandbox.create_code_context()
    print(ctx.run_code("print(total)").text)  # -> "6": in-kernel state came back
    assert ctx.run_code("print(total)").text == "6"  # check:
    assert sandbox.template == "code-interpreter"  # check:
    assert sandbox.filesystem.read("/workspace/state.txt") == b"on disk"  # check:


def test_seed_000_fork_tree_and_fork(warm):
    warm_sb, ctx = warm
    ctx.run_code("import numpy as np")

    # Branch the warmed state into N independent rollouts. Each child has its own id,
    # its own kernel memory, and starts from the parent's exact state. The parent is untouched.
    branches = warm_sb.fork_tree(3, metadata={"search": "tree-of-thought"})
    assert len(branches) == 3 and len({b.id for b in branches} | {warm_sb.id}) == 4  # check:

    for i, sb in enumerate(branches):
        bctx = sb.create_code_context()  # new context handle per child (new sandbox id)
        # Each branch explores a different hypothesis against the SAME loaded df —
        # no re-download, no re-parse. Pages are shared CoW until a branch writes.
        out = bctx.run_code(f"df.sample(frac=0.5, random_state={i})['a'].mean()")
        print(i, out.text)
        assert out.error is None and float(out.text) in {1.0, 1.5, 2.0, 2.5, 3.0}, out  # check:
        assert bctx.run_code(f"total = {100 + i}; total").text == str(100 + i)  # check: diverge

    assert ctx.run_code("total").text == "6"  # check: the parent is untouched
    for i, sb in enumerate(branches):  # check: siblings did not see each other's writes
        assert sb.exec("cat /workspace/state.txt").stdout == "on disk"

    # Score the rollouts, keep the winner, kill the rest.
    for sb in branches:
        sb.kill()

    branch = warm_sb.fork(metadata={"branch": "experiment"})
    assert branch.id != warm_sb.id  # check:
    assert branch.metadata.get("branch") == "experiment", branch.metadata  # check:
    assert branch.create_code_context().run_code("total").text == "6"  # check:


def test_fork_keeps_running_processes_and_diverges_files(warm):
    sandbox, _ = warm
    sandbox.exec("nohup setsid sleep 4123456 >/dev/null 2>&1 &")
    child = sandbox.fork()
    assert "sleep 4123456" in child.exec(PS).stdout
    child.filesystem.write("/workspace/state.txt", b"child")
    assert sandbox.filesystem.read("/workspace/state.txt") == b"on disk"
    assert child.filesystem.read("/workspace/state.txt") == b"child"


def test_deleting_a_fork_parent_leaves_no_containers(server, warm):
    from pandastack import NotFoundError, Sandbox

    sandbox, _ = warm
    _, stale_before = steady_host(server)
    kids = sandbox.fork_tree(2)
    sandbox.kill()
    for kid in kids:
        try:
            kid.kill()
        except NotFoundError:
            pass  # went with its parent
    listed = {s.id for s in Sandbox.list()}
    assert not listed & ({sandbox.id} | {k.id for k in kids}), listed
    # Every container left must belong to a listed sandbox or the warm pool.
    _, stale_after = steady_host(server)
    assert stale_after <= stale_before, f"instance dirs left without a container: {stale_after - stale_before}"


def test_logs_hold_what_commands_printed(warm):
    sandbox, ctx = warm
    sandbox.exec("echo logged-out; echo logged-err >&2")
    lines = list(sandbox.logs())
    assert "logged-out" in lines and "logged-err" in lines, lines
    assert "logged-err" not in list(sandbox.logs(stream="stdout"))


def test_prometheus_metrics_parse(server, warm):
    from prometheus_client.parser import text_string_to_metric_families

    sandbox, _ = warm
    sandbox.exec("true")
    start = time.monotonic()
    auth = {"Authorization": f"Bearer {server.admin_key()}"}
    text = requests.get(f"{server.url}/metrics", headers=auth, timeout=10).text
    assert time.monotonic() - start < 5
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families, text[:500]
    samples = [s for f in families.values() for s in f.samples]
    assert any("exec" in str(s.labels) for s in samples), sorted(families)
