"""What no tenant's network policy opens (issue 23 findings 1, 2 and the DNS part of 12),
through raw HTTP (the SDK create sends no network fields) and the published SDK: another
sandbox, the host (only the operator's `--allow-host-service` opens a host service), and the
resolver of a sandbox without internet access.

Test traffic goes only to loopback, the sandboxes' namespaces and the namespace of
`net_fixtures.private_target` (which also stands in for the resolver here), all on this machine.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
import requests

from lifecycle_fixtures import SecondServer, _copy_current_template, scrub_data_dir
from net_fixtures import (  # noqa: F401  (fixtures)
    PRIVATE_ADDR,
    PRIVATE_NS,
    HostListener,
    curl_code,
    host_addresses,
    host_link_of,
    host_listener,
    private_target,
    start_http_server,
)

# The port of the test's stand-in resolver (an HTTP server: the finding was that any payload
# went through to port 53).
RESOLVER_PORT = 53


def assert_error(resp: requests.Response, status: int, *words: str) -> None:
    """Checks a `{"error": ...}` reply with `status` whose message names each of `words`."""
    assert resp.status_code == status, f"HTTP {resp.status_code}, wanted {status}: {resp.text[:300]}"
    message = resp.json()["error"]
    for w in words:
        assert w.lower() in message.lower(), f"{message!r} does not name {w!r}"


def create(url: str, key: str, **body) -> requests.Response:
    return requests.post(f"{url}/v1/sandboxes", json={"template": "base", **body},
                         headers={"Authorization": f"Bearer {key}"}, timeout=120)


@pytest.fixture(scope="module")
def fake_resolver(private_target):
    """An HTTP server on `PRIVATE_ADDR:53` in the test's private namespace."""
    proc = subprocess.Popen(
        ["ip", "netns", "exec", PRIVATE_NS, "python3", "-m", "http.server", str(RESOLVER_PORT), "--bind", PRIVATE_ADDR],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if requests.get(f"http://{PRIVATE_ADDR}:{RESOLVER_PORT}/", timeout=2).ok:
                    break
            except requests.RequestException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield PRIVATE_ADDR
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def operator_server(server, host_listener, fake_resolver):
    """A second server whose operator opened the test's host listener to every sandbox
    (`--allow-host-service`) and whose sandboxes' resolver is the test's stand-in."""
    host_ip = host_addresses()[0]
    data_dir = server.data_dir.parent / f"guard-server-{os.getpid()}"
    scrub_data_dir(data_dir)
    (data_dir / "templates").mkdir(parents=True)
    _copy_current_template(server.data_dir / "templates", data_dir / "templates", "base")
    srv = SecondServer(server.binary, data_dir, server.log.parent / "server-guard.log",
                       ["--pool-size", "0", "--netns-stock", "0", "--restore-targets", "0",
                        "--allow-host-service", f"{host_ip}:{host_listener.port}",
                        "--sandbox-resolver", fake_resolver])
    try:
        srv.start()
        yield srv
    finally:
        srv.teardown()


def test_allow_out_never_opens_another_sandbox(server, workspace_b_key, client_b, private_target):
    from pandastack import Sandbox

    a = Sandbox.create(template="base")
    start_http_server(a)
    assert requests.get(f"http://{a.guest_ip}:8000/", timeout=10).ok, "the host reaches A's server"

    for rules, bad in [
        (["203.0.113.7", f"{a.guest_ip}:8000"], 1),
        ([f"{a.guest_ip}/30"], 0),
        ([f"{host_link_of(a.guest_ip)}:8000"], 0),
    ]:
        resp = create(server.url, workspace_b_key, network={"allow_out": rules})
        assert_error(resp, 400, f"network.allow_out[{bad}]", "sandbox network")

    # A policy the API accepts, with internet access: A stays closed to B.
    resp = create(server.url, workspace_b_key, network={"allow_out": [private_target]})
    assert resp.status_code == 201, resp.text
    b = client_b.sandboxes.get(resp.json()["id"])
    assert curl_code(b, f"http://{private_target}/") == "200", "the accepted policy works"
    assert curl_code(b, f"http://{a.guest_ip}:8000/") == "000", "B reached A's sandbox"


def test_allow_out_never_opens_the_host(server, host_listener, private_target):
    from pandastack import Sandbox

    hp = host_listener.port
    key = server.admin_key()
    for addr in [host_addresses()[0], "10.0.2.2", "127.0.0.1"]:
        resp = create(server.url, key, allow_internet_access=False, network={"allow_out": [f"{addr}:{hp}"]})
        assert_error(resp, 400, "network.allow_out[0]", "--allow-host-service")
    resp = create(server.url, key, network={"allow_out": ["0.0.0.0/0"]})
    assert_error(resp, 400, "network.allow_out[0]")

    resp = create(server.url, key, allow_internet_access=False, network={"allow_out": [private_target]})
    assert resp.status_code == 201, resp.text
    sb = Sandbox.get(resp.json()["id"])
    for addr in [host_addresses()[0], "10.0.2.2", host_link_of(sb.guest_ip)]:
        assert curl_code(sb, f"http://{addr}:{hp}/") == "000", f"the host was reachable at {addr}"
    assert curl_code(sb, f"http://{private_target}/") == "200", "the accepted policy works"


def test_only_the_operator_opens_a_host_service(server, operator_server, host_listener, tmp_path):
    from pandastack import Sandbox

    host_ip = host_addresses()[0]
    url = f"http://{host_ip}:{host_listener.port}/"
    other = HostListener(tmp_path / "other")  # a host listener the operator did not open
    try:
        opened = operator_server.client().sandboxes.create(template="base")
        assert curl_code(opened, url) == "200", "--allow-host-service did not open the host service"
        assert curl_code(opened, f"http://{host_ip}:{other.port}/") == "000", "a port the operator did not open"
        resp = create(operator_server.url, operator_server.admin_key(), allow_internet_access=False)
        assert resp.status_code == 201, resp.text
        offline = operator_server.client().sandboxes.get(resp.json()["id"])
        assert curl_code(offline, url) == "200", "the operator's service is open whatever the policy"
    finally:
        other.close()

    plain = Sandbox.create(template="base")
    assert curl_code(plain, url) == "000", "a server without the flag opened the host"


def test_without_internet_access_the_resolver_is_closed(operator_server, fake_resolver, private_target):
    key = operator_server.admin_key()
    client = operator_server.client()
    resolver = f"http://10.0.2.3:{RESOLVER_PORT}/"

    online = client.sandboxes.create(template="base")
    assert curl_code(online, resolver) == "200", "with internet access the resolver is reachable"

    resp = create(operator_server.url, key, allow_internet_access=False, network={"allow_out": [private_target]})
    assert resp.status_code == 201, resp.text
    offline = client.sandboxes.get(resp.json()["id"])
    assert curl_code(offline, f"http://{private_target}/") == "200", "the accepted policy works"
    assert curl_code(offline, resolver) == "000", "port 53 stayed open without internet access"
