"""Issue 14: the OpenAPI 3.1 description of /v1. The server serves it at GET /v1/openapi.json
(no key needed); it must equal docs/openapi.json (which a Rust test regenerates from the code)
and be a valid OpenAPI document (openapi-spec-validator, PyPI). Then schemathesis (PyPI) fuzzes
every operation from it against the live server, in a workspace of its own (the operator-only
`GET /v1/hosts` with the operator's key, issue 12): a fixed seed, a few examples per operation,
all phases (examples, coverage, fuzzing, stateful through the description's links), every check
(no 5xx; status codes, content types, headers and bodies as described; schema-valid requests
accepted and invalid ones refused). Afterwards, once the workspace's sandboxes, snapshots and
databases are deleted through the API, nothing may be left behind on the host: no runsc
container or instance directory beyond what the server holds ahead (warm pool, restore
targets), no snapshot image, fork capture (on disk or in the RAM scratch dir) or hibernation
image without its row, no database directory, PostgreSQL server, mount or loop device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import requests
from openapi_spec_validator import validate

from helpers import steady_host
from net_fixtures import server_tag

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
# Fixed so that a failure replays; the examples per operation and the time bounds keep the run
# within a few minutes on 2 cores.
SEED = 20261201
MAX_EXAMPLES = int(os.environ.get("PANDASTACK_FUZZ_EXAMPLES", "5"))
RUN_TIMEOUT_S = 300  # ~80 s here; a bound, not a benchmark
OPERATOR_RUN_TIMEOUT_S = 60


def test_served_description_is_the_checked_in_file_and_valid(server):
    resp = requests.get(f"{server.url}/v1/openapi.json", timeout=30)  # no Authorization
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/json")
    served = resp.json()
    checked_in = json.loads((REPO / "docs" / "openapi.json").read_text())
    assert served == checked_in, "the server serves a description other than docs/openapi.json"
    validate(served)
    assert served["openapi"].startswith("3.1"), served["openapi"]
    ops = [(m, p) for p, item in served["paths"].items() for m in item]
    assert len(ops) >= 40, len(ops)
    # What the wire contract names: the error shape, the SDKs' endpoints, bearer auth.
    assert served["components"]["schemas"]["ErrorBody"]["required"] == ["error"]
    for method, path in [("post", "/v1/sandboxes"), ("post", "/v1/sandboxes/{id}/exec/stream"),
                         ("put", "/v1/sandboxes/{id}/fs"), ("post", "/v1/sandboxes/{id}/repl/sessions/{ctx}/run"),
                         ("post", "/v1/sandboxes/{id}/fork-tree"), ("get", "/v1/snapshots")]:
        assert method in served["paths"][path], (method, path)
    assert served["components"]["securitySchemes"]["api_key"]["scheme"] == "bearer"


def _host_leftovers(data: Path) -> dict[str, set[str]]:
    listing = lambda d: {p.name for p in d.iterdir()} if d.is_dir() else set()
    databases = str(data / "databases") + "/"
    losetup = subprocess.run(["losetup", "-a"], capture_output=True, text=True, timeout=30, check=True).stdout
    return {
        "snapshots": listing(data / "snapshots"), "forks": listing(data / "forks"), "hibernate": listing(data / "hibernate"),
        # Fork captures go to the server's RAM scratch dir when they fit.
        "ram forks": listing(Path(f"/dev/shm/pandastack-{server_tag(data)}/forks")),
        "databases": listing(data / "databases"),
        "database mounts": {l.split()[4] for l in Path("/proc/self/mountinfo").read_text().splitlines() if databases in l},
        "database loop devices": {l.split(":")[0] for l in losetup.splitlines() if databases in l},
        # A cluster's postmaster names its data dir (under the database's directory).
        "database servers": {
            p.name for p in Path("/proc").iterdir()
            if p.name.isdigit() and databases.encode() in _cmdline(p)
        },
    }


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:  # the process ended meanwhile
        return b""


def _delete_everything(url: str, headers: dict) -> None:
    """Deletes the fuzz workspace's databases, sandboxes, snapshots and volumes through the API."""
    for db in requests.get(f"{url}/v1/databases", headers=headers, timeout=60).json()["items"]:
        r = requests.delete(f"{url}/v1/databases/{db['id']}", headers=headers, timeout=120)
        assert r.status_code in (204, 404), r.text
    for sb in requests.get(f"{url}/v1/sandboxes", headers=headers, timeout=60).json():
        r = requests.delete(f"{url}/v1/sandboxes/{sb['id']}", headers=headers, timeout=120)
        assert r.status_code in (204, 404), r.text  # a fork child may go with its parent
    for snap in requests.get(f"{url}/v1/snapshots", headers=headers, timeout=60).json()["snapshots"]:
        r = requests.delete(f"{url}/v1/snapshots/{snap['id']}", headers=headers, timeout=120)
        assert r.status_code == 204, r.text
    for vol in requests.get(f"{url}/v1/volumes", headers=headers, timeout=60).json():
        r = requests.delete(f"{url}/v1/volumes/{vol['name']}", headers=headers, timeout=120)
        assert r.status_code == 204, r.text  # their sandboxes are gone


def test_fuzz_every_operation_from_the_description(server, tmp_path):
    key = server.create_workspace(f"fuzz-{os.getpid()}-{int(time.time())}")
    headers = {"Authorization": f"Bearer {key}"}
    steady_host(server)
    before = _host_leftovers(server.data_dir)

    env = dict(os.environ, SCHEMATHESIS_HOOKS="fuzz_hooks", PYTHONPATH=str(Path(__file__).parent))
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        # The run's sandboxes and forks fill the host's memory budget: then starts (and implicit
        # wakes) answer 503 with Retry-After, the host's state, not a fault; fuzz_hooks'
        # a_503_is_the_host_at_capacity fails any other 503.
        '[checks.not_a_server_error]\nexpected-statuses = ["2xx", "3xx", "4xx", "503"]\n'
        # The proxy answers 502 when nothing listens on the port: the described reply of a
        # gateway, not a fault of the server.
        '[[operations]]\ninclude-operation-id-regex = "^proxy_"\n'
        'checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "502", "503"]\n'
        # A create's cpu and memory_mb must equal its template's (issue 8): a rule between two
        # fields and the server's templates, which no schema can state; any other size is a 400.
        '[[operations]]\ninclude-operation-id = "create_sandbox"\n'
        'checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409", "429", "503"]\n'
        # A fork's `host` hint must name a host of the cluster (issue 12), a rule against the
        # registered hosts no schema can state; any other name is a 400 naming the field.
        '[[operations]]\ninclude-operation-id = "fork_sandbox"\n'
        'checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409", "429", "503"]\n'
        # A build's name must not be a built-in's or a route's, and it needs a dockerfile or a
        # rootfs part: rules no form schema states (issue 13); both are 400s naming the field.
        '[[operations]]\ninclude-operation-id = "build_template"\n'
        'checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409", "429", "503"]\n'
        # A database's memory_mb must agree with its size, a clone's storage_mb must not be below
        # its source's, and storage never shrinks (issue 10): rules between fields or against the
        # stored database; each is a 400 naming the field.
        '[[operations]]\ninclude-operation-id-regex = "^(create|clone|update)_database$"\n'
        'checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409", "429", "503"]\n'
        # A volume never shrinks (issue 9): a grow below its current size is a 400 naming
        # size_mb, a rule against the stored volume.
        '[[operations]]\ninclude-operation-id = "resize_volume"\n'
        'checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409", "429", "503"]\n'
        # Failover needs a standby, which one host does not run: the described 501 (issue 10).
        '[[operations]]\ninclude-operation-id = "failover_database"\n'
        'checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "501", "503"]\n'
    )
    def schemathesis(name: str, api_key: str, *selection: str, timeout_s: int) -> None:
        log_dir = Path(server.log).parent
        cmd = [
            str(VENV_BIN / "schemathesis"), "--config-file", str(config), "run", f"{server.url}/v1/openapi.json",
            "--header", f"Authorization: Bearer {api_key}", *selection,
            "--seed", str(SEED), "--max-examples", str(MAX_EXAMPLES), "--workers", "1",
            "--checks", "all", "--request-timeout", "120",
            "--report", "junit", "--report-dir", str(log_dir), "--report-junit-path", f"{name}.xml",
        ]
        started = time.monotonic()
        run = subprocess.run(cmd, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=timeout_s)
        (log_dir / f"{name}.log").write_text(run.stdout + run.stderr)
        summary = run.stdout[run.stdout.find("== SUMMARY"):]
        print(f"{name}: exit {run.returncode} in {time.monotonic() - started:.0f} s\n{summary}")
        assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-3000:]
        assert "Authentication failed" not in run.stdout, f"{name} lost its key"
        assert " passed" in summary and "failures" not in summary, summary

    try:
        # Every operation in the fuzz workspace but the operator-only host ones (issue 12),
        # which get the operator's key: the list is read-only, and on this single host a drain
        # answers 409 (it needs a cluster) and activate sets only what is already so, so the
        # first workspace is safe to use.
        host_ops = ["list_hosts", "drain_host", "activate_host"]
        schemathesis("schemathesis", key, *[a for op in host_ops for a in ("--exclude-operation-id", op)],
                     timeout_s=RUN_TIMEOUT_S)
        # (They link nowhere, so there is no stateful phase.)
        schemathesis("schemathesis-operator", server.admin_key(),
                     *[a for op in host_ops for a in ("--include-operation-id", op)],
                     "--phases", "examples,coverage,fuzzing", timeout_s=OPERATOR_RUN_TIMEOUT_S)
    finally:
        _delete_everything(server.url, headers)

    # Everything was deleted through the API as a user would (above); now look at the host.
    assert requests.get(f"{server.url}/v1/sandboxes", headers=headers, timeout=60).json() == []
    assert requests.get(f"{server.url}/v1/databases", headers=headers, timeout=60).json() == {"items": []}
    _, stale = steady_host(server)
    assert not stale, f"instance dirs without a container: {stale}"
    after = _host_leftovers(server.data_dir)
    for what in after:
        assert after[what] <= before[what], f"{what} left behind: {after[what] - before[what]}"
