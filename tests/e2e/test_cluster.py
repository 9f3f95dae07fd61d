"""Several hosts, one control plane (issue 12): two `pandastack server` processes on this
machine ("a" and "b": separate data dirs, ports and sandbox networks) share one PostgreSQL
database of the test cluster scripts/test.sh starts ($PANDASTACK_TEST_POSTGRES_URL) and one
bucket of the Garage (a real S3 server) it starts ($PANDASTACK_TEST_S3_*) as their object
store for snapshot, hibernation and fork images. Each test
drives them through the published Python SDK (or raw HTTP for what the SDK has no call for:
the placement hint, `GET /v1/hosts`).

Host b's template builds are not a's: the fixture adds one file to b's copies (`/etc/` +
BAKE_MARK), as an independent bake of the same recipe would differ, so every image that moves
between the hosts restores onto the build it was taken on, published to the object store by
its host and fetched by the other (issue 12 point 6).

The hosts run without a warm pool or restore targets (`--pool-size 0 --restore-targets 0`), so
every container runsc lists under a host's root is a sandbox's, which the fencing test counts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import PREVIEW_SUFFIX
from lifecycle_fixtures import SecondServer, _copy_current_template, _pid_alive, scrub_data_dir, wait_until


PG_URL = os.environ.get("PANDASTACK_TEST_POSTGRES_URL", "")
if not PG_URL:
    # Never skipped: scripts/test.sh starts a PostgreSQL and sets it.
    pytest.fail("PANDASTACK_TEST_POSTGRES_URL is not set (scripts/test.sh starts a PostgreSQL and sets it)",
                pytrace=False)

S3 = {k: os.environ.get(f"PANDASTACK_TEST_S3_{k}", "") for k in ("ENDPOINT", "BUCKET", "KEY_ID", "SECRET")}
if not all(S3.values()):
    # Never skipped: scripts/test.sh starts a Garage and sets these.
    pytest.fail("PANDASTACK_TEST_S3_ENDPOINT/BUCKET/KEY_ID/SECRET are not set (scripts/test.sh starts Garage)",
                pytrace=False)
# The hosts read their S3 settings from the standard AWS variables (they inherit this env).
os.environ.update({"AWS_ENDPOINT_URL": S3["ENDPOINT"], "AWS_REGION": "garage", "AWS_ALLOW_HTTP": "true",
                   "AWS_ACCESS_KEY_ID": S3["KEY_ID"], "AWS_SECRET_ACCESS_KEY": S3["SECRET"]})

# Small enough for the quota test to reach across both hosts, above what the others create.
WORKSPACE_MAX_SANDBOXES = 24
HOST_ARGS = ["--pool-size", "0", "--restore-targets", "0", "--idle-hibernate-seconds", "3600",
             "--object-store", f"s3://{S3['BUCKET']}", "--preview-host-suffix", PREVIEW_SUFFIX,
             "--workspace-max-sandboxes", str(WORKSPACE_MAX_SANDBOXES)]


# The file only b's template builds have (module doc).
BAKE_MARK = "pandastack-bake-of-b"


def _mark_bake(template_dir) -> None:
    """Makes the current build in `template_dir` differ from the original it was hard-linked
    from: a new file (a new inode: the original's files are untouched) in its `etc/`."""
    current = (template_dir / "current").read_text().strip()
    (template_dir / current / "rootfs" / "etc" / BAKE_MARK).write_text("b\n")


def _psql(sql: str) -> None:
    subprocess.run(["psql", PG_URL, "-v", "ON_ERROR_STOP=1", "-qc", sql], check=True, timeout=60,
                   stdin=subprocess.DEVNULL, capture_output=True)


class Cluster:
    def __init__(self, server, db_url: str) -> None:
        self.db_url = db_url
        parent = server.data_dir.parent
        for stale in parent.glob("cluster-*-*"):
            pid = stale.name.rsplit("-", 1)[-1]
            if pid.isdigit() and not _pid_alive(int(pid)):
                scrub_data_dir(stale)
        self.hosts: dict[str, SecondServer] = {}
        for name in ("a", "b"):
            data_dir = parent / f"cluster-{name}-{os.getpid()}"
            scrub_data_dir(data_dir)
            (data_dir / "templates").mkdir(parents=True)
            for tpl in ("base", "code-interpreter"):
                _copy_current_template(server.data_dir / "templates", data_dir / "templates", tpl)
                if name == "b":
                    _mark_bake(data_dir / "templates" / tpl)
            self.hosts[name] = SecondServer(
                server.binary, data_dir, server.log.parent / f"server-cluster-{name}.log",
                ["--store", db_url, "--host-name", name] + HOST_ARGS,
            )
        self.a, self.b = self.hosts["a"], self.hosts["b"]
        for h in self.hosts.values():
            h.extra_args += ["--advertise-url", h.url]

    def start(self) -> None:
        self.a.start()  # the first host bootstraps the workspace and writes admin.env
        self.b.start()
        self.key = self.a.admin_key()
        # Each host boots and checkpoints its template images once at start; the tests count
        # containers only after those are done.
        wait_until(lambda: not self.containers(self.a) and not self.containers(self.b),
                   timeout=300, interval=1, what="the hosts' template images")
        # And publish their template builds (b's differ from a's) in the background; the tests
        # start once that load is over on both (the placement test measures load).
        wait_until(lambda: all(self.published_since_start(h) >= 2 for h in (self.a, self.b)),
                   timeout=600, interval=2, what="the hosts' template builds to be published")

    def published_since_start(self, host: SecondServer) -> int:
        """Template builds `host` published (or found published) since its last start, from its
        log (shared_builds.rs logs one line per build)."""
        text = host.log.read_text(errors="replace")
        since = text.rsplit("starting server on", 1)[-1]
        return since.count("template build published") + since.count("template build already published")

    def client(self, host: SecondServer):
        from pandastack import Client

        return Client(api_url=host.url, api_key=self.key)

    def call(self, host: SecondServer, method: str, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", 120)
        headers = kw.pop("headers", {}) | {"Authorization": f"Bearer {self.key}"}
        return requests.request(method, host.url + path, headers=headers, **kw)

    def create_on(self, via: SecondServer, host: str, template: str = "base") -> str:
        """Creates a sandbox through `via` with the placement hint `host`; returns its id."""
        r = self.call(via, "POST", "/v1/sandboxes", json={"template": template, "host": host})
        assert r.status_code == 201, f"HTTP {r.status_code}: {r.text[:300]}"
        assert r.json()["host"] == host, r.json()
        return r.json()["id"]

    def objects(self, prefix: str) -> list[str]:
        """Keys under `prefix` in the cluster's bucket (read with boto3, another S3 client)."""
        import boto3

        s3 = boto3.client("s3", endpoint_url=S3["ENDPOINT"], region_name="garage",
                          aws_access_key_id=S3["KEY_ID"], aws_secret_access_key=S3["SECRET"])
        out = s3.list_objects_v2(Bucket=S3["BUCKET"], Prefix=prefix)
        return [o["Key"] for o in out.get("Contents", [])]

    def containers(self, host: SecondServer) -> list[str]:
        out = subprocess.run(["runsc", f"--root={host.data_dir / 'runsc'}", "list", "-quiet"],
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        return out.stdout.split()

    def delete_all(self) -> None:
        from pandastack import NotFoundError

        for host in (self.a, self.b):
            if host.proc is None or host.proc.poll() is not None:
                host.start()
        client = self.client(self.a)
        for sb in client.sandboxes.list():
            try:
                client.sandboxes.delete(sb.id)
            except NotFoundError:
                pass
        for db in self.call(self.a, "GET", "/v1/databases").json()["items"]:
            self.call(self.a, "DELETE", f"/v1/databases/{db['id']}")

    def teardown(self) -> None:
        for h in self.hosts.values():
            if h.proc is not None and h.proc.poll() is None:
                try:
                    os.kill(h.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        try:
            self.delete_all()
        finally:
            for h in self.hosts.values():
                h.stop()
                scrub_data_dir(h.data_dir)


@pytest.fixture(scope="module")
def cluster(server):
    name = f"cluster_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    _psql(f"CREATE DATABASE {name}")
    base = PG_URL.rsplit("/", 1)[0]
    c = Cluster(server, f"{base}/{name}")
    try:
        c.start()
        yield c
    finally:
        try:
            c.teardown()
        finally:
            _psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def clean(cluster):
    yield cluster
    cluster.delete_all()


def test_every_host_is_listed_with_its_state_and_load_for_the_operator_only(clean):
    r = clean.call(clean.b, "GET", "/v1/hosts")
    assert r.status_code == 200, r.text
    hosts = {h["name"]: h for h in r.json()}
    assert set(hosts) == {"a", "b"}
    for name, h in hosts.items():
        assert h["state"] == "active", h
        assert h["advertise_url"] == clean.hosts[name].url
        assert h["heartbeat_age_ms"] < 20_000
        assert set(h["capacity"]["templates"]) >= {"base", "code-interpreter"}, h["capacity"]
        assert h["capacity"]["max_sandboxes"] > 0
    # A key of another workspace is no operator's.
    out = subprocess.run(
        [str(clean.a.binary), "admin", "workspace-create", "--name", "not-operator",
         "--data-dir", str(clean.a.data_dir), "--store", clean.db_url],
        capture_output=True, text=True, timeout=60, check=True, stdin=subprocess.DEVNULL,
    ).stdout
    key = next(line.split("=", 1)[1].strip() for line in out.splitlines()
               if line.startswith("export PANDASTACK_API_KEY="))
    r = requests.get(f"{clean.a.url}/v1/hosts", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 403, r.text


def test_a_sandbox_on_b_is_served_through_a(clean):
    sid = clean.create_on(clean.a, "b", template="code-interpreter")
    wait_until(lambda: not clean.containers(clean.a) and len(clean.containers(clean.b)) == 1,
               timeout=30, what="one container, on b")
    sb = clean.client(clean.a).sandboxes.get(sid)
    res = sb.exec("echo hello from $(hostname)")
    assert res.exit_code == 0 and "hello from" in res.stdout
    sb.filesystem.write("/workspace/note.txt", "written through a")
    assert sb.filesystem.read("/workspace/note.txt") == b"written through a"
    ctx = sb.create_code_context()
    ctx.run_code("x = 6 * 7")
    assert ctx.run_code("x").text == "42"
    # Streaming exec through the relay.
    chunks = []
    assert sb.exec_stream("for i in 1 2 3; do echo line$i; done", on_stdout=chunks.append) == 0
    assert "line3" in "".join(chunks)
    # Host b answers for it too, and both show the same sandbox with its host.
    via_b = clean.call(clean.b, "GET", f"/v1/sandboxes/{sid}").json()
    via_a = clean.call(clean.a, "GET", f"/v1/sandboxes/{sid}").json()
    assert via_a["host"] == via_b["host"] == "b" and via_a["status"] == "running"
    # Every host's list shows every sandbox of the workspace.
    assert sid in [s.id for s in clean.client(clean.a).sandboxes.list()]
    sb.kill()
    assert clean.call(clean.b, "GET", f"/v1/sandboxes/{sid}").status_code == 404
    wait_until(lambda: not clean.containers(clean.b), timeout=30, what="b's container to go")


def test_events_of_every_host_reach_a_subscriber_of_either(clean):
    from lifecycle_fixtures import EventStream

    stream = EventStream(clean.a.url, clean.key)
    try:
        sid = clean.create_on(clean.b, "b")
        assert clean.call(clean.b, "DELETE", f"/v1/sandboxes/{sid}").status_code == 204

        def seen():
            got = [e for _, e in stream.events if e["sandbox_id"] == sid]
            return got if any(e["to"] == "deleted" for e in got) else None

        got = wait_until(seen, timeout=20, what="b's events on a's stream")
        assert [e["to"] for e in got] == ["running", "deleted"], got
        seqs = [e["seq"] for e in got]
        assert seqs == sorted(seqs)
    finally:
        stream.close()


def test_concurrent_creates_spread_over_the_hosts(clean):
    client = clean.client(clean.a)

    # Placement reads the other host's load from its heartbeat (every 5 s): wait until both
    # report the earlier tests' sandboxes gone, or b looks busier than it is.
    def idle():
        hosts = clean.call(clean.a, "GET", "/v1/hosts").json()
        return all(h["capacity"]["sandboxes"] == 0 for h in hosts)

    wait_until(idle, timeout=60, interval=0.5, what="both hosts' heartbeats to show no sandboxes")

    def create(_):
        return client.sandboxes.create(template="base").id

    with ThreadPoolExecutor(max_workers=20) as pool:
        ids = list(pool.map(create, range(20)))
    hosts = [clean.call(clean.a, "GET", f"/v1/sandboxes/{i}").json()["host"] for i in ids]
    counts = {h: hosts.count(h) for h in ("a", "b")}
    assert sum(counts.values()) == 20, counts
    assert min(counts.values()) >= 5, f"creates not spread: {counts}"


def test_from_snapshot_lands_on_the_host_holding_the_image_with_kernel_state(clean):
    client = clean.client(clean.a)
    sid = clean.create_on(clean.a, "b", template="code-interpreter")
    sb = client.sandboxes.get(sid)
    ctx = sb.create_code_context()
    ctx.run_code("import pandas as pd\ndf = pd.DataFrame({'v': range(100000)})")
    snap = sb.snapshot()
    restored = client.sandboxes.create(from_snapshot=snap)
    assert clean.call(clean.a, "GET", f"/v1/sandboxes/{restored.id}").json()["host"] == "b"
    # A context re-opened on the restored sandbox reaches the snapshot's kernel (as on one
    # host): its DataFrame came along.
    again = restored.create_code_context()
    assert again.run_code("int(df['v'].sum())").text == str(sum(range(100000)))
    r = clean.call(clean.a, "DELETE", f"/v1/snapshots/{snap}")
    assert r.status_code == 204, r.text


def test_a_volume_lives_on_its_host_and_is_reached_through_any(clean):
    """Issue 9 in a cluster: a volume's image is on the host that made it (b); a create through
    a that attaches it lands on b, and a's answers for the volume come from b (its holder, its
    refusal to delete while attached, the delete)."""
    from pandastack import BadRequestError

    name = f"shared-{uuid.uuid4().hex[:8]}"
    r = clean.call(clean.b, "POST", "/v1/volumes", json={"name": name, "size_mb": 128})
    assert r.status_code == 201, r.text
    via_a = clean.client(clean.a)
    with pytest.raises(BadRequestError):  # names are unique per workspace, whichever host
        via_a.volumes.create(name=name, size_mb=64)
    sb = via_a.sandboxes.create(template="base", volumes=[{"name": name}])
    assert clean.call(clean.a, "GET", f"/v1/sandboxes/{sb.id}").json()["host"] == "b"
    assert sb.exec(f"sh -c 'echo on-b > /mnt/{name}/f && sync && cat /mnt/{name}/f'").stdout == "on-b\n"
    vol = clean.call(clean.a, "GET", f"/v1/volumes/{name}").json()
    assert vol["attached_to"] == sb.id and vol["used_bytes"] > 0, vol
    r = clean.call(clean.a, "DELETE", f"/v1/volumes/{name}")
    assert r.status_code == 409 and sb.id in r.text, r.text
    sb.kill()
    r = clean.call(clean.a, "DELETE", f"/v1/volumes/{name}")
    assert r.status_code == 204, r.text
    assert not list((clean.b.data_dir / "volumes").glob("*.ext4")), "the image stayed on b"


def _wait_failed(c: Cluster, via: SecondServer, sid: str, within: float) -> dict:
    def failed():
        r = c.call(via, "GET", f"/v1/sandboxes/{sid}")
        # While its host is dead and not yet seen down, `via` answers from the store: the
        # row, never an error (a 500 here once: the retried request had lost its route).
        assert r.status_code == 200, f"HTTP {r.status_code}: {r.text[:300]}"
        return r.json() if r.json()["status"] == "failed" else None

    return wait_until(failed, timeout=within, what=f"sandbox {sid} to fail")


def test_a_killed_host_fails_its_sandboxes_by_lease_expiry_and_creates_go_on(clean):
    sid = clean.create_on(clean.a, "b")
    killed = time.monotonic()
    clean.b.proc.send_signal(signal.SIGKILL)
    clean.b.proc.wait(timeout=30)
    # Creates keep working through a while b is gone (before b counts as down, a relay to it
    # fails and a takes the create).
    sb = clean.client(clean.a).sandboxes.create(template="base")
    assert sb.exec("true").exit_code == 0
    row = _wait_failed(clean, clean.a, sid, within=45)
    took = time.monotonic() - killed
    assert row["host"] == "b"
    events = clean.call(clean.a, "GET", f"/v1/sandboxes/{sid}/events").json()
    assert events[-1]["to"] == "failed" and events[-1]["cause"] == "lease expired (host b)", events
    print(f"lease expiry to failed: {took:.1f} s after kill -9")
    def states():
        return {h["name"]: h["state"] for h in clean.call(clean.a, "GET", "/v1/hosts").json()}

    assert wait_until(lambda: states()["b"] == "down" and states(), timeout=30, what="b to be down")["a"] == "active"
    # b's restart destroys what it left of the failed sandbox.
    clean.b.start()
    wait_until(lambda: not clean.containers(clean.b), timeout=60, what="b to destroy the failed sandbox's instance")


def test_a_partitioned_host_destroys_its_instances_rather_than_double_running(clean):
    sid = clean.create_on(clean.a, "b")
    wait_until(lambda: len(clean.containers(clean.b)) == 1, timeout=30, what="one container on b")
    os.kill(clean.b.proc.pid, signal.SIGSTOP)
    try:
        _wait_failed(clean, clean.a, sid, within=60)
    finally:
        os.kill(clean.b.proc.pid, signal.SIGCONT)
    # b finds its lease gone at its next renewal (every 10 s) and destroys the instance.
    wait_until(lambda: not clean.containers(clean.b), timeout=40, what="b to fence its instance")
    row = clean.call(clean.a, "GET", f"/v1/sandboxes/{sid}").json()
    assert row["status"] == "failed" and row["host"] == "b"
    r = clean.call(clean.a, "POST", f"/v1/sandboxes/{sid}/exec", json={"cmd": "true"})
    assert r.status_code in (404, 409), r.text


def test_a_database_lives_on_its_host_and_is_served_through_any(clean):
    """A database made through b lives on b (its cluster, storage and port are b's): a lists
    it, answers for it by relaying to b, and a's restart (its start-up recovery) leaves it
    alone; a delete through a removes it on b."""
    r = clean.call(clean.b, "POST", "/v1/databases", json={"label": "on-b"})
    assert r.status_code == 202, r.text
    db_id = r.json()["id"]

    def running():
        d = clean.call(clean.a, "GET", f"/v1/databases/{db_id}").json()
        return d if d["status"] == "running" and d.get("connection_url") else None

    db = wait_until(running, timeout=120, what="the database to run")
    assert db["label"] == "on-b"
    listed = clean.call(clean.a, "GET", "/v1/databases").json()["items"]
    assert [d["id"] for d in listed] == [db_id]
    clean.a.stop()
    clean.a.start()
    assert running()["connection_url"] == db["connection_url"]
    assert clean.call(clean.a, "DELETE", f"/v1/databases/{db_id}").status_code in (200, 202, 204)
    wait_until(lambda: clean.call(clean.b, "GET", f"/v1/databases/{db_id}").status_code == 404,
               timeout=60, what="the database to be gone on b")


def test_a_snapshot_taken_on_a_restores_on_b_and_its_delete_removes_its_objects(clean):
    """Issue 12 point 6: the snapshot is uploaded in the background (its JSON says when), a
    restore on b fetches it and the kernel state came along; deleting it deletes its objects,
    and b's fetched copy goes too (b's cache sweep, every 10 s)."""
    client = clean.client(clean.a)
    sid = clean.create_on(clean.a, "a", template="code-interpreter")
    sb = client.sandboxes.get(sid)
    sb.create_code_context().run_code("secret = 'taken on a'")
    snap = sb.snapshot()
    wait_until(lambda: clean.call(clean.b, "GET", f"/v1/snapshots/{snap}").json()["uploaded"],
               timeout=300, interval=0.5, what="the snapshot to be uploaded")
    keys = clean.objects(f"snapshots/{snap}/")
    assert f"snapshots/{snap}/manifest.json" in keys and f"snapshots/{snap}/pages.img" in keys, keys
    r = clean.call(clean.a, "POST", "/v1/sandboxes", json={"from_snapshot": snap, "host": "b"})
    assert r.status_code == 201, r.text
    restored = client.sandboxes.get(r.json()["id"])
    assert r.json()["host"] == "b"
    assert restored.create_code_context().run_code("secret").text == "'taken on a'"
    cache = clean.b.data_dir / "object-cache"
    assert [p for p in cache.iterdir() if p.name.startswith(f"{snap}-")], "b kept no fetched copy"
    r = clean.call(clean.b, "DELETE", f"/v1/snapshots/{snap}")
    assert r.status_code == 204, r.text
    wait_until(lambda: not clean.objects(f"snapshots/{snap}/"), timeout=30, what="the snapshot's objects to go")
    assert not (clean.a.data_dir / "snapshots" / snap).exists()
    wait_until(lambda: not [p for p in cache.iterdir() if p.name.startswith(f"{snap}-")], timeout=30,
               what="b's fetched copy of the deleted snapshot to go")
    # The sandbox restored from it runs on.
    assert restored.exec("echo alive").stdout == "alive\n"


def _wait_uploaded(c: Cluster, snap: str) -> None:
    # The first image of a build may wait for the build's own upload (hundreds of MiB).
    wait_until(lambda: c.call(c.a, "GET", f"/v1/snapshots/{snap}").json()["uploaded"],
               timeout=300, interval=0.5, what=f"snapshot {snap} to be uploaded")


def test_hosts_with_their_own_bakes_restore_each_others_images_onto_the_fetched_build(clean):
    """Issue 12 point 6: an image taken on a restores on b (whose own build differs, module
    doc) onto a's build, which a published under its manifest digest before the image counted
    as uploaded and b fetched, checked, into `fetched-templates/<digest>/`. The restored
    sandbox runs on a's build (no BAKE_MARK) while a fresh create on b runs on b's own; a
    snapshot of it goes back to a onto a's own build, with nothing fetched there."""
    client = clean.client(clean.a)
    sb = client.sandboxes.get(clean.create_on(clean.a, "a"))
    assert sb.exec(f"test -e /etc/{BAKE_MARK}").exit_code == 1
    sb.exec("echo 'written on a' > /root/note")
    snap = sb.snapshot()
    _wait_uploaded(clean, snap)
    published = clean.objects("template-builds/")
    assert any(k.endswith("/manifest.json") for k in published), published
    r = clean.call(clean.a, "POST", "/v1/sandboxes", json={"from_snapshot": snap, "host": "b"})
    assert r.status_code == 201, r.text
    restored = client.sandboxes.get(r.json()["id"])
    assert restored.exec("cat /root/note").stdout == "written on a\n"
    assert restored.exec(f"test -e /etc/{BAKE_MARK}").exit_code == 1, "restored onto b's own build"
    fresh = client.sandboxes.get(clean.create_on(clean.a, "b"))
    assert fresh.exec(f"test -e /etc/{BAKE_MARK}").exit_code == 0, "b's creates use b's build"
    fetched = [p.name for p in (clean.b.data_dir / "fetched-templates").iterdir() if len(p.name) == 64]
    assert fetched, "b fetched no build"
    for digest in fetched:
        # Fetched from a complete publication (its manifest lists the archive).
        assert f"template-builds/{digest}/manifest.json" in published, (digest, published)
        assert (clean.b.data_dir / "fetched-templates" / digest / "rootfs" / "etc" / "hostname").exists()
    back = restored.snapshot()
    _wait_uploaded(clean, back)
    r = clean.call(clean.b, "POST", "/v1/sandboxes", json={"from_snapshot": back, "host": "a"})
    assert r.status_code == 201, r.text
    assert client.sandboxes.get(r.json()["id"]).exec("cat /root/note").stdout == "written on a\n"
    fetched_on_a = clean.a.data_dir / "fetched-templates"
    assert not fetched_on_a.exists() or not list(fetched_on_a.iterdir()), "a fetched its own build"
    for s in (snap, back):
        assert clean.call(clean.a, "DELETE", f"/v1/snapshots/{s}").status_code == 204


def test_a_sandbox_hibernated_on_a_wakes_on_b_after_a_is_killed(clean):
    """Issue 12 point 7: a's hibernated sandbox, its image uploaded, survives a kill -9 of a:
    once a is seen down, a request through b takes it over and wakes it there."""
    sid = clean.create_on(clean.a, "a", template="code-interpreter")
    # A context opened through b (relayed to a while a lives) is used again after a's death.
    ctx = clean.client(clean.b).sandboxes.get(sid).create_code_context()
    ctx.run_code("kept = sum(range(10))")
    r = clean.call(clean.a, "POST", f"/v1/sandboxes/{sid}/hibernate")
    assert r.status_code in (200, 202, 204), r.text
    wait_until(lambda: any(k.endswith("/manifest.json") for k in clean.objects(f"hibernate/{sid}/")),
               timeout=300, interval=0.5, what="the hibernation image to be uploaded")
    clean.a.proc.send_signal(signal.SIGKILL)
    clean.a.proc.wait(timeout=30)

    def a_down():
        return {h["name"]: h["state"] for h in clean.call(clean.b, "GET", "/v1/hosts").json()}["a"] == "down"

    wait_until(a_down, timeout=40, what="a to be down")
    assert ctx.run_code("kept").text == "45"
    row = clean.call(clean.b, "GET", f"/v1/sandboxes/{sid}").json()
    assert row["host"] == "b" and row["status"] == "running", row
    wait_until(lambda: not clean.objects(f"hibernate/{sid}/"), timeout=30, what="the used image's objects to go")
    # a's restart collects its copy of the image: the sandbox is b's now.
    clean.a.start()
    assert not (clean.a.data_dir / "hibernate" / sid).exists()
    assert clean.call(clean.a, "GET", f"/v1/sandboxes/{sid}").json()["host"] == "b"


def test_a_fork_with_the_host_hint_runs_on_the_other_host_with_the_parents_state(clean):
    """Issue 12 point 4: a fork placed on another host is captured on the parent's host,
    goes through the object store, and is restored there."""
    client = clean.client(clean.b)
    sid = clean.create_on(clean.b, "a", template="code-interpreter")
    parent = client.sandboxes.get(sid)
    parent.create_code_context().run_code("state = 'of the parent'")
    r = clean.call(clean.b, "POST", f"/v1/sandboxes/{sid}/fork", json={"host": "b"})
    assert r.status_code == 201, r.text
    child = r.json()
    assert child["host"] == "b" and child["metadata"]["parent_id"] == sid, child
    got = client.sandboxes.get(child["id"]).create_code_context().run_code("state")
    assert got.text == "'of the parent'"
    # The parent runs on, and the transfer's objects are gone.
    assert parent.exec("true").exit_code == 0
    tree = child["metadata"]["fork_tree_id"]
    wait_until(lambda: not clean.objects(f"forks/{tree}/"), timeout=30, what="the fork image's objects to go")
    r = clean.call(clean.b, "POST", f"/v1/sandboxes/{sid}/fork", json={"host": "nowhere"})
    assert r.status_code == 400 and "host" in r.text, r.text


def test_a_fork_whose_parents_host_is_full_lands_on_the_other_host(clean):
    """Issue 12 point 4, seed 000: a fork stays on its parent's host unless that host is full;
    then it goes to another host through the object store (no hint needed). Host a is
    restarted with room for one sandbox (its sandboxes are re-adopted), holds the parent,
    and the fork and the fork tree made through the SDK land on b with the parent's kernel
    state."""
    a = clean.a
    a.stop()
    a.extra_args += ["--max-sandboxes", "1"]
    try:
        a.start()
        client = clean.client(a)
        sid = clean.create_on(a, "a", template="code-interpreter")
        parent = client.sandboxes.get(sid)
        parent.create_code_context().run_code("state = 'parent on a full host'")
        r = clean.call(clean.b, "POST", "/v1/sandboxes", json={"template": "base", "host": "a"})
        assert r.status_code == 503 and r.headers.get("Retry-After"), (r.status_code, r.text)
        child = parent.fork()
        row = clean.call(a, "GET", f"/v1/sandboxes/{child.id}").json()
        assert row["host"] == "b" and row["metadata"]["parent_id"] == sid, row
        assert child.create_code_context().run_code("state").text == "'parent on a full host'"
        assert parent.exec("true").exit_code == 0
        # A fork tree goes whole to one host with room for it, from one capture.
        kids = parent.fork_tree(2)
        rows = [clean.call(a, "GET", f"/v1/sandboxes/{k.id}").json() for k in kids]
        assert [r["host"] for r in rows] == ["b", "b"], rows
        assert len({r["metadata"]["fork_tree_id"] for r in rows}) == 1, rows
        for k in kids:
            assert k.create_code_context().run_code("state").text == "'parent on a full host'"
    finally:
        a.stop()
        del a.extra_args[-2:]
        a.start()


def test_a_drain_moves_live_sandboxes_with_their_state_and_nothing_new_lands_there(clean):
    """Issue 12 point 8: `pandastack admin drain a` (the CLI, through b) moves a's running and
    paused sandboxes to b under the same ids, with their kernels' variables (the same context
    handle answers), files, volumes and state; a is `draining`, so creates go elsewhere until
    it is activated again."""
    via_b = clean.client(clean.b)
    running = clean.create_on(clean.b, "a", template="code-interpreter")
    sb = via_b.sandboxes.get(running)
    ctx = sb.create_code_context()
    ctx.run_code("kept = 6 * 7")
    sb.filesystem.write("/workspace/note.txt", "written on a")
    paused = clean.create_on(clean.b, "a")
    r = clean.call(clean.b, "POST", f"/v1/sandboxes/{paused}/pause")
    assert r.status_code in (200, 204), r.text
    # A volume on a (made through a), held read-write by a sandbox there: both move.
    vol = f"drained-{uuid.uuid4().hex[:8]}"
    r = clean.call(clean.a, "POST", "/v1/volumes", json={"name": vol, "size_mb": 256})
    assert r.status_code == 201, r.text
    holder = clean.client(clean.a).sandboxes.create(template="base", volumes=[{"name": vol}])
    assert clean.call(clean.a, "GET", f"/v1/sandboxes/{holder.id}").json()["host"] == "a"
    assert holder.exec(f"sh -c 'echo kept > /mnt/{vol}/f && sync'").exit_code == 0
    env = os.environ | {"PANDASTACK_API": clean.b.url, "PANDASTACK_API_KEY": clean.key}
    try:
        out = subprocess.run([str(clean.a.binary), "admin", "drain", "a", "--json"], env=env,
                             capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        assert out.returncode == 0, out.stderr + out.stdout
        report = json.loads(out.stdout)
        assert report["host"] == "a" and report["left"] == [], report
        moved = {m["sandbox_id"]: m for m in report["moved"]}
        assert set(moved) == {running, paused, holder.id}, report
        assert {m["to"] for m in moved.values()} == {"b"}, report
        assert (moved[running]["state"], moved[paused]["state"]) == ("running", "paused"), report
        # The same ids and context handle: the kernel's variables and the files came along.
        assert ctx.run_code("kept").text == "42"
        assert sb.filesystem.read("/workspace/note.txt") == b"written on a"
        # The volume came along: same content, attached to the same sandbox, image on b only.
        assert holder.exec(f"cat /mnt/{vol}/f").stdout == "kept\n"
        assert clean.call(clean.b, "GET", f"/v1/volumes/{vol}").json()["attached_to"] == holder.id
        assert len(list((clean.b.data_dir / "volumes").glob("*.ext4"))) == 1
        assert not list((clean.a.data_dir / "volumes").glob("*.ext4")), "a kept the volume's image"
        wait_until(lambda: not clean.objects("volumes/"), timeout=30,
                   what="the volume's transfer objects to go")
        rows = {i: clean.call(clean.a, "GET", f"/v1/sandboxes/{i}").json() for i in (running, paused)}
        assert (rows[running]["host"], rows[running]["status"]) == ("b", "running"), rows
        assert (rows[paused]["host"], rows[paused]["status"]) == ("b", "paused"), rows
        wait_until(lambda: not clean.containers(clean.a), timeout=30, what="a's containers to go")
        assert not (clean.a.data_dir / "hibernate" / running).exists(), "a kept its copy of the image"
        wait_until(lambda: not clean.objects(f"hibernate/{running}/"), timeout=30,
                   what="the moved image's objects to go")
        # a takes nothing new while it drains.
        states = {h["name"]: h["state"] for h in clean.call(clean.b, "GET", "/v1/hosts").json()}
        assert states["a"] == "draining", states
        r = clean.call(clean.a, "POST", "/v1/sandboxes", json={"template": "base"})
        assert r.status_code == 201 and r.json()["host"] == "b", r.text
        r = clean.call(clean.a, "POST", "/v1/sandboxes", json={"template": "base", "host": "a"})
        assert r.status_code == 503 and "draining" in r.text, r.text
    finally:
        r = clean.call(clean.a, "POST", "/v1/hosts/a/activate")
        clean.call(clean.a, "DELETE", f"/v1/sandboxes/{holder.id}")
        clean.call(clean.a, "DELETE", f"/v1/volumes/{vol}")
    assert r.status_code == 200 and r.json()["state"] == "active", r.text
    clean.create_on(clean.b, "a")


def test_a_drain_needs_a_cluster(server):
    """A single host has nowhere to move its sandboxes to: 409 naming what is missing, and
    nothing changes."""
    headers = {"Authorization": f"Bearer {server.admin_key()}"}
    name = requests.get(f"{server.url}/v1/hosts", headers=headers, timeout=30).json()[0]["name"]
    r = requests.post(f"{server.url}/v1/hosts/{name}/drain", headers=headers, timeout=30)
    assert r.status_code == 409 and "cluster" in r.json()["error"], r.text
    r = requests.post(f"{server.url}/v1/hosts/nowhere/drain", headers=headers, timeout=30)
    assert r.status_code == 404, r.text
    assert requests.get(f"{server.url}/v1/hosts", headers=headers, timeout=30).json()[0]["state"] == "active"


def test_a_preview_of_a_sandbox_on_b_is_served_through_a(clean):
    """Issue 12: a host-based preview (`{port}-{id}.suffix`) that reaches host a for a sandbox
    on b is relayed to b, which checks the preview token and serves the port."""
    from net_fixtures import start_http_server

    sid = clean.create_on(clean.a, "b")
    sb = clean.client(clean.a).sandboxes.get(sid)
    sb.filesystem.write("/srv/who", b"served on b")
    start_http_server(sb)
    host = f"8000-{sid}.{PREVIEW_SUFFIX}"
    # No token: b refuses it, through a.
    plain = requests.get(f"{clean.a.url}/who", headers={"Host": host}, timeout=30)
    assert plain.status_code == 401 and "preview token" in plain.text, plain.text
    tok = clean.call(clean.a, "POST", f"/v1/sandboxes/{sid}/preview-token", json={"port": 8000, "ttl_seconds": 600})
    assert tok.status_code == 200, tok.text
    first = requests.get(f"{clean.a.url}/who", params={"ps_token": tok.json()["token"]}, headers={"Host": host},
                         allow_redirects=False, timeout=30)
    assert first.status_code == 302, (first.status_code, first.text)
    cookie = first.headers["set-cookie"].split(";")[0]
    r = requests.get(f"{clean.a.url}/who", headers={"Host": host, "Cookie": cookie}, timeout=30)
    assert (r.status_code, r.text) == (200, "served on b"), (r.status_code, r.text[:200])


def test_the_workspace_sandbox_quota_counts_every_host(clean):
    """The workspace quota (`--workspace-max-sandboxes`, 24 here) is the workspace's across
    the cluster: with half of its sandboxes on each host, the next create on either answers
    429 naming the quota (each host used to count only its own)."""
    half = WORKSPACE_MAX_SANDBOXES // 2
    for host in ("a", "b"):
        for _ in range(half):
            clean.create_on(clean.a, host)
    for via, host in ((clean.a, "a"), (clean.b, "b")):
        r = clean.call(via, "POST", "/v1/sandboxes", json={"template": "base", "host": host})
        assert r.status_code == 429 and "workspace quota" in r.text, (r.status_code, r.text[:300])
