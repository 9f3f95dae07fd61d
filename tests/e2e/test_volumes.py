"""Volumes (issue 9; seed 001 §3, contract §2.6): named ext4 volumes of a workspace that outlive
sandboxes, mounted at /mnt/{name}, attached read-write to one sandbox at a time.

Driven through the published Python SDK (`client.volumes.*`, `Sandbox.create(volumes=...)`);
raw HTTP only where the SDK has no call (PATCH to grow a volume, a fork body with `"volumes":
"detach"`) or to check status codes. Every test ends with nothing of its volumes mounted or
looped on the host (`/proc/mounts`, `/sys/block/loop*`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from helpers import assert_json_error
from lifecycle_fixtures import SecondServer, _copy_current_template, processes_matching, scrub_data_dir


def host_volume_state(data_dir: Path) -> tuple[set[str], set[str]]:
    """Mounts of volume images on the host (`<data>/mounts/volume/...` and their binds under
    `<data>/mounts/sandbox/...`), and loop devices backed by an image under `<data>/volumes`."""
    volume_dir, staging_dir = data_dir / "mounts" / "volume", data_dir / "mounts" / "sandbox"
    mounts = set()
    for line in Path("/proc/mounts").read_text().splitlines():
        point = Path(line.split()[1])
        # An image's host mount, or its bind into a staging directory (`<staging>/<id>/<name>`).
        if volume_dir in point.parents or (staging_dir in point.parents and point.parent != staging_dir):
            mounts.add(str(point))
    loops = set()
    for dev in Path("/sys/block").glob("loop*"):
        try:
            backing = (dev / "loop" / "backing_file").read_text().strip()
        except OSError:
            continue
        if backing.startswith(str(data_dir / "volumes")):
            loops.add(backing)
    return mounts, loops


@contextlib.contextmanager
def volumes_of(client, *names_sizes):
    """Creates volumes with unique names (`name-<hex>`), yields the names, deletes them after
    (their sandboxes are killed by then) and checks nothing is left mounted or looped."""
    names = [f"{n}-{uuid.uuid4().hex[:8]}" for n, _ in names_sizes]
    try:
        for name, (_, size) in zip(names, names_sizes):
            client.volumes.create(name=name, size_mb=size)
        yield names
    finally:
        for sb in client.sandboxes.list():
            with contextlib.suppress(Exception):
                client.sandboxes.delete(sb.id)
        for name in names:
            with contextlib.suppress(Exception):
                client.volumes.delete(name)


def assert_nothing_mounted(server):
    mounts, loops = host_volume_state(server.data_dir)
    assert not mounts and not loops, f"left on the host: mounts {mounts}, loops {loops}"


def test_seed_001_volume_outlives_its_sandbox(server, api):
    """Seed 001 §3 unchanged, then what a user does next: a later sandbox sees the files; one
    volume is attached to one sandbox at a time; a delete while attached is refused."""
    from pandastack import BadRequestError, Client

    client = Client()
    # Seed 001 §3, verbatim but for the name (the test workspace is shared with other tests).
    name = f"agent-workspace-{uuid.uuid4().hex[:8]}"
    info = client.volumes.create(name=name, size_mb=8192)
    assert info["name"] == name and info["size_mb"] == 8192 and info["created_at"], info
    assert info["attached_to"] is None, info
    try:
        sb = client.sandboxes.create(
            template="base",
            volumes=[{"name": name}],
        )
        # /mnt/agent-workspace outlives this sandbox
        r = sb.exec(f"sh -c 'echo notes-for-tomorrow > /mnt/{name}/notes.txt && sync && df -k /mnt/{name} | tail -1'")
        assert r.exit_code == 0, r
        size_kb = int(r.stdout.split()[1])
        assert 8_000_000 < size_kb <= 8 << 20, r.stdout
        assert client.volumes.get(name)["attached_to"] == sb.id
        assert [v["name"] for v in api("GET", f"/v1/sandboxes/{sb.id}").json()["volumes"]] == [name]
        assert name in [v["name"] for v in client.volumes.list()]

        # One sandbox at a time: a second read-write attach names the holder.
        with pytest.raises(BadRequestError) as e:
            client.sandboxes.create(template="base", volumes=[{"name": name}])
        assert sb.id in str(e.value), e.value
        assert_json_error(
            api("POST", "/v1/sandboxes", json={"template": "base", "volumes": [{"name": name, "read_only": False}]}),
            sb.id,
            status=409,
        )
        with pytest.raises(BadRequestError) as e:
            client.volumes.delete(name)
        assert sb.id in str(e.value), e.value
        assert_json_error(api("DELETE", f"/v1/volumes/{name}"), "attached", status=409)

        sb.kill()
        assert_nothing_mounted(server)
        assert client.volumes.get(name)["attached_to"] is None
        later = client.sandboxes.create(template="base", volumes=[{"name": name}])
        assert later.exec(f"cat /mnt/{name}/notes.txt").stdout == "notes-for-tomorrow\n"
        later.kill()
        used = client.volumes.get(name)["used_bytes"]
        assert 0 < used < 1 << 30, used
    finally:
        with contextlib.suppress(Exception):
            client.volumes.delete(name)
    assert name not in [v["name"] for v in client.volumes.list()]
    with pytest.raises(Exception):
        client.volumes.get(name)
    assert_nothing_mounted(server)


def test_volume_api_rules_size_read_only_and_workspaces(server, api, client_b):
    """Bad names and sizes are 400s naming the field; duplicates 409; an unknown volume at
    create 404 naming it; writes past the size get ENOSPC; read-only attaches refuse writes and
    may be shared, but not with a read-write holder; a volume grows (never shrinks) while
    detached; another workspace neither sees nor reaches it."""
    from pandastack import BadRequestError, Client, NotFoundError

    client = Client()
    for body, field in [
        ({"name": "a/b", "size_mb": 64}, "name"),
        ({"name": "", "size_mb": 64}, "name"),
        ({"name": "x" * 65, "size_mb": 64}, "name"),
        ({"name": "ok", "size_mb": 1}, "size_mb"),
        ({"name": "ok", "size_mb": 65537}, "size_mb"),
        ({"name": "ok", "size_mb": "big"}, "size_mb"),
        ({"name": "ok"}, "size_mb"),
    ]:
        assert_json_error(api("POST", "/v1/volumes", json=body), field, status=400)
    assert_json_error(api("POST", "/v1/sandboxes", json={"template": "base", "volumes": [{"name": "../x"}]}), "volumes[0].name", status=400)
    with pytest.raises(NotFoundError) as e:
        client.sandboxes.create(template="base", volumes=[{"name": "no-such-volume"}])
    assert "no-such-volume" in str(e.value)

    with volumes_of(client, ("small", 64), ("shared", 64)) as (small, shared):
        with pytest.raises(BadRequestError) as e:
            client.volumes.create(name=small, size_mb=64)
        assert "exists" in str(e.value)
        # Another workspace: the name is free there, and ours is invisible.
        assert small not in [v["name"] for v in client_b.volumes.list()]
        with pytest.raises(NotFoundError):
            client_b.volumes.get(small)
        with pytest.raises(NotFoundError):
            client_b.sandboxes.create(template="base", volumes=[{"name": small}])
        client_b.volumes.create(name=small, size_mb=64)
        client_b.volumes.delete(small)

        sb = client.sandboxes.create(template="base", volumes=[{"name": small}, {"name": shared, "read_only": True}])
        r = sb.exec(f"sh -c 'dd if=/dev/zero of=/mnt/{small}/fill bs=1M count=100 conv=fsync 2>&1; echo rc=$?'")
        assert "No space left" in r.stdout and "rc=1" in r.stdout, r.stdout
        r = sb.exec(f"sh -c 'touch /mnt/{shared}/x 2>&1; echo rc=$?; touch /mnt/stray 2>&1'")
        assert "Read-only" in r.stdout and "rc=1" in r.stdout, r.stdout
        # Read-only holders share; a read-write one is refused while they hold it.
        reader = client.sandboxes.create(template="base", volumes=[{"name": shared, "read_only": True}])
        assert reader.exec(f"ls /mnt/{shared}").stdout == "lost+found\n"
        with pytest.raises(BadRequestError) as e:
            client.sandboxes.create(template="base", volumes=[{"name": shared}])
        assert "read-only" in str(e.value)
        assert_json_error(api("PATCH", f"/v1/volumes/{small}", json={"size_mb": 128}), "attached", status=409)
        sb.kill()
        reader.kill()
        assert_nothing_mounted(server)

        assert_json_error(api("PATCH", f"/v1/volumes/{small}", json={"size_mb": 32}), "size_mb", status=400)
        grown = api("PATCH", f"/v1/volumes/{small}", json={"size_mb": 256})
        assert grown.status_code == 200 and grown.json()["size_mb"] == 256, grown.text
        after = client.sandboxes.create(template="base", volumes=[{"name": small}])
        r = after.exec(f"sh -c 'ls -s /mnt/{small}/fill >/dev/null && df -k /mnt/{small} | tail -1'")
        assert 200_000 < int(r.stdout.split()[1]) <= 256 << 10, r.stdout
        after.kill()
    assert_nothing_mounted(server)


def test_volumes_across_fork_snapshot_and_hibernate(server, api):
    """A fork of a read-write holder is refused (409 saying why) unless the body says
    `"volumes": "detach"`; read-only volumes are inherited. A snapshot does not copy the
    volume: a restore attaches it again (409 while it is held elsewhere). A hibernated sandbox
    keeps its volume; wake attaches it again with the data."""
    from pandastack import BadRequestError, Client, Sandbox

    client = Client()
    with volumes_of(client, ("work", 128), ("ref", 64)) as (work, ref):
        sb = Sandbox.create(template="base", volumes=[{"name": work}])
        sb.exec(f"sh -c 'echo v1 > /mnt/{work}/state && sync'")
        with pytest.raises(BadRequestError) as e:
            sb.fork()
        assert "detach" in str(e.value) and work in str(e.value), e.value
        child = api("POST", f"/v1/sandboxes/{sb.id}/fork", json={"volumes": "detach"})
        assert child.status_code == 201, child.text
        assert child.json()["volumes"] == []
        kid = Sandbox.get(child.json()["id"])
        r = kid.exec(f"sh -c 'cat /mnt/{work}/state 2>&1; echo rc=$?'")
        assert "rc=1" in r.stdout, r.stdout
        kid.kill()

        snap = sb.snapshot()
        listed = api("GET", f"/v1/snapshots/{snap}").json()
        assert [v["name"] for v in listed["volumes"]] == [work], listed
        sb.exec(f"sh -c 'echo v2 > /mnt/{work}/state && sync'")
        with pytest.raises(BadRequestError) as e:
            Sandbox.create(template="base", from_snapshot=snap)
        assert sb.id in str(e.value), e.value

        sb.hibernate()
        assert client.volumes.get(work)["attached_to"] == sb.id
        with pytest.raises(BadRequestError):
            Sandbox.create(template="base", volumes=[{"name": work}])
        assert_nothing_mounted(server)  # hibernated: held, but the image is closed
        sb.wake()
        assert sb.exec(f"cat /mnt/{work}/state").stdout == "v2\n"
        sb.kill()

        # The volume is external state: the restore sees what it holds now, not at capture.
        restored = Sandbox.create(template="base", from_snapshot=snap)
        assert restored.exec(f"cat /mnt/{work}/state").stdout == "v2\n"
        assert [v["name"] for v in api("GET", f"/v1/sandboxes/{restored.id}").json()["volumes"]] == [work]
        restored.kill()

        reader = Sandbox.create(template="base", volumes=[{"name": ref, "read_only": True}])
        kids = reader.fork_tree(2)
        for k in kids:
            assert k.exec(f"ls /mnt/{ref}").stdout == "lost+found\n"
            assert [(v["name"], v["read_only"]) for v in api("GET", f"/v1/sandboxes/{k.id}").json()["volumes"]] == [(ref, True)]
        assert {a["sandbox_id"] for a in client.volumes.get(ref)["attachments"]} == {reader.id} | {k.id for k in kids}
        for k in kids:
            k.kill()
        reader.kill()
        api("DELETE", f"/v1/snapshots/{snap}")
    assert_nothing_mounted(server)


def test_fsynced_volume_data_survives_kill_9_of_the_server(server):
    """Issue 9 point 6: what a sandbox fsynced to its volume survives a server kill -9; the
    restarted server keeps the sandbox attached (a second attach is still refused) and frees
    the volume once the sandbox is killed."""
    from pandastack import BadRequestError, Client, Sandbox

    client = Client()
    with volumes_of(client, ("durable", 128)) as (durable,):
        sb = Sandbox.create(template="base", volumes=[{"name": durable}])
        r = sb.exec(
            f"python3 -c \"import os; f=open('/mnt/{durable}/log','w'); f.write('fsynced'); f.flush(); os.fsync(f.fileno())\""
        )
        assert r.exit_code == 0, r
        server.restart()
        again = Sandbox.get(sb.id)
        assert again.exec(f"cat /mnt/{durable}/log").stdout == "fsynced"
        with pytest.raises(BadRequestError):
            Sandbox.create(template="base", volumes=[{"name": durable}])
        again.kill()
        assert_nothing_mounted(server)
        later = Sandbox.create(template="base", volumes=[{"name": durable}])
        assert later.exec(f"cat /mnt/{durable}/log").stdout == "fsynced"
        later.kill()
    assert_nothing_mounted(server)


def simulate_host_reboot(srv) -> None:
    """What a clean host reboot does to a server on `srv.data_dir`, without rebooting: every
    process dies (the server, shims, runsc; kill -9), then every filesystem is unmounted
    (deepest first: volumes, instance disks, staging dirs; a clean shutdown's `umount`, which
    flushes and closes each ext4 image) and with them the loop devices (autoclear)."""
    srv.proc.kill()
    srv.proc.wait(timeout=30)
    marker = f"{srv.data_dir}/"
    for _ in range(100):
        left = processes_matching(marker)
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    assert not processes_matching(marker), "processes outlived the simulated reboot"
    points = [l.split(" ")[4] for l in Path("/proc/self/mountinfo").read_text().splitlines()]
    for m in sorted((m for m in points if m.startswith(marker)), reverse=True):
        # CI once saw this unmount fail (exit 32) right after the kill: most likely a killed
        # process still exiting (its /proc cmdline already empty, its working directory not yet
        # released). A reboot's unmount waits for processes to end too, so retry for up to 5 s.
        for _ in range(50):
            done = subprocess.run(["umount", m], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
            if done.returncode == 0:
                break
            time.sleep(0.1)
        assert done.returncode == 0, f"umount {m}: {done.stderr.strip()}"
    assert host_volume_state(srv.data_dir) == (set(), set())


@pytest.fixture
def reboot_server(server):
    """A server of this test's own (its instances are killed by the simulated reboot), with
    `base` hard-linked from the main server's data dir and no warm pool."""
    data_dir = server.data_dir.parent / f"vol-reboot-{os.getpid()}"
    scrub_data_dir(data_dir)
    (data_dir / "templates").mkdir(parents=True)
    _copy_current_template(server.data_dir / "templates", data_dir / "templates", "base")
    srv = SecondServer(server.binary, data_dir, server.log.parent / "server-vol-reboot.log",
                       ["--pool-size", "0", "--netns-stock", "0"])
    try:
        srv.start()
        yield srv
    finally:
        srv.teardown()


def test_fsynced_volume_data_survives_a_host_reboot(reboot_server):
    """Issue 9 point 6 ("survives ... a clean host reboot"): after every process died and
    every filesystem was unmounted, the restarted server marks the running sandbox failed and
    frees its volume, whose fsynced data is intact; a hibernated sandbox wakes with its volume
    attached again and its data."""
    srv = reboot_server
    client = srv.client()
    work, cache = f"work-{uuid.uuid4().hex[:8]}", f"cache-{uuid.uuid4().hex[:8]}"
    client.volumes.create(name=work, size_mb=64)
    client.volumes.create(name=cache, size_mb=64)
    fsync = "python3 -c \"import os; f=open('/mnt/{0}/log','w'); f.write('{1}'); f.flush(); os.fsync(f.fileno())\""
    running = client.sandboxes.create(template="base", volumes=[{"name": work}])
    assert running.exec(fsync.format(work, "running")).exit_code == 0
    sleeping = client.sandboxes.create(template="base", persistent=True, volumes=[{"name": cache}])
    assert sleeping.exec(fsync.format(cache, "hibernated")).exit_code == 0
    sleeping.hibernate()

    simulate_host_reboot(srv)
    srv.start()

    assert client.sandboxes.get(running.id).status == "failed"
    assert client.volumes.get(work)["attachments"] == []
    later = client.sandboxes.create(template="base", volumes=[{"name": work}])
    assert later.exec(f"cat /mnt/{work}/log").stdout == "running"
    assert client.sandboxes.get(sleeping.id).status == "hibernated"
    sleeping.wake()
    assert sleeping.exec(f"cat /mnt/{cache}/log").stdout == "hibernated"
    for sb in (later, sleeping):
        sb.kill()
    for name in (work, cache):
        client.volumes.delete(name)
    assert host_volume_state(srv.data_dir) == (set(), set())
