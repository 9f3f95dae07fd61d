"""Issue 4, server side: the lifecycle events stream (`GET /v1/events`, SSE) and one sandbox's
event history, Prometheus metrics (`GET /metrics`) and per-sandbox metrics, sandbox logs (the
Python SDK's `logs()`), streaming exec (the Python SDK's `exec_stream`), and environment
variables injected at create (`envs`, raw HTTP: the Python SDK has no argument for them) that
never show up in listings or in the server's log.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import uuid

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from lifecycle_fixtures import EventStream, raw_session, wait_until

# --- events -------------------------------------------------------------------------------


def test_events_stream_create_pause_resume_hibernate_wake_kill_in_order_within_100ms(server, workspace_b_key):
    from pandastack import Client, Sandbox

    stream_a = EventStream(server.url, server.admin_key())
    stream_b = EventStream(server.url, workspace_b_key)
    try:
        calls: list[tuple[str, float, float]] = []  # (what, called at, returned at)

        def timed(what: str, fn):
            start = time.monotonic()
            out = fn()
            calls.append((what, start, time.monotonic()))
            return out

        sb = timed("create", lambda: Sandbox.create(template="base"))
        timed("pause", sb.pause)
        timed("resume", sb.resume)
        timed("hibernate", sb.hibernate)
        timed("wake", sb.wake)
        timed("kill", sb.kill)

        wait_until(lambda: len(stream_a.of(sb.id)) >= 6, 5, 0.02, what="6 events of the sandbox")
        time.sleep(0.3)  # nothing more may come
        got = stream_a.of(sb.id)
        transitions = [(e["from"], e["to"]) for _, e in got]
        assert transitions == [
            ("creating", "running"),
            ("running", "paused"),
            ("paused", "running"),
            ("running", "hibernated"),
            ("hibernated", "running"),
            ("running", "deleted"),
        ], transitions
        for (what, called, returned), (arrived, ev) in zip(calls, got):
            assert called <= arrived <= returned + 0.100, (
                f"{what}: event {ev['seq']} arrived {1000 * (arrived - returned):+.0f} ms after the call returned"
            )
            assert set(ev) >= {"seq", "sandbox_id", "from", "to", "cause", "at"}, ev
            assert isinstance(ev["at"], str) and ev["at"].endswith("Z"), ev
        seqs = [e["seq"] for _, e in got]
        assert seqs == sorted(seqs) and len(set(seqs)) == 6, seqs
        raw_ids = [r.get("id") for r in stream_a.raw if '"sandbox_id":"' + sb.id in r["data"].replace(" ", "")]
        assert raw_ids == [str(s) for s in seqs], raw_ids  # SSE `id:` is the seq (for Last-Event-ID)

        # One sandbox's history: the same transitions, the same seqs.
        hist = raw_session(server.admin_key()).get(f"{server.url}/v1/sandboxes/{sb.id}/events", timeout=30)
        assert hist.status_code == 200, hist.text
        assert [(e["seq"], e["from"], e["to"]) for e in hist.json()] == [(e["seq"], e["from"], e["to"]) for _, e in got]
        other = raw_session(workspace_b_key).get(f"{server.url}/v1/sandboxes/{sb.id}/events", timeout=30)
        assert other.status_code == 404, other.text

        # `since` replays what came after a seq, then goes on live.
        replay = EventStream(server.url, server.admin_key(), since=seqs[0] - 1)
        try:
            wait_until(lambda: len(replay.of(sb.id)) >= 6, 5, 0.02, what="the replay")
            assert [e["seq"] for _, e in replay.of(sb.id)] == seqs
        finally:
            replay.close()
        tail = EventStream(server.url, server.admin_key(), since=seqs[2])
        try:
            wait_until(lambda: len(tail.of(sb.id)) >= 3, 5, 0.02, what="the replay after seq 3")
            time.sleep(0.2)
            assert [e["seq"] for _, e in tail.of(sb.id)] == seqs[3:]
        finally:
            tail.close()

        # Workspace B saw none of it, but does see its own sandbox (and A does not).
        assert stream_b.all() == [], stream_b.all()
        b_box = Client(api_url=server.url, api_key=workspace_b_key).sandboxes.create(template="base")
        wait_until(lambda: stream_b.of(b_box.id), 5, 0.02, what="workspace B's own event")
        time.sleep(0.2)
        assert {e["sandbox_id"] for _, e in stream_b.all()} == {b_box.id}
        assert not stream_a.of(b_box.id)
        b_box.kill()
    finally:
        stream_a.close()
        stream_b.close()


# --- metrics ------------------------------------------------------------------------------


def _scrape(url: str) -> tuple[dict[str, str], list[tuple[str, dict, float]]]:
    # /metrics needs an API key unless the server runs with --public-metrics (issue 8).
    key = os.environ["PANDASTACK_API_KEY"]
    r = requests.get(f"{url}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 200, r.text[:300]
    assert r.headers.get("content-type", "").startswith("text/plain"), r.headers
    types: dict[str, str] = {}
    samples: list[tuple[str, dict, float]] = []
    for fam in text_string_to_metric_families(r.text):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples.append((s.name, dict(s.labels), s.value))
    return types, samples


def _sum(samples, name: str, **labels) -> float:
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == want for k, want in labels.items()))


def test_prometheus_metrics_parse_and_move_when_sandboxes_are_made(server):
    from pandastack import Sandbox

    types, before = _scrape(server.url)
    assert types.get("pandastack_sandboxes_created") == "counter", types
    assert types.get("pandastack_http_request_duration_seconds") == "histogram", types
    assert types.get("pandastack_lifecycle_duration_seconds") == "histogram", types
    assert types.get("pandastack_sandboxes") == "gauge", types

    made = [Sandbox.create(template="base") for _ in range(2)]
    _, after = _scrape(server.url)
    created = "pandastack_sandboxes_created_total"
    assert _sum(after, created, template="base") - _sum(before, created, template="base") == 2
    routes = {lab.get("route") for n, lab, _ in after if n == "pandastack_http_request_duration_seconds_count"}
    create_route = next((r for r in routes if r in ("/v1/sandboxes", "/sandboxes")), None)
    assert create_route, routes  # by matched route, never by raw path (no ids in labels)
    assert not any(r and any(sb.id in r for sb in made) for r in routes), routes
    req = dict(name="pandastack_http_request_duration_seconds_count", method="POST", route=create_route, status="201")
    assert _sum(after, **req) - _sum(before, **req) == 2
    op = dict(name="pandastack_lifecycle_duration_seconds_count", op="create")
    assert _sum(after, **op) - _sum(before, **op) == 2
    running = _sum(after, "pandastack_sandboxes", state="running")
    assert running >= 2

    for sb in made:
        sb.kill()
    _, gone = _scrape(server.url)
    assert _sum(gone, "pandastack_sandboxes", state="running") == running - 2
    kill = dict(name="pandastack_lifecycle_duration_seconds_count", op="kill")
    assert _sum(gone, **kill) - _sum(after, **kill) == 2


def test_sandbox_metrics_report_memory_and_cpu(server):
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    s = raw_session(server.admin_key())
    m0 = s.get(f"{server.url}/v1/sandboxes/{sb.id}/metrics", timeout=30)
    assert m0.status_code == 200, m0.text
    m0 = m0.json()
    assert m0["sandbox_id"] == sb.id and m0["status"] == "running", m0
    assert sb.exec("python3 -c 'sum(range(3_000_000))'").exit_code == 0
    m1 = s.get(f"{server.url}/v1/sandboxes/{sb.id}/metrics", timeout=30).json()
    assert m1["cpu_ns"] > m0["cpu_ns"], (m0, m1)
    # A running sandbox holds tens of MiB on the host (the harness's own runsc processes
    # show it in /proc); the API must report it.
    assert isinstance(m1["memory_bytes"], int) and m1["memory_bytes"] > 1024 * 1024, m1
    sb.kill()


# --- logs ---------------------------------------------------------------------------------


def test_logs_return_what_an_exec_printed_and_follow_yields_a_later_line():
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    m = uuid.uuid4().hex[:8]
    sb.exec(f"echo out-{m}; echo err-{m} >&2")
    lines = list(sb.logs())
    assert f"out-{m}" in lines and f"err-{m}" in lines, lines
    assert f"err-{m}" not in list(sb.logs(stream="stdout"))
    assert f"err-{m}" in list(sb.logs(stream="stderr"))
    sb.create_code_context().run_code(f"print('kernel-{m}')")
    assert f"kernel-{m}" in list(sb.logs()), "a code context's print is not in the logs"

    got: queue.Queue = queue.Queue()

    def follow():
        try:
            for line in sb.logs(follow=True):
                got.put((time.monotonic(), line))
                if line == f"later-{m}":
                    return
        except Exception as e:  # surfaced below
            got.put((time.monotonic(), e))

    threading.Thread(target=follow, daemon=True).start()
    time.sleep(1.0)
    called = time.monotonic()
    sb.exec(f"echo later-{m}")
    returned = time.monotonic()
    seen = []
    deadline = time.monotonic() + 10
    while True:
        at, line = got.get(timeout=max(0.1, deadline - time.monotonic()))
        assert not isinstance(line, Exception), line
        seen.append(line)
        if line == f"later-{m}":
            break
    assert at >= called and at - returned < 1.0, (at - called, at - returned)
    assert f"out-{m}" in seen  # follow starts with the stored lines
    sb.kill()


# --- streaming exec -----------------------------------------------------------------------


def test_exec_stream_delivers_output_as_it_is_produced_and_returns_the_exit_code():
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    chunks: list[tuple[float, str]] = []
    started = time.monotonic()
    code = sb.exec_stream(
        "for i in 1 2 3; do echo $i; sleep 1; done",
        on_stdout=lambda c: chunks.append((time.monotonic(), c)),
    )
    assert code == 0
    assert "".join(c for _, c in chunks) == "1\n2\n3\n", chunks
    t1 = next(t for t, c in chunks if "1" in c)
    t3 = next(t for t, c in chunks if "3" in c)
    # "3" is printed >= 2 s after the command started, which is after `started`: "1" came
    # well before "3" existed.
    assert t1 - started < 1.5, f'"1" arrived {t1 - started:.2f} s after the call'
    assert t3 - t1 > 1.5, f'"1" and "3" arrived {t3 - t1:.2f} s apart: not streamed'

    out, err = [], []
    assert sb.exec_stream("echo bye; echo oops >&2; exit 7", on_stdout=out.append, on_stderr=err.append) == 7
    assert "".join(out) == "bye\n" and "".join(err) == "oops\n", (out, err)
    sb.kill()


# --- envs at create -----------------------------------------------------------------------


def test_envs_at_create_reach_commands_and_kernels_but_no_listing_and_no_server_log(server, api):
    from pandastack import Sandbox

    token = f"t0k-{uuid.uuid4().hex}"
    log_start = server.log.stat().st_size
    envs = {"MY_SECRET": "v4lue", "MY_TOKEN": token}
    r = api("POST", "/v1/sandboxes", json={"template": "base", "envs": envs})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    assert "envs" not in r.json() and "v4lue" not in r.text and token not in r.text, r.text
    sb = Sandbox.get(sid)
    assert sb.exec("echo $MY_SECRET").stdout == "v4lue\n"
    assert sb.exec("echo $MY_TOKEN").stdout == f"{token}\n"
    per_exec = api("POST", f"/v1/sandboxes/{sid}/exec", json={"cmd": "echo $ONLY_HERE $MY_SECRET", "env": {"ONLY_HERE": "x1"}})
    assert per_exec.status_code == 200 and per_exec.json()["stdout"] == "x1 v4lue\n", per_exec.text
    assert sb.exec("echo ${ONLY_HERE:-unset}").stdout == "unset\n"  # exec env is per command

    r = api("POST", "/v1/sandboxes", json={"template": "code-interpreter", "envs": envs})
    assert r.status_code == 201, r.text
    ci = Sandbox.get(r.json()["id"])
    ex = ci.create_code_context().run_code("import os; os.environ['MY_SECRET'], os.environ['MY_TOKEN']")
    assert ex.error is None and ex.text == f"('v4lue', '{token}')", ex

    child = sb.fork()  # a fork carries the environment along
    assert child.exec("echo $MY_TOKEN").stdout == f"{token}\n"

    for path in ["/v1/sandboxes", f"/v1/sandboxes/{sid}", f"/v1/sandboxes/{ci.id}", f"/v1/sandboxes/{child.id}"]:
        body = api("GET", path)
        assert body.status_code == 200, body.text
        assert "v4lue" not in body.text and token not in body.text and "envs" not in body.text, (path, body.text[:500])

    for s in (child, sb, ci):  # the child first: it dies with its parent
        s.kill()
    log = server.log.read_bytes()
    assert token.encode() not in log, "an env value is in the server log"
    assert b"v4lue" not in log[log_start:], "an env value is in the server log"


@pytest.mark.parametrize("bad", [{"": "x"}, {"A=B": "x"}])
def test_envs_with_an_invalid_name_are_a_400(api, bad):
    r = api("POST", "/v1/sandboxes", json={"template": "base", "envs": bad})
    assert r.status_code == 400 and "envs" in r.json()["error"], r.text
