"""Issue 8 (reliability and resource limits): each finding of the hostile-tenant and operator
probe, replayed against a real server through the published Python SDK (raw HTTP only where the
SDK has no call, or to see a status code or header) with the outcome asserted.

Limits here are small on purpose (a few MiB of output, a short TTL): nothing in this file fills
the host's disk or memory.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from helpers import assert_json_error, instance_dirs, runsc_containers, steady_host
from lifecycle_fixtures import raw_session, wait_until

MIB = 1024 * 1024


def _gone(sandbox_id: str) -> bool:
    from pandastack import NotFoundError, Sandbox

    try:
        Sandbox.get(sandbox_id)
    except NotFoundError:
        return True
    return False


def _raw_request(url: str, head: str, body_bytes: int = 0, chunk: bytes = b"x" * MIB) -> tuple[int, bytes]:
    """Sends `head` (request line and headers) and then `body_bytes` of body from a thread, and
    returns the status code and body of the answer: the server may answer before the client
    has sent all it announced (a 413), which `requests` cannot show."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)

    def send() -> None:
        try:
            sock.sendall(head.encode())
            left = body_bytes
            while left > 0:
                n = min(left, len(chunk))
                sock.sendall(chunk[:n])
                left -= n
        except OSError:
            pass  # the server answered and closed before the whole body was sent

    writer = threading.Thread(target=send, daemon=True)
    writer.start()
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            part = sock.recv(65536)
            if not part:
                break
            data += part
        head_part, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head_part.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v.strip())
        while len(rest) < length:
            part = sock.recv(65536)
            if not part:
                break
            rest += part
        return int(head_part.split()[1]), rest
    finally:
        sock.close()


# --- 7: one server per data dir ------------------------------------------------------------


def test_a_second_server_on_the_same_data_dir_exits_at_once_and_touches_nothing(server):
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    # The warm pool and restore targets refill and trim in the background: compare a quiet host.
    steady_host(server)
    before_dirs, before_containers = instance_dirs(server.data_dir), runsc_containers(server.data_dir)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    second = subprocess.run(
        [str(server.binary), "server", "--listen", f"127.0.0.1:{port}", "--data-dir", str(server.data_dir)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )
    took = time.monotonic() - started
    assert second.returncode != 0, second
    assert "in use by another pandastack server" in second.stderr, second.stderr
    assert str(server.pid) in second.stderr, second.stderr
    assert took < 5, f"the second server took {took:.1f} s to give up"
    # Nothing of the first server's was touched: the same instances (its sandbox and its warm
    # pool) run, and the sandbox answers.
    assert runsc_containers(server.data_dir) >= before_containers
    assert instance_dirs(server.data_dir) >= before_dirs
    assert sb.exec("echo still mine").stdout == "still mine\n"


# --- 10: API nits ----------------------------------------------------------------------------


def test_sizes_in_a_create_are_checked_against_the_template(api):
    assert_json_error(api("POST", "/v1/sandboxes", json={"template": "base", "cpu": 100000}), "cpu", status=400)
    assert_json_error(api("POST", "/v1/sandboxes", json={"template": "base", "memory_mb": 999999}), "memory_mb", status=400)
    assert_json_error(api("POST", "/v1/sandboxes", json={"template": "base", "cpu": "many"}), "cpu", status=400)
    assert_json_error(api("POST", "/v1/sandboxes", json={"template": "base", "memory_mb": -1}), "memory_mb", status=400)
    tpl = api("GET", "/v1/templates/base").json()
    ok = api("POST", "/v1/sandboxes", json={"template": "base", "cpu": tpl["cpu"], "memory_mb": tpl["memory_mb"]})
    assert ok.status_code == 201, ok.text
    assert (ok.json()["cpu"], ok.json()["memory_mb"]) == (tpl["cpu"], tpl["memory_mb"])


def test_exec_refuses_nul_bytes_and_bad_env_names(api):
    from pandastack import BadRequestError, Sandbox

    sb = Sandbox.create(template="base")
    with pytest.raises(BadRequestError) as e:
        sb.exec("echo a\0b")
    assert "nul" in str(e.value).lower()
    for env, word in [({"A\0B": "1"}, "env"), ({"A=B": "1"}, "env"), ({"": "1"}, "env"), ({"A": "x\0y"}, "nul")]:
        r = api("POST", f"/v1/sandboxes/{sb.id}/exec", json={"cmd": "true", "env": env})
        assert_json_error(r, word, status=400)
    assert sb.exec("echo fine").stdout == "fine\n"


def test_a_100_mb_json_body_is_413(server):
    key = server.admin_key()
    status, body = _raw_request(
        server.url,
        f"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {100 * MIB}\r\n\r\n",
        body_bytes=100 * MIB,
        chunk=b" " * MIB,
    )
    assert status == 413, (status, body[:200])
    assert "larger than" in json.loads(body)["error"]


def test_writing_a_read_only_path_is_403_naming_the_reason(api):
    from pandastack import BadRequestError, Sandbox

    sb = Sandbox.create(template="base")
    r = api("PUT", f"/v1/sandboxes/{sb.id}/fs", params={"path": "/.pandastack/x"}, data=b"x")
    assert_json_error(r, "read-only", status=403)
    with pytest.raises(BadRequestError) as e:  # the Python SDK maps 403 to BadRequestError
        sb.filesystem.write("/.pandastack/kernel.py", b"print('owned')")
    assert "read-only" in str(e.value)
    assert sb.exec("echo fine").stdout == "fine\n"


def test_a_template_name_with_dot_dot_is_404(api):
    r = api("GET", "/v1/templates/..%2F..%2Fetc")
    assert_json_error(r, "not found", status=404)
    r = api("GET", "/v1/templates/..%2F..%2Fetc%2Fpasswd")
    assert_json_error(r, "not found", status=404)


def test_metadata_size_is_bounded(api):
    from pandastack import BadRequestError, Sandbox

    many = {f"k{i}": "v" for i in range(10_000)}
    assert_json_error(api("POST", "/v1/sandboxes", json={"template": "base", "metadata": many}), "metadata", status=400)
    with pytest.raises(BadRequestError) as e:
        Sandbox.create(template="base", metadata={"blob": "x" * (1536 * 1024)})
    assert "metadata" in str(e.value)
    sb = Sandbox.create(template="base", metadata={"job": "ok"})
    r = api("POST", f"/v1/sandboxes/{sb.id}/fork", json={"metadata": many})
    assert_json_error(r, "metadata", status=400)


def test_metrics_need_an_api_key(server):
    r = requests.get(f"{server.url}/metrics", timeout=30)
    assert_json_error(r, "authorization", status=401)
    r = requests.get(f"{server.url}/metrics", headers={"Authorization": "Bearer pds_not_a_real_key_at_all"}, timeout=30)
    assert r.status_code == 401
    r = requests.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {server.admin_key()}"}, timeout=30)
    assert r.status_code == 200 and "pandastack" in r.text


# --- 3: memory --------------------------------------------------------------------------


def _oom_events(api, sandbox_id: str) -> list[dict]:
    return [e for e in api("GET", f"/v1/sandboxes/{sandbox_id}/events").json() if e["cause"].startswith("oom: killed")]


def test_a_process_over_the_memory_limit_is_killed_alone_and_the_sandbox_lives_on(api):
    """A process allocating 2 GiB in a 512 MiB sandbox: the guest's memory guard kills it
    (exit 137, a line on stderr saying why), the sandbox keeps running with its other
    processes, an event names the process and `oom`; /dev/shm (RAM) is bounded by its size."""
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    try:
        other = sb.exec("sleep 600 > /dev/null 2>&1 & echo $!").stdout.strip()
        started = time.monotonic()
        r = sb.exec("python3 -c 'x = bytearray(2 * 1024 ** 3)'", timeout_seconds=120)
        print(f"killed after {time.monotonic() - started:.2f} s")
        assert r.exit_code == 137, r
        assert "out of memory: killed python3" in r.stderr and "of its 512 MiB" in r.stderr, r.stderr
        assert sb.exec(f"kill -0 {other} && echo alive").stdout == "alive\n"
        assert api("GET", f"/v1/sandboxes/{sb.id}").json()["status"] == "running"
        ev = wait_until(lambda: _oom_events(api, sb.id), timeout=15, what="the oom event")
        assert ev[0]["from"] == "running" and ev[0]["to"] == "running", ev
        assert "python3" in ev[0]["cause"] and "of its 512 MiB" in ev[0]["cause"], ev
        # RAM-backed /dev/shm ends in ENOSPC at its size, not in a kill.
        out = sb.exec("head -c 200000000 /dev/zero > /dev/shm/fill; echo rc=$?; rm -f /dev/shm/fill")
        assert "No space left on device" in out.stderr and "rc=1" in out.stdout, out
        assert sb.exec("echo still here").stdout == "still here\n"
    finally:
        sb.kill()


def test_a_kernel_over_the_memory_limit_reports_a_memory_error_and_the_context_works_again(api):
    """A cell allocating 2 GiB: its kernel is killed, the run reports a `MemoryError`, the same
    context runs the next cell in a fresh kernel, and another context's kernel keeps its
    state."""
    from pandastack import Sandbox

    sb = Sandbox.create(template="code-interpreter")
    try:
        keep, hog = sb.create_code_context(), sb.create_code_context()
        assert keep.run_code("kept = 41").error is None
        assert hog.run_code("y = 1").error is None
        ex = hog.run_code("x = bytearray(2 * 1024 ** 3)")
        assert ex.error is not None and ex.error.startswith("MemoryError"), ex
        assert "out of memory" in ex.error and "fresh kernel" in ex.error, ex.error
        again = hog.run_code("print(1 + 1)")
        assert again.error is None and again.stdout == "2\n", again
        gone = hog.run_code("y")
        assert gone.error is not None and "NameError" in gone.error, gone
        assert keep.run_code("print(kept + 1)").stdout == "42\n"
        assert sb.exec("echo ok").stdout == "ok\n"
        wait_until(lambda: _oom_events(api, sb.id), timeout=15, what="the oom event")
    finally:
        sb.kill()


def _memory_cgroup(server_pid: int, iid: str) -> Path:
    own = next(
        line.split(":", 2)[2] for line in Path(f"/proc/{server_pid}/cgroup").read_text().splitlines()
        if line.split(":", 2)[1] == "memory"
    )
    for base in (Path("/sys/fs/cgroup/memory") / own.lstrip("/"), Path("/sys/fs/cgroup/memory")):
        if (base / "pandastack" / iid).is_dir():
            return base / "pandastack" / iid
    raise AssertionError(f"no memory cgroup for {iid}")


def test_a_sandbox_whose_host_memory_runs_out_is_failed_at_once_naming_oom(server, api):
    """When the whole sandbox does die of memory (memory the guard cannot free, or the
    sentry's own past the cgroup's headroom; forced here by lowering the host cgroup's limit
    just above what the sandbox uses, then allocating well under its `memory_mb`): the host's
    OOM killer ends the gVisor sandbox, the server notices within its death-watch poll, the
    exec that did it answers 409 naming the cause, the sandbox is `failed` with an event whose
    cause starts with `oom`, and later requests answer 409 `sandbox failed: oom: ...` at once."""
    from pandastack import BadRequestError, Sandbox

    from lifecycle_fixtures import instance_id

    sb = Sandbox.create(template="base")
    try:
        assert sb.exec("true").exit_code == 0
        cg = _memory_cgroup(server.pid, instance_id(server.data_dir, sb.id))
        # runsc's limit (memory_mb) plus the headroom the engine adds (cgroup::headroom_bytes:
        # 96 MiB and 2 MiB for each of the 128 + 64 processes a 512 MiB sandbox may hold).
        assert int((cg / "memory.limit_in_bytes").read_text()) == (512 + 96 + 2 * (128 + 64)) * MIB
        used = int((cg / "memory.usage_in_bytes").read_text())
        (cg / "memory.limit_in_bytes").write_text(str(used + 48 * MIB))
        with pytest.raises(BadRequestError) as e:
            sb.exec("python3 -c 'x = bytearray(300 * 1024 ** 2)'", timeout_seconds=120)
        seen = time.monotonic()
        assert "out of memory" in str(e.value) and "killed" in str(e.value), e.value
        row = wait_until(
            lambda: (r := api("GET", f"/v1/sandboxes/{sb.id}").json())["status"] == "failed" and r,
            timeout=10, what="the sandbox to be failed",
        )
        print(f"failed {time.monotonic() - seen:.2f} s after the exec's answer")
        assert row["status"] == "failed"
        events = api("GET", f"/v1/sandboxes/{sb.id}/events").json()
        assert events[-1]["to"] == "failed" and events[-1]["cause"].startswith("oom: out of memory"), events
        started = time.monotonic()
        with pytest.raises(BadRequestError) as again:
            sb.exec("true")
        assert "sandbox failed: oom: out of memory" in str(again.value), again.value
        assert time.monotonic() - started < 5
    finally:
        sb.kill()


# A fork loop whose children become `sleep`: it holds every process slot it can get with
# little memory (~1 MiB each; Python children cost ~4 MiB each under gVisor and would bring
# the memory guard first) and marks the first EAGAIN it meets.
_SLEEPING_FORK_BOMB = """
import errno, os, time
end = time.monotonic() + 10
while time.monotonic() < end:
    try:
        pid = os.fork()
    except OSError as e:
        if e.errno == errno.EAGAIN and not os.path.exists("/tmp/eagain"):
            open("/tmp/eagain", "w").close()
        time.sleep(0.01)
        continue
    if pid == 0:
        os.execv("/bin/sleep", ["sleep", str(max(0.1, end - time.monotonic()))])
"""

# The classic: every process forks on, as fast as it can, for 6 s.
_BUSY_FORK_BOMB = """
import os, time
end = time.monotonic() + 6
while time.monotonic() < end:
    try:
        os.fork()
    except OSError:
        pass
"""


def _process_count(sb) -> int:
    """Processes in the sandbox, counted by one process (a shell pipeline would need forks a
    fork loop at the limit refuses)."""
    count = sb.exec("python3 -c \"import os; print(sum(n.isdigit() for n in os.listdir('/proc')))\"")
    assert count.exit_code == 0, count.stderr
    return int(count.stdout)


def _wait_for_the_loops_children(sb) -> None:
    """A fork loop's exec answers once its leader has exited (at most `PIPE_GRACE_MS`, 100 ms,
    later, as a shell would), while its ~128 children may still be finishing their last fork()
    or sleep on a loaded host. The next loop's `timeout` would get EAGAIN from them."""
    wait_until(lambda: _process_count(sb) < 20, timeout=30, what="the fork loop's children to exit")


def test_a_fork_bomb_stops_at_the_process_limit_and_the_sandbox_lives_on():
    """Issue 8 point 3: a fork loop gets EAGAIN at the sandbox's process limit (128 at 512
    MiB) while new execs still run (the guest keeps a reserve above the user limit: before it,
    the guest's own threads shared the limit and execs failed with `cannot start exec worker:
    Resource temporarily unavailable`), and a busy fork loop ends in EAGAIN or in the memory
    guard's kill of its process group, never in the end of the sandbox."""
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    sb.filesystem.write("/tmp/sleeping.py", _SLEEPING_FORK_BOMB)
    sb.filesystem.write("/tmp/busy.py", _BUSY_FORK_BOMB)
    with ThreadPoolExecutor(1) as pool:
        bomb = pool.submit(sb.exec, "timeout -s KILL 20 python3 /tmp/sleeping.py", 40)
        wait_until(lambda: sb.exec("test -e /tmp/eagain").exit_code == 0, timeout=15, what="the fork loop to reach the process limit")
        during = sb.exec("echo alive")
        assert (during.exit_code, during.stdout) == (0, "alive\n"), f"an exec during the fork loop: {during}"
        count = _process_count(sb)
        assert 100 <= count <= 128 + 64, f"{count} processes during the fork loop"
        assert bomb.result().exit_code == 0
    _wait_for_the_loops_children(sb)
    for _ in range(2):
        busy = sb.exec("timeout -s KILL 20 python3 /tmp/busy.py", 40)
        assert busy.exit_code in (0, 137), f"the busy fork loop: {busy}"
        if busy.exit_code == 137 and busy.stderr:
            assert "out of memory" in busy.stderr, busy.stderr
        after = sb.exec("echo alive")
        assert (after.exit_code, after.stdout) == (0, "alive\n"), f"an exec after the fork loop: {after}"
        _wait_for_the_loops_children(sb)
    assert Sandbox.get(sb.id).status == "running"


def test_deleting_a_sandbox_during_an_exec_tells_the_exec_it_was_killed():
    from pandastack import BadRequestError, Sandbox

    sb = Sandbox.create(template="base")
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(sb.exec, "sleep 30", timeout_seconds=60)
        time.sleep(1.0)
        sb.kill()
        with pytest.raises(BadRequestError) as e:
            running.result(timeout=30)
    assert "deleted" in str(e.value) and "killed" in str(e.value), e.value


def test_snapshots_of_another_workspaces_sandbox_are_404(server, workspace_b_key):
    from pandastack import Sandbox

    mine = Sandbox.create(template="base")
    as_b = raw_session(workspace_b_key)
    r = as_b.get(f"{server.url}/v1/sandboxes/{mine.id}/snapshots", timeout=30)
    assert_json_error(r, "not found", status=404)
    assert as_b.get(f"{server.url}/v1/sandboxes/{uuid.uuid4()}/snapshots", timeout=30).status_code == 404
    # The owner still lists them.
    r = raw_session(server.admin_key()).get(f"{server.url}/v1/sandboxes/{mine.id}/snapshots", timeout=30)
    assert r.status_code == 200 and r.json() == {"snapshots": []}, r.text


# --- 6: exec output cap ------------------------------------------------------------------------


def test_non_streaming_exec_output_is_capped_at_16_mib_and_says_truncated(server, api):
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    cmd = "head -c 40000000 /dev/zero | tr '\\0' x; echo done >&2"
    r = api("POST", f"/v1/sandboxes/{sb.id}/exec", json={"cmd": cmd}, timeout=120)
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    assert body["exit_code"] == 0 and body["truncated"] is True, {k: v for k, v in body.items() if k != "stdout"}
    assert len(body["stdout"]) == 16 * MIB and set(body["stdout"]) == {"x"}
    assert body["stderr"] == "done\n"
    # The SDK reads the same reply unchanged.
    res = sb.exec("echo small")
    assert (res.stdout, res.exit_code) == ("small\n", 0)
    assert api("POST", f"/v1/sandboxes/{sb.id}/exec", json={"cmd": "echo small"}).json()["truncated"] is False

    # Execs printing far past the cap, at once, hold at most the cap each in server memory
    # (issue 8: eight execs of 100 MB took the server from 35 MB to 975 MB). The server's RSS
    # is sampled while they run.
    before = server.rss_kib()
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], server.rss_kib())
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    big = {"cmd": "head -c 60000000 /dev/zero | tr '\\0' y", "timeout_seconds": 300}
    try:
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda _: api("POST", f"/v1/sandboxes/{sb.id}/exec", json=big, timeout=300), range(4)))
    finally:
        done.set()
        sampler.join(5)
    for o in outs:
        assert o.status_code == 200, o.text[:200]
        assert len(o.json()["stdout"]) == 16 * MIB and o.json()["truncated"] is True
    grown_mib = (peak[0] - before) / 1024
    assert grown_mib < 250, f"server RSS peaked {grown_mib:.0f} MiB above its start for 4 capped execs"


# --- 4: TTL versus activity ------------------------------------------------------------------


def test_the_ttl_never_kills_a_sandbox_in_the_middle_of_a_command_a_code_run_or_a_stream():
    from pandastack import Sandbox

    sb = Sandbox.create(template="code-interpreter", ttl_seconds=2)
    ctx = sb.create_code_context()
    chunks: list[str] = []
    with ThreadPoolExecutor(3) as pool:
        ex = pool.submit(sb.exec, "sleep 6; echo slept", timeout_seconds=60)
        run = pool.submit(ctx.run_code, "import time; time.sleep(6); 'kernel slept'")
        stream = pool.submit(sb.exec_stream, "for i in 1 2 3 4 5 6; do echo $i; sleep 1; done", on_stdout=chunks.append)
        assert ex.result(timeout=60).stdout == "slept\n"
        assert run.result(timeout=60).text == "'kernel slept'"
        assert stream.result(timeout=60) == 0
    assert "".join(chunks).split() == [str(i) for i in range(1, 7)]
    assert Sandbox.get(sb.id).status == "running"
    # Once nothing runs, the TTL counts again from the end of the last request.
    wait_until(lambda: _gone(sb.id), timeout=10, what="the TTL to take the idle sandbox")


# --- 5: kill, snapshot and hibernate never wait on a client's stream ----------------------------


class StalledDownload:
    """`GET .../fs` of a large file whose client reads a few bytes and then stops reading (as a
    rate-limited client does): the server's stream is blocked on TCP backpressure."""

    def __init__(self, url: str, key: str, sandbox_id: str, path: str) -> None:
        self.resp = requests.get(
            f"{url}/v1/sandboxes/{sandbox_id}/fs",
            params={"path": path},
            headers={"Authorization": f"Bearer {key}"},
            stream=True,
            timeout=(10, 120),
        )
        assert self.resp.status_code == 200, self.resp.text[:200]
        assert self.resp.raw.read(1024)

    def close(self) -> None:
        self.resp.close()


def test_delete_and_snapshot_during_a_stalled_download_return_at_once(server, new_snapshots_deleted):
    from pandastack import Sandbox

    key = server.admin_key()
    sb = Sandbox.create(template="base")
    assert sb.exec("head -c 200000000 /dev/urandom > /workspace/big.bin").exit_code == 0
    stalled = StalledDownload(server.url, key, sb.id, "/workspace/big.bin")
    try:
        time.sleep(1)
        started = time.monotonic()
        snap = sb.snapshot()
        assert snap.startswith("snap-")
        assert time.monotonic() - started < 10
        started = time.monotonic()
        sb.kill()
        assert time.monotonic() - started < 2, "DELETE waited on a client's download"
        assert _gone(sb.id)
    finally:
        stalled.close()

    # A client that gives up on its DELETE at once does not cancel it.
    other = Sandbox.create(template="base")
    assert other.exec("head -c 100000000 /dev/urandom > /workspace/big.bin").exit_code == 0
    stalled = StalledDownload(server.url, key, other.id, "/workspace/big.bin")
    try:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(f"DELETE /v1/sandboxes/{other.id} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
        # The socket is closed without reading the reply.
        wait_until(lambda: _gone(other.id), timeout=10, what=f"the abandoned DELETE of {other.id} to delete")
    finally:
        stalled.close()


def test_a_delete_whose_client_closes_at_once_still_deletes(server):
    """Issue 8 point 5, without any download: a client that sends a DELETE and closes its
    socket at once (or half-closes it and waits for the answer). hyper used to take the EOF for
    a client that gave up and drop the request before its handler ran: 4 of 15 such deletes
    were lost on an idle server, so ten in a row caught it almost always."""
    from pandastack import Sandbox

    key = server.admin_key()
    host, port = server.url.removeprefix("http://").split(":")
    closed = [Sandbox.create(template="base") for _ in range(6)]
    half_closed = [Sandbox.create(template="base") for _ in range(4)]
    for sb in closed:
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(f"DELETE /v1/sandboxes/{sb.id} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
    for sb in half_closed:
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(f"DELETE /v1/sandboxes/{sb.id} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
            s.shutdown(socket.SHUT_WR)
            reply = s.recv(4096)
        assert reply.startswith(b"HTTP/1.1 204"), f"half-closed DELETE of {sb.id} answered {reply[:200]!r}"
    for sb in closed + half_closed:
        wait_until(lambda: _gone(sb.id), timeout=10, what=f"the abandoned DELETE of {sb.id} to delete")


@pytest.fixture
def new_snapshots_deleted(server):
    from lifecycle_fixtures import _snapshot_ids, delete_new_snapshots

    before = _snapshot_ids(server.url, server.admin_key())
    yield
    delete_new_snapshots(server.url, server.admin_key(), before)


# --- 2 and 8: kill -9 during hibernate, snapshot and fork_tree loses nothing, leaves nothing --------


class _ProcessWatch:
    """Watches for a new host process whose command line contains every needle. Processes
    already running when the watch starts are skipped, and so are new ones that are neither
    runsc nor pandastack, so a scan takes about a millisecond (fast enough to catch a
    checkpoint of ~100 ms)."""

    def __init__(self, *needles: str) -> None:
        self.needles = needles
        self.seen: set[str] = {p.name for p in Path("/proc").iterdir() if p.name.isdigit()}

    def wait(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in Path("/proc").iterdir():
                if not p.name.isdigit() or p.name in self.seen:
                    continue
                try:
                    cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if all(n in cmd for n in self.needles):
                    return int(p.name)
                if cmd and "runsc" not in cmd and "pandastack" not in cmd:
                    # Not one of ours (and exec'd: a child of the server shows the server's
                    # command line until it execs, so those are read again).
                    self.seen.add(p.name)
            time.sleep(0.001)
        raise AssertionError(f"no process with {self.needles} within {timeout} s")


def _image_leftovers(data_dir: Path) -> dict[str, list[str]]:
    """Entries of the image directories (partial images included)."""
    return {
        d: sorted(p.name for p in (data_dir / d).iterdir()) if (data_dir / d).is_dir() else []
        for d in ("snapshots", "hibernate", "forks")
    }


def _in_background(fn) -> threading.Thread:
    def run() -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001 - the server is killed under this call on purpose
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_kill_9_during_hibernate_loses_nothing(server):
    from pandastack import CodeContext, Sandbox

    sb = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
    ctx = sb.create_code_context()
    assert ctx.run_code("kept = 'set before the crash'; kept").text == "'set before the crash'"
    sb.filesystem.write("/workspace/kept.txt", b"written before the crash")
    before = _image_leftovers(server.data_dir)

    # The moment runsc checkpoint is writing this sandbox's hibernation image, the server dies.
    watch = _ProcessWatch("checkpoint", f"hibernate/{sb.id}")
    call = _in_background(sb.hibernate)
    watch.wait()
    server.kill9()
    call.join(30)
    server.start()

    again = Sandbox.get(sb.id)
    # A complete image is a hibernated (wakeable) sandbox; a torn one is removed and the
    # sandbox runs on. Never failed, never lost.
    assert again.status in ("hibernated", "running"), again.status
    assert again.filesystem.read("/workspace/kept.txt") == b"written before the crash"
    ex = CodeContext(again, ctx.id).run_code("kept")
    assert (ex.error, ex.text) == (None, "'set before the crash'"), ex
    assert Sandbox.get(sb.id).status == "running"
    assert _image_leftovers(server.data_dir) == before


def test_kill_9_during_snapshot_loses_nothing_and_leaves_nothing(server, new_snapshots_deleted):
    from pandastack import Sandbox

    from lifecycle_fixtures import _snapshot_ids, instance_id

    sb = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
    sb.filesystem.write("/workspace/kept.txt", b"snapshotted")
    iid = instance_id(server.data_dir, sb.id)
    snaps_before = _snapshot_ids(server.url, server.admin_key())

    watch = _ProcessWatch("checkpoint", f"{server.data_dir}/snapshots/snap-", iid)
    call = _in_background(sb.snapshot)
    watch.wait()
    server.kill9()
    call.join(30)
    server.start()

    assert Sandbox.get(sb.id).status == "running"
    assert sb.exec("cat /workspace/kept.txt").stdout == "snapshotted"
    new = _snapshot_ids(server.url, server.admin_key()) - snaps_before
    assert len(new) <= 1, new
    # Only images a snapshot row references are on disk: nothing partial, nothing orphaned.
    on_disk = set(_image_leftovers(server.data_dir)["snapshots"])
    assert new <= on_disk <= _stored_snapshot_dirs(server.data_dir), on_disk
    for snap in new:  # a snapshot finished after the restart restores like any other
        restored = Sandbox.create(from_snapshot=snap)
        assert restored.exec("cat /workspace/kept.txt").stdout == "snapshotted"


def test_kill_9_during_fork_tree_leaves_nothing_and_start_up_collects_stray_images(server):
    from pandastack import Sandbox

    from helpers import steady_host

    from net_fixtures import server_tag

    parent = Sandbox.create(template="base")
    assert parent.exec("echo parent > /workspace/p.txt").exit_code == 0
    steady_host(server)

    # Killed while the children are being restored from the parent's capture (in the data dir
    # or, when it fits, in the server's RAM scratch dir).
    watch = _ProcessWatch("restore", "/forks/tree-")
    call = _in_background(lambda: parent.fork_tree(3))
    watch.wait()
    server.kill9()
    call.join(30)
    # Stray images of earlier crashes, referenced by no row.
    for stray in (f"snapshots/snap-{uuid.uuid4().hex}", f"hibernate/{uuid.uuid4()}", f"forks/tree-{uuid.uuid4().hex}", f"snapshots/snap-{uuid.uuid4().hex}.partial"):
        (server.data_dir / stray).mkdir(parents=True)
        (server.data_dir / stray / "pages.img").write_bytes(b"\0" * 4096)
    server.start()

    # The interrupted fork is undone whole: no child is listed (failed or otherwise), the parent
    # runs on, and the host holds exactly the parent and the warm pool.
    assert {s.id for s in Sandbox.list()} == {parent.id}
    assert parent.exec("cat /workspace/p.txt").stdout == "parent\n"
    ids, stale_dirs = steady_host(server)
    assert ids == {parent.id} and not stale_dirs, (ids, stale_dirs)
    left = _image_leftovers(server.data_dir)
    assert left["forks"] == [] and left["hibernate"] == [], left
    scratch = Path(f"/dev/shm/pandastack-{server_tag(server.data_dir)}/forks")
    assert not scratch.exists() or list(scratch.iterdir()) == [], list(scratch.iterdir())
    assert not any(n.endswith(".partial") for n in left["snapshots"]), left
    assert set(left["snapshots"]) <= _stored_snapshot_dirs(server.data_dir), left


def _stored_snapshot_dirs(data_dir: Path) -> set[str]:
    """Names of the image directories of every snapshot row (any workspace), read-only."""
    import sqlite3

    db = sqlite3.connect(f"file:{data_dir / 'store.db'}?mode=ro", uri=True, timeout=10)
    try:
        return {Path(r[0]).name for r in db.execute("SELECT image_dir FROM snapshots")}
    finally:
        db.close()


# --- 9: kernel results come only from the kernel driver ----------------------------------------

_FORGED_LINES = '''
import json
def forged(seqs, nonce=None):
    return b"".join(
        b"\\n" + json.dumps({"seq": s, "nonce": nonce, "results": [{"text/plain": "'forged'"}], "stdout": "", "stderr": "", "error": None, "exit_code": 0, "duration_ms": 0}).encode() + b"\\n"
        for s in seqs
    )
'''

# A cell that writes forged replies (its own run's token, guessed sequence numbers) on every
# socket and pipe it holds, and forks a child that keeps doing so while later cells run.
_FORGING_CELL = _FORGED_LINES + '''
import os, sys, stat, time
req = None
for f in sys._current_frames().values():
    while f is not None:
        if isinstance(f.f_locals.get("request"), dict):
            req = f.f_locals["request"]
        f = f.f_back
seq, nonce = req["seq"], req.get("nonce")
lines = forged(range(seq + 1, seq + 8), nonce)
fds = [fd for fd in range(3, 256) if os.path.exists(f"/proc/self/fd/{fd}") and (stat.S_ISSOCK(os.fstat(fd).st_mode) or stat.S_ISFIFO(os.fstat(fd).st_mode))]
def spray():
    for fd in fds:
        try:
            os.write(fd, lines)
        except OSError:
            pass
spray()
if os.fork() == 0:
    end = time.monotonic() + 4
    while time.monotonic() < end:
        spray()
        time.sleep(0.01)
    os._exit(0)
len(fds)
'''

# A separate process that reopens the kernel's descriptors through /proc and writes forged
# replies into whatever opens, for a few seconds.
_FORGING_PROCESS = _FORGED_LINES + '''
import os, sys, time
pid = sys.argv[1]
opened = []
for n in os.listdir(f"/proc/{pid}/fd"):
    try:
        opened.append(os.open(f"/proc/{pid}/fd/{n}", os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass
print("opened", len(opened), flush=True)
end = time.monotonic() + 4
while time.monotonic() < end:
    for fd in opened:
        try:
            os.write(fd, forged(range(1, 200)))
        except OSError:
            pass
    time.sleep(0.01)
'''


def test_kernel_results_cannot_be_forged_by_a_cell_or_another_process(api):
    from pandastack import Sandbox

    sb = Sandbox.create(template="code-interpreter")
    ctx = sb.create_code_context()
    ex = ctx.run_code(_FORGING_CELL)
    assert ex.error is None, ex.error
    assert int(ex.text) > 0, "the cell found no channel to forge on"
    for i in range(1, 5):
        ex = ctx.run_code(f"import time; time.sleep(0.3); {i} * 10")
        assert (ex.error, ex.text) == (None, str(i * 10)), f"cell {i} returned {ex.text!r}"

    # Another process of the sandbox: it cannot reopen the kernel's channel.
    sb.filesystem.write("/workspace/forge.py", _FORGING_PROCESS.encode())
    kernels = api("GET", f"/v1/sandboxes/{sb.id}/repl").json()["kernels"]
    pid = next(k["pid"] for k in kernels if k["attached"])
    assert sb.exec(f"nohup python3 /workspace/forge.py {pid} > /workspace/forge.out 2>&1 &").exit_code == 0
    wait_until(lambda: sb.filesystem.exists("/workspace/forge.out") and b"opened" in sb.filesystem.read("/workspace/forge.out"), timeout=20, what="the forging process to start")
    for i in range(1, 5):
        ex = ctx.run_code(f"import time; time.sleep(0.3); 'honest {i}'")
        assert (ex.error, ex.text) == (None, f"'honest {i}'"), f"run {i} returned {ex.text!r}"


# --- 6: capacity: host admission (503), workspace quotas and rate limits (429), disk reserve (507) ---


class LimitedServer:
    """A server of this file on its own data dir (a copy of the baked `base` template), restarted
    with the flags a test needs; sandboxes survive the restarts, as they do a deploy."""

    def __init__(self, main) -> None:
        from lifecycle_fixtures import SecondServer, _copy_current_template, scrub_data_dir

        self.data_dir = main.data_dir.parent / f"abuse-server-{__import__('os').getpid()}"
        scrub_data_dir(self.data_dir)
        (self.data_dir / "templates").mkdir(parents=True)
        _copy_current_template(main.data_dir / "templates", self.data_dir / "templates", "base")
        self.srv = SecondServer(main.binary, self.data_dir, main.log.parent / "server-abuse-limited.log", [])

    def restart(self, *flags: str):
        self.srv.stop()
        self.srv.extra_args = ["--pool-size", "0", *flags]
        self.srv.start()
        return self.srv.client()

    @property
    def url(self) -> str:
        return self.srv.url

    def key(self) -> str:
        return self.srv.admin_key()

    def sweep(self) -> None:
        import sweep

        if self.srv.proc is not None and self.srv.proc.poll() is None:
            sweep.sweep(self.srv.url, [self.key()])


@pytest.fixture(scope="module")
def limited(server):
    srv = LimitedServer(server)
    try:
        yield srv
    finally:
        srv.srv.teardown()


@pytest.fixture
def limited_clean(limited):
    yield limited
    limited.sweep()


def test_a_full_host_answers_503_with_retry_after_and_the_sdk_retries_the_create(limited_clean):
    from pandastack import Sandbox

    client = limited_clean.restart("--max-sandboxes", "3")
    s = raw_session(limited_clean.key())

    def create(_):
        return s.post(f"{limited_clean.url}/v1/sandboxes", json={"template": "base"}, timeout=120)

    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(create, range(8)))
    codes = sorted(r.status_code for r in replies)
    assert codes.count(201) == 3 and codes.count(503) == 5, codes
    for r in replies:
        if r.status_code == 503:
            assert int(r.headers["Retry-After"]) >= 1, r.headers
            assert "host at capacity" in r.json()["error"], r.text
    made = [r.json()["id"] for r in replies if r.status_code == 201]
    assert all(client.sandboxes.get(i).exec("echo ok").stdout == "ok\n" for i in made)

    # The Python SDK retries a create refused with 503 + Retry-After: room made while it waits
    # is taken.
    from pandastack import Client

    waiting = Client(api_url=limited_clean.url, api_key=limited_clean.key(), max_create_retry_seconds=60)
    with ThreadPoolExecutor(1) as pool:
        later = pool.submit(waiting.sandboxes.create, template="base")
        time.sleep(2)
        client.sandboxes.delete(made[0])
        sb = later.result(timeout=90)
    assert sb.exec("echo admitted").stdout == "admitted\n"

    # The memory budget: 0.03 x this host's memory is room for two 512 MiB sandboxes at most.
    client = limited_clean.restart("--memory-overcommit", "0.03")
    for i in made[1:] + [sb.id]:
        client.sandboxes.delete(i)
    wait_until(lambda: not client.sandboxes.list(), timeout=30, what="the sandboxes to go")
    total_mib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]) // 1024
    room = int(total_mib * 0.03) // 512
    for _ in range(room):
        assert create(0).status_code == 201
    r = create(0)
    assert r.status_code == 503 and "MiB" in r.json()["error"] and r.headers.get("Retry-After"), r.text


def test_workspace_quotas_answer_429_naming_the_quota(limited_clean):
    client = limited_clean.restart("--workspace-max-sandboxes", "2", "--workspace-max-snapshot-gb", "0.000001")
    s = raw_session(limited_clean.key())
    first = client.sandboxes.create(template="base")
    client.sandboxes.create(template="base")
    r = s.post(f"{limited_clean.url}/v1/sandboxes", json={"template": "base"}, timeout=60)
    assert r.status_code == 429 and "Retry-After" not in r.headers, (r.status_code, r.headers)
    assert "workspace quota" in r.json()["error"] and "2 sandboxes" in r.json()["error"], r.text
    r = s.post(f"{limited_clean.url}/v1/sandboxes/{first.id}/fork", timeout=60)
    assert r.status_code == 429 and "workspace quota" in r.json()["error"], r.text
    # Snapshots: the first one fits (nothing was kept), the next is past the byte quota.
    assert s.post(f"{limited_clean.url}/v1/sandboxes/{first.id}/snapshots", timeout=120).status_code == 201
    r = s.post(f"{limited_clean.url}/v1/sandboxes/{first.id}/snapshots", timeout=120)
    assert r.status_code == 429 and "snapshots hold" in r.json()["error"], r.text
    for snap in s.get(f"{limited_clean.url}/v1/snapshots", timeout=30).json()["snapshots"]:
        s.delete(f"{limited_clean.url}/v1/snapshots/{snap['id']}", timeout=30)


def test_requests_past_the_workspace_rate_limit_answer_429_with_retry_after(limited_clean):
    limited_clean.restart("--rate-limit", "5")
    s = raw_session(limited_clean.key())
    replies = [s.get(f"{limited_clean.url}/v1/sandboxes", timeout=30) for _ in range(40)]
    limited = [r for r in replies if r.status_code == 429]
    assert limited and all(r.status_code in (200, 429) for r in replies), [r.status_code for r in replies]
    wait = int(limited[0].headers["Retry-After"])
    assert wait >= 1 and "rate limit" in limited[0].json()["error"]
    time.sleep(wait)
    assert s.get(f"{limited_clean.url}/v1/sandboxes", timeout=30).status_code == 200


def test_low_host_disk_refuses_creates_forks_snapshots_and_hibernations_with_507(limited_clean):
    client = limited_clean.restart()
    sb = client.sandboxes.create(template="base")
    # Nothing is written to fill the disk: the reserve is raised above what is free.
    client = limited_clean.restart("--disk-reserve-percent", "99.9", "--disk-reserve-max-gb", "100000")
    s = raw_session(limited_clean.key())
    base = f"{limited_clean.url}/v1/sandboxes"
    for method, path, body in [
        ("POST", "", {"template": "base"}),
        ("POST", f"/{sb.id}/fork", None),
        ("POST", f"/{sb.id}/snapshots", None),
        ("POST", f"/{sb.id}/hibernate", None),
    ]:
        r = s.request(method, base + path, json=body, timeout=60)
        assert r.status_code == 507 and "host storage low" in r.json()["error"], (path, r.status_code, r.text)
    r = s.post(f"{limited_clean.url}/v1/templates/build", data={"name": "low-disk", "dockerfile": "FROM base\n"}, timeout=60)
    assert r.status_code == 507 and "host storage low" in r.json()["error"], r.text
    again = client.sandboxes.get(sb.id)
    assert again.status == "running" and again.exec("echo fine").stdout == "fine\n"


def test_a_template_build_on_a_full_host_waits_for_room_then_runs(limited_clean):
    """Build sandboxes go through host admission like creates (issue 8 x issue 13): on a full
    host a build's RUN step waits, saying so in its log, and runs once room is made."""
    client = limited_clean.restart("--max-sandboxes", "1")
    s = raw_session(limited_clean.key())
    api = limited_clean.url
    sb = client.sandboxes.create(template="base")
    r = s.post(f"{api}/v1/templates/build", data={"name": "waits-for-room", "dockerfile": "FROM base\nRUN echo built > /built\n"}, timeout=60)
    assert r.status_code == 202, r.text
    build = r.json()["id"]

    def log() -> str:
        return s.get(f"{api}/v1/templates/builds/{build}/logs", timeout=30).text

    wait_until(lambda: "waiting for room on the host" in log(), timeout=60, what="the build to wait for room")
    assert s.get(f"{api}/v1/templates/builds/{build}", timeout=30).json()["status"] == "running"
    client.sandboxes.delete(sb.id)
    wait_until(
        lambda: s.get(f"{api}/v1/templates/builds/{build}", timeout=30).json()["status"] in ("done", "failed"),
        timeout=180,
        what="the build to end",
    )
    got = s.get(f"{api}/v1/templates/builds/{build}", timeout=30).json()
    assert got["status"] == "done", (got, log())
    made = client.sandboxes.create(template="waits-for-room")
    assert made.exec("cat /built").stdout == "built\n"
    client.sandboxes.delete(made.id)
    assert s.delete(f"{api}/v1/templates/waits-for-room", timeout=30).status_code in (200, 204)
# --- 1: disk quota per sandbox ------------------------------------------------------------------


def _image_bytes(data_dir: Path, sandbox_id: str) -> int:
    """Host bytes held by the sandbox's disk image (allocated blocks of the sparse file)."""
    from lifecycle_fixtures import instance_id

    iid = instance_id(data_dir, sandbox_id)
    return (data_dir / "instances" / iid / "disk.img").stat().st_blocks * 512


def _host_free(path: Path) -> int:
    import os

    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_a_sandbox_cannot_write_past_its_disk_and_the_host_never_pays_more(server, api):
    from pandastack import Sandbox, ServerError

    r = api("POST", "/v1/sandboxes", json={"template": "base", "disk_mb": 512})
    assert r.status_code == 201 and r.json()["disk_mb"] == 512, r.text
    sb = Sandbox.get(r.json()["id"])
    free_before = _host_free(server.data_dir)

    # 1 GB into the root: ENOSPC at the disk's size, the sandbox lives on.
    out = sb.exec("dd if=/dev/zero of=/root/fill bs=1M count=1000 2>&1; echo rc=$?", timeout_seconds=120)
    assert "No space left on device" in out.stdout and "rc=0" not in out.stdout, out.stdout
    # /tmp is on the same disk (not a RAM tmpfs).
    out = sb.exec("dd if=/dev/zero of=/tmp/fill bs=1M count=100 2>&1; grep Shmem: /proc/meminfo")
    assert "No space left on device" in out.stdout, out.stdout
    shmem_kib = int(out.stdout.split("Shmem:")[1].split()[0])
    assert shmem_kib < 32 * 1024, f"/tmp writes went to RAM: Shmem {shmem_kib} KiB"
    assert sb.exec("echo still here").stdout == "still here\n"
    held = _image_bytes(server.data_dir, sb.id)
    assert held <= 540 * MIB, f"the host holds {held >> 20} MiB for a 512 MiB disk"
    assert free_before - _host_free(server.data_dir) < 700 * MIB

    m = api("GET", f"/v1/sandboxes/{sb.id}/metrics").json()
    assert m["disk_limit_bytes"] <= 512 * MIB and m["disk_used_bytes"] > 400 * MIB, m

    # The filesystem API says so too, with a 507 that names the disk.
    with pytest.raises(ServerError) as e:
        sb.filesystem.write("/workspace/more.bin", b"x" * (2 * MIB))
    assert "disk is full" in str(e.value)
    assert sb.exec("rm /root/fill /tmp/fill && echo freed").stdout == "freed\n"
    sb.filesystem.write("/workspace/more.bin", b"x" * (2 * MIB))
    # gVisor gives the deleted files' blocks back to its overlay file store in the background.
    wait_until(
        lambda: api("GET", f"/v1/sandboxes/{sb.id}/metrics").json()["disk_used_bytes"] < 100 * MIB,
        timeout=30, interval=0.5, what="the freed space to show in disk_used_bytes",
    )

    # Bad sizes are a 400 naming the field; the SDK's creates get the server default (10 GiB).
    assert_json_error(api("POST", "/v1/sandboxes", json={"template": "base", "disk_mb": 1}), "disk_mb", status=400)
    assert_json_error(api("POST", "/v1/sandboxes", json={"template": "base", "disk_mb": 10**7}), "disk_mb", status=400)
    default = Sandbox.create(template="base")
    assert api("GET", f"/v1/sandboxes/{default.id}").json()["disk_mb"] == 10240
    assert 9 * 1024 * MIB < api("GET", f"/v1/sandboxes/{default.id}/metrics").json()["disk_limit_bytes"] <= 10240 * MIB


def test_forks_get_their_own_copy_within_the_same_limit(server, api):
    from lifecycle_fixtures import instance_id
    from pandastack import Sandbox

    r = api("POST", "/v1/sandboxes", json={"template": "base", "disk_mb": 512})
    parent = Sandbox.get(r.json()["id"])
    assert parent.exec("head -c 200000000 /dev/urandom > /root/data && md5sum /root/data > /root/sum").exit_code == 0
    children = parent.fork_tree(2)
    for c in children:
        assert api("GET", f"/v1/sandboxes/{c.id}").json()["disk_mb"] == 512
        assert c.exec("md5sum -c /root/sum").stdout == "/root/data: OK\n"
        # Its own disk, with its own limit: filling it does not touch the parent's.
        out = c.exec("dd if=/dev/zero of=/root/fill bs=1M count=1000 2>&1")
        assert "No space left on device" in out.stdout, out.stdout
        assert _image_bytes(server.data_dir, c.id) <= 540 * MIB
    assert parent.exec("md5sum -c /root/sum && df -k / >/dev/null && echo ok").stdout.endswith("ok\n")
    assert _image_bytes(server.data_dir, parent.id) < 300 * MIB

    # The parent goes first, while its children (started after its disk was mounted) live:
    # its disk is unmounted and its loop device detached everywhere, so the host gets the
    # space back at once (no copy of the mount stays behind in a child's mount namespace).
    parent_image = server.data_dir / "instances" / instance_id(server.data_dir, parent.id) / "disk.img"
    assert parent_image in _loop_images(server.data_dir)
    for c in children:
        c.promote()
    parent.kill()
    wait_until(lambda: parent_image not in _loop_images(server.data_dir), timeout=10, what="parent's loop device detached")
    child_images = {server.data_dir / "instances" / instance_id(server.data_dir, c.id) / "disk.img" for c in children}
    for c in children:
        assert c.exec("md5sum -c /root/sum").stdout == "/root/data: OK\n"
        c.kill()
    wait_until(lambda: not child_images & _loop_images(server.data_dir), timeout=10, what="children's loop devices detached")


def _loop_images(data_dir: Path) -> set[Path]:
    """Backing files under `data_dir` of the host's loop devices (deleted ones included)."""
    found = set()
    for dev in Path("/sys/block").glob("loop*"):
        try:
            backing = (dev / "loop" / "backing_file").read_text().strip()
        except OSError:
            continue
        path = Path(backing.removesuffix(" (deleted)"))
        if path.is_relative_to(data_dir):
            found.add(path)
    return found


def test_snapshot_restore_and_hibernate_wake_keep_the_disk_and_its_limit(server, api):
    from pandastack import Sandbox

    r = api("POST", "/v1/sandboxes", json={"template": "base", "disk_mb": 256, "persistent": True})
    assert r.status_code == 201, r.text
    sb = Sandbox.get(r.json()["id"])
    write = "head -c 30000000 /dev/urandom > /root/data && md5sum /root/data > /tmp/sum && echo ok"
    assert sb.exec(write).stdout == "ok\n"
    snap = sb.snapshot()

    def bounded_with_data(s):
        assert api("GET", f"/v1/sandboxes/{s.id}").json()["disk_mb"] == 256
        assert s.exec("md5sum -c /tmp/sum").stdout == "/root/data: OK\n"
        out = s.exec("dd if=/dev/zero of=/root/fill bs=1M count=400 2>&1", timeout_seconds=120)
        assert "No space left on device" in out.stdout, out.stdout
        assert _image_bytes(server.data_dir, s.id) <= 280 * MIB
        assert s.exec("rm /root/fill && echo freed").stdout == "freed\n"

    restored = Sandbox.create(from_snapshot=snap)
    bounded_with_data(restored)
    restored.kill()

    sb.hibernate()
    assert api("GET", f"/v1/sandboxes/{sb.id}").json()["status"] == "hibernated"
    sb.wake()
    bounded_with_data(sb)
    sb.kill()
