"""Issue 23 findings 4, 5 and 6: template builds a hostile tenant should not be able to abuse,
through the published Python SDK (`pandastack==0.10.0`) and raw HTTP.

- 4: a rootfs tar whose `tmp` is a symlink to a host path writes nothing there.
- 5: a build writes on a disk of its own of the template's `size_mb`: a `RUN` past it gets
  ENOSPC (the host's copy never grows past it), `ADD` and rootfs tars over it fail naming
  `size_mb`, and a server killed mid-`RUN` leaves no build disk mounted or looped.
- 6: on a server with one build worker, a workspace's one-line build does not wait behind
  another workspace's queue; a workspace may queue at most `--max-queued-builds` builds
  (429), and a newer build of a name supersedes its queued older one.

The queue tests run on a second server of their own (one worker, at most 2 queued builds per
workspace, set through the environment so a server without the flag still starts).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import tarfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
import requests
from pandastack import Client

from conftest import Server, _free_port, delete_all
from helpers import assert_json_error
from lifecycle_fixtures import _copy_current_template, scrub_data_dir
from test_templates import delete_workspace_templates, tiny_rootfs_tar, wait_build

MIB = 1 << 20


class Zeros(io.RawIOBase):
    """`size` zero bytes read as a file, without holding them in memory."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


def with_zeros(tar_bytes: bytes, name: str, size: int) -> bytes:
    """`tar_bytes` (a plain tar) plus a file `name` of `size` zero bytes, gzip-compressed."""
    plain = tarfile.open(fileobj=io.BytesIO(tar_bytes))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.GNU_FORMAT, compresslevel=1) as tar:
        for m in plain.getmembers():
            tar.addfile(m, plain.extractfile(m) if m.isfile() else None)
        info = tarfile.TarInfo(name)
        info.size, info.mode = size, 0o644
        tar.addfile(info, Zeros(size))
    return buf.getvalue()


def submit(url: str, key: str, name: str, dockerfile: str, **fields) -> requests.Response:
    """`POST /v1/templates/build` with a Dockerfile (urlencoded, as the Python SDK sends it)."""
    return requests.post(
        f"{url}/v1/templates/build",
        headers={"Authorization": f"Bearer {key}"},
        data={"name": name, "dockerfile": dockerfile, **{k: str(v) for k, v in fields.items()}},
        timeout=60,
    )


def moment(value) -> datetime:
    """An RFC 3339 time of the API (the SDK may hand it over parsed already)."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def loops_under(path: Path) -> list[str]:
    """Loop devices whose backing file lies under `path` (a deleted one by its old name)."""
    found = []
    for dev in Path("/sys/block").glob("loop*"):
        try:
            backing = (dev / "loop" / "backing_file").read_text().strip()
        except OSError:
            continue
        if backing.removesuffix(" (deleted)").startswith(f"{path}/"):
            found.append(f"/dev/{dev.name}: {backing}")
    return found


def mounts_under(path: Path) -> list[str]:
    """Mount points under `path` in this mount namespace."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p.startswith(f"{path}/")]


def allocated_kib(paths: list[Path]) -> int:
    """Disk blocks the trees take on their own filesystem (`du -skx`: a mounted build disk is
    counted as its image file, not twice), KiB."""
    if not paths:
        return 0
    out = subprocess.run(["du", "-skxc", *map(str, paths)], capture_output=True, text=True, timeout=60).stdout
    totals = [l for l in out.splitlines() if l.endswith("\ttotal")]
    return int(totals[-1].split()[0]) if totals else 0


@pytest.fixture
def lc(server):
    """A client of a workspace of its own; its sandboxes and templates go after the test."""
    key = server.create_workspace(f"e2e-build-limits-{uuid.uuid4().hex[:8]}")
    client = Client(api_url=server.url, api_key=key)
    yield client
    delete_all(server.url, key)
    delete_workspace_templates(server.url, key)


def test_rootfs_tar_with_tmp_symlinked_to_a_host_path_writes_nothing_there(lc, server, tmp_path):
    # Issue 23 finding 4: `ln -s /tmp/hostmark r/tmp` in a rootfs tar made the server create
    # /tmp/hostmark/.pandastack-keep on the host. The target is a directory this test made.
    host_dir = Path(f"/tmp/e2e-hostmark-{uuid.uuid4().hex[:8]}")
    host_dir.mkdir()
    try:
        plain = tarfile.open(fileobj=io.BytesIO(tiny_rootfs_tar(server)))
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for m in plain.getmembers():
                if m.name != "tmp":
                    tar.addfile(m, plain.extractfile(m) if m.isfile() else None)
            link = tarfile.TarInfo("tmp")
            link.type, link.linkname, link.mode = tarfile.SYMTYPE, str(host_dir), 0o777
            tar.addfile(link)
        (tmp_path / "evil.tar").write_bytes(buf.getvalue())
        b = lc.templates.build("e2e-tmp-link", rootfs_tar=str(tmp_path / "evil.tar"), size_mb=256)
        b = wait_build(lc, b.id)
        assert list(host_dir.iterdir()) == [], "the server wrote through the rootfs's /tmp symlink"
        assert b.status == "done", b.error
        sb = lc.sandboxes.create(template="e2e-tmp-link")
        r = sb.exec("if [ -d /tmp ] && [ ! -h /tmp ]; then echo real-tmp; fi; echo x > /tmp/f; cat /tmp/f")
        assert r.stdout == "real-tmp\nx\n", r
        assert list(host_dir.iterdir()) == [], "a sandbox's /tmp reached the host path"
    finally:
        subprocess.run(["rm", "-rf", str(host_dir)], check=False)


def test_run_past_size_mb_gets_enospc_and_the_host_copy_stays_within_it(lc, server):
    # Issue 23 finding 5: `RUN fallocate -l 1500M` in a 256 MiB template took 1.5 GB of host
    # disk. Here a RUN writes 600 MiB into a 256 MiB template: it must get ENOSPC, and the
    # build's files on the host (its partial directory) must stay near 256 MiB meanwhile.
    name = "e2e-enospc"
    dockerfile = (
        "FROM base\n"
        "RUN dd if=/dev/zero of=/big.bin bs=1M count=600 || (echo wrote-until-full; sleep 3; exit 1)\n"
    )
    accepted = submit(server.url, lc.api_key, name, dockerfile, size_mb=256)
    assert accepted.status_code == 202, accepted.text
    build_id = accepted.json()["id"]
    partials = lambda: list(server.data_dir.glob(f"user-templates/*/{name}/*.partial"))  # noqa: E731
    peak = 0
    deadline = time.monotonic() + 300
    while (b := lc.templates.get_build(build_id)).status not in ("done", "failed"):
        peak = max(peak, allocated_kib(partials()))
        assert time.monotonic() < deadline, f"build still {b.status}"
        time.sleep(0.3)
    assert b.status == "failed", "a RUN writing 600 MiB into a 256 MiB template must fail"
    assert "size_mb" in b.error and "256 MiB" in b.error, b.error
    assert "No space left on device" in b.error, b.error
    # The build disk's image is sparse: ~256 MiB of blocks at most, and a little slack.
    assert peak <= (256 + 32) * 1024, f"the build took {peak // 1024} MiB of host disk"
    assert not partials(), "a failed build leaves nothing behind"


def test_add_and_rootfs_tar_over_size_mb_fail_naming_it(lc, server, tmp_path):
    # Issue 23 finding 5: an ADD archive could unpack to 16 GiB, a rootfs tar to 10 GiB,
    # whatever the template's size_mb. 300 MiB of zeros (a small gzip) into 256 MiB templates.
    big = with_zeros(tiny_rootfs_tar(server), "data/blob", 300 * MIB)
    (tmp_path / "big.tar.gz").write_bytes(big)
    b = wait_build(lc, lc.templates.build("e2e-big-tar", rootfs_tar=str(tmp_path / "big.tar.gz"), size_mb=256).id)
    assert b.status == "failed" and "size_mb" in b.error and "256 MiB" in b.error, b.error

    ctx = tmp_path / "ctx"
    ctx.mkdir()
    empty = io.BytesIO()
    tarfile.open(fileobj=empty, mode="w").close()
    (ctx / "bundle.tar.gz").write_bytes(with_zeros(empty.getvalue(), "pkg/zeros", 300 * MIB))
    dockerfile = "FROM base\nADD bundle.tar.gz /opt/\n"
    b = wait_build(lc, lc.templates.build_from_dockerfile("e2e-big-add", dockerfile, context_dir=str(ctx), size_mb=256).id)
    assert b.status == "failed" and "Dockerfile line 2" in b.error and "size_mb" in b.error, b.error
    assert not list(server.data_dir.glob("user-templates/*/e2e-big-*/*.partial"))


@pytest.fixture(scope="module")
def queue_server(server):
    """A server with one build worker and at most 2 queued builds per workspace, on a fresh
    data dir whose base template is a hard-linked copy of the main server's."""
    data = server.data_dir.parent / f"build-queue-server-{os.getpid()}"
    scrub_data_dir(data)
    (data / "templates").mkdir(parents=True)
    _copy_current_template(server.data_dir / "templates", data / "templates", "base")
    srv = Server(server.binary, data, _free_port(), server.log.parent / "server-build-queue.log")
    env = {"PANDASTACK_BUILD_CONCURRENCY": "1", "PANDASTACK_MAX_QUEUED_BUILDS": "2", "PANDASTACK_POOL_SIZE": "0"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        srv.start()
        yield srv
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        srv.stop()
        scrub_data_dir(data)


def wait_log(client: Client, build_id: str, pattern: str, within: float = 120) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if any(re.search(pattern, l) for l in client.templates.build_logs(build_id, follow=False)):
            return
        time.sleep(0.3)
    raise AssertionError(f"{build_id}: no log line matching {pattern!r}")


def test_server_killed_mid_run_leaves_no_build_disk(queue_server):
    # Issue 23 finding 5: the build writes on a disk of its own (a loop device while it
    # runs); kill -9 mid-RUN and restart: start-up leaves no mount or loop device of it.
    key = queue_server.create_workspace(f"e2e-crash-{uuid.uuid4().hex[:8]}")
    client = Client(api_url=queue_server.url, api_key=key)
    accepted = submit(queue_server.url, key, "e2e-crash", "FROM base\nRUN echo in-the-step; sleep 60\n", size_mb=256)
    assert accepted.status_code == 202, accepted.text
    build_id = accepted.json()["id"]
    wait_log(client, build_id, r"^in-the-step$")
    stores = (queue_server.data_dir / "user-templates").resolve()
    assert loops_under(stores), "a running build has a loop-mounted disk of its own"
    queue_server.kill9()
    queue_server.start()
    deadline = time.monotonic() + 60
    while (left := loops_under(stores) + mounts_under(stores)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left
    b = client.templates.get_build(build_id)
    assert b.status == "failed" and "restarted" in b.error, b


def test_one_workspace_does_not_hold_the_build_worker(queue_server):
    # Issue 23 finding 6: with one worker, workspace A's one-line build waited 50 s behind
    # workspace B's queue. B queues a slow build and two quick ones, then A one quick one: A
    # runs right after B's first, before B's second.
    key_a = queue_server.create_workspace(f"e2e-rr-a-{uuid.uuid4().hex[:8]}")
    key_b = queue_server.create_workspace(f"e2e-rr-b-{uuid.uuid4().hex[:8]}")
    ids = []
    for n, step in enumerate(["RUN echo b0-running; sleep 5", "RUN true", "RUN true"]):
        r = submit(queue_server.url, key_b, f"e2e-rr-b{n}", f"FROM base\n{step}\n", size_mb=256)
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    client_b = Client(api_url=queue_server.url, api_key=key_b)
    wait_log(client_b, ids[0], r"^b0-running$")
    r = submit(queue_server.url, key_a, "e2e-rr-a", "FROM base\nRUN true\n", size_mb=256)
    assert r.status_code == 202, r.text
    client_a = Client(api_url=queue_server.url, api_key=key_a)
    a = wait_build(client_a, r.json()["id"])
    assert a.status == "done", a.error
    b1 = client_b.templates.get_build(ids[1])
    assert b1.started_at is None or moment(b1.started_at) >= moment(a.ended_at), (
        f"workspace A's build ran after B's second: B1 started {b1.started_at}, A ended {a.ended_at}"
    )
    # B's quick builds finish on their own (the server and its data dir go with the module).


def test_queued_builds_are_capped_and_a_newer_build_supersedes_a_queued_one(queue_server):
    # Issue 23 finding 6: six queued builds of one name were all accepted. At most 2 may be
    # queued here (the server's --max-queued-builds); one may be running besides.
    key = queue_server.create_workspace(f"e2e-cap-{uuid.uuid4().hex[:8]}")
    client = Client(api_url=queue_server.url, api_key=key)
    first = submit(queue_server.url, key, "e2e-cap-0", "FROM base\nRUN echo cap-running; sleep 8\n", size_mb=256)
    assert first.status_code == 202, first.text
    wait_log(client, first.json()["id"], r"^cap-running$")
    queued = []
    for n in (1, 2):
        r = submit(queue_server.url, key, f"e2e-cap-{n}", "FROM base\nRUN true\n", size_mb=256)
        assert r.status_code == 202, r.text
        queued.append(r.json()["id"])
    over = submit(queue_server.url, key, "e2e-cap-3", "FROM base\nRUN true\n", size_mb=256)
    assert_json_error(over, "queued", "max-queued-builds", status=429)
    # A newer build of a queued name replaces it, even at the cap.
    newer = submit(queue_server.url, key, "e2e-cap-1", "FROM base\nRUN echo newer\n", size_mb=256)
    assert newer.status_code == 202, newer.text
    old = client.templates.get_build(queued[0])
    assert old.status == "failed" and "superseded" in old.error and newer.json()["id"] in old.error, old
    assert client.templates.get_build(newer.json()["id"]).status in ("queued", "running", "done")
