"""Issue 3 (sandbox lifecycle) through the published Python SDK: seed 000 sections 2, 3 and "a
durable loop" (000_c44f664048d9d288.txt), with `kill -9` of the server between snapshot and
restore and a real 20 MB CSV in the warm sandbox; seed 003's Python calls
(003_9a81e070ecbef351.txt); and what the seeds promise about each state, checked on the host
(processes, CPU ticks, RAM) and over the API (status, 404, 409).

Seed snippet lines are verbatim and in order; `# check:` lines are the assertions, `# setup:`
lines provide what a seed assumes exists. The idle-hibernation and re-bake tests run on a
second server of this session (`second_server` in lifecycle_fixtures.py).
"""

from __future__ import annotations

import json
import random
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import runsc_containers
from lifecycle_fixtures import (  # noqa: F401  (fixtures are used by name)
    IDLE_SECONDS,
    instance_id,
    new_snapshots_deleted,
    processes_matching,
    raw_session,
    rss_kib,
    sandbox_process_tree,
    second_server,
    wait_until,
)

# A loop that keeps running in the background of a sandbox: a counter in /tmp/count
# (replaced by rename, so a reader never sees it half written).
COUNTER_LOOP = (
    "nohup sh -c 'echo $$ > /tmp/loop.pid; i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done'"
    " >/dev/null 2>&1 &"
)


def _gone(sandbox_id: str) -> bool:
    from pandastack import NotFoundError, Sandbox

    try:
        Sandbox.get(sandbox_id)
    except NotFoundError:
        return True
    return False


def _status(sandbox_id: str) -> str:
    from pandastack import Sandbox

    return Sandbox.get(sandbox_id).status


def _events(server, sandbox_id: str) -> list[dict]:
    r = raw_session(server.admin_key()).get(f"{server.url}/v1/sandboxes/{sandbox_id}/events", timeout=30)
    assert r.status_code == 200, r.text[:300]
    return r.json()


def kill_children_first(children, parent) -> None:
    """Kills fork children, then their parent (a parent's kill takes its unpromoted children
    along, so killing them afterwards, as a parallel sweep might, would be a 404)."""
    for sb in list(children) + [parent]:
        sb.kill()


def _big_csv(path: Path, rows: int = 700_000) -> tuple[int, int]:
    """Writes a CSV of >= 20 MB (columns a, b, c, s); returns (rows, sum of column a)."""
    rnd = random.Random(7)
    total = 0
    with open(path, "w") as f:
        f.write("a,b,c,s\n")
        for i in range(rows):
            a = rnd.randrange(1000)
            total += a
            f.write(f"{a},{i * 0.5},{rnd.random():.6f},row-{i:07d}\n")
    assert path.stat().st_size >= 20 * 1024 * 1024, path.stat().st_size
    return rows, total


# --- seed 000 §2: snapshot and resume across a restart -----------------------------------


def test_seed000_snapshot_then_kill_9_of_the_server_then_restore(server, new_snapshots_deleted):
    from pandastack import Client, NotFoundError, Sandbox

    db: dict[str, str] = {}  # setup: "wherever you keep session state"
    conversation_id = f"conv-{uuid.uuid4().hex[:8]}"  # setup:

    def save_to_db(cid: str, snap: str) -> None:  # setup:
        db[cid] = snap

    def load_from_db(cid: str) -> str | None:  # setup:
        return db.get(cid)

    # setup: section 1, the state section 2 captures
    sandbox = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
    ctx = sandbox.create_code_context()
    ctx.run_code("import pandas as pd; df = pd.DataFrame({'a': [1, 2, 3]})")
    ex = ctx.run_code("total = int(df['a'].sum()); total")
    assert ex.text == "6", ex  # check:

    # --- End of a session, or right before a planned shutdown ---
    snap_id = sandbox.snapshot()   # str: capture vm.mem + vm.state + rootfs to storage
    save_to_db(conversation_id, snap_id)   # persist the id wherever you keep session state
    sandbox.kill()                 # free the VM; the snapshot outlives it

    assert isinstance(snap_id, str) and snap_id.startswith("snap-"), snap_id  # check:
    old_id = sandbox.id  # check:
    assert _gone(old_id)  # check: killed
    assert snap_id in {s["id"] for s in Client().snapshots.list()}  # check: outlives the VM

    server.restart()  # setup: the orchestrator restarts, and so does the server (kill -9)

    # --- New process / next turn: resume the exact memory + disk state ---
    snap_id = load_from_db(conversation_id)
    sandbox = Sandbox.create(from_snapshot=snap_id)  # template/cpu/mem inherited from snapshot

    # The restored VM has a NEW id, so the old CodeContext handle is NOT portable.
    # Re-open a context on the restored sandbox — the KERNEL state behind it survived.
    ctx = sandbox.create_code_context()
    out = ctx.run_code("print(total)")  # check: (the seed prints .text of this call)
    print(out.text)  # -> "6": in-kernel state came back
    assert out.error is None, out.error  # check:
    assert out.text == "6", out  # check:

    assert sandbox.id != old_id  # check: a new id
    assert sandbox.template == "code-interpreter", sandbox.template  # check:
    again = Sandbox.get(sandbox.id)  # check:
    assert again.status == "running" and again.from_snapshot == snap_id, again
    assert ctx.run_code("df['a'].tolist()").text == "[1, 2, 3]"  # check: the DataFrame too
    with pytest.raises(NotFoundError):  # check: the old handle stays dead after the restart
        Sandbox.get(old_id)
    sandbox.kill()


# --- seed 000 §3: fork_tree of a warm sandbox holding a 20 MB DataFrame --------------------


def test_seed000_fork_tree_branches_a_warm_dataframe_loaded_from_a_20mb_csv(tmp_path):
    from pandastack import Sandbox

    local_csv = tmp_path / "big.csv"  # setup: a real CSV of >= 20 MB
    rows, sum_a = _big_csv(local_csv)

    # warm: a sandbox whose kernel already loaded the dataset and ran setup
    warm = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
    warm.filesystem.upload(local_csv, "/data/big.csv")  # setup: the dataset the seed reads
    ctx = warm.create_code_context()
    ctx.run_code("import pandas as pd; df = pd.read_csv('/data/big.csv')")  # the expensive part

    loaded = ctx.run_code("len(df), int(df['a'].sum())")  # check:
    assert loaded.error is None and loaded.text == f"({rows}, {sum_a})", loaded
    # setup: delete the file, so a child can only compute on the DataFrame it inherited
    assert warm.exec("rm /data/big.csv && test ! -e /data/big.csv").exit_code == 0

    # Branch the warmed state into N independent rollouts. Each child has its own id,
    # its own kernel memory, and starts from the parent's exact state. The parent is untouched.
    branches = warm.fork_tree(3, metadata={"search": "tree-of-thought"})

    assert len(branches) == 3, branches  # check:
    ids = {sb.id for sb in branches}
    assert len(ids) == 3 and warm.id not in ids, ids
    trees = {sb.metadata.get("fork_tree_id") for sb in branches}
    assert len(trees) == 1 and all(trees), [sb.metadata for sb in branches]
    for sb in branches:
        md = Sandbox.get(sb.id).metadata  # the server's own record, not the SDK's additions
        assert md.get("parent_id") == warm.id, md
        assert md.get("fork_tree_id") == next(iter(trees)), md
        assert md.get("search") == "tree-of-thought", md
    # check: what each child must answer, computed by the parent (the same df, same seed)
    expected = [ctx.run_code(f"df.sample(frac=0.5, random_state={i})['a'].mean()").text for i in range(3)]
    assert all(e and e != "nan" for e in expected), expected

    bctxs = []
    for i, sb in enumerate(branches):
        bctx = sb.create_code_context()  # new context handle per child (new sandbox id)
        # Each branch explores a different hypothesis against the SAME loaded df —
        # no re-download, no re-parse. Pages are shared CoW until a branch writes.
        out = bctx.run_code(f"df.sample(frac=0.5, random_state={i})['a'].mean()")
        print(i, out.text)
        assert out.error is None and out.text == expected[i], (i, out)  # check:
        bctxs.append(bctx)

    # check: no re-read was possible: the file is gone in every child, the df is whole
    for sb, bctx in zip(branches, bctxs):
        assert sb.exec("test -e /data/big.csv").exit_code == 1
        assert bctx.run_code("len(df), int(df['a'].sum())").text == f"({rows}, {sum_a})"

    # check: a change in one child is seen neither by its siblings nor by the parent
    changed = bctxs[0].run_code("df['a'] += 1; only_in_child_0 = 'yes'; int(df['a'].sum())")
    assert changed.error is None and changed.text == str(sum_a + rows), changed
    branches[0].filesystem.write("/workspace/only-in-child-0.txt", b"child 0 wrote this")
    probe = "int(df['a'].sum()), 'only_in_child_0' in globals()"
    for name, c, sb in [("child 1", bctxs[1], branches[1]), ("child 2", bctxs[2], branches[2]), ("parent", ctx, warm)]:
        assert c.run_code(probe).text == f"({sum_a}, False)", name
        assert not sb.filesystem.exists("/workspace/only-in-child-0.txt"), name
    assert bctxs[0].run_code(probe).text == f"({sum_a + rows}, True)"

    # Score the rollouts, keep the winner, kill the rest.
    for sb in branches:
        sb.kill()

    for sb in branches:  # check:
        assert _gone(sb.id), sb.id
    assert _status(warm.id) == "running"  # check: fork never disturbs the source sandbox
    assert ctx.run_code("len(df), int(df['a'].sum())").text == f"({rows}, {sum_a})"


def test_promote_cleans_up_siblings_and_an_unpromoted_child_dies_with_its_parent():
    """Seed 003 "Forking": promote a child to standalone (it keeps running after the parent is
    killed); `cleanup_siblings` deletes the other children of its tree; seed 000's single
    `fork()` gives a child that, unpromoted, dies with its parent."""
    from pandastack import BadRequestError, Sandbox

    parent = Sandbox.create(template="base")
    parent.exec("echo from-the-parent > /workspace/who")
    kids = parent.fork_tree(3, metadata={"search": "promote"})
    tree = kids[0].metadata["fork_tree_id"]

    with pytest.raises(BadRequestError):  # another tree's id is refused
        kids[0].promote(cleanup_siblings=True, tree_id="tree-00000000000000000000000000000000")
    assert all(not _gone(k.id) for k in kids)

    res = kids[0].promote(cleanup_siblings=True)
    assert res.get("winner") == kids[0].id, res
    assert res.get("tree_id") == tree, res
    assert set(res.get("deleted") or []) == {kids[1].id, kids[2].id}, res
    assert not res.get("failures"), res
    for k in kids[1:]:
        assert _gone(k.id), k.id

    branch = parent.fork(metadata={"branch": "experiment"})  # seed 000 §3's single fork
    md = Sandbox.get(branch.id).metadata
    assert md.get("parent_id") == parent.id and md.get("fork_tree_id"), md
    assert md.get("branch") == "experiment", md
    assert branch.exec("cat /workspace/who").stdout == "from-the-parent\n"

    parent.kill()
    wait_until(lambda: _gone(branch.id), 10, what=f"unpromoted child {branch.id} to die with its parent")
    promoted = Sandbox.get(kids[0].id)
    assert promoted.status == "running", promoted
    assert promoted.exec("cat /workspace/who").stdout == "from-the-parent\n"
    promoted.kill()


# --- seed 000 "Putting it together: a durable loop" ---------------------------------------


def test_seed000_durable_loop_with_kill_9_of_the_server_between_turns(server, new_snapshots_deleted):
    db: dict[str, str] = {}  # setup: the session store the loop reads and writes

    def load_from_db(conversation_id: str):  # setup:
        return db.get(conversation_id)

    def save_to_db(conversation_id: str, snap_id: str) -> None:  # setup:
        db[conversation_id] = snap_id

    made: list[str] = []  # check: every sandbox the loop made

    from pandastack import Sandbox

    def session(conversation_id: str, user_code: str) -> str:
        snap_id = load_from_db(conversation_id)            # None on first turn
        if snap_id:
            sandbox = Sandbox.create(from_snapshot=snap_id, ttl_seconds=3600)  # resume memory + disk
        else:
            sandbox = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
        made.append(sandbox.id)  # check:

        ctx = sandbox.create_code_context()                # re-open on the (possibly new) id
        ex = ctx.run_code(user_code)                       # the agent's tool call for this turn

        save_to_db(conversation_id, sandbox.snapshot())    # checkpoint for the next process
        sandbox.kill()                                     # snapshot outlives the VM
        return ex.error or ex.text

    conv = f"conv-{uuid.uuid4().hex[:8]}"
    assert session(conv, "import pandas as pd; df = pd.DataFrame({'a': [1, 2, 3]}); total = int(df['a'].sum()); total") == "6"
    first_snap = db[conv]
    server.restart()  # check: a new server process between turns (kill -9)
    assert session(conv, "total += 10; df['a'] = df['a'] * 2; total") == "16"
    assert db[conv] != first_snap
    server.restart()
    err = session(conv, "1 / 0")
    assert "ZeroDivisionError" in err, err  # the loop returns the error as the tool result
    assert session(conv, "total, df['a'].tolist()") == "(16, [2, 4, 6])"

    assert len(set(made)) == 4, made  # check: one sandbox per turn, each killed
    live = {s.id for s in Sandbox.list()}
    assert not live & set(made), live & set(made)


# --- seed 003's Python calls --------------------------------------------------------------


def test_seed003_python_calls_run_unchanged(new_snapshots_deleted):
    from pandastack import NotFoundError, Sandbox

    sandbox = Sandbox.create(
        template="code-interpreter",
        ttl_seconds=3600,
        metadata={"job": "demo"},
    )
    # check: "The returned object includes id, boot_ms, boot_mode, guest_ip, and any metadata"
    assert str(uuid.UUID(sandbox.id)) == sandbox.id, sandbox.id
    assert sandbox.metadata == {"job": "demo"}, sandbox.metadata
    assert sandbox.status == "running" and sandbox.template == "code-interpreter", sandbox
    assert sandbox.boot_mode in ("snapshot", "cold"), sandbox.boot_mode
    assert isinstance(sandbox.boot_ms, int) and sandbox.boot_ms >= 0, sandbox.boot_ms
    assert hasattr(sandbox, "guest_ip")
    ctx = sandbox.create_code_context()  # setup: state that every transition must keep
    assert ctx.run_code("counter = 41; counter").text == "41"

    sandbox.pause()
    # ...wait for user input...
    assert _status(sandbox.id) == "paused"  # check:
    sandbox.resume()
    assert _status(sandbox.id) == "running"  # check:
    assert ctx.run_code("counter += 1; counter").text == "42"  # check:

    sandbox.hibernate()
    # ...minutes or hours later...
    assert _status(sandbox.id) == "hibernated"  # check:
    sandbox.wake()
    assert _status(sandbox.id) == "running"  # check: the same id again
    assert ctx.run_code("counter").text == "42"  # check: RAM intact

    ttl = sandbox.set_ttl(7200)              # extend to 2 hours
    pers = sandbox.set_persistent(True)       # opt out of TTL; survive idle sweeper
    print(sandbox.lifecycle())
    # {"ttl_seconds": 7200, "persistent": true, "idle_seconds": 12}
    lc = sandbox.lifecycle()  # check:
    assert set(lc) == {"ttl_seconds", "persistent", "idle_seconds"}, lc
    assert lc["ttl_seconds"] == 7200 and lc["persistent"] is True, lc
    assert isinstance(lc["idle_seconds"], int) and 0 <= lc["idle_seconds"] < 10, lc
    assert ttl["ttl_seconds"] == 7200 and pers["persistent"] is True, (ttl, pers)
    assert Sandbox.get(sandbox.id).persistent is True

    child = sandbox.fork(metadata={"branch": "feature-x"})
    fanout = sandbox.fork_tree(count=8, metadata={"batch": "search"})

    md = Sandbox.get(child.id).metadata  # check:
    assert md.get("branch") == "feature-x" and md.get("parent_id") == sandbox.id, md
    assert len(fanout) == 8 and len({c.id for c in fanout} | {child.id, sandbox.id}) == 10
    assert len({c.metadata.get("fork_tree_id") for c in fanout}) == 1
    with ThreadPoolExecutor(max_workers=8) as pool:  # check: every child answers, with the state
        answers = list(pool.map(lambda c: c.exec("echo up").stdout, [child] + fanout))
    assert answers == ["up\n"] * 9, answers
    assert child.create_code_context().run_code("counter").text == "42"

    snap_id = sandbox.snapshot()
    # → "snap-…" (the snapshot id)
    assert isinstance(snap_id, str) and snap_id.startswith("snap-"), snap_id  # check:

    parent = sandbox
    with Sandbox.create(template="code-interpreter") as sandbox:
        sandbox.exec("python3 train.py")
    # kill() called on __exit__
    with pytest.raises(NotFoundError):  # check:
        Sandbox.get(sandbox.id)
    kill_children_first([child, *fanout], parent)


# --- each state, checked on the host -------------------------------------------------------


def test_pause_stops_the_sandbox_cpu_exec_gets_409_and_resume_continues_a_loop(server, api):
    from pandastack import BadRequestError, Sandbox

    sb = Sandbox.create(template="base")
    sb.exec(COUNTER_LOOP)
    wait_until(lambda: sb.exec("cat /tmp/count 2>/dev/null").stdout.strip().isdigit(), 10, what="the loop")
    loop_pid = sb.exec("cat /tmp/loop.pid").stdout.strip()
    iid = instance_id(server.data_dir, sb.id)
    tree, _ = sandbox_process_tree(iid)
    assert tree, f"no runsc-sandbox process of instance {iid}"

    c0 = int(sb.exec("cat /tmp/count").stdout)
    _, t0 = sandbox_process_tree(iid)
    time.sleep(2)
    _, t1 = sandbox_process_tree(iid)
    c1 = int(sb.exec("cat /tmp/count").stdout)
    running_ticks, rate = t1 - t0, (c1 - c0) / 2
    assert running_ticks >= 5 and rate > 2, f"the loop ran {rate}/s using {running_ticks} ticks"

    before = int(sb.exec("cat /tmp/count").stdout)
    sb.pause()
    assert _status(sb.id) == "paused"
    _, p0 = sandbox_process_tree(iid)
    time.sleep(2)
    _, p1 = sandbox_process_tree(iid)
    # Clock ticks are 10 ms: at most 2 ticks in 2 s (1 % of a core) while the loop used
    # `running_ticks` in the same time before.
    assert p1 - p0 <= 2, f"paused sandbox used {p1 - p0} ticks in 2 s (running: {running_ticks})"

    with pytest.raises(BadRequestError, match="paused"):
        sb.exec("echo hi")
    r = api("POST", f"/v1/sandboxes/{sb.id}/exec", json={"cmd": "echo hi"})
    assert r.status_code == 409 and "paused" in r.json()["error"], r.text
    r = api("POST", f"/v1/sandboxes/{sb.id}/pause")
    assert r.status_code == 409 and "paused" in r.json()["error"], r.text  # the state is named

    sb.resume()
    after = int(sb.exec("cat /tmp/count").stdout)
    # It did not count while paused (2 s would have been ~2 * rate more).
    assert before <= after < before + max(4, rate), (before, after, rate)
    time.sleep(1)
    later = int(sb.exec("cat /tmp/count").stdout)
    assert later > after, (after, later)
    assert sb.exec("cat /tmp/loop.pid").stdout.strip() == loop_pid  # the same process
    r = api("POST", f"/v1/sandboxes/{sb.id}/resume")
    assert r.status_code == 409 and "running" in r.json()["error"], r.text
    sb.kill()


def test_hibernated_sandbox_holds_no_process_and_no_ram_and_exec_wakes_it(server):
    from pandastack import Sandbox

    sb = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
    ctx = sb.create_code_context()
    ex = ctx.run_code("import pandas as pd\nframe = pd.DataFrame({'v': range(100000)})\nsecret = 'kept-after-hibernate'")
    assert ex.error is None, ex.error
    sb.filesystem.write("/workspace/on-disk.txt", b"written before hibernate")

    iid = instance_id(server.data_dir, sb.id)
    procs = processes_matching(iid)
    assert any(c.startswith("runsc-sandbox") for c in procs.values()), procs
    tree, _ = sandbox_process_tree(iid)
    assert rss_kib(tree) > 20 * 1024, f"running sandbox RSS only {rss_kib(tree)} KiB"
    assert iid in runsc_containers(server.data_dir)

    sb.hibernate()
    assert _status(sb.id) == "hibernated"
    wait_until(lambda: not processes_matching(iid), 10, what=f"the processes of {iid} to exit")
    for pid in list(procs) + list(tree):  # none of them lives on under another name
        assert not Path(f"/proc/{pid}").exists() or iid not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    # The stopped container's runsc record and directory are removed in the background right
    # after the image is written (runsc needs ~2 s for it); no process is left meanwhile.
    wait_until(lambda: iid not in runsc_containers(server.data_dir), 10, what=f"runsc to forget {iid}")
    wait_until(lambda: not (server.data_dir / "instances" / iid).exists(), 10, what=f"the directory of {iid} to go")
    assert instance_id(server.data_dir, sb.id) is None
    m = raw_session(server.admin_key()).get(f"{server.url}/v1/sandboxes/{sb.id}/metrics", timeout=30).json()
    assert m["memory_bytes"] == 0, m

    r = sb.exec("python3 -c 'print(6 * 7)'")  # wakes it
    assert r.exit_code == 0 and r.stdout == "42\n", r
    assert _status(sb.id) == "running"
    assert sb.filesystem.read("/workspace/on-disk.txt") == b"written before hibernate"
    ex = ctx.run_code("secret, int(frame['v'].sum())")
    assert ex.error is None and ex.text == "('kept-after-hibernate', 4999950000)", ex
    new_iid = instance_id(server.data_dir, sb.id)
    assert new_iid and new_iid != iid
    assert any(c.startswith("runsc-sandbox") for c in processes_matching(new_iid).values())
    causes = [(e["from"], e["to"], e["cause"]) for e in _events(server, sb.id)]
    assert causes[-2:] == [("running", "hibernated", "api"), ("hibernated", "running", "implicit")], causes
    sb.kill()


def test_every_kind_of_request_wakes_a_hibernated_sandbox(server):
    """Issue 3 §5: "Any request addressed to a hibernated sandbox (exec, fs, repl, lifecycle)
    wakes it implicitly and then succeeds"."""
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    sb.filesystem.write("/workspace/f.txt", b"file")
    requests_of = {
        "fs read": lambda: sb.filesystem.read("/workspace/f.txt") == b"file",
        "code context": lambda: sb.create_code_context().run_code("1 + 1").text == "2",
        "lifecycle": lambda: isinstance(sb.lifecycle().get("idle_seconds"), int),
    }
    not_woken = []
    for name, call in requests_of.items():
        sb.hibernate()
        assert _status(sb.id) == "hibernated"
        assert call(), name
        status = _status(sb.id)
        if status != "running":
            not_woken.append(f"{name}: status {status}")
            sb.wake()
    assert not not_woken, f"requests that did not wake the hibernated sandbox: {not_woken}"
    sb.kill()


def test_ttl_kills_within_2s_of_expiry_activity_refreshes_it_persistent_ignores_it(server, api):
    from pandastack import Sandbox

    busy = Sandbox.create(template="base", ttl_seconds=3)
    kept = Sandbox.create(template="base", ttl_seconds=2, persistent=True)
    started = time.monotonic()
    idle = Sandbox.create(template="base", ttl_seconds=2)
    created = time.monotonic()
    busy.exec("true")

    def gone(sid: str) -> bool:
        r = api("GET", f"/v1/sandboxes/{sid}")
        assert r.status_code in (200, 404), r.text
        return r.status_code == 404

    time.sleep(0.8)
    assert not gone(idle.id)  # GET is no activity: it must not refresh the TTL
    while not gone(idle.id):
        assert time.monotonic() < created + 2 + 2, "ttl_seconds=2 sandbox still there 2 s after expiry"
        busy.exec("true")  # activity refreshes busy's TTL
        time.sleep(0.05)
    gone_at = time.monotonic()
    assert gone_at >= started + 1.9, f"killed {gone_at - started:.2f} s after create, before its TTL"
    assert [e["cause"] for e in _events(server, idle.id)][-1] == "ttl"

    for _ in range(8):  # 4 s more of activity every 0.5 s: busy stays, past its 3 s TTL
        busy.exec("true")
        time.sleep(0.5)
    assert not gone(busy.id)
    last_activity = time.monotonic()
    wait_until(lambda: gone(busy.id), 3 + 2 + 1, 0.05, what="busy to expire after activity stopped")
    assert time.monotonic() >= last_activity + 2.5

    assert not gone(kept.id)  # persistent: 6+ s past a 2 s TTL, still here
    assert _status(kept.id) == "running"
    kept.kill()


def test_persistent_sandbox_is_hibernated_after_the_idle_period_and_wakes_on_the_next_request(second_server):
    srv = second_server
    client = srv.client()
    sb = client.sandboxes.create(template="base", persistent=True)
    other = client.sandboxes.create(template="base")  # not persistent: never idle-hibernated
    try:
        sb.exec("echo kept > /workspace/k; nohup sleep 10000 >/dev/null 2>&1 &")
        other.exec("true")
        active = time.monotonic()
        time.sleep(IDLE_SECONDS - 1)
        assert client.sandboxes.get(sb.id).status == "running", "hibernated before the idle period"

        wait_until(lambda: client.sandboxes.get(sb.id).status == "hibernated", IDLE_SECONDS + 6, 0.1,
                   what=f"idle hibernation ({IDLE_SECONDS} s idle)")
        took = time.monotonic() - active
        assert took >= IDLE_SECONDS - 0.3, took
        assert client.sandboxes.get(other.id).status == "running"
        r = raw_session(srv.admin_key()).get(f"{srv.url}/v1/sandboxes/{sb.id}/events", timeout=30).json()
        assert (r[-1]["to"], r[-1]["cause"]) == ("hibernated", "idle"), r

        out = sb.exec("cat /workspace/k; ps -eo args | grep -c '^sleep 10000'")  # the next request
        assert out.exit_code == 0 and out.stdout == "kept\n1\n", out
        assert client.sandboxes.get(sb.id).status == "running"
        assert client.sandboxes.get(sb.id).persistent is True
    finally:
        for s in (sb, other):
            s.kill()


# --- snapshots ------------------------------------------------------------------------------


def test_snapshots_list_get_delete_and_restore_takes_its_size_from_the_snapshot(server, api, new_snapshots_deleted):
    from pandastack import Client, NotFoundError, Sandbox

    client = Client()
    sb = Sandbox.create(template="base")
    sb.exec("echo one > /workspace/n")
    s1 = sb.snapshot()
    sb.exec("echo two > /workspace/n")
    s2 = sb.snapshot()
    assert s1 != s2 and s1.startswith("snap-") and s2.startswith("snap-")

    mine = client.snapshots.list(sandbox_id=sb.id)
    assert {s["id"] for s in mine} == {s1, s2}, mine
    for s in mine:
        assert s["sandbox_id"] == sb.id and s["template"] == "base" and s["created_at"], s
        assert isinstance(s["size_bytes"], int) and s["size_bytes"] > 0, s
    assert {s1, s2} <= {s["id"] for s in client.snapshots.list()}
    assert client.snapshots.get(s1)["id"] == s1
    assert (server.data_dir / "snapshots" / s1).is_dir()

    # "You cannot resize on restore": template/cpu/memory come from the snapshot.
    r = api("POST", "/v1/sandboxes", json={"from_snapshot": s1, "template": "code-interpreter", "cpu": 4, "memory_mb": 4096})
    assert r.status_code == 201, r.text
    restored = r.json()
    assert (restored["template"], restored["cpu"], restored["memory_mb"]) == ("base", sb.cpu, sb.memory_mb), restored
    assert restored["from_snapshot"] == s1
    assert Sandbox.get(restored["id"]).exec("cat /workspace/n").stdout == "one\n"
    assert Sandbox.create(from_snapshot=s2).exec("cat /workspace/n").stdout == "two\n"  # point in time

    client.snapshots.delete(s1)
    assert s1 not in {s["id"] for s in client.snapshots.list()}
    with pytest.raises(NotFoundError):
        client.snapshots.get(s1)
    with pytest.raises(NotFoundError):
        Sandbox.create(from_snapshot=s1)
    wait_until(lambda: not (server.data_dir / "snapshots" / s1).exists(), 10, what="the image to be removed")
    assert s2 in {s["id"] for s in client.snapshots.list()}


def test_rebaking_a_template_makes_an_older_snapshot_fail_with_a_clear_409(second_server):
    """Seed 000 gotcha: "re-bake the code-interpreter template and old snapshot ids stop
    restoring". Re-bakes the second server's own copy of `base` (~40 s)."""
    from pandastack import BadRequestError

    srv = second_server
    client = srv.client()
    sb = client.sandboxes.create(template="base")
    made = [sb]
    try:
        sb.exec("echo before-rebake > /workspace/x")
        snap = sb.snapshot()
        first = client.sandboxes.create(from_snapshot=snap)  # restores before the re-bake
        made.append(first)
        assert first.exec("cat /workspace/x").stdout == "before-rebake\n"
        first.kill()

        tpl = srv.data_dir / "templates" / "base"
        old_gen = json.loads((tpl / (tpl / "current").read_text().strip() / "meta.json").read_text())["generation"]
        bake = subprocess.run(
            [str(srv.binary), "template-bake", "base", "--force", "--data-dir", str(srv.data_dir)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
        )
        assert bake.returncode == 0, bake.stdout[-2000:] + bake.stderr[-2000:]
        new_gen = json.loads((tpl / (tpl / "current").read_text().strip() / "meta.json").read_text())["generation"]
        assert new_gen > old_gen, (old_gen, new_gen, bake.stdout[-500:])

        with pytest.raises(BadRequestError) as err:
            client.sandboxes.create(from_snapshot=snap)
        msg = str(err.value).lower()
        assert "generation" in msg and "re-baked" in msg, msg
        assert str(old_gen) in msg and str(new_gen) in msg, msg  # which one it needs, which is current
        r = raw_session(srv.admin_key()).post(f"{srv.url}/v1/sandboxes", json={"from_snapshot": snap}, timeout=60)
        assert r.status_code == 409 and snap in r.json()["error"], r.text

        assert sb.exec("cat /workspace/x").stdout == "before-rebake\n"  # running ones are not disturbed
        fresh = client.sandboxes.create(template="base")  # the new generation
        made.append(fresh)
        snap2 = fresh.snapshot()
        again = client.sandboxes.create(from_snapshot=snap2)  # and a new snapshot restores
        made.append(again)
        assert again.exec("echo ok").stdout == "ok\n"
    finally:
        for s in made:
            try:
                s.kill()
            except Exception as e:  # already gone
                print(f"kill {s.id}: {e}")
