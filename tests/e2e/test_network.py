"""Sandbox networking (issue 7), through the published Python SDK, raw HTTP and the CLI:
egress through NAT with DNS, the policy that blocks the host, other sandboxes and private
ranges unless `allow_out` opens them, listening ports and the authenticated proxy (path- and
host-based, with preview tokens, streaming and upgrades), listeners kept across fork, restore,
hibernate and pause, and nothing of a sandbox's network left on the host after kill, a failed
create, or kill -9 of the server.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from conftest import PREVIEW_SUFFIX
from helpers import assert_json_error
from lifecycle_fixtures import (  # noqa: F401  (new_snapshots_deleted is a fixture)
    SecondServer,
    _copy_current_template,
    new_snapshots_deleted,
    scrub_data_dir,
)
from net_fixtures import (  # noqa: F401  (fixtures)
    PRIVATE_ADDR,
    PRIVATE_PORT,
    curl_code,
    host_addresses,
    host_link_of,
    host_listener,
    links,
    namespaces,
    nft_table,
    private_target,
    server_tag,
    slot_chains,
    start_http_server,
)

# A tiny server for the proxy's streaming and upgrade paths: /stream sends three chunks 0.7 s
# apart; /ws answers 101 and then echoes every byte back.
STREAM_SERVER = r'''
import socket, threading, time
def serve(c):
    f = c.makefile("rb")
    line = f.readline().decode()
    while f.readline() not in (b"\r\n", b""):
        pass
    if line.split()[1].startswith("/ws"):
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        while True:
            d = c.recv(4096)
            if not d:
                break
            c.sendall(d)
    else:
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(3):
            part = f"part{i}\n".encode()
            c.sendall(b"%x\r\n%s\r\n" % (len(part), part))
            time.sleep(0.7)
        c.sendall(b"0\r\n\r\n")
    c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 9000)); s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


def assert_error(resp: requests.Response, status: int, *words: str) -> None:
    """Checks a `{"error": ...}` reply with `status` whose message names each of `words`."""
    assert resp.status_code == status, f"HTTP {resp.status_code}, wanted {status}: {resp.text[:300]}"
    message = resp.json()["error"]
    for w in words:
        assert w.lower() in message.lower(), f"{message!r} does not name {w!r}"


def auth(server) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.admin_key()}"}


def proxy_get(server, sandbox_id: str, path: str, port: int = 8000, **kw) -> requests.Response:
    kw.setdefault("headers", auth(server))
    kw.setdefault("timeout", 30)
    return requests.get(f"{server.url}/v1/sandboxes/{sandbox_id}/proxy/{port}/{path}", **kw)


def test_egress_reaches_the_registry_with_dns_and_every_sandbox_sees_the_same_address(server):
    from pandastack import Sandbox

    a = Sandbox.create(template="base")
    b = Sandbox.create(template="base")
    assert a.guest_ip and b.guest_ip and a.guest_ip != b.guest_ip, (a.guest_ip, b.guest_ip)
    for sb in (a, b):
        inside = sb.exec("ip -4 -o addr show dev eth0").stdout
        assert "10.0.2.100/24" in inside, inside
    r = a.exec("getent hosts pypi.org", timeout_seconds=30)
    assert r.exit_code == 0 and r.stdout.strip(), r
    r = a.exec("python3 -m pip download --no-deps --no-cache-dir -d /tmp/dl six==1.16.0", timeout_seconds=180)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "six-1.16.0" in a.exec("ls /tmp/dl").stdout


def test_ports_proxy_and_previews(server, workspace_b_key):
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    sb.filesystem.write("/srv/who", b"one")
    start_http_server(sb)
    sb.filesystem.write("/opt/stream_server.py", STREAM_SERVER.encode())
    sb.exec("setsid python3 /opt/stream_server.py > /dev/null 2>&1 < /dev/null &")

    # Listed by /ports, and the SDK's preview_urls() read it.
    deadline = time.monotonic() + 20
    while True:
        listed = requests.get(f"{server.url}/v1/sandboxes/{sb.id}/ports", headers=auth(server), timeout=30).json()
        if {p["port"] for p in listed["ports"]} >= {8000, 9000} or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    by_port = {p["port"]: p for p in listed["ports"]}
    assert by_port[8000]["listening"] is True, listed
    assert by_port[8000]["proxy_url"] == f"/v1/sandboxes/{sb.id}/proxy/8000/", listed
    urls = sb.preview_urls()
    assert 8000 in urls and 9000 in urls and f"8000-{sb.id}." in urls[8000], urls

    # Path-based proxy: our key works and is not forwarded; no key or another workspace's fails.
    r = proxy_get(server, sb.id, "who")
    assert (r.status_code, r.text) == (200, "one"), r.text
    assert_json_error(proxy_get(server, sb.id, "who", headers={}), "preview token", status=401)
    other = {"Authorization": f"Bearer {workspace_b_key}"}
    assert proxy_get(server, sb.id, "who", headers=other).status_code == 404
    assert_error(proxy_get(server, sb.id, "", port=8001), 502, "nothing is listening on port 8001")
    sb.exec("setsid python3 -m http.server 8002 --bind 127.0.0.1 > /dev/null 2>&1 < /dev/null &")
    time.sleep(1.5)
    assert_error(proxy_get(server, sb.id, "", port=8002), 502, "loopback only")

    # Bodies stream: the first chunk arrives long before the last one is sent.
    t0 = time.monotonic()
    with proxy_get(server, sb.id, "stream", port=9000, stream=True) as resp:
        assert resp.status_code == 200
        chunks = resp.iter_lines()
        assert next(chunks) == b"part0"
        first = time.monotonic() - t0
        assert list(chunks) == [b"part1", b"part2"]
        total = time.monotonic() - t0
    assert first < total - 1.0, (first, total)

    # An upgrade is spliced both ways.
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
        s.sendall(
            (
                f"GET /v1/sandboxes/{sb.id}/proxy/9000/ws HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                f"Authorization: Bearer {server.admin_key()}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        assert head.startswith(b"HTTP/1.1 101"), head
        s.sendall(b"hello through the proxy")
        echoed = b""
        while len(echoed) < len(b"hello through the proxy"):
            echoed += s.recv(4096)
        assert echoed == b"hello through the proxy"

    # Host-based routing of the SDK's own preview_url(): a preview token in the URL becomes a
    # cookie; nothing else gets in.
    from pandastack import Client

    client = Client()
    client.preview_host = PREVIEW_SUFFIX
    sdk_url = client.sandboxes.get(sb.id).preview_url(8000, scheme="http")
    host = sdk_url.removeprefix("http://")
    assert host == f"8000-{sb.id}.{PREVIEW_SUFFIX}", sdk_url
    plain = requests.get(f"{server.url}/who", headers={"Host": host}, timeout=30)
    assert_json_error(plain, "preview token", status=401)
    tok = requests.post(
        f"{server.url}/v1/sandboxes/{sb.id}/preview-token", json={"port": 8000, "ttl_seconds": 600},
        headers=auth(server), timeout=30,
    )
    assert tok.status_code == 200, tok.text
    body = tok.json()
    assert body["url"].startswith(f"http://{host}:{server.port}/?ps_token="), body
    assert body["expires_at"].endswith("Z"), body
    token = body["token"]
    first = requests.get(f"{server.url}/who", params={"ps_token": token}, headers={"Host": host},
                         allow_redirects=False, timeout=30)
    assert first.status_code == 302 and first.headers["location"] == "/who", first.headers
    cookie = first.headers["set-cookie"].split(";")[0]
    r = requests.get(f"{server.url}/who", headers={"Host": host, "Cookie": cookie}, timeout=30)
    assert (r.status_code, r.text) == (200, "one")
    wrong_port = requests.get(f"{server.url}/who", headers={"Host": f"8001-{sb.id}.{PREVIEW_SUFFIX}", "Cookie": cookie},
                              timeout=30)
    assert wrong_port.status_code == 401, "a token for port 8000 opened port 8001"
    short = requests.post(
        f"{server.url}/v1/sandboxes/{sb.id}/preview-token", json={"port": 8000, "ttl_seconds": 1},
        headers=auth(server), timeout=30,
    ).json()["token"]
    time.sleep(2.1)
    expired = requests.get(f"{server.url}/who", params={"ps_token": short}, headers={"Host": host}, timeout=30)
    assert expired.status_code == 401, "an expired token was accepted"
    bad = requests.post(f"{server.url}/v1/sandboxes/{sb.id}/preview-token", json={"port": 0},
                        headers=auth(server), timeout=30)
    assert_json_error(bad, "port", status=400)


def test_listeners_survive_fork_snapshot_hibernate_and_pause(server, new_snapshots_deleted):
    from pandastack import Sandbox

    parent = Sandbox.create(template="base")
    parent.filesystem.write("/srv/who", b"parent")
    start_http_server(parent)

    children = parent.fork_tree(2)
    for i, child in enumerate(children):
        assert child.guest_ip and child.guest_ip != parent.guest_ip
        child.filesystem.write("/srv/who", f"child-{i}".encode())
    for i, child in enumerate(children):
        r = proxy_get(server, child.id, "who")
        assert (r.status_code, r.text) == (200, f"child-{i}"), r.text
    assert proxy_get(server, parent.id, "who").text == "parent"

    snap = parent.snapshot()
    restored = Sandbox.create(from_snapshot=snap)
    r = proxy_get(server, restored.id, "who")
    assert (r.status_code, r.text) == (200, "parent"), r.text

    parent.hibernate()
    assert Sandbox.get(parent.id).status == "hibernated"
    r = proxy_get(server, parent.id, "who")  # the proxied request wakes it
    assert (r.status_code, r.text) == (200, "parent"), r.text
    assert Sandbox.get(parent.id).status == "running"

    parent.pause()
    assert proxy_get(server, parent.id, "who").status_code == 409
    parent.resume()
    assert proxy_get(server, parent.id, "who").text == "parent"


def test_the_host_other_sandboxes_and_private_ranges_are_blocked(server, host_listener, private_target):
    from pandastack import Client, Sandbox

    target = Sandbox.create(template="base")
    start_http_server(target)
    sb = Sandbox.create(template="base")
    hp = host_listener.port

    assert curl_code(sb, f"http://{target.guest_ip}:8000/") == "000", "another sandbox was reachable"
    for addr in ["10.0.2.2", host_link_of(sb.guest_ip), *host_addresses()]:
        assert curl_code(sb, f"http://{addr}:{hp}/") == "000", f"the host was reachable at {addr}"
    assert curl_code(sb, f"http://10.0.2.2:{server.port}/health") == "000"
    assert curl_code(sb, f"http://{PRIVATE_ADDR}:{PRIVATE_PORT}/") == "000", "a private address was reachable"
    # Sanity check of the target itself: the host reaches it.
    assert requests.get(f"http://{PRIVATE_ADDR}:{PRIVATE_PORT}/", timeout=10).text == "private"

    # allow_out opens exactly what it names, also without internet access (never the host or
    # another sandbox: test_network_guard.py).
    client = Client()
    opened = client.sandboxes.create(template="base")  # SDK create sends no network fields
    resp = requests.post(
        f"{server.url}/v1/sandboxes",
        json={"template": "base", "allow_internet_access": False, "network": {"allow_out": [private_target]}},
        headers=auth(server), timeout=60,
    )
    assert resp.status_code == 201, resp.text
    closed = Sandbox.get(resp.json()["id"])
    assert resp.json()["allow_internet_access"] is False
    assert resp.json()["network"]["allow_out"] == [private_target]
    assert curl_code(closed, f"http://{private_target}/") == "200"
    assert curl_code(opened, f"http://{private_target}/") == "000"
    assert curl_code(closed, f"http://{PRIVATE_ADDR}:{PRIVATE_PORT + 1}/") == "000", "another port opened"
    # Without internet access there is no DNS either (issue 23 finding 12): name lookups wait
    # out the resolver's timeout, so pip is cut short rather than left to retry.
    r = closed.exec("timeout 20 python3 -m pip download --retries 0 --no-deps --no-cache-dir -d /tmp/dl six==1.16.0",
                    timeout_seconds=60)
    assert r.exit_code != 0, "the registry was reachable without internet access"


def test_bad_network_settings_are_400s_naming_the_field(api):
    for body, words in [
        ({"template": "base", "network": {"allow_out": ["10.0.0.0/33"]}}, ["network.allow_out[0]"]),
        ({"template": "base", "network": {"deny_out": ["1.2.3.4", "example.com"]}}, ["network.deny_out[1]"]),
        ({"template": "base", "network": {"allow_out": ["10.0.0.1:0"]}}, ["network.allow_out[0]"]),
        ({"template": "base", "network": {"allow": []}}, ["allow"]),
        ({"template": "base", "allow_internet_access": "no"}, ["allow_internet_access"]),
    ]:
        assert_json_error(api("POST", "/v1/sandboxes", json=body), *words, status=400)


def test_cli_creates_with_a_policy_lists_ports_and_prints_a_preview(server, private_target):
    env = {**os.environ, "PANDASTACK_API": server.url, "PANDASTACK_API_KEY": server.admin_key()}

    def cli(*args: str) -> str:
        out = subprocess.run([str(server.binary), *args], env=env, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    created = json.loads(cli("sandbox", "create", "--template", "base", "--no-internet",
                             "--allow-out", private_target, "-o", "json"))
    from pandastack import Sandbox

    sb = Sandbox.get(created["id"])
    assert created["allow_internet_access"] is False and created["guest_ip"], created
    assert curl_code(sb, f"http://{private_target}/") == "200"
    start_http_server(sb)
    table = cli("sandbox", "ports", sb.id)
    assert "8000" in table and f"/v1/sandboxes/{sb.id}/proxy/8000/" in table, table
    url = cli("sandbox", "preview", sb.id, "--port", "8000").strip()
    assert url.startswith(f"http://8000-{sb.id}.{PREVIEW_SUFFIX}:{server.port}/?ps_token="), url


# --- nothing is left behind -----------------------------------------------------------------


@pytest.fixture(scope="module")
def bare_server(server):
    """A server without a warm pool, restore targets or namespace stock, so every namespace,
    link and policy chain on the host belongs to a live sandbox of it."""
    parent = server.data_dir.parent
    data_dir = parent / f"network-server-{os.getpid()}"
    scrub_data_dir(data_dir)
    (data_dir / "templates").mkdir(parents=True)
    _copy_current_template(server.data_dir / "templates", data_dir / "templates", "base")
    srv = SecondServer(server.binary, data_dir, server.log.parent / "server-network.log",
                       ["--pool-size", "0", "--netns-stock", "0", "--restore-targets", "0"])
    try:
        srv.start()
        yield srv
    finally:
        srv.teardown()


def wait_for(what: str, check, limit_s: float = 90.0):
    deadline = time.monotonic() + limit_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, what
            return value
        time.sleep(0.2)


def test_kill_failed_create_and_kill_9_leave_no_network_behind(bare_server):
    from pandastack import ServerError

    client = bare_server.client()
    tag = server_tag(bare_server.data_dir)
    on_host = lambda: (len(namespaces(tag)), len(links(tag)), slot_chains(tag))  # noqa: E731

    def cycle(_: int) -> None:
        sb = client.sandboxes.create(template="base")
        client.sandboxes.delete(sb.id)

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(cycle, range(200)))
    wait_for("200 create/kill cycles left network pieces", lambda: on_host() == (0, 0, 0))

    # A create whose restore fails leaves nothing either.
    keep = client.sandboxes.create(template="base")
    snap = keep.snapshot()
    image = Path(bare_server.data_dir) / "snapshots" / snap / "checkpoint.img"
    image.write_bytes(image.read_bytes()[:4096])
    with pytest.raises(ServerError):
        client.sandboxes.create(from_snapshot=snap)
    wait_for("a failed create left network pieces", lambda: on_host() == (1, 1, 1))

    # kill -9 with sandboxes running: the restarted server keeps their network as it was, and
    # a listener inside is reachable through the new server's proxy.
    second = client.sandboxes.create(template="base")
    keep.filesystem.write("/srv/who", b"kept")
    start_http_server(keep)
    before = {s.id: s.guest_ip for s in (keep, second)}
    bare_server.proc.kill()
    bare_server.proc.wait(timeout=30)
    bare_server.start()
    client = bare_server.client()
    after = {s.id: client.sandboxes.get(s.id).guest_ip for s in (keep, second)}
    assert after == before
    assert "10.0.2.100" in client.sandboxes.get(keep.id).exec("ip -4 -o addr show dev eth0").stdout
    r = requests.get(f"{bare_server.url}/v1/sandboxes/{keep.id}/proxy/8000/who",
                     headers={"Authorization": f"Bearer {bare_server.admin_key()}"}, timeout=30)
    assert (r.status_code, r.text) == (200, "kept"), r.text
    assert on_host() == (2, 2, 2)
    for sid in before:
        client.sandboxes.delete(sid)
    wait_for("deleted sandboxes left network pieces", lambda: on_host() == (0, 0, 0))

    # A graceful stop with no sandbox left removes the server's table too.
    bare_server.stop()
    assert on_host() == (0, 0, 0) and nft_table(tag) is None
    assert not Path(f"/dev/shm/pandastack-{tag}").exists(), "the RAM scratch dir outlived a graceful stop"
    bare_server.start()
