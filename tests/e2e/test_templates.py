"""Issue 13: templates users build, through the published Python SDK (`pandastack==0.10.0`):
`templates.build_from_dockerfile` with and without a context dir, `templates.build` with a
rootfs tar, build logs followed live, failures (a failing RUN, an unsupported instruction,
malicious tars), cache hits, generations and the 409 for old snapshots, workspace scoping,
resources visible inside, quotas (on a second server with small ones), bad requests.

Builds start FROM base and use tiny tars (a few binaries of the baked base rootfs), so each
takes seconds. Every build here happens in a workspace of its own, whose templates are deleted
after each test: the session server's built-in view (and warm-pool counts other tests check)
stays as it was.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
import requests
from pandastack import BadRequestError, Client, NotFoundError

from conftest import Server, _free_port
from helpers import assert_json_error, instance_dirs

BUILD_TIMEOUT = 300

# Binaries of the base rootfs that need nothing but libc (checked with ldd on bookworm).
TINY_BINARIES = ["dash", "cat", "echo", "nproc", "head", "uname", "sleep", "env"]
TINY_LIBS = ["usr/lib/x86_64-linux-gnu/libc.so.6", "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"]


def base_rootfs(server) -> Path:
    """The baked base template's rootfs on this host (read, never written)."""
    tdir = server.data_dir / "templates" / "base"
    return tdir / (tdir / "current").read_text().strip() / "rootfs"


def tiny_rootfs_tar(server, extra: dict[str, bytes] | None = None, gz: bool = False) -> bytes:
    """A rootfs tar without python: dash as /bin/sh, a few coreutils, libc, merged-/usr links."""
    root = base_rootfs(server)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=tarfile.GNU_FORMAT) as tar:
        def add_dir(name: str) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)

        def add_link(name: str, target: str) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)

        for d in ["usr", "usr/bin", "usr/lib", "usr/lib/x86_64-linux-gnu", "usr/lib64", "etc", "tmp", "root"]:
            add_dir(d)
        for name, target in [("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/bin")]:
            add_link(name, target)
        add_link("usr/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
        add_link("usr/bin/sh", "dash")
        for rel in [f"usr/bin/{b}" for b in TINY_BINARIES] + TINY_LIBS:
            tar.add(root / rel, arcname=rel)
        for name, body in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(body), 0o644
            tar.addfile(info, io.BytesIO(body))
        etc = b"root:x:0:0:root:/root:/bin/sh\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size, info.mode = len(etc), 0o644
        tar.addfile(info, io.BytesIO(etc))
    return buf.getvalue()


def raw(client: Client, path: str) -> dict:
    """GET a JSON resource with the client's key (fields the SDK's dataclasses drop)."""
    resp = requests.get(f"{client.api_url}/v1{path}", headers={"Authorization": f"Bearer {client.api_key}"}, timeout=30)
    resp.raise_for_status()
    return resp.json()


def wait_build(client: Client, build_id: str) -> object:
    """Polls a build until it is done or failed."""
    deadline = time.monotonic() + BUILD_TIMEOUT
    while True:
        b = client.templates.get_build(build_id)
        if b.status in ("done", "failed"):
            return b
        assert time.monotonic() < deadline, f"build {build_id} still {b.status}"
        time.sleep(0.3)


def build_ok(client: Client, name: str, dockerfile: str, **kw) -> object:
    b = wait_build(client, client.templates.build_from_dockerfile(name, dockerfile, **kw).id)
    assert b.status == "done", f"build failed: {b.error}\n" + "\n".join(client.templates.build_logs(b.id, follow=False))
    return b


def delete_workspace_templates(url: str, key: str) -> None:
    """Deletes every template the workspace built (the built-ins are global and stay)."""
    client = Client(api_url=url, api_key=key)
    for t in client.templates.list():
        if not t.is_global:
            try:
                client.templates.delete(t.name)
            except NotFoundError:
                pass


@pytest.fixture(scope="module")
def tpl_key(server) -> str:
    """The key of a workspace that only this module uses."""
    return server.create_workspace(f"e2e-templates-{os.getpid()}-{int(time.time())}")


@pytest.fixture
def tc(server, tpl_key):
    """A Python SDK client of the templates workspace; its sandboxes and templates go after."""
    from conftest import delete_all

    client = Client(api_url=server.url, api_key=tpl_key)
    yield client
    delete_all(server.url, tpl_key)
    delete_workspace_templates(server.url, tpl_key)


def test_dockerfile_without_context_logs_live_and_runtime_defaults(tc):
    dockerfile = (
        "FROM base\n"
        "ARG GREETING=hello\n"
        "ENV APP_HOME=/opt/app GREETING_COPY=$GREETING\n"
        "WORKDIR /opt/app\n"
        'RUN echo "$GREETING from $APP_HOME" > built.txt && echo step-output-marker\n'
        'CMD ["bash"]\n'
    )
    accepted = tc.templates.build_from_dockerfile("e2e-plain", dockerfile, cpu=1, memory_mb=512)
    assert accepted.status in ("queued", "running"), accepted
    assert accepted.id.startswith("bld-")
    lines, status_at_marker = [], None
    for line in tc.templates.build_logs(accepted.id, follow=True):
        lines.append(line)
        if line == "step-output-marker":
            # Followed live: the step's output arrives while the build is still going.
            status_at_marker = tc.templates.get_build(accepted.id).status
    assert status_at_marker == "running", (status_at_marker, lines)
    assert "Step 4/5 : RUN echo \"$GREETING from $APP_HOME\" > built.txt && echo step-output-marker" in lines
    assert any("CMD is ignored" in l for l in lines), lines
    final = tc.templates.get_build(accepted.id)
    assert final.status == "done", final.error
    assert final.bytes and final.bytes > 10_000_000 and final.ended_at and final.started_at

    t = tc.templates.get("e2e-plain")
    assert (t.is_global, t.base, t.cpu, t.memory_mb) == (False, "base", 1, 512)
    assert "e2e-plain" in [x.name for x in tc.templates.list()]
    assert accepted.id in [b.id for b in tc.templates.builds()]

    sb = tc.sandboxes.create(template="e2e-plain")
    assert sb.boot_mode == "snapshot", "the build took the template snapshot: the fast path from the first create"
    r = sb.exec("cat built.txt; echo $GREETING_COPY; pwd; echo ${GREETING:-unset}")
    assert r.exit_code == 0, r
    # ENV and WORKDIR are the template's defaults; the ARG value did not survive the build.
    assert r.stdout == "hello from /opt/app\nhello\n/opt/app\nunset\n"
    ctx = sb.create_code_context()
    assert ctx.run_code("import os; print(os.getcwd(), os.environ['APP_HOME'])").stdout == "/opt/app /opt/app\n"


def test_run_pip_install_reaches_pypi_through_the_build_sandboxes_egress(tc):
    # The only network traffic of this test: pip to PyPI (the package registry), from the
    # build sandbox's namespace through the server's NAT.
    b = build_ok(tc, "e2e-pip", "FROM base\nRUN pip install --no-cache-dir tomli-w==1.0.0\n")
    logs = list(tc.templates.build_logs(b.id, follow=False))
    assert any("Successfully installed tomli-w-1.0.0" in l or "Successfully installed tomli_w-1.0.0" in l for l in logs), logs
    sb = tc.sandboxes.create(template="e2e-pip")
    r = sb.exec("python3 -c 'import tomli_w; print(tomli_w.dumps({\"a\": 1}), end=\"\")'")
    assert (r.exit_code, r.stdout) == (0, "a = 1\n"), r


def test_dockerfile_with_context_dir_copy_chown_user(tc, tmp_path):
    ctx = tmp_path / "ctx"
    (ctx / "app").mkdir(parents=True)
    (ctx / "app" / "main.py").write_text("print('from the context')\n")
    (ctx / "app" / "lib").mkdir()
    (ctx / "app" / "lib" / "util.py").write_text("X = 1\n")
    (ctx / "greet.sh").write_text("#!/bin/sh\necho greet $1\n")
    (ctx / "notes.txt").write_text("plain\n")
    dockerfile = ctx / "Dockerfile"
    dockerfile.write_text(
        "FROM base\n"
        "COPY . /src/\n"
        "COPY greet.sh /usr/local/bin/greet\n"
        "COPY app/*.py /only-top/\n"
        "RUN useradd -m bob\n"
        "COPY --chown=bob:bob --chmod=751 app /home/bob/app\n"
        "USER bob\n"
        "RUN whoami > /tmp/who && echo $HOME >> /tmp/who && touch /home/bob/made-by-bob\n"
        "USER root\n"
        "RUN greet build > /greeted\n"
    )
    b = build_ok(tc, "e2e-context", str(dockerfile), context_dir=str(ctx))
    logs = list(tc.templates.build_logs(b.id, follow=False))
    assert any("USER applies to the RUN steps after it" in l for l in logs), logs
    sb = tc.sandboxes.create(template="e2e-context")
    r = sb.exec(
        "cat /src/app/main.py /src/notes.txt /src/app/lib/util.py; greet x; cat /greeted /tmp/who; "
        "ls /only-top; stat -c '%U %G %a' /home/bob/app /home/bob/app/main.py /home/bob/made-by-bob; "
        "stat -c %a /usr/local/bin/greet /src/notes.txt"
    )
    assert r.exit_code == 0, r
    assert r.stdout.splitlines() == [
        "print('from the context')", "plain", "X = 1",
        "greet x", "greet build", "bob", "/home/bob",
        "main.py",
        "bob bob 751", "bob bob 751", "bob bob 644",
        "755", "644",
    ], r.stdout
    # The Dockerfile itself was part of the context too (Py sends the whole directory).
    assert sb.filesystem.read("/src/Dockerfile").startswith(b"FROM base")


def test_rebuild_is_a_cache_hit_and_a_change_invalidates_old_snapshots(tc):
    v1 = "FROM base\nRUN echo one > /version\n"
    first = build_ok(tc, "e2e-gen", v1)
    t1 = raw(tc, "/templates/e2e-gen")
    started = time.monotonic()
    again = tc.templates.build_from_dockerfile("e2e-gen", v1)
    took = time.monotonic() - started
    print(f"unchanged rebuild answered in {took * 1000:.1f} ms")
    assert again.status == "done", again
    assert again.id != first.id
    assert raw(tc, "/templates/e2e-gen")["hash"] == t1["hash"]
    info = raw(tc, f"/templates/builds/{again.id}")
    assert info["cache_hit"] is True and info["generation"] == 1, info

    sb = tc.sandboxes.create(template="e2e-gen")
    assert sb.exec("echo two > /scratch; cat /version").stdout == "one\n"
    snap = sb.snapshot()
    restored = tc.sandboxes.create(from_snapshot=snap)
    assert restored.template == "e2e-gen"
    assert restored.exec("cat /version /scratch").stdout == "one\ntwo\n", "a user-template snapshot restores"

    build_ok(tc, "e2e-gen", "FROM base\nRUN echo two > /version\n")
    info = raw(tc, "/templates/e2e-gen")
    assert info["generation"] == 2, info
    with pytest.raises(BadRequestError) as e:
        tc.sandboxes.create(from_snapshot=snap)
    assert "generation 1" in str(e.value) and "now generation 2" in str(e.value), e.value
    # The sandboxes of generation 1 keep running on their rootfs; new ones get generation 2.
    assert sb.exec("cat /version").stdout == "one\n"
    assert tc.sandboxes.create(template="e2e-gen").exec("cat /version").stdout == "two\n"


def test_copy_only_child_shares_files_but_never_changes_the_parent(tc, tmp_path):
    # A build without RUN links the parent's files instead of copying them; COPY over one of
    # them must replace the child's entry, not write through the shared inode.
    build_ok(tc, "e2e-parent", "FROM base\nENV LEVEL=parent\nRUN echo parent > /etc/motd-file\n")
    (tmp_path / "motd").write_text("child\n")
    (tmp_path / "Dockerfile").write_text("FROM e2e-parent\nCOPY motd /etc/motd-file\nENV LEVEL=child\n")
    b = build_ok(tc, "e2e-child", str(tmp_path / "Dockerfile"), context_dir=str(tmp_path))
    assert any(l.startswith("Linking the rootfs of e2e-parent") for l in tc.templates.build_logs(b.id, follow=False))
    assert raw(tc, "/templates/e2e-child")["base"] == "e2e-parent"
    child = tc.sandboxes.create(template="e2e-child")
    parent = tc.sandboxes.create(template="e2e-parent")
    assert child.exec("cat /etc/motd-file; echo $LEVEL").stdout == "child\nchild\n"
    assert parent.exec("cat /etc/motd-file; echo $LEVEL").stdout == "parent\nparent\n"


def test_a_template_from_code_interpreter_has_its_kernel_warmed_in_the_snapshot(tc):
    # Issue 13 "Template snapshot": a template with IPython and pandas is checkpointed with a
    # kernel that already imported pandas, as the built-in code-interpreter is. A build with
    # only ENV links the parent's files, so this costs one template snapshot.
    build_ok(tc, "e2e-ci-child", "FROM code-interpreter\nENV ROLE=analyst\n")
    assert raw(tc, "/templates/e2e-ci-child")["base"] == "code-interpreter"
    sb = tc.sandboxes.create(template="e2e-ci-child")
    assert sb.boot_mode == "snapshot"
    ctx = sb.create_code_context()
    r = ctx.run_code("import os, sys; print('pandas' in sys.modules, os.environ['ROLE'])")
    assert r.stdout == "True analyst\n", r


def test_failing_run_fails_the_build_with_its_output(tc):
    b = tc.templates.build_from_dockerfile(
        "e2e-fail", "FROM base\nRUN echo visible-failure-output && echo to-stderr >&2 && exit 3\n"
    )
    logs = list(tc.templates.build_logs(b.id, follow=True))
    final = tc.templates.get_build(b.id)
    assert final.status == "failed"
    assert "Dockerfile line 2" in final.error and "exit code 3" in final.error, final.error
    assert "visible-failure-output" in final.error and "to-stderr" in final.error, final.error
    assert "visible-failure-output" in logs and any(l.startswith("error: ") for l in logs), logs
    with pytest.raises(NotFoundError):
        tc.templates.get("e2e-fail")


def test_unsupported_instruction_names_line_and_instruction(tc):
    b = tc.templates.build_from_dockerfile("e2e-expose", "FROM base\nRUN true\nEXPOSE 8080\n")
    assert b.status == "failed", "the Dockerfile is checked when it is submitted"
    assert b.error.startswith("Dockerfile line 3: unsupported instruction EXPOSE"), b.error
    b = tc.templates.build_from_dockerfile("e2e-from", "FROM ubuntu:22.04\nRUN true\n")
    assert b.status == "failed" and "FROM ubuntu:22.04" in b.error and "base" in b.error, b.error
    assert b.id in [x.id for x in tc.templates.builds()]


def test_rootfs_tar_build_without_python(tc, server, tmp_path):
    tar = tmp_path / "tiny.tar.gz"
    tar.write_bytes(tiny_rootfs_tar(server, gz=True))
    b = tc.templates.build("e2e-tar", rootfs_tar=str(tar), size_mb=256)
    assert b.status == "done", b.error
    t = raw(tc, "/templates/e2e-tar")
    assert (t["kind"], t["python"], t["size_mb"]) == ("rootfs_tar", False, 256), t
    sb = tc.sandboxes.create(template="e2e-tar")
    r = sb.exec("echo hi from $(uname -s); nproc")
    assert r.exit_code == 0 and r.stdout.startswith("hi from Linux\n"), r
    sb.filesystem.write("/tmp/f.txt", b"files work")
    assert sb.filesystem.read("/tmp/f.txt") == b"files work"
    with pytest.raises(BadRequestError) as e:
        sb.create_code_context()
    assert "no Python" in str(e.value), e.value
    # The same tar again: nothing to do.
    assert tc.templates.build("e2e-tar", rootfs_tar=str(tar), size_mb=256).status == "done"


def evil_tar(entries) -> bytes:
    """A tar with hand-made headers (tarfile itself would not write some of these)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, mode, body in entries:
            info = tarfile.TarInfo(name)
            info.type, info.mode = kind, mode
            if kind == tarfile.REGTYPE:
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
            else:
                if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                    info.devmajor, info.devminor = 8, 0
                tar.addfile(info)
    return buf.getvalue()


@pytest.mark.parametrize(
    "entries,word",
    [
        ([("../etc/passwd", tarfile.REGTYPE, 0o644, b"root::0:0::/:/bin/sh\n")], "'..'"),
        ([("/etc/passwd", tarfile.REGTYPE, 0o644, b"x")], "absolute"),
        ([("evil/sda", tarfile.BLKTYPE, 0o660, b"")], "device nodes"),
        ([("home/x/rootme", tarfile.REGTYPE, 0o4755, b"x")], "setuid"),
    ],
    ids=["dotdot", "absolute", "device", "setuid"],
)
def test_malicious_tars_are_refused(tc, tmp_path, entries, word):
    tar = tmp_path / "evil.tar"
    tar.write_bytes(evil_tar([("usr/", tarfile.DIRTYPE, 0o755, b"")] + entries))
    b = tc.templates.build("e2e-evil", rootfs_tar=str(tar))
    assert b.status == "failed", b
    assert "rootfs tar refused" in b.error and word in b.error, b.error
    assert entries[0][0] in b.error, b.error
    with pytest.raises(NotFoundError):
        tc.templates.get("e2e-evil")


def test_workspace_scoping(tc, client_b, server):
    build_ok(tc, "e2e-scoped", "FROM base\nRUN echo mine > /owner\n")
    a_build = tc.templates.builds()[0]
    with pytest.raises(NotFoundError):
        client_b.templates.get("e2e-scoped")
    assert "e2e-scoped" not in [t.name for t in client_b.templates.list()]
    with pytest.raises(NotFoundError):
        client_b.templates.delete("e2e-scoped")
    with pytest.raises(NotFoundError):
        client_b.templates.get_build(a_build.id)
    with pytest.raises(BadRequestError) as e:
        client_b.sandboxes.create(template="e2e-scoped")
    assert "unknown template" in str(e.value)
    # Names are per workspace: B builds its own template of the same name.
    try:
        b = wait_build(client_b, client_b.templates.build_from_dockerfile("e2e-scoped", "FROM base\nRUN echo theirs > /owner\n").id)
        assert b.status == "done", b.error
        assert client_b.sandboxes.create(template="e2e-scoped").exec("cat /owner").stdout == "theirs\n"
        assert tc.sandboxes.create(template="e2e-scoped").exec("cat /owner").stdout == "mine\n"
        assert tc.templates.get("e2e-scoped").workspace != client_b.templates.get("e2e-scoped").workspace
    finally:
        from conftest import delete_all

        delete_all(server.url, client_b.api_key)
        delete_workspace_templates(server.url, client_b.api_key)
    # The built-ins are global and cannot be deleted by anyone.
    with pytest.raises(BadRequestError):
        tc.templates.delete("base")  # 403: Py maps it to BadRequestError (contract §1.5)
    assert tc.templates.get("base").is_global


def cgroup_quota_of_new_instance(server, before: set[str]) -> int:
    new = instance_dirs(server.data_dir) - before
    quotas = []
    for iid in new:
        f = Path("/sys/fs/cgroup/cpu/pandastack") / iid / "cpu.cfs_quota_us"
        if f.exists():
            quotas.append(int(f.read_text()))
    assert quotas, f"no cgroup for the new instances {new}"
    return max(quotas)


def test_cpu_memory_and_disk_are_baked_in(tc, server):
    build_ok(tc, "e2e-size", "FROM base\nRUN true\n", cpu=2, memory_mb=768, size_mb=512)
    assert raw(tc, "/templates/e2e-size")["size_mb"] == 512
    before = instance_dirs(server.data_dir)
    sb = tc.sandboxes.create(template="e2e-size")
    assert (sb.cpu, sb.memory_mb) == (2, 768)
    # size_mb is the disk of the template's sandboxes (their writable root and /tmp).
    assert raw(tc, f"/sandboxes/{sb.id}")["disk_mb"] == 512
    limit = raw(tc, f"/sandboxes/{sb.id}/metrics")["disk_limit_bytes"]
    assert 400 * 1024 * 1024 < limit <= 512 * 1024 * 1024, limit
    r = sb.exec("nproc; grep MemTotal /proc/meminfo")
    nproc, meminfo = r.stdout.splitlines()
    assert int(nproc) == 2
    assert int(meminfo.split()[1]) == 768 * 1024, meminfo
    assert cgroup_quota_of_new_instance(server, before) == 200_000
    # Snapshots and forks inherit the size (seed 000: not resizable on restore).
    restored = tc.sandboxes.create(from_snapshot=sb.snapshot())
    assert (restored.cpu, restored.memory_mb) == (2, 768)
    assert restored.exec("grep MemTotal /proc/meminfo").stdout.split()[1] == str(768 * 1024)
    child = sb.fork()
    assert (child.cpu, child.memory_mb) == (2, 768)
    assert raw(tc, f"/sandboxes/{restored.id}")["disk_mb"] == raw(tc, f"/sandboxes/{child.id}")["disk_mb"] == 512
    # A create may still ask for another disk than the template's.
    other = requests.post(
        f"{tc.api_url}/v1/sandboxes",
        json={"template": "e2e-size", "disk_mb": 1024},
        headers={"Authorization": f"Bearer {tc.api_key}"},
        timeout=120,
    )
    assert other.status_code == 201 and other.json()["disk_mb"] == 1024, other.text


def test_bad_requests_name_the_field(api, server):
    def post(**kw):
        return api("POST", "/v1/templates/build", **kw)

    assert_json_error(post(data={"name": "x", "image_ref": "docker.io/library/python:3"}), "image_ref", "registry", status=400)
    assert_json_error(post(data={"name": "base", "dockerfile": "FROM base"}), "name", "reserved", status=400)
    assert_json_error(post(data={"name": "Bad_Name", "dockerfile": "FROM base"}), "name", status=400)
    assert_json_error(post(data={"name": "ok", "dockerfile": "FROM base", "cpu": "0"}), "cpu", status=400)
    assert_json_error(post(data={"name": "ok", "dockerfile": "FROM base", "memory_mb": "lots"}), "memory_mb", status=400)
    assert_json_error(post(data={"name": "ok", "dockerfile": "FROM base", "size_mb": "1"}), "size_mb", status=400)
    assert_json_error(post(data={"name": "ok"}), "dockerfile", "rootfs", status=400)
    assert_json_error(post(data={"name": "ok", "dockerfile": "FROM base", "color": "red"}), "color", "unknown field", status=400)
    assert_json_error(post(json={"name": "ok"}), "content type", status=400)
    assert_json_error(
        post(data={"name": "ok", "dockerfile": "FROM base"}, files={"../escape": ("../escape", b"x")}),
        "context path", "..", status=400,
    )
    assert_json_error(api("DELETE", "/v1/templates/code-interpreter"), "built in", status=403)
    assert_json_error(api("GET", "/v1/templates/builds/bld-nope"), "not found", status=404)
    assert_json_error(api("GET", "/v1/templates/nope-nope"), "not found", status=404)
    # Nothing was half-created: no build directory is left for any refused request.
    leftovers = [d for d in (server.data_dir / "template-builds").iterdir() if (d / "input").exists()]
    assert not leftovers, leftovers


@pytest.fixture
def quota_server(tmp_path):
    """A second server with small template quotas on a data dir of its own (no built-ins
    baked: the quota builds are rootfs tars)."""
    data = Path(os.environ.get("PANDASTACK_TEST_SERVER_DATA", "/var/lib/pandastack-ci/server")).parent / "quota-server"
    subprocess.run(["rm", "-rf", str(data)], check=True)
    data.mkdir(parents=True)
    srv = Server(Path(os.environ.get("PANDASTACK_TEST_BIN", "dist/pandastack")), data, _free_port(), tmp_path / "quota-server.log")
    env = {"PANDASTACK_MAX_TEMPLATES": "1", "PANDASTACK_MAX_TEMPLATE_STORAGE_MB": "8", "PANDASTACK_POOL_SIZE": "0"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        srv.start()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    yield srv
    try:
        from conftest import delete_all

        delete_all(srv.url, srv.admin_key())
    finally:
        srv.stop()
        subprocess.run(["rm", "-rf", str(data)], check=False)


def test_template_quotas(quota_server, server, tmp_path):
    client = Client(api_url=quota_server.url, api_key=quota_server.admin_key())
    tiny = tmp_path / "tiny.tar"
    tiny.write_bytes(tiny_rootfs_tar(server))
    assert client.templates.build("q-one", rootfs_tar=str(tiny)).status == "done"
    with pytest.raises(BadRequestError) as e:
        client.templates.build("q-two", rootfs_tar=str(tiny))
    assert "template quota" in str(e.value) and "1 of 1" in str(e.value), e.value
    # Rebuilding an existing name is not a new template.
    assert client.templates.build("q-one", rootfs_tar=str(tiny)).status == "done"
    client.templates.delete("q-one")
    # Storage: 8 MiB per workspace; this tar unpacks to more.
    big = tmp_path / "big.tar"
    big.write_bytes(tiny_rootfs_tar(server, extra={"data/blob": os.urandom(9 << 20)}))
    b = client.templates.build("q-big", rootfs_tar=str(big))
    assert b.status == "failed" and "storage quota" in b.error, b.error
    assert client.templates.build("q-two", rootfs_tar=str(tiny)).status == "done"
    resp = requests.post(
        f"{quota_server.url}/v1/templates/build",
        headers={"Authorization": f"Bearer {quota_server.admin_key()}"},
        data={"name": "q-three", "dockerfile": "FROM base"},
        timeout=30,
    )
    assert_json_error(resp, "template quota", status=429)


def test_cli_template_commands(server, tpl_key, tmp_path):
    """`pandastack template build/list/get/builds/build-logs/delete` as a user runs them."""
    from test_cli import Cli

    cli = Cli(server, tmp_path)
    cli.env["PANDASTACK_API_KEY"] = tpl_key
    (tmp_path / "ctx" / "sub").mkdir(parents=True)
    (tmp_path / "ctx" / "sub" / "hello.txt").write_text("hi from the cli\n")
    (tmp_path / "Dockerfile").write_text("FROM base\nCOPY sub/hello.txt /hello.txt\nRUN cat /hello.txt\n")
    (tmp_path / "Bad").write_text("FROM base\nRUN echo about-to-fail; exit 7\n")
    (tmp_path / "tiny.tar").write_bytes(tiny_rootfs_tar(server))
    try:
        p = cli.run("pandastack template build e2e-cli -f Dockerfile --context ctx --cpu 1 --memory-mb 512", timeout=BUILD_TIMEOUT)
        assert "Step 2/2 : RUN cat /hello.txt" in p.stdout and "hi from the cli" in p.stdout, p.stdout
        assert "template e2e-cli is ready (generation 1)" in p.stderr, p.stderr
        p = cli.run("pandastack template build e2e-cli -f Dockerfile --context ctx --cpu 1 --memory-mb 512")
        assert "nothing changed" in p.stderr, p.stderr
        listed = cli.run("pandastack template list").stdout
        assert "e2e-cli" in listed and "base" in listed, listed
        got = cli.run("pandastack template get e2e-cli").stdout.split()
        assert got[got.index("kind") + 1] == "dockerfile" and got[got.index("base") + 1] == "base", got
        builds = json.loads(cli.run("pandastack template builds -o json").stdout)
        assert builds[0]["name"] == "e2e-cli" and builds[0]["status"] == "done", builds
        logs = cli.run(f"pandastack template build-logs {builds[1]['id']}").stdout
        assert "hi from the cli" in logs, logs
        bad = cli.run("pandastack template build e2e-cli-bad -f Bad", ok=False, timeout=BUILD_TIMEOUT)
        assert bad.returncode == 1 and "about-to-fail" in bad.stdout, (bad.stdout, bad.stderr)
        assert "failed" in bad.stderr and "exit code 7" in bad.stderr, bad.stderr
        p = cli.run("pandastack template build e2e-cli-tar --rootfs tiny.tar", timeout=BUILD_TIMEOUT)
        assert "Unpacked" in p.stdout, p.stdout
        cli.run("pandastack template delete e2e-cli")
        gone = cli.run("pandastack template get e2e-cli", ok=False)
        assert gone.returncode == 1 and "not found" in gone.stderr, gone.stderr
    finally:
        delete_workspace_templates(server.url, tpl_key)
