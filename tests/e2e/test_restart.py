"""A `kill -9` of the server loses nothing: after a restart on the same data dir, a sandbox
created before still answers exec, keeps its files, and its kernel keeps its variables (the
same code context id goes on working: neither SDK can reattach to a context any other way)."""

from __future__ import annotations

import time


def test_sandbox_and_kernel_survive_kill_9_of_the_server(server):
    from pandastack import CodeContext, Sandbox

    sb = Sandbox.create(template="code-interpreter", ttl_seconds=3600, metadata={"job": "restart"})
    ctx = sb.create_code_context()
    ex = ctx.run_code("import pandas as pd\nsecret = 'kept-1234'\nframe = pd.DataFrame({'v': range(100)})\nint(frame['v'].sum())")
    assert ex.text == "4950", ex
    sb.filesystem.write("/workspace/before.txt", b"written before the crash")
    base = Sandbox.create(template="base")
    old_pid = server.pid

    server.restart()
    assert server.pid != old_pid

    again = Sandbox.get(sb.id)
    assert again.status == "running", again
    assert again.metadata == {"job": "restart"}, again
    assert again.template == "code-interpreter"
    assert {s.id for s in Sandbox.list()} >= {sb.id, base.id}

    assert again.exec("echo alive").stdout == "alive\n"
    assert again.filesystem.read("/workspace/before.txt") == b"written before the crash"
    assert Sandbox.get(base.id).exec("echo base alive").stdout == "base alive\n"

    same = CodeContext(again, ctx.id)
    ex = same.run_code("secret, int(frame['v'].sum())")
    assert ex.error is None, ex.error
    assert ex.text == "('kept-1234', 4950)", ex

    # The restarted server creates and kills sandboxes as before.
    start = time.monotonic()
    fresh = Sandbox.create(template="base")
    assert fresh.exec("echo new").stdout == "new\n"
    assert time.monotonic() - start < 30
    fresh.kill()
    sb.kill()
    assert sb.id not in {s.id for s in Sandbox.list()}
