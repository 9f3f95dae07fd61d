"""Host-side helpers of the networking tests (test_network.py): what of a server's sandbox
network exists on the host, a listener in a network namespace the test makes itself (the
"private address" every sandbox must be blocked from), and a listener on the host.

Test traffic goes only to loopback, to the sandboxes' namespaces and to namespaces made here,
plus the package registry through pip.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

# The test's own "private network": a namespace holding 10.99.0.1, routed from the host over
# a veth, so a packet that got past the sandbox's policy would still end here, on this machine.
PRIVATE_ADDR = "10.99.0.1"
PRIVATE_PORT = 8080
# The namespace holding PRIVATE_ADDR (made by the `private_target` fixture).
PRIVATE_NS = f"pstest-{os.getpid() % 100000}"


def server_tag(data_dir: Path) -> str:
    """The 6 hex digits that name a server's namespaces, links and nft table (the first 3 bytes
    of the SHA-256 of its canonical data dir)."""
    return hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:6]


def namespaces(tag: str) -> set[str]:
    d = Path("/run/netns")
    return {p.name for p in d.iterdir() if p.name.startswith(f"ps-{tag}-")} if d.is_dir() else set()


def links(tag: str) -> set[str]:
    return {p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(f"ps{tag}-")}


def nft_table(tag: str) -> str | None:
    """`nft list table inet pandastack_<tag>`, or None when there is no such table."""
    out = subprocess.run(
        ["nft", "list", "table", "inet", f"pandastack_{tag}"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
    )
    return out.stdout if out.returncode == 0 else None


def slot_chains(tag: str) -> int:
    """Per-sandbox policy chains in the server's table."""
    text = nft_table(tag) or ""
    return sum(1 for line in text.splitlines() if line.strip().startswith("chain slot_"))


def host_addresses() -> list[str]:
    """IPv4 addresses of this host's own interfaces, except loopback and sandbox links."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=30, check=True)
    addrs = []
    for line in out.stdout.splitlines():
        f = line.split()
        dev, addr = f[1], f[3].split("/")[0]
        if dev != "lo" and not dev.startswith("ps") and not dev.startswith("pst"):
            addrs.append(addr)
    return addrs


def host_link_of(guest_ip: str) -> str:
    """The host's end of a sandbox's uplink (guest_ip - 1)."""
    a, b, c, d = (int(x) for x in guest_ip.split("."))
    return f"{a}.{b}.{c}.{d - 1}"


def curl_code(sb, url: str, timeout_s: int = 4) -> str:
    """HTTP status of `url` fetched from inside sandbox `sb` ("000": no connection)."""
    r = sb.exec(f"curl -s -m {timeout_s} -o /dev/null -w '%{{http_code}}' {url}", timeout_seconds=timeout_s + 10)
    return r.stdout.strip()


def start_http_server(sb, port: int = 8000, directory: str = "/srv") -> None:
    """Starts `python3 -m http.server` in `sb` (in its own session, so it outlives the exec)
    and waits until it listens."""
    sb.exec(f"mkdir -p {directory}")
    r = sb.exec(
        f"setsid python3 -m http.server {port} --bind 0.0.0.0 --directory {directory} "
        "> /dev/null 2>&1 < /dev/null &"
    )
    assert r.exit_code == 0, r
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if curl_code(sb, f"http://127.0.0.1:{port}/", 2) == "200":
            return
        time.sleep(0.2)
    raise AssertionError(f"http.server on port {port} did not come up")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class HostListener:
    """An HTTP server of the test on every host address (0.0.0.0), on a free port."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "index.html").write_text("host")
        handler = lambda *a, **kw: _Quiet(*a, directory=str(directory), **kw)  # noqa: E731
        self.httpd = http.server.ThreadingHTTPServer(("0.0.0.0", 0), handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def host_listener(tmp_path_factory):
    h = HostListener(tmp_path_factory.mktemp("host-listener"))
    yield h
    h.close()


@pytest.fixture(scope="module")
def private_target():
    """`PRIVATE_ADDR:PRIVATE_PORT`: an HTTP listener in a network namespace this fixture makes,
    on a veth from the host with a host route to 10.99.0.0/24."""
    n = os.getpid() % 100000
    ns, host_if, ns_if = PRIVATE_NS, f"pst{n}h", f"pst{n}n"

    def sh(*cmd: str) -> None:
        subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)

    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    subprocess.run(["ip", "link", "del", host_if], capture_output=True)
    sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", ns)
    sh("ip", "-n", ns, "addr", "add", f"{PRIVATE_ADDR}/24", "dev", ns_if)
    sh("ip", "-n", ns, "link", "set", ns_if, "up")
    sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "addr", "add", "10.99.0.2/24", "dev", host_if)
    sh("ip", "link", "set", host_if, "up")
    web = Path(f"/tmp/{ns}-www")
    web.mkdir(exist_ok=True)
    (web / "index.html").write_text("private")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns, "python3", "-m", "http.server", str(PRIVATE_PORT), "--bind", PRIVATE_ADDR,
         "--directory", str(web)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection((PRIVATE_ADDR, PRIVATE_PORT), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"{PRIVATE_ADDR}:{PRIVATE_PORT}"
    finally:
        proc.kill()
        proc.wait(timeout=10)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
