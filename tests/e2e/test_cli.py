"""Issue 4: the `pandastack` CLI. Every `pandastack ...` line of the seed documents (those of
003_9a81e070ecbef351.txt and 004_a8db76e6bc11f419.txt here; 000 has none; 001's `pandastack
db ...` lines run in test_databases.py) is run as written, through `bash -c`, by the
built binary ($PANDASTACK_TEST_BIN, first on PATH) against the session's real server, with
`<id>` replaced by a real id; each must exit 0 and print what the document says. Then the
CLI's documented contract (crates/cli/src/lib.rs): exit code passthrough, `-o json`, one-line
errors, live streaming of `sandbox exec`.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from lifecycle_fixtures import new_snapshots_deleted  # noqa: F401  (fixture used by name)

# The seed lines, verbatim (placeholders as in the documents).
SEED_003 = [
    "pandastack sandbox create --template code-interpreter --ttl 3600 --metadata job=demo",
    "pandastack sandbox pause <sandbox-id>",
    "pandastack sandbox resume <sandbox-id>",
    "pandastack sandbox hibernate <sandbox-id>",
    "pandastack sandbox wake <sandbox-id>",
    "pandastack sandbox set-ttl <sandbox-id> --ttl 7200",
    "pandastack sandbox set-persistent <sandbox-id> --persistent true",
    "pandastack sandbox lifecycle <sandbox-id>",
    "pandastack sandbox fork <sandbox-id> --metadata branch=feature-x",
    "pandastack sandbox fork-tree <sandbox-id> --count 8 --metadata batch=search",
    "pandastack sandbox snapshot <sandbox-id>",
]
SEED_004 = [
    "pandastack sandbox create --template code-interpreter --ttl 3600",
    "pandastack sandbox exec <id> --timeout 30 -- 'python -c \"print(2 + 2)\"'",
    "pandastack sandbox delete <id>",
    "pandastack sandbox run-code <id> --language python -- 'x = 42; y = x * 2; print(x, y)'",
    "pandastack fs upload <id> --local ./data.csv --remote /workspace/data.csv",
    "pandastack sandbox run-code <id> --language python -- 'import pandas as pd; df = pd.read_csv(\"/workspace/data.csv\"); print(df.describe())'",
    "pandastack fs download <id> --remote /workspace/result.csv --local ./result.csv",
]


class Cli:
    """Runs command lines as a user's shell would, with the built binary first on PATH."""

    def __init__(self, server, cwd: Path) -> None:
        self.cwd = cwd
        self.binary = Path(server.binary).resolve()
        self.env = dict(os.environ)
        self.env.update(
            PANDASTACK_API=server.url,
            PANDASTACK_API_KEY=server.admin_key(),
            PATH=f"{self.binary.parent}:{os.environ.get('PATH', '')}",
            HOME=str(cwd),  # no config file of the machine's user
            NO_COLOR="1",
        )
        found = shutil.which("pandastack", path=self.env["PATH"])
        assert found and Path(found).resolve() == self.binary, found

    def run(self, line: str, timeout: float = 120, ok: bool = True, **subst: str) -> subprocess.CompletedProcess:
        for k, v in subst.items():
            line = line.replace(f"<{k.replace('_', '-')}>", v)
        assert "<" not in line.split("--", 1)[0], f"unsubstituted placeholder in {line!r}"
        p = subprocess.run(
            ["bash", "-c", line], cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout,
        )
        if ok:
            assert p.returncode == 0, f"{line!r} exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
        return p


def pairs(text: str) -> dict[str, str]:
    """The CLI's `key  value` lines."""
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition("  ")
        if k and v:
            out[k.strip()] = v.strip()
    return out


def table(text: str) -> list[dict[str, str]]:
    """The CLI's tables: an upper-case header line, columns two or more spaces apart."""
    lines = [l for l in text.splitlines() if l.strip()]
    start = next(i for i, l in enumerate(lines) if l.startswith("ID "))
    header = re.split(r"\s{2,}", lines[start].strip())
    return [dict(zip(header, re.split(r"\s{2,}", l.strip()))) for l in lines[start + 1 :]]


@pytest.fixture
def cli(server, tmp_path) -> Cli:
    return Cli(server, tmp_path)


def test_seed003_cli_lines(cli, new_snapshots_deleted):
    from pandastack import Sandbox

    out = cli.run(SEED_003[0]).stdout
    # "The returned object includes id, boot_ms, boot_mode, guest_ip, and any metadata"
    sb = pairs(out)
    assert {"id", "boot_ms", "boot_mode", "guest_ip", "metadata"} <= set(sb), out
    assert sb["metadata"] == "job=demo" and sb["template"] == "code-interpreter", out
    assert sb["status"] == "running" and sb["ttl_seconds"] == "3600", out
    sid = sb["id"]
    assert Sandbox.get(sid).metadata == {"job": "demo"}

    assert cli.run(SEED_003[1], sandbox_id=sid).stdout == f"paused sandbox {sid}\n"
    assert Sandbox.get(sid).status == "paused"
    assert cli.run(SEED_003[2], sandbox_id=sid).stdout == f"resumed sandbox {sid}\n"
    assert Sandbox.get(sid).status == "running"
    assert cli.run(SEED_003[3], sandbox_id=sid).stdout == f"hibernated sandbox {sid}\n"
    assert Sandbox.get(sid).status == "hibernated"
    assert cli.run(SEED_003[4], sandbox_id=sid).stdout == f"woke sandbox {sid}\n"
    assert Sandbox.get(sid).status == "running"

    assert pairs(cli.run(SEED_003[5], sandbox_id=sid).stdout)["ttl_seconds"] == "7200"
    assert pairs(cli.run(SEED_003[6], sandbox_id=sid).stdout)["persistent"] == "true"
    # {"ttl_seconds": 7200, "persistent": true, "idle_seconds": 12}
    lc = pairs(cli.run(SEED_003[7], sandbox_id=sid).stdout)
    assert lc["ttl_seconds"] == "7200" and lc["persistent"] == "true" and lc["idle_seconds"].isdigit(), lc
    assert Sandbox.get(sid).persistent is True

    child = pairs(cli.run(SEED_003[8], sandbox_id=sid).stdout)
    md = dict(kv.split("=", 1) for kv in child["metadata"].split(","))
    assert md.get("branch") == "feature-x" and md.get("parent_id") == sid, child
    assert Sandbox.get(child["id"]).exec("echo child").stdout == "child\n"

    fan = cli.run(SEED_003[9], sandbox_id=sid, timeout=300).stdout
    rows = table(fan)
    assert len(rows) == 8 and len({r["ID"] for r in rows}) == 8, fan
    tree = pairs(fan.split("\nID ", 1)[0])["tree_id"]
    for r in rows:
        assert r["STATUS"] == "running", r
        assert f"parent_id={sid}" in r["METADATA"] and "batch=search" in r["METADATA"], r
        assert f"fork_tree_id={tree}" in r["METADATA"], r

    for r in rows + [child]:  # children first: the parent's kill takes them along
        Sandbox.get(r.get("ID") or r["id"]).kill()

    snap = cli.run(SEED_003[10], sandbox_id=sid).stdout
    assert re.fullmatch(r"snap-[0-9a-f]+\n", snap), snap  # → "snap-…" (the snapshot id)
    snap = snap.strip()
    listed = table(cli.run("pandastack snapshot list").stdout)
    assert any(r["ID"] == snap and r["SANDBOX"] == sid for r in listed), listed
    assert cli.run(f"pandastack snapshot delete {snap}").stdout == f"deleted snapshot {snap}\n"
    assert snap not in {r["ID"] for r in table(cli.run("pandastack snapshot list").stdout)}


def _data_csv(path: Path, rows: int = 120) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["day", "region", "units", "revenue"])
        for i in range(rows):
            w.writerow([i, ["north", "south", "east"][i % 3], i % 17, 100 + i * 3.5])


def test_seed004_cli_lines(cli, tmp_path):
    from pandastack import NotFoundError, Sandbox

    _data_csv(tmp_path / "data.csv")  # setup: the seed's ./data.csv

    # One-shot exec
    sid = pairs(cli.run(SEED_004[0]).stdout)["id"]
    assert Sandbox.get(sid).template == "code-interpreter"
    p = cli.run(SEED_004[1], id=sid)
    assert p.stdout == "4\n", p  # "4\n"
    assert cli.run(SEED_004[2], id=sid).stdout == f"deleted sandbox {sid}\n"
    with pytest.raises(NotFoundError):
        Sandbox.get(sid)

    # Run Python code, file uploads, upload and download helpers
    sid = pairs(cli.run(SEED_004[0]).stdout)["id"]
    assert cli.run(SEED_004[3], id=sid).stdout == "42 84\n"  # "42 84\n"

    up = cli.run(SEED_004[4], id=sid).stdout
    size = (tmp_path / "data.csv").stat().st_size
    assert up == f"uploaded {size} bytes to /workspace/data.csv\n", up
    sb = Sandbox.get(sid)
    assert sb.filesystem.read("/workspace/data.csv") == (tmp_path / "data.csv").read_bytes()

    described = cli.run(SEED_004[5], id=sid).stdout
    head = described.splitlines()[0].split()
    assert head == ["day", "units", "revenue"], described  # the numeric columns
    count = next(l for l in described.splitlines() if l.startswith("count")).split()[1:]
    assert [float(c) for c in count] == [120.0] * 3, described
    assert re.search(r"^mean\s+59\.5", described, re.M), described

    assert cli.run(SEED_004[4], id=sid).stdout == up  # the second occurrence of the line
    made = sb.run_code(  # setup: the result file the seed downloads
        "import pandas as pd; pd.read_csv('/workspace/data.csv').groupby('region').sum().to_csv('/workspace/result.csv')"
    )
    assert made.exit_code == 0, made.stderr
    down = cli.run(SEED_004[6], id=sid).stdout
    remote = sb.filesystem.read("/workspace/result.csv")
    assert (tmp_path / "result.csv").read_bytes() == remote
    assert remote.startswith(b"region,") and b"\nnorth," in remote, remote
    assert down == f"downloaded {len(remote)} bytes to ./result.csv\n", down


def test_fs_upload_download_round_trip_binary_bytes(cli, tmp_path):
    from pandastack import Sandbox

    blob = os.urandom(3 * 1024 * 1024 + 17) + bytes(range(256))
    (tmp_path / "blob.bin").write_bytes(blob)
    sb = Sandbox.create(template="base")
    cli.run(f"pandastack fs upload {sb.id} --local ./blob.bin --remote /workspace/sub/blob.bin")
    assert sb.exec("sha256sum /workspace/sub/blob.bin").stdout.split()[0] == __import__("hashlib").sha256(blob).hexdigest()
    cli.run(f"pandastack fs download {sb.id} --remote /workspace/sub/blob.bin --local ./back.bin")
    assert (tmp_path / "back.bin").read_bytes() == blob


def test_exec_exit_code_passes_through_and_output_streams_live(cli):
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    p = cli.run(f"pandastack sandbox exec {sb.id} -- 'echo out; echo err >&2; exit 7'", ok=False)
    assert (p.returncode, p.stdout, p.stderr) == (7, "out\n", "err\n"), p
    p = cli.run(f"pandastack sandbox run-code {sb.id} --language python -- 'import sys; sys.exit(5)'", ok=False)
    assert p.returncode == 5, p

    proc = subprocess.Popen(
        ["pandastack", "sandbox", "exec", sb.id, "--", "for i in 1 2 3; do echo $i; sleep 1; done"],
        cwd=cli.cwd, env=cli.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    started = time.monotonic()
    lines = [(time.monotonic(), line) for line in proc.stdout]
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    assert [l for _, l in lines] == ["1\n", "2\n", "3\n"], lines
    assert lines[0][0] - started < 1.5, f'"1" printed {lines[0][0] - started:.2f} s after start: not live'
    assert lines[2][0] - lines[0][0] > 1.5, lines


def test_json_output_parses(cli):
    from pandastack import Sandbox

    sb = Sandbox.create(template="base", metadata={"k": "v"})
    got = json.loads(cli.run(f"pandastack sandbox get {sb.id} -o json").stdout)
    assert got["id"] == sb.id and got["metadata"] == {"k": "v"} and got["status"] == "running", got
    listed = json.loads(cli.run("pandastack sandbox -o json list").stdout)
    assert sb.id in {s["id"] for s in listed}, listed
    lc = json.loads(cli.run(f"pandastack sandbox lifecycle {sb.id} --output json").stdout)
    assert set(lc) == {"ttl_seconds", "persistent", "idle_seconds"}, lc
    p = cli.run(f"pandastack sandbox exec {sb.id} -o json -- 'echo hi; exit 3'", ok=False)
    res = json.loads(p.stdout)
    assert p.returncode == 3 and res["exit_code"] == 3 and res["stdout"] == "hi\n", (p, res)
    child = json.loads(cli.run(f"pandastack sandbox fork {sb.id} -o json").stdout)
    child = child.get("sandbox", child)
    assert child["metadata"]["parent_id"] == sb.id, child
    Sandbox.get(child["id"]).kill()


def test_errors_exit_non_zero_with_a_one_line_message(cli, server):
    ghost = str(uuid.uuid4())
    for line in [f"pandastack sandbox get {ghost}", f"pandastack sandbox exec {ghost} -- 'echo hi'", f"pandastack sandbox pause {ghost}"]:
        p = cli.run(line, ok=False)
        assert p.returncode == 1, (line, p)
        assert p.stdout == "", (line, p.stdout)
        assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), (line, p.stderr)
        assert "not found" in p.stderr and "(HTTP 404)" in p.stderr, (line, p.stderr)

    env = dict(cli.env, PANDASTACK_API="http://127.0.0.1:9")  # nothing listens on port 9
    p = subprocess.run(["pandastack", "sandbox", "list"], env=env, cwd=cli.cwd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stderr.startswith("error: cannot reach") and p.stderr.count("\n") == 1, p

    env = dict(cli.env)
    del env["PANDASTACK_API_KEY"]
    p = subprocess.run(["pandastack", "sandbox", "list"], env=env, cwd=cli.cwd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p

    p = cli.run("pandastack sandbox frobnicate", ok=False)
    assert p.returncode == 2, p  # usage errors are 2
