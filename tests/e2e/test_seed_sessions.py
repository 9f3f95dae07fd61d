"""Section 1 of the "Persistent sandbox sessions" seed document (000_c44f664048d9d288.txt),
"State across turns: one sandbox, one kernel", run as written through the Python SDK."""

from __future__ import annotations


def test_state_across_turns_one_sandbox_one_kernel():
    from pandastack import Sandbox

    # One long-lived sandbox for the whole conversation. ttl_seconds keeps it from
    # being reaped between turns; bump it if turns are far apart.
    sandbox = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
    ctx = sandbox.create_code_context()  # persistent kernel; state survives run_code

    # Turn 1: load data once, define helpers. This lives in the kernel.
    ctx.run_code("import pandas as pd; df = pd.DataFrame({'a': [1, 2, 3]})")

    # Turn 2 (later in the loop): the df is still there — no reload, no re-parse.
    ex = ctx.run_code("total = int(df['a'].sum()); total")
    print(ex.text)  # -> "6"
    assert ex.text == "6", ex  # check:
    assert ex.error is None and ex.exit_code == 0, ex  # check:


def test_print_output_is_also_the_text_result():
    """Issue 2: a cell that printed and displayed nothing carries its stdout as text/plain,
    so the seed's later `ctx.run_code("print(total)").text` reads "6"."""
    from pandastack import Sandbox

    sandbox = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
    ctx = sandbox.create_code_context()
    ctx.run_code("total = 6")
    ex = ctx.run_code("print(total)")
    assert ex.stdout == "6\n", ex
    assert ex.text == "6", ex
