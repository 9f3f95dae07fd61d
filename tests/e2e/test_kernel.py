"""Code contexts: state that lasts, a runaway cell interrupted on time, independent kernels."""

from __future__ import annotations

import csv
import random
import time

import pytest


@pytest.fixture
def ci_sandbox():
    from pandastack import Sandbox

    return Sandbox.create(template="code-interpreter", ttl_seconds=3600)


def write_big_csv(path, rows: int) -> dict:
    """A deterministic CSV of a few MB; returns what the test expects pandas to find."""
    rnd = random.Random(20240601)
    total_qty = 0
    cities = ["Lyon", "Osaka", "Quito", "Perth", "Oslo", "Accra"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["order_id", "city", "qty", "price", "note"])
        for i in range(rows):
            qty = rnd.randint(1, 500)
            total_qty += qty
            w.writerow([i, cities[i % len(cities)], qty, f"{rnd.uniform(0.5, 999.5):.2f}", f"n{rnd.getrandbits(40):x}"])
    return {"rows": rows, "total_qty": total_qty}


def test_dataframe_from_a_real_csv_survives_20_calls(ci_sandbox, tmp_path):
    local = tmp_path / "orders.csv"
    want = write_big_csv(local, 120_000)
    size = local.stat().st_size
    assert 3_000_000 < size < 12_000_000, size
    ci_sandbox.filesystem.upload(local, "/workspace/orders.csv")

    ctx = ci_sandbox.create_code_context()
    ex = ctx.run_code(
        "import pandas as pd\n"
        "df = pd.read_csv('/workspace/orders.csv')\n"
        "fingerprint = int(pd.util.hash_pandas_object(df, index=True).sum())\n"
        "len(df), int(df['qty'].sum())",
        timeout_seconds=60,
    )
    assert ex.error is None, ex.error
    assert ex.text == f"({want['rows']}, {want['total_qty']})", ex.text

    # 20 unrelated cells: new variables, other frames, a copy that is modified, plots, errors.
    cells = [
        "a = 1",
        "b = [i * i for i in range(1000)]",
        "other = pd.DataFrame({'x': range(10)})",
        "copy = df.copy(); copy['qty'] = 0",
        "import numpy as np; m = np.ones((200, 200))",
        "raise ValueError('a cell that fails')",
        "del other",
        "s = sum(b)",
        "print('hello')",
        "import matplotlib; matplotlib.use('Agg')",
        "df2 = df[df['qty'] > 250]",
        "len(df2)",
        "t = tuple(range(5))",
        "d = {'k': 'v'}",
        "import math; math.sqrt(2)",
        "copy.head()",
        "1/0",
        "x = 'state'",
        "df.shape",
        "None",
    ]
    assert len(cells) == 20
    for code in cells:
        ctx.run_code(code)

    ex = ctx.run_code(
        "int(pd.util.hash_pandas_object(df, index=True).sum()) == fingerprint, len(df), int(df['qty'].sum())"
    )
    assert ex.error is None, ex.error
    assert ex.text == f"(True, {want['rows']}, {want['total_qty']})", ex.text


def test_infinite_loop_is_interrupted_on_time_and_state_survives(ci_sandbox):
    ctx = ci_sandbox.create_code_context()
    ctx.run_code("kept = 'still here'; counter = 41")

    start = time.monotonic()
    ex = ctx.run_code("while True: pass", timeout_seconds=2)
    took = time.monotonic() - start
    assert took < 3.0, f"run took {took:.2f} s for a 2 s timeout"
    assert ex.error, ex
    assert "timeout" in ex.error.lower() or "KeyboardInterrupt" in ex.error, ex.error

    ex = ctx.run_code("counter += 1; kept, counter")
    assert ex.error is None, ex.error
    assert ex.text == "('still here', 42)", ex.text


def test_contexts_are_independent_kernels(ci_sandbox):
    one = ci_sandbox.create_code_context()
    two = ci_sandbox.create_code_context()
    assert one.id != two.id
    one.run_code("only_in_one = 1")
    ex = two.run_code("only_in_one")
    assert ex.error and "NameError" in ex.error, ex
    assert one.run_code("only_in_one").text == "1"


def test_cell_error_is_a_traceback_not_an_http_error(ci_sandbox):
    ctx = ci_sandbox.create_code_context()
    ex = ctx.run_code("def f():\n    raise KeyError('missing')\nf()")
    assert ex.error and "KeyError" in ex.error and "missing" in ex.error, ex
    assert ex.exit_code != 0, ex
    assert ctx.run_code("2 + 2").text == "4"
