"""Issue 14: the MCP server, driven by the official Python MCP client (PyPI `mcp`) over both
transports: Streamable HTTP at /mcp on the session's server (bearer key), and stdio through
`pandastack mcp` started as a subprocess (PANDASTACK_API / PANDASTACK_API_KEY), as a desktop
agent host starts it. Each transport runs the same flow against real sandboxes: list the tools,
create a sandbox, run code twice with the kernel's state kept, get a matplotlib chart back as
PNG image content, write and read a file, kill the sandbox. Then what must not work: another
workspace's sandbox, a missing key, API errors (as tool errors with the API's message), and
the per-workspace rate limit.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
import requests
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

TOOLS = {
    "create_sandbox", "list_sandboxes", "kill_sandbox", "run_code", "exec", "read_file",
    "write_file", "list_files", "snapshot", "restore", "fork", "pause", "resume", "list_ports",
    "preview_url", "create_database", "list_databases", "database_connection", "delete_database",
    "create_volume", "list_volumes", "delete_volume",
}


@asynccontextmanager
async def http_session(server, key: str):
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(300.0)) as http:
        async with streamable_http_client(f"{server.url}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


@asynccontextmanager
async def stdio_session(server, key: str, calls_per_second: str | None = None):
    env = {"PANDASTACK_API": server.url, "PANDASTACK_API_KEY": key, "HOME": os.environ.get("HOME", "/root")}
    if calls_per_second is not None:
        env["PANDASTACK_MCP_CALLS_PER_SECOND"] = calls_per_second
    params = StdioServerParameters(command=str(server.binary), args=["mcp"], env=env)
    with open(server.log.with_name("mcp-stdio.log"), "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def texts(result) -> list[str]:
    return [c.text for c in result.content if c.type == "text"]


async def call(session, name: str, /, **arguments):
    return await session.call_tool(name, arguments)


async def call_json(session, name: str, /, **arguments):
    result = await call(session, name, **arguments)
    assert not result.is_error, (name, texts(result))
    return json.loads(texts(result)[0])


async def the_flow(session) -> None:
    listed = await session.list_tools()
    names = {t.name for t in listed.tools}
    assert TOOLS <= names, names
    run_code = next(t for t in listed.tools if t.name == "run_code")
    assert set(run_code.input_schema["required"]) == {"sandbox_id", "code"}, run_code.input_schema
    assert run_code.description and "persistent" in run_code.description

    sb = await call_json(session, "create_sandbox", template="code-interpreter", ttl_seconds=600)
    sid = sb["id"]
    assert sb["status"] == "running" and sb["template"] == "code-interpreter", sb
    assert sid in {s["id"] for s in await call_json(session, "list_sandboxes")}

    first = await call(session, "run_code", sandbox_id=sid, code="import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nx = 41")
    assert not first.is_error, texts(first)
    second = await call(session, "run_code", sandbox_id=sid, code="x + 1 + int(df['a'].sum()) - 6")
    assert not second.is_error and texts(second) == ["42"], texts(second)

    chart = await call(session, "run_code", sandbox_id=sid, code="import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
    images = [c for c in chart.content if c.type == "image"]
    assert not chart.is_error and len(images) == 1, chart.content
    assert images[0].mime_type == "image/png"
    png = base64.b64decode(images[0].data)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000, len(png)

    raised = await call(session, "run_code", sandbox_id=sid, code="1 / 0")
    assert raised.is_error and any("ZeroDivisionError" in t for t in texts(raised)), texts(raised)
    assert texts(await call(session, "run_code", sandbox_id=sid, code="x")) == ["41"]  # state survived

    wrote = await call(session, "write_file", sandbox_id=sid, path="/workspace/notes/hello.txt", content="héllo from mcp\n")
    assert not wrote.is_error and texts(wrote) == ["wrote 16 bytes to /workspace/notes/hello.txt"], texts(wrote)
    read = await call(session, "read_file", sandbox_id=sid, path="/workspace/notes/hello.txt")
    assert not read.is_error and texts(read) == ["héllo from mcp\n"], read.content
    blob = bytes(range(256))
    await call(session, "write_file", sandbox_id=sid, path="/workspace/blob.bin", content=base64.b64encode(blob).decode(), encoding="base64")
    back = await call(session, "read_file", sandbox_id=sid, path="/workspace/blob.bin")
    assert base64.b64decode(back.content[0].resource.blob) == blob
    entries = await call_json(session, "list_files", sandbox_id=sid, path="/workspace/notes")
    assert [e["name"] for e in entries] == ["hello.txt"], entries
    out = await call_json(session, "exec", sandbox_id=sid, command="cat /workspace/notes/hello.txt | wc -c")
    assert out["stdout"].strip() == "16" and out["exit_code"] == 0, out

    killed = await call(session, "kill_sandbox", sandbox_id=sid)
    assert texts(killed) == [f"killed sandbox {sid}"]
    gone = await call(session, "run_code", sandbox_id=sid, code="1")
    assert gone.is_error and any("not found" in t and "404" in t for t in texts(gone)), texts(gone)
    assert sid not in {s["id"] for s in await call_json(session, "list_sandboxes")}


def test_database_tools(server):
    """An agent makes a database, hands its URL to a sandbox's command, and deletes it."""

    async def main():
        async with http_session(server, server.admin_key()) as session:
            db = await call_json(session, "create_database", label="mcp-memory")
            assert db["status"] == "running" and db["database"] == "mcp_memory", db
            url = texts(await call(session, "database_connection", database_id=db["id"]))[0]
            assert url == db["connection_url"], url
            listed = await call_json(session, "list_databases")
            assert [d["id"] for d in listed if d["id"] == db["id"]] and "password" not in listed[0], listed
            sb = await call_json(session, "create_sandbox", template="base", ttl_seconds=600)
            out = await call_json(session, "exec", sandbox_id=sb["id"], command='psql "$DATABASE_URL" -Atc "SELECT 6 * 7"',
                                  env={"DATABASE_URL": url})
            assert out["exit_code"] == 0 and out["stdout"].strip() == "42", out
            await call(session, "kill_sandbox", sandbox_id=sb["id"])
            gone = await call(session, "delete_database", database_id=db["id"])
            assert texts(gone) == [f"deleted database {db['id']}"]
            missing = await call(session, "database_connection", database_id=db["id"])
            assert missing.is_error and any("404" in t for t in texts(missing)), texts(missing)

    anyio.run(main)


def test_volume_tools(server):
    """An agent keeps a working directory on a volume across sandboxes: one sandbox writes
    there, a later one (mounting it read-only) reads it back; a delete is refused while a
    sandbox holds the volume and works once none does."""
    name = f"mcp-work-{uuid.uuid4().hex[:8]}"

    async def main():
        async with http_session(server, server.admin_key()) as session:
            vol = await call_json(session, "create_volume", name=name, size_mb=64)
            assert vol["name"] == name and vol["size_mb"] == 64, vol
            first = await call_json(session, "create_sandbox", template="base", ttl_seconds=600,
                                    volumes=[{"name": name}])
            out = await call_json(session, "exec", sandbox_id=first["id"],
                                  command=f"echo kept > /mnt/{name}/notes.txt && sync")
            assert out["exit_code"] == 0, out
            held = await call(session, "delete_volume", name=name)
            assert held.is_error and any("409" in t for t in texts(held)), texts(held)
            await call(session, "kill_sandbox", sandbox_id=first["id"])
            second = await call_json(session, "create_sandbox", template="base", ttl_seconds=600,
                                     volumes=[{"name": name, "read_only": True}])
            out = await call_json(session, "exec", sandbox_id=second["id"], command=f"cat /mnt/{name}/notes.txt")
            assert out["stdout"] == "kept\n", out
            await call(session, "kill_sandbox", sandbox_id=second["id"])
            assert name in {v["name"] for v in await call_json(session, "list_volumes")}
            gone = await call(session, "delete_volume", name=name)
            assert texts(gone) == [f"deleted volume {name}"], texts(gone)
            assert name not in {v["name"] for v in await call_json(session, "list_volumes")}

    anyio.run(main)


def test_streamable_http_flow(server):
    async def main():
        async with http_session(server, server.admin_key()) as session:
            await the_flow(session)

    anyio.run(main)


def test_stdio_flow(server):
    async def main():
        async with stdio_session(server, server.admin_key()) as session:
            await the_flow(session)

    anyio.run(main)


def test_lifecycle_tools_snapshot_restore_fork(server):
    async def main():
        async with http_session(server, server.admin_key()) as session:
            sb = await call_json(session, "create_sandbox")
            sid = sb["id"]
            assert texts(await call(session, "run_code", sandbox_id=sid, code="total = 6; total")) == ["6"]
            assert (await call_json(session, "pause", sandbox_id=sid))["status"] == "paused"
            busy = await call(session, "exec", sandbox_id=sid, command="true")
            assert busy.is_error and any("paused" in t and "409" in t for t in texts(busy)), texts(busy)
            assert (await call_json(session, "resume", sandbox_id=sid))["status"] == "running"
            snap = await call_json(session, "snapshot", sandbox_id=sid)
            assert snap["id"].startswith("snap-"), snap
            restored = await call_json(session, "restore", snapshot_id=snap["id"])
            assert restored["id"] != sid and restored["from_snapshot"] == snap["id"], restored
            assert texts(await call(session, "run_code", sandbox_id=restored["id"], code="print(total)")) == ["6\n"]
            kids = await call_json(session, "fork", sandbox_id=sid, count=2, metadata={"try": "mcp"})
            assert len(kids) == 2 and all(k["metadata"]["parent_id"] == sid for k in kids), kids
            assert texts(await call(session, "run_code", sandbox_id=kids[1]["id"], code="total * 7")) == ["42"]
            for s in [k["id"] for k in kids] + [restored["id"], sid]:
                await call(session, "kill_sandbox", sandbox_id=s)
            deleted = await anyio.to_thread.run_sync(
                lambda: __import__("requests").delete(
                    f"{server.url}/v1/snapshots/{snap['id']}",
                    headers={"Authorization": f"Bearer {server.admin_key()}"},
                    timeout=60,
                )
            )
            assert deleted.status_code == 204

    anyio.run(main)


def test_workspaces_keys_and_errors(server, workspace_b_key):
    from pandastack import Sandbox

    mine = Sandbox.create(template="base")

    async def main():
        # Workspace B sees neither the sandbox nor its listing.
        async with http_session(server, workspace_b_key) as session:
            assert mine.id not in {s["id"] for s in await call_json(session, "list_sandboxes")}
            for name, args in [("exec", {"command": "id"}), ("read_file", {"path": "/etc/hostname"}), ("kill_sandbox", {})]:
                r = await call(session, name, sandbox_id=mine.id, **args)
                assert r.is_error and any("not found" in t for t in texts(r)), (name, texts(r))
        # API errors are tool errors carrying the API's message; bad arguments too.
        async with http_session(server, server.admin_key()) as session:
            r = await call(session, "create_sandbox", ttl_seconds=-1)
            assert r.is_error and any("ttl_seconds" in t and "400" in t for t in texts(r)), texts(r)
            r = await call(session, "exec", sandbox_id="not-a-uuid", command="true")
            assert r.is_error and any("not a UUID" in t for t in texts(r)), texts(r)
            r = await call(session, "read_file", sandbox_id=mine.id, path="/etc")
            assert r.is_error and any("directory" in t for t in texts(r)), texts(r)
            r = await call(session, "exec", sandbox_id=mine.id)
            assert r.is_error and any("command" in t for t in texts(r)), texts(r)

    anyio.run(main)
    assert Sandbox.get(mine.id).status == "running"

    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    hdrs = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    for auth in [None, "Bearer pds_not_a_key_at_all_000000"]:
        h = dict(hdrs, **({"Authorization": auth} if auth else {}))
        resp = requests.post(f"{server.url}/mcp", json=body, headers=h, timeout=30)
        assert resp.status_code == 401 and "error" in resp.json(), (auth, resp.status_code, resp.text)


def test_tool_calls_are_rate_limited_per_workspace(server):
    async def main():
        # 0.25 calls/s: a burst of one, then a wait of 4 s. The second call is refused unless the
        # first took 4 s; after the sleep the bucket has refilled however slow the machine is.
        async with stdio_session(server, server.admin_key(), calls_per_second="0.25") as session:
            assert not (await call(session, "list_sandboxes")).is_error
            limited = await call(session, "list_sandboxes")
            assert limited.is_error and any("rate limited" in t for t in texts(limited)), texts(limited)
            await anyio.sleep(4.2)
            assert not (await call(session, "list_sandboxes")).is_error

    anyio.run(main)


# One tool call per workspace every 100 s, bursts of one: whatever the load, a workspace's second
# call within the test is refused, so nothing here depends on timing.
MCP_CALLS_PER_SECOND = "0.01"


@pytest.fixture(scope="module")
def mcp_limited_server(server):
    """A server of this file on its own data dir (the baked `base` template hard-linked, no warm
    pool, no restore targets) with `--mcp-calls-per-second 0.01`."""
    from lifecycle_fixtures import SecondServer, _copy_current_template, scrub_data_dir

    data_dir = server.data_dir.parent / f"mcp-server-{os.getpid()}"
    scrub_data_dir(data_dir)
    (data_dir / "templates").mkdir(parents=True)
    _copy_current_template(server.data_dir / "templates", data_dir / "templates", "base")
    srv = SecondServer(
        server.binary, data_dir, server.log.with_name("server-mcp-limited.log"),
        ["--pool-size", "0", "--restore-targets", "0", "--mcp-calls-per-second", MCP_CALLS_PER_SECOND],
    )
    try:
        srv.start()
        yield srv
    finally:
        srv.teardown()


def _workspace_key(srv, name: str) -> str:
    out = subprocess.run(
        [str(srv.binary), "admin", "workspace-create", "--name", name, "--data-dir", str(srv.data_dir)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    return next(l.split("=", 1)[1].strip() for l in out.splitlines() if l.startswith("export PANDASTACK_API_KEY="))


def test_http_rate_limit_is_per_workspace(mcp_limited_server):
    """Workspace A's second tool call is refused (a tool error naming the wait, not a protocol
    failure); workspace B's first call right after still passes and its second is refused too.
    The MCP limit is a bucket of its own: A's REST requests are still answered (each tool call
    also spends at least one request of the workspace's REST rate limit, `--rate-limit`, 100/s by default,
    which is far above the MCP default of 20 calls/s, so tool calls meet the MCP limit first)."""
    srv = mcp_limited_server
    key_a, key_b = srv.admin_key(), _workspace_key(srv, f"mcp-b-{os.getpid()}")

    async def main():
        async with http_session(srv, key_a) as a, http_session(srv, key_b) as b:
            first = await call(a, "list_sandboxes")
            assert not first.is_error and json.loads(texts(first)[0]) == [], texts(first)
            refused = await call(a, "list_sandboxes")
            assert refused.is_error and any("rate limited" in t and "retry after" in t for t in texts(refused)), texts(refused)
            assert not (await call(b, "list_sandboxes")).is_error
            assert (await call(b, "list_sandboxes")).is_error
            assert (await call(a, "list_sandboxes")).is_error

    anyio.run(main)
    rest = requests.get(f"{srv.url}/v1/sandboxes", headers={"Authorization": f"Bearer {key_a}"}, timeout=30)
    assert rest.status_code == 200 and rest.json() == [], (rest.status_code, rest.text)
