"""One-shot exec and exec_stream through the SDK: exit codes, non-UTF-8 output, timeouts that
kill the whole process group, and output that streams while the command still runs."""

from __future__ import annotations

import time

import pytest

from helpers import PS


@pytest.fixture
def sb():
    from pandastack import Sandbox

    return Sandbox.create(template="base")


def test_exit_codes_and_streams(sb):
    from pandastack import CommandFailed

    r = sb.exec("echo out; echo err >&2; exit 7")
    assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 7)
    assert sb.exec("true").exit_code == 0
    with pytest.raises(CommandFailed) as e:
        sb.exec("exit 3", check=True)
    assert e.value.exit_code == 3


def test_non_utf8_output_comes_back_without_an_error(sb):
    r = sb.exec("printf '\\xff\\xfe'; printf 'ok\\n'; printf '\\xc3' >&2")
    assert r.exit_code == 0
    assert isinstance(r.stdout, str) and r.stdout.endswith("ok\n") and len(r.stdout) >= 4, repr(r.stdout)
    assert isinstance(r.stderr, str) and r.stderr, repr(r.stderr)
    chunks = []
    assert sb.exec_stream("printf '\\xff\\xfe'; echo tail", on_stdout=chunks.append) == 0
    assert "".join(chunks).endswith("tail\n"), chunks
    # Multi-byte UTF-8 survives intact.
    assert sb.exec("printf 'h\\xc3\\xa9llo \\xe2\\x9c\\x93'").stdout == "héllo ✓"


def test_exec_timeout_kills_the_process_group(sb):
    from pandastack import SandboxTimeout

    start = time.monotonic()
    # Contract §7: a timeout is a 5xx whose message says "timeout"; the SDK raises SandboxTimeout.
    with pytest.raises(SandboxTimeout):
        sb.exec("sleep 301 & (sleep 302 &) ; bash -c 'sleep 303' & sleep 304; echo never", timeout_seconds=2)
    took = time.monotonic() - start
    assert took < 6, f"a 2 s timeout took {took:.1f} s"
    time.sleep(0.5)
    left = sb.exec(PS).stdout
    for n in (301, 302, 303, 304):
        assert f"sleep {n}" not in left, f"sleep {n} survived the timeout:\n{left}"
    assert sb.exec("echo next").stdout == "next\n"


def test_exec_stream_delivers_output_while_the_command_runs(sb):
    seen: list[tuple[float, str]] = []
    start = time.monotonic()
    rc = sb.exec_stream(
        "for i in 1 2 3; do echo $i; sleep 1; done",
        on_stdout=lambda chunk: seen.append((time.monotonic() - start, chunk)),
    )
    assert rc == 0
    text = "".join(c for _, c in seen)
    assert text == "1\n2\n3\n", seen
    t1 = next(t for t, c in seen if "1" in c)
    t3 = next(t for t, c in seen if "3" in c)
    # "3" is printed ~2 s after "1": if "1" arrived only with "3", nothing was streamed.
    assert t3 - t1 > 1.5, seen


def test_exec_stream_exit_code_and_stderr(sb):
    err: list[str] = []
    assert sb.exec_stream("echo oops >&2; exit 7", on_stderr=err.append) == 7
    assert "".join(err) == "oops\n"
    assert sb.exec_stream("true") == 0


def test_exec_stream_timeout_is_reported(sb):
    from pandastack import SandboxTimeout

    start = time.monotonic()
    with pytest.raises(SandboxTimeout):
        sb.exec_stream("sleep 305", timeout_seconds=1)
    assert time.monotonic() - start < 5
    assert "sleep 305" not in sb.exec(PS).stdout


def test_commands_run_and_env(sb):
    r = sb.commands.run("echo $HOME; pwd", timeout=10)
    assert r.exit_code == 0 and r.stdout.strip(), r
