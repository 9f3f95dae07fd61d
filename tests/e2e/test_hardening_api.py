"""Hardening of the API surface (issue 23 findings 8, 9, 10 and the API parts of 12), against
the real server and real sandboxes, through the published SDK and raw HTTP:

- `/metrics` shows a workspace key only its own series; the operator's key shows all (8);
- the redirect after a preview token exchange stays on the preview host (9);
- a sandbox app's `Set-Cookie` loses `Domain`, cookies named like ours are dropped, and a
  planted `ps_preview` cookie does not shadow a valid one (10);
- a CR LF in a proxy path is a 400 naming `path`; `Authorization: BEARER ...` (any case) is
  recognised and stripped; reading `/proc/self/mem`, a device or a FIFO is a 4xx naming
  `path`; `pandastack admin workspace-delete` (refusing without `--force`) and
  `pandastack admin key-revoke` (12).

Every address used is 127.0.0.1 (the server) with a Host header naming a preview; nothing
resolves or leaves the machine.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import sqlite3
import subprocess
import time

import pytest
import requests

from conftest import PREVIEW_SUFFIX
from helpers import assert_json_error

# The app of these tests, on port 8000 of a sandbox: answers every request with the path and
# headers it got (JSON), and tries to set a cookie for every preview host and one named like
# the proxy's own.
ECHO_APP = r'''
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "ps_preview=junk; Domain=%s; Path=/" % SUFFIX)
        self.send_header("Set-Cookie", "ps_preview_0bad=junk; Path=/")
        self.send_header("Set-Cookie", "app=1; Domain=%s; Path=/deep; HttpOnly" % SUFFIX)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
'''


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def admin(server, *args: str) -> subprocess.CompletedProcess:
    """`pandastack admin ARGS --data-dir DATA` of the session's server."""
    return subprocess.run(
        [str(server.binary), "admin", *args, "--data-dir", str(server.data_dir)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
    )


class App:
    """A sandbox of a workspace of its own running [`ECHO_APP`] (so the per-test cleanup of
    workspace A leaves it for the module)."""

    def __init__(self, server) -> None:
        from pandastack import Client

        self.server = server
        self.key = server.create_workspace(f"e2e-h23-{os.getpid()}-{int(time.time())}")
        self.client = Client(api_url=server.url, api_key=self.key)
        self.sb = self.client.sandboxes.create(template="base")
        self.sb.filesystem.write("/opt/echo_app.py", ECHO_APP.replace("SUFFIX", repr(PREVIEW_SUFFIX)).encode())
        self.sb.exec("setsid python3 /opt/echo_app.py > /tmp/app.log 2>&1 < /dev/null &")
        self.host = f"8000-{self.sb.id}.{PREVIEW_SUFFIX}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = self.by_path("/ready")
            if r.status_code == 200:
                return
            time.sleep(0.3)
        raise AssertionError(f"the app did not come up: {r.status_code} {r.text[:200]}")

    def by_path(self, path: str, headers: dict[str, str] | None = None) -> requests.Response:
        return requests.get(
            f"{self.server.url}/v1/sandboxes/{self.sb.id}/proxy/8000{path}",
            headers=bearer(self.key) if headers is None else headers,
            timeout=30,
        )

    def token(self) -> str:
        r = requests.post(
            f"{self.server.url}/v1/sandboxes/{self.sb.id}/preview-token",
            json={"port": 8000, "ttl_seconds": 600},
            headers=bearer(self.key),
            timeout=30,
        )
        assert r.status_code == 200, r.text
        return r.json()["token"]

    def raw(self, target: str, headers: dict[str, str]) -> http.client.HTTPResponse:
        """`GET target` exactly as written (no client-side normalisation of the path)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
        conn.request("GET", target, headers=headers)
        resp = conn.getresponse()
        resp.read()
        conn.close()
        return resp

    def close(self) -> None:
        self.client.sandboxes.delete(self.sb.id)


@pytest.fixture(scope="module")
def app(server):
    a = App(server)
    yield a
    a.close()


def database_ids(server, key: str) -> set[str]:
    r = requests.get(f"{server.url}/metrics", headers=bearer(key), timeout=30)
    assert r.status_code == 200, r.text[:300]
    return set(re.findall(r'database="([^"]+)"', r.text))


def test_metrics_show_a_workspace_only_its_own_series(server):
    from pandastack import Client

    stamp = f"{os.getpid()}-{int(time.time())}"
    key_c = server.create_workspace(f"e2e-metrics-c-{stamp}")
    key_d = server.create_workspace(f"e2e-metrics-d-{stamp}")
    client_c = Client(api_url=server.url, api_key=key_c)
    db = client_c.databases.create(label="metrics-c")
    try:
        assert db["id"] in database_ids(server, key_c)
        # Workspace D has no database: it sees no database id at all (C's included).
        assert database_ids(server, key_d) == set(), "a workspace key read other workspaces' database series"
        assert db["id"] in database_ids(server, server.admin_key()), "the operator lost the full set"
        # Host-wide totals without ids stay visible.
        text = requests.get(f"{server.url}/metrics", headers=bearer(key_d), timeout=30).text
        assert "pandastack_sandboxes{" in text and "pandastack_databases{" in text, text[:500]
    finally:
        client_c.databases.delete(db["id"])


def test_preview_redirect_stays_on_the_preview_host(app):
    token = app.token()
    for target in (f"//evil.example/x?ps_token={token}", f"///evil.example/?ps_token={token}"):
        resp = app.raw(target, {"Host": app.host})
        location = resp.getheader("Location") or ""
        assert resp.status == 302, (target, resp.status)
        assert location.startswith("/") and location[1:2] not in ("/", "\\"), location
        assert location.startswith("/evil.example"), location
    resp = app.raw(f"/\\evil.example/?ps_token={token}", {"Host": app.host})
    location = resp.getheader("Location") or ""
    assert resp.status == 400 or (location.startswith("/") and location[1:2] not in ("/", "\\")), (
        resp.status,
        location,
    )


def set_cookies(resp: requests.Response) -> list[str]:
    return resp.raw.headers.getlist("Set-Cookie")


def test_sandbox_cookies_cannot_reach_other_previews(app):
    token = app.token()
    # Two cookies of our name, a junk one first (as a sibling host could have planted it).
    cookie = f"ps_preview=junk; ps_preview={token}"
    r = requests.get(f"{app.server.url}/page", headers={"Host": app.host, "Cookie": cookie}, timeout=30)
    assert r.status_code == 200, f"a planted cookie shadowed a valid one: {r.status_code} {r.text[:200]}"
    cookies = set_cookies(r)
    assert cookies, r.headers
    for c in cookies:
        assert "domain" not in c.lower(), cookies
        assert not c.lower().startswith("ps_preview"), cookies
    assert any(c.startswith("app=1") and "Path=/deep" in c for c in cookies), cookies
    # Our cookie never reaches the app; its own do.
    got = requests.get(
        f"{app.server.url}/page", headers={"Host": app.host, "Cookie": f"ps_preview={token}; mine=2"}, timeout=30
    ).json()
    assert got["headers"].get("cookie") == "mine=2", got
    # On the API host's path-based proxy the cookie's Path moves under the proxy prefix.
    r = app.by_path("/page")
    assert r.status_code == 200, r.text[:200]
    prefix = f"/v1/sandboxes/{app.sb.id}/proxy/8000"
    cookies = set_cookies(r)
    assert cookies == [f"app=1; Path={prefix}/deep; HttpOnly"], cookies


def test_control_characters_in_a_proxy_path_are_a_400_naming_path(app):
    r = app.by_path("/a%0d%0aX-Injected:%20yes")
    assert_json_error(r, "path", status=400)
    resp = requests.get(
        f"{app.server.url}/a%0D%0AX-Injected:%20yes",
        headers={"Host": app.host, "Cookie": f"ps_preview={app.token()}"},
        timeout=30,
    )
    assert_json_error(resp, "path", status=400)
    # An ordinary encoded path still goes through, encoded as sent.
    ok = app.by_path("/a%20b")
    assert ok.status_code == 200 and ok.json()["path"] == "/a%20b", ok.text[:200]


def test_bearer_key_is_recognised_and_stripped_in_any_case(app):
    for scheme in ("BEARER", "bearer", "BeArEr"):
        r = app.by_path("/who", headers={"Authorization": f"{scheme} {app.key}"})
        assert r.status_code == 200, (scheme, r.status_code, r.text[:200])
        assert "authorization" not in r.json()["headers"], (scheme, r.json())
    # An app's own credentials (another scheme) are the app's: forwarded.
    r = requests.get(
        f"{app.server.url}/who",
        headers={"Host": app.host, "Cookie": f"ps_preview={app.token()}", "Authorization": "Basic dXNlcjpwYXNz"},
        timeout=30,
    )
    assert r.status_code == 200 and r.json()["headers"].get("authorization") == "Basic dXNlcjpwYXNz", r.text[:300]


def test_reading_special_files_is_a_4xx_naming_path(app):
    sb = app.sb
    sb.exec("rm -f /tmp/fifo && mkfifo /tmp/fifo")

    def read(path: str) -> requests.Response:
        return requests.get(
            f"{app.server.url}/v1/sandboxes/{sb.id}/fs", params={"path": path}, headers=bearer(app.key), timeout=60
        )

    for path in ("/proc/self/mem", "/dev/zero", "/tmp/fifo"):
        assert_json_error(read(path), "path", path)
    # Pseudo-files that read, and plain files, still do.
    status = read("/proc/self/status")
    assert status.status_code == 200 and b"Pid:" in status.content, status.text[:200]
    assert read("/opt/echo_app.py").status_code == 200


def instance_dir_of(server, guest_ip: str):
    """The instance directory on the host whose network (`net.json`) has `guest_ip`."""
    for d in (server.data_dir / "instances").iterdir():
        try:
            if json.loads((d / "net.json").read_text()).get("guest_ip") == guest_ip:
                return d
        except (OSError, ValueError):
            continue
    raise AssertionError(f"no instance has guest_ip {guest_ip}")


def test_workspace_delete_refuses_running_sandboxes_unless_forced(server):
    from pandastack import Client

    key = server.create_workspace(f"e2e-delete-{os.getpid()}-{int(time.time())}")
    client = Client(api_url=server.url, api_key=key)
    sb = client.sandboxes.create(template="base")
    client.volumes.create(name="doomed", size_mb=64)
    ws = requests.get(f"{server.url}/v1/me", headers=bearer(key), timeout=30).json()["workspace_id"]
    instance = instance_dir_of(server, sb.guest_ip)

    refused = admin(server, "workspace-delete", ws)
    assert refused.returncode != 0, refused.stdout
    assert sb.id in refused.stderr and "--force" in refused.stderr, refused.stderr
    assert requests.get(f"{server.url}/v1/me", headers=bearer(key), timeout=30).status_code == 200
    assert sb.exec("echo alive").stdout.strip() == "alive"

    done = admin(server, "workspace-delete", ws, "--force")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"workspace {ws} deleted" in done.stdout, done.stdout
    assert requests.get(f"{server.url}/v1/me", headers=bearer(key), timeout=30).status_code == 401
    # Its sandbox is gone from the host, and the workspace with its rows from the store.
    deadline = time.monotonic() + 30
    while instance.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not instance.exists(), f"{instance} is still on the host"
    with sqlite3.connect(f"file:{server.data_dir / 'store.db'}?mode=ro", uri=True, timeout=30) as db:
        rows = [
            db.execute(sql, (ws,)).fetchone()[0]
            for sql in (
                "SELECT COUNT(*) FROM workspaces WHERE id = ?",
                "SELECT COUNT(*) FROM sandboxes WHERE workspace_id = ?",
                "SELECT COUNT(*) FROM volumes WHERE workspace_id = ?",
                "SELECT COUNT(*) FROM api_keys WHERE workspace_id = ?",
            )
        ]
    assert rows == [0, 0, 0, 0], rows
    again = admin(server, "workspace-delete", ws)
    assert again.returncode != 0 and "not found" in again.stderr, again.stderr
    # The operator's workspace is never deleted.
    operator = requests.get(f"{server.url}/v1/me", headers=bearer(server.admin_key()), timeout=30).json()
    refused = admin(server, "workspace-delete", operator["workspace_id"], "--force")
    assert refused.returncode != 0 and "operator" in refused.stderr, refused.stderr


def test_operator_revokes_a_key(server):
    key = server.create_workspace(f"e2e-revoke-{os.getpid()}-{int(time.time())}")
    made = requests.post(f"{server.url}/v1/me/tokens", json={"label": "second"}, headers=bearer(key), timeout=30)
    assert made.status_code in (200, 201), made.text
    second = made.json()["token"]
    by_prefix = admin(server, "key-revoke", second[:12])
    assert by_prefix.returncode == 0, by_prefix.stderr
    assert requests.get(f"{server.url}/v1/me", headers=bearer(second), timeout=30).status_code == 401
    assert requests.get(f"{server.url}/v1/me", headers=bearer(key), timeout=30).status_code == 200
    whole = admin(server, "key-revoke", key)
    assert whole.returncode == 0, whole.stderr
    assert requests.get(f"{server.url}/v1/me", headers=bearer(key), timeout=30).status_code == 401
    unknown = admin(server, "key-revoke", second[:12])
    assert unknown.returncode != 0 and "not found" in unknown.stderr, unknown.stderr
