"""Bad input gets a clear 4xx JSON error naming the problem and leaves nothing behind: no new
sandbox in the list, no new instance directory, no new runsc container on the host.

The SDK is used wherever it can send the input; raw HTTP only for bodies the SDK cannot
produce (malformed JSON, wrong field types) and to check the status code and JSON shape."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest

from helpers import assert_json_error, nothing_left_behind


def test_bad_creates(api, server):
    with nothing_left_behind(server):
        bad_creates(api)


def bad_creates(api):
    from pandastack import BadRequestError, NotFoundError, PandastackError, Sandbox

    with pytest.raises((BadRequestError, NotFoundError)) as e:
        Sandbox.create(template="no-such-template")
    assert "no-such-template" in str(e.value)
    assert_json_error(api("POST", "/v1/sandboxes", json={"template": "no-such-template"}), "no-such-template")

    with pytest.raises(BadRequestError) as e:
        Sandbox.create(template="base", ttl_seconds=-5)
    assert "ttl_seconds" in str(e.value)
    assert_json_error(api("POST", "/v1/sandboxes", json={"template": "base", "ttl_seconds": -5}), "ttl_seconds", status=400)
    assert_json_error(api("POST", "/v1/sandboxes", json={"template": "base", "ttl_seconds": 0}), "ttl_seconds", status=400)

    malformed = api("POST", "/v1/sandboxes", data=b'{"template": "base",', headers={"Content-Type": "application/json"})
    assert_json_error(malformed, "json", status=400)
    assert_json_error(api("POST", "/v1/sandboxes", data=b'{"template": "base" "ttl_seconds": 60}', headers={"Content-Type": "application/json"}), "json", status=400)

    for body, field in [
        ({"template": 5}, "template"),
        ({"template": "base", "ttl_seconds": "soon"}, "ttl_seconds"),
        ({"template": "base", "ttl_seconds": 1.5}, "ttl_seconds"),
        ({"template": "base", "metadata": {"job": 1}}, "metadata"),
        ({"template": "base", "metadata": ["job"]}, "metadata"),
        ({"template": "base", "persistent": "yes"}, "persistent"),
    ]:
        assert_json_error(api("POST", "/v1/sandboxes", json=body), field, status=400)
    assert_json_error(api("POST", "/v1/sandboxes", data=b"not json", headers={"Content-Type": "application/json"}), "json", status=400)
    assert_json_error(api("POST", "/v1/sandboxes", json=["base"]), status=400)

    # Something the SDK raises for a 4xx must be an SDK error, never a crash.
    with pytest.raises(PandastackError):
        Sandbox.create(template="../../etc")


def test_bad_ids_and_bodies_on_a_sandbox(api, server):
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    ctx = sb.create_code_context()
    with nothing_left_behind(server):
        bad_ids(api)
        bad_bodies(api, sb, ctx)
    assert sb.exec("echo still fine").stdout == "still fine\n"


def bad_ids(api):
    from pandastack import BadRequestError, Sandbox

    for bad in ["not-a-uuid", "123", "00000000-0000-0000-0000-00000000000g"]:
        with pytest.raises(BadRequestError) as e:
            Sandbox.get(bad)
        assert "uuid" in str(e.value).lower(), e.value
        assert_json_error(api("GET", f"/v1/sandboxes/{bad}"), "uuid", status=400)
        assert_json_error(api("POST", f"/v1/sandboxes/{bad}/exec", json={"cmd": "true"}), "uuid", status=400)
        assert_json_error(api("GET", f"/v1/sandboxes/{bad}/fs", params={"path": "/etc/passwd"}), "uuid", status=400)
        assert_json_error(api("DELETE", f"/v1/sandboxes/{bad}"), "uuid", status=400)
    missing = str(uuid.uuid4())
    assert_json_error(api("GET", f"/v1/sandboxes/{missing}"), status=404)
    assert_json_error(api("DELETE", f"/v1/sandboxes/{missing}"), status=404)


def bad_bodies(api, sb, ctx):
    from pandastack import BadRequestError

    for body, field in [({"cmd": 5}, "cmd"), ({"cmd": "true", "timeout_seconds": "x"}, "timeout_seconds"), ({}, "cmd")]:
        assert_json_error(api("POST", f"/v1/sandboxes/{sb.id}/exec", json=body), field, status=400)
    assert_json_error(api("POST", f"/v1/sandboxes/{sb.id}/exec", data=b"{cmd", headers={"Content-Type": "application/json"}), "json", status=400)
    assert_json_error(api("POST", f"/v1/sandboxes/{sb.id}/repl/sessions", json={"language": 3}), "language", status=400)
    assert_json_error(api("POST", f"/v1/sandboxes/{sb.id}/repl/sessions/{ctx.id}/run", json={"code": 1}), "code", status=400)
    assert_json_error(api("POST", f"/v1/sandboxes/{sb.id}/repl/sessions/{ctx.id}/run", json={"code": "1", "timeout_ms": "x"}), "timeout_ms", status=400)
    assert_json_error(api("PATCH", f"/v1/sandboxes/{sb.id}/lifecycle", json={"ttl_seconds": -1}), "ttl_seconds", status=400)
    with pytest.raises(BadRequestError) as e:
        sb.set_ttl(-1)
    assert "ttl_seconds" in str(e.value)


def test_fs_paths_cannot_leave_the_sandbox(api, server):
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    with nothing_left_behind(server):
        bad_paths(api, sb)


def bad_paths(api, sb):
    from pandastack import BadRequestError, NotFoundError

    host_passwd = Path("/etc/passwd").read_bytes()
    host_digest = hashlib.sha256(host_passwd).hexdigest()
    for bad in ["/workspace/../../etc/passwd", "/../etc/passwd", "/workspace/..", "/a/../../../../etc/shadow"]:
        with pytest.raises(BadRequestError) as e:
            sb.filesystem.read(bad)
        assert ".." in str(e.value), e.value
        with pytest.raises(BadRequestError):
            sb.filesystem.write(bad, b"x")
        for ep in ["fs", "fs/dir", "fs/stat"]:
            assert_json_error(api("GET", f"/v1/sandboxes/{sb.id}/{ep}", params={"path": bad}), "..", status=400)
        assert_json_error(api("DELETE", f"/v1/sandboxes/{sb.id}/fs", params={"path": bad}), "..", status=400)
    assert_json_error(api("GET", f"/v1/sandboxes/{sb.id}/fs", params={"path": "etc/passwd"}), "absolute", status=400)
    assert_json_error(api("GET", f"/v1/sandboxes/{sb.id}/fs"), "path", status=400)

    # Symlinks resolve inside the sandbox: the sandbox's /etc/passwd, never the host's.
    marker = f"sandbox-only-{uuid.uuid4().hex}"
    setup = sb.exec(
        f"echo '{marker}:x:4242:4242::/nonexistent:/usr/sbin/nologin' >> /etc/passwd && "
        "ln -s /etc/passwd /workspace/link && ln -s ../../../../../../etc/passwd /workspace/deep-link && "
        "ln -s /workspace/link /workspace/link-to-link"
    )
    assert setup.exit_code == 0, setup
    for link in ["/workspace/link", "/workspace/deep-link", "/workspace/link-to-link"]:
        got = sb.filesystem.read(link)
        assert marker.encode() in got, f"{link} did not read the sandbox's /etc/passwd"
        assert got != host_passwd
    assert marker.encode() not in Path("/etc/passwd").read_bytes()

    # Writing through a symlink changes the sandbox's file only.
    sb.filesystem.write("/workspace/link", b"root:x:0:0::/root:/bin/bash\n")
    assert hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest() == host_digest
    assert b"root:x:0:0" in sb.filesystem.read("/etc/passwd")

    # A path that does not exist is a 404, not a 500.
    with pytest.raises(NotFoundError):
        sb.filesystem.read("/workspace/no-such-file")
    assert_json_error(api("GET", f"/v1/sandboxes/{sb.id}/fs", params={"path": "/workspace/no-such-file"}), status=404)
    assert not sb.filesystem.exists("/workspace/no-such-file")
