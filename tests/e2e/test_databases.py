"""Issue 10: databases. Seed 001 section 4 through the CLI and sandboxes, the published Python
SDK's `client.databases` calls, isolation between workspaces, the owner role's limits, a full
disk, kill -9 of the server and of a cluster, idle stop and wake on connect, events and
metrics, bad input, and that a delete leaves nothing behind.

Sandboxes reach a database at 10.0.2.2 (their gateway, which is the host); the host reaches
the same URL. Every byte stays on this machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests

from db_fixtures import databases_deleted, delete_databases, leftovers, psql  # noqa: F401
from helpers import assert_json_error
from lifecycle_fixtures import SecondServer, scrub_data_dir
from test_cli import Cli, pairs, table

# Seed 001 section 4, verbatim.
SEED_001 = [
    "pandastack db create --label agent-memory --size 1g",
    "pandastack db connection <db-id>",
]


def host_psql(url: str, sql: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """psql on the host (postgresql-client comes with the server's PostgreSQL)."""
    return subprocess.run(
        ["psql", url, "-v", "ON_ERROR_STOP=1", "-At", "-c", sql],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def cli(server, tmp_path) -> Cli:
    return Cli(server, tmp_path)


def test_seed001_database_outlives_the_sandbox(cli, server, databases_deleted):
    from pandastack import Client, Sandbox

    created = pairs(cli.run(SEED_001[0], timeout=180).stdout)
    assert created["status"] == "running", created
    assert created["label"] == "agent-memory" and created["size"] == "1g", created
    db_id = created["id"]
    url = cli.run(SEED_001[1], db_id=db_id).stdout.strip()
    assert url.startswith("postgres://agent_memory_owner:") and url.endswith("/agent_memory"), url
    assert "@10.0.2.2:" in url, url

    # "Pass the connection string into the sandbox as an environment variable".
    sb_id = pairs(cli.run(f"pandastack sandbox create --template code-interpreter --env DATABASE_URL='{url}'").stdout)["id"]
    sb = Sandbox.get(sb_id)
    ex = sb.create_code_context().run_code(
        "import os, psycopg2\n"
        "conn = psycopg2.connect(os.environ['DATABASE_URL'])\n"
        "cur = conn.cursor()\n"
        "cur.execute('CREATE TABLE memory (k text PRIMARY KEY, v text)')\n"
        "cur.execute(\"INSERT INTO memory VALUES ('goal', 'ship issue 10'), ('turn', '1')\")\n"
        "conn.commit()\n"
        "cur.execute('SELECT count(*) FROM memory'); print(cur.fetchone()[0])"
    )
    assert ex.error is None, ex.error
    assert ex.stdout.strip() == "2", ex.stdout
    sb.kill()

    # The data does not live in the sandbox: a new one (base, with psql) reads it back.
    other = Sandbox.create(template="base")
    r = psql(other, url, "SELECT v FROM memory WHERE k = 'goal'")
    assert r.exit_code == 0 and r.stdout.strip() == "ship issue 10", (r.stdout, r.stderr)
    other.kill()

    # The host reaches the same URL (the user's own app).
    assert host_psql(url, "SELECT count(*) FROM memory").stdout.strip() == "2"

    listed = table(cli.run("pandastack db list").stdout)
    assert any(r["ID"] == db_id and r["STATUS"] == "running" for r in listed), listed
    assert pairs(cli.run(f"pandastack db get {db_id}").stdout)["connection_url"] == url
    as_json = json.loads(cli.run(f"pandastack db get {db_id} -o json").stdout)
    assert as_json["connection_url"] == url and as_json["database"] == "agent_memory"
    assert cli.run(f"pandastack db delete {db_id}").stdout.strip() == f"deleted {db_id}"
    assert db_id not in {d["id"] for d in Client().databases.list()}
    gone = cli.run(f"pandastack db get {db_id}", ok=False)
    assert gone.returncode == 1 and "(HTTP 404)" in gone.stderr, gone.stderr


def test_sdk_calls_clone_reset_and_delete_leave_nothing(server, databases_deleted):
    from pandastack import Client, Sandbox

    client = Client()
    db = client.databases.create(label="orders", size="1g")
    assert db["status"] == "running" and db["connection_url"], db
    assert db["database"] == "orders" and db["username"] == "orders_owner", db
    assert db["host"] == "10.0.2.2" and isinstance(db["port"], int), db
    assert db["template"].startswith("postgresql") and db["always_on"] is False
    assert isinstance(db["created_at"], int), db
    assert len(db["password"]) >= 22, "at least 128 bits"
    assert db["password"] not in server.log.read_text(errors="replace"), "a password in the server log"
    url = db["connection_url"]
    assert host_psql(url, "CREATE TABLE t (n int); INSERT INTO t SELECT generate_series(1, 10)").returncode == 0

    # Listings hide the credentials.
    listed = [d for d in client.databases.list() if d["id"] == db["id"]]
    assert len(listed) == 1, listed
    assert "password" not in listed[0] and "connection_url" not in listed[0], listed[0]
    assert db["password"] not in json.dumps(client.databases.list())
    assert client.databases.get(db["id"])["connection_url"] == url
    assert client.databases.connection(db["id"])["connection_url"] == url

    # A clone holds the data at that moment and has its own password.
    clone = client.databases.clone(db["id"], label="orders-copy")
    assert clone["cloned_from"] == db["id"] and clone["status"] == "running", clone
    assert clone["password"] != db["password"] and clone["port"] != db["port"]
    assert host_psql(clone["connection_url"], "SELECT sum(n) FROM t").stdout.strip() == "55"
    assert host_psql(url, "INSERT INTO t VALUES (100)").returncode == 0
    assert host_psql(clone["connection_url"], "SELECT count(*) FROM t").stdout.strip() == "10"
    old_into_clone = clone["connection_url"].replace(clone["password"], db["password"])
    assert host_psql(old_into_clone, "SELECT 1").returncode != 0

    # reset_credentials: a new password, and open sessions of the old one end.
    sb = Sandbox.create(template="base")
    sb.exec(f"setsid sh -c \"psql '{url}' -c 'SELECT pg_sleep(600)' > /tmp/long.out 2>&1\" > /dev/null 2>&1 &")
    deadline = time.monotonic() + 30
    while client.databases.get(db["id"])["connections"] < 1:
        assert time.monotonic() < deadline, "the sleeping session never connected"
        time.sleep(0.2)
    fresh = client.databases.reset_credentials(db["id"])
    assert fresh["connection_url"] and fresh["password"] != db["password"], fresh
    assert host_psql(url, "SELECT 1").returncode != 0, "the old password still works"
    assert host_psql(fresh["connection_url"], "SELECT count(*) FROM t").stdout.strip() == "11"
    deadline = time.monotonic() + 30
    # The FATAL of the terminated backend, or (a session still authenticating when the
    # password changed) the front end closing it.
    while not any(m in sb.exec("cat /tmp/long.out").stdout
                  for m in ("terminating connection", "server closed the connection")):
        assert time.monotonic() < deadline, sb.exec("cat /tmp/long.out").stdout
        time.sleep(0.3)
    sb.kill()

    # A delete removes the cluster, its storage and its port.
    for d in (db, clone):
        before = client.databases.get(d["id"])
        assert leftovers(server.data_dir, before), "nothing on the host before the delete?"
        client.databases.delete(d["id"])
        assert leftovers(server.data_dir, before) == {}
    ids = {d["id"] for d in client.databases.list()}
    assert db["id"] not in ids and clone["id"] not in ids


def test_only_the_workspace_reaches_its_database(server, client_b, databases_deleted):
    from pandastack import Client, NotFoundError, Sandbox

    db = Client().databases.create(label="private")
    url = db["connection_url"]
    # Another workspace's sandbox is refused before PostgreSQL sees it.
    sb_b = client_b.sandboxes.create(template="base")
    try:
        r = psql(sb_b, url, "SELECT 1")
        assert r.exit_code != 0, r.stdout
        assert "only the host and sandboxes of this database's workspace" in r.stderr, r.stderr
    finally:
        client_b.sandboxes.delete(sb_b.id)
    # ... and sees nothing of it through the API.
    with pytest.raises(NotFoundError):
        client_b.databases.get(db["id"])
    assert db["id"] not in {d["id"] for d in client_b.databases.list()}
    with pytest.raises(NotFoundError):
        client_b.databases.delete(db["id"])
    # The owner's own sandbox connects.
    sb = Sandbox.create(template="base")
    assert psql(sb, url, "SELECT current_user").stdout.strip() == "private_owner"

    # The role owns its database and nothing more.
    other = Client().databases.create(label="neighbour")
    other_dir = Path(server.data_dir) / "databases" / other["id"] / "mnt" / "pgdata"
    for sql in [
        "CREATE ROLE intruder LOGIN",
        "ALTER ROLE private_owner SUPERUSER",
        "CREATE DATABASE another",
        f"SELECT pg_read_file('{other_dir}/PG_VERSION')",
        f"CREATE TABLE f (t text); COPY f FROM '{other_dir}/postgresql.conf'",
        "SELECT pg_ls_dir('/')",
    ]:
        r = psql(sb, url, sql)
        assert r.exit_code != 0 and "42501" in r.stderr, (sql, r.stderr)  # insufficient_privilege
    r = psql(sb, url.rsplit("/", 1)[0] + "/postgres", "SELECT 1")
    assert r.exit_code != 0 and "permission denied for database" in r.stderr, r.stderr
    # Its own schema is its to use.
    out = psql(sb, url, "CREATE TABLE mine (x int); INSERT INTO mine VALUES (1); SELECT x FROM mine").stdout
    assert out.splitlines()[-1] == "1", out
    sb.kill()


def test_a_full_disk_is_a_postgresql_error(server, api, databases_deleted):
    from pandastack import Client

    client = Client()
    db = client.databases.create(label="small")
    # Grow first (PATCH storage_mb), then fill a fresh one of the smallest size.
    small = api("POST", "/v1/databases", json={"label": "tiny", "storage_mb": 256})
    assert small.status_code == 202, small.text
    tiny = client.databases.wait_until_ready(small.json()["id"])
    assert tiny["storage_mb"] == 256
    url = tiny["connection_url"]
    # Stored as is (no compression), so every row costs its 2 KiB.
    assert host_psql(url, "CREATE TABLE big (b text); ALTER TABLE big ALTER b SET STORAGE EXTERNAL").returncode == 0
    failure = None
    for _ in range(100):
        r = host_psql(url, "INSERT INTO big SELECT repeat(md5(g::text), 64) FROM generate_series(1, 20000) g", timeout=120)
        if r.returncode != 0:
            failure = r.stderr
            break
    assert failure and "No space left on device" in failure, failure
    assert requests.get(f"{server.url}/health", timeout=5).text == "ok"
    assert host_psql(url, "SELECT 1").stdout.strip() == "1", "the cluster still serves"
    used = client.databases.get(tiny["id"])["storage_used_bytes"]
    assert used > 0.9 * 256 * 1024 * 1024, used  # the filesystem itself takes some of the 256 MiB
    # Growing makes room again (the cluster restarts for it).
    grown = api("PATCH", f"/v1/databases/{tiny['id']}", json={"storage_mb": 512})
    assert grown.status_code == 200, grown.text
    assert grown.json()["storage_mb"] == 512 and grown.json()["status"] == "running"
    assert host_psql(url, "INSERT INTO big SELECT repeat('x', 1000) FROM generate_series(1, 1000)").returncode == 0
    shrink = api("PATCH", f"/v1/databases/{tiny['id']}", json={"storage_mb": 256})
    assert_json_error(shrink, "storage_mb", "shrink", status=400)
    assert host_psql(db["connection_url"], "SELECT 1").stdout.strip() == "1"


def test_committed_rows_survive_kill_9_of_the_server_and_of_the_cluster(server, databases_deleted):
    from pandastack import Client

    client = Client()
    db = client.databases.create(label="durable", always_on=True)
    url = db["connection_url"]
    assert host_psql(url, "CREATE TABLE ledger (n int); INSERT INTO ledger SELECT generate_series(1, 1000)").returncode == 0

    server.restart()
    again = client.databases.get(db["id"])
    assert again["status"] == "running" and again["connection_url"] == url, again
    assert host_psql(url, "SELECT count(*) FROM ledger").stdout.strip() == "1000"

    # A crash of the cluster itself: the next connection finds it dead and starts it again
    # (crash recovery replays the WAL).
    pid_file = Path(server.data_dir) / "databases" / db["id"] / "mnt" / "pgdata" / "postmaster.pid"
    postmaster = int(pid_file.read_text().splitlines()[0])
    # Its own memory limit: the 1g tier, on its own cgroup.
    groups = dict(l.split(":", 2)[1:] for l in Path(f"/proc/{postmaster}/cgroup").read_text().splitlines())
    memory_v1 = next((path for ctrls, path in groups.items() if "memory" in ctrls.split(",")), None)
    if memory_v1 is not None:
        memcg, limit_file = memory_v1, Path(f"/sys/fs/cgroup/memory{memory_v1}/memory.limit_in_bytes")
    else:
        memcg, limit_file = groups[""], Path(f"/sys/fs/cgroup{groups['']}/memory.max")
    assert memcg.endswith(f"/pandastack-db/{db['id']}"), memcg
    assert int(limit_file.read_text().strip()) == 1024 * 1024 * 1024, limit_file
    assert Path(f"/proc/{postmaster}/status").read_text().count("Uid:\t0\t") == 0, "runs as root"
    assert host_psql(url, "INSERT INTO ledger VALUES (1001)").returncode == 0
    os.kill(postmaster, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        r = host_psql(url, "SELECT count(*) FROM ledger")
        if r.returncode == 0:
            break
        assert time.monotonic() < deadline, r.stderr
        time.sleep(0.5)
    assert r.stdout.strip() == "1001"
    events = [(e["from"], e["to"], e["cause"]) for e in requests.get(
        f"{server.url}/v1/databases/{db['id']}/events",
        headers={"Authorization": f"Bearer {server.admin_key()}"}, timeout=30).json()]
    assert ("running", "stopped", "crashed") in events, events


IDLE_S = 7


@pytest.fixture(scope="module")
def idle_server(server):
    """A server whose databases stop after IDLE_S idle seconds (no warm pool, no templates:
    its tests reach databases from the host only). IDLE_S is above the SDK's longest poll
    interval (5 s), or `databases.create()` could see its new database stopped already."""
    data_dir = server.data_dir.parent / f"db-idle-server-{os.getpid()}"
    scrub_data_dir(data_dir)
    srv = SecondServer(server.binary, data_dir, server.log.parent / "server-db-idle.log",
                       ["--database-idle-stop-seconds", str(IDLE_S), "--pool-size", "0", "--netns-stock", "0"])
    try:
        srv.start()
        yield srv
    finally:
        try:
            delete_databases(srv.url, srv.admin_key())
        finally:
            srv.teardown()


def wait_status(client, db_id: str, status: str, limit_s: float = 30) -> dict:
    deadline = time.monotonic() + limit_s
    while True:
        d = client.databases.get(db_id)
        if d["status"] == status:
            return d
        assert time.monotonic() < deadline, f"still {d['status']}, not {status}"
        time.sleep(0.2)


def test_idle_stop_and_wake_on_connect(idle_server):
    client = idle_server.client()
    db = client.databases.create(label="napper")
    url = db["connection_url"]
    assert host_psql(url, "CREATE TABLE naps (n int); INSERT INTO naps VALUES (1)").returncode == 0
    stopped = wait_status(client, db["id"], "stopped")
    assert stopped["connection_url"] == url, "a stopped database keeps its URL"
    assert not [c for c in os.popen("ps -eo args").read().splitlines() if db["id"] in c and "postgres" in c]
    # The next connection starts it.
    t0 = time.monotonic()
    r = host_psql(url, "SELECT count(*) FROM naps")
    took = time.monotonic() - t0
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
    assert took < 10, took
    assert client.databases.get(db["id"])["status"] == "running"
    wait_status(client, db["id"], "stopped")
    woke = client.databases.wake(db["id"])
    assert woke == {"id": db["id"], "status": "running", "detail": "started (it was stopped)"}, woke
    # always_on keeps it up past the idle time; false lets it stop again.
    assert client.databases.update(db["id"], always_on=True)["always_on"] is True
    time.sleep(IDLE_S + 2)
    assert client.databases.get(db["id"])["status"] == "running"
    client.databases.update(db["id"], always_on=False)
    wait_status(client, db["id"], "stopped")
    causes = [(e["from"], e["to"], e["cause"]) for e in requests.get(
        f"{idle_server.url}/v1/databases/{db['id']}/events",
        headers={"Authorization": f"Bearer {idle_server.admin_key()}"}, timeout=30).json()]
    assert causes[0] == ("provisioning", "running", "api"), causes
    assert ("running", "stopped", "idle") in causes and ("stopped", "running", "connection") in causes, causes
    assert ("stopped", "running", "api") in causes, causes

    # A restart of the server starts the always_on database again; the other stays stopped
    # until something connects.
    keeper = client.databases.create(label="keeper", always_on=True)
    assert host_psql(keeper["connection_url"], "CREATE TABLE k (n int); INSERT INTO k VALUES (7)").returncode == 0
    idle_server.stop()
    assert not [c for c in os.popen("ps -eo args").read().splitlines() if keeper["id"] in c], "a graceful stop stops clusters"
    idle_server.start()
    client = idle_server.client()
    assert client.databases.get(keeper["id"])["status"] == "running"
    assert client.databases.get(db["id"])["status"] == "stopped"
    assert host_psql(keeper["connection_url"], "SELECT n FROM k").stdout.strip() == "7"
    assert host_psql(url, "SELECT count(*) FROM naps").stdout.strip() == "1"



def test_low_host_disk_refuses_creates_clones_and_growth_with_507(idle_server):
    client = idle_server.client()
    db = client.databases.create(label="cramped", always_on=True)
    assert host_psql(db["connection_url"], "CREATE TABLE c (n int); INSERT INTO c VALUES (3)").returncode == 0
    # Nothing is written to fill the disk: the reserve is raised above what is free.
    plain = list(idle_server.extra_args)
    idle_server.extra_args = plain + ["--disk-reserve-percent", "99.9", "--disk-reserve-max-gb", "100000"]
    try:
        idle_server.stop()
        idle_server.start()
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {idle_server.admin_key()}"
        base = f"{idle_server.url}/v1/databases"
        for method, path, body in [
            ("POST", "", {"label": "more"}),
            ("POST", f"/{db['id']}/clone", {}),
            ("PATCH", f"/{db['id']}", {"storage_mb": 6144}),
        ]:
            r = s.request(method, base + path, json=body, timeout=60)
            assert r.status_code == 507 and "host storage low" in r.json()["error"], (path, r.status_code, r.text)
        # What runs goes on, and a refusal made nothing.
        assert host_psql(db["connection_url"], "INSERT INTO c VALUES (4); SELECT count(*) FROM c").stdout.split() == ["INSERT", "0", "1", "2"]
        listed = s.get(base, timeout=30).json()["items"]
        assert not [d for d in listed if d["label"] == "more" or d["cloned_from"] == db["id"]], listed
        assert s.get(f"{base}/{db['id']}", timeout=30).json()["storage_mb"] == 5120
    finally:
        idle_server.extra_args = plain
        idle_server.stop()
        idle_server.start()
    client.databases.delete(db["id"])


def test_events_and_metrics(server, databases_deleted):
    from pandastack import Client
    from prometheus_client.parser import text_string_to_metric_families

    headers = {"Authorization": f"Bearer {server.admin_key()}", "Accept": "text/event-stream"}
    client = Client()
    db = client.databases.create(label="observed")
    host_psql(db["connection_url"], "SELECT 1")
    resp = requests.get(f"{server.url}/v1/events", headers=headers, params={"since": 0}, stream=True, timeout=(10, 30))
    name, seen = None, []
    for line in resp.iter_lines(decode_unicode=True):
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and name == "database":
            ev = json.loads(line[6:])
            if ev["database_id"] == db["id"]:
                seen.append(ev)
                break
    resp.close()
    assert seen and seen[0]["from"] == "provisioning" and seen[0]["to"] == "running", seen

    text = requests.get(f"{server.url}/metrics", headers={"Authorization": headers["Authorization"]}, timeout=30).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    storage = [s for s in families["pandastack_database_storage_used_bytes"].samples if s.labels.get("database") == db["id"]]
    assert storage and storage[0].value > 10 * 1024 * 1024, storage
    conns = [s for s in families["pandastack_database_connections"].samples if s.labels.get("database") == db["id"]]
    assert conns and conns[0].value == 0, conns
    running = [s for s in families["pandastack_databases"].samples if s.labels.get("state") == "running"]
    assert running and running[0].value >= 1


def test_bad_input_names_the_field(api, databases_deleted):
    cases = [
        ({"size": "2g"}, "size"),
        ({"bogus": 1}, "bogus"),
        ({"storage_mb": 10}, "storage_mb"),
        ({"storage_mb": -1}, "storage_mb"),
        ({"memory_mb": 512}, "memory_mb"),
        ({"size": "1g", "memory_mb": 4096}, "memory_mb"),
        ({"cpu": 0}, "cpu"),
        ({"label": "x" * 200}, "label"),
        ({"always_on": "yes"}, "always_on"),
    ]
    for body, field in cases:
        assert_json_error(api("POST", "/v1/databases", json=body), field, status=400)
    assert not api("GET", "/v1/databases").json()["items"], "a refused create made a database"
    assert_json_error(api("GET", "/v1/databases/not-a-uuid"), "not a UUID", status=400)
    assert_json_error(api("GET", "/v1/databases/00000000-0000-4000-8000-000000000000"), "not found", status=404)
    created = api("POST", "/v1/databases", json={"label": "target"})
    assert created.status_code == 202 and created.json()["status"] == "provisioning", created.text
    db_id = created.json()["id"]
    assert_json_error(api("POST", f"/v1/databases/{db_id}/clone", json={"target_time": "2026-01-01T00:00:00Z"}),
                      "target_time is not supported", status=400)
    failover = api("POST", f"/v1/databases/{db_id}/failover")
    assert failover.status_code == 501 and "failover" in failover.json()["error"], failover.text
    assert_json_error(api("PATCH", f"/v1/databases/{db_id}", json={"always_on": 1}), "always_on", status=400)
