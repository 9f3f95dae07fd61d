"""Every Python snippet of the "Code interpreter" seed document (004_a8db76e6bc11f419.txt),
run as written through the published SDK against the real server.

The snippet lines are copied verbatim, in order. Lines marked `# setup:` are not in the seed:
they provide the files the snippets read (`/workspace/sales.csv`, `./data.csv`, ...), which the
document assumes exist. Lines marked `# check:` assert the results the document promises.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from helpers import assert_png


def sales_csv(rows: int = 200) -> str:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["day", "region", "units", "revenue"])
    for i in range(rows):
        w.writerow([i, ["north", "south", "east"][i % 3], i % 17, round(100 + i * 3.5 + (i % 7) * 11.25, 2)])
    return out.getvalue()


def test_stateful_code_context_dataframe_and_chart():
    from pandastack import Sandbox

    sandbox = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
    ctx = sandbox.create_code_context()
    sandbox.filesystem.write("/workspace/sales.csv", sales_csv())  # setup: the CSV the seed reads

    # State persists across cells, exactly like a notebook.
    ctx.run_code("import pandas as pd")
    ctx.run_code("df = pd.read_csv('/workspace/sales.csv')")

    # A DataFrame comes back as an HTML table — no stdout parsing.
    ex = ctx.run_code("df.describe()")
    print(ex.results[0].html)        # "<table>...</table>"
    assert ex.error is None, ex.error  # check:
    assert "<table" in ex.results[0].html and "revenue" in ex.results[0].html  # check:

    # A chart comes back as a base64 PNG — no save-to-disk, no second download.
    ex = ctx.run_code("""
import matplotlib.pyplot as plt
df['revenue'].plot()
plt.show()
""")
    png_b64 = ex.png                 # ready to send to the model or render
    assert ex.error is None, ex.error  # check:
    assert_png(png_b64)  # check:

    ctx.close()        # or: with sandbox.create_code_context() as ctx: ...
    with sandbox.create_code_context() as ctx:  # check: the other form the seed names
        assert ctx.run_code("6 * 7").text == "42"
    sandbox.kill()


def test_one_shot_exec():
    from pandastack import Sandbox

    sandbox = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
    result = sandbox.exec('python -c "print(2 + 2)"', timeout_seconds=30)
    print(result.stdout)  # "4\n"
    assert result.stdout == "4\n" and result.exit_code == 0, result  # check:
    sandbox.kill()


def test_run_python_code_and_shell():
    from pandastack import Sandbox

    sandbox = Sandbox.create(template="code-interpreter", ttl_seconds=3600)

    out = sandbox.run_code("""
x = 42
y = x * 2
print(x, y)
""", language="python")
    print(out.stdout)  # "42 84\n"
    assert out.stdout == "42 84\n" and out.exit_code == 0, out  # check:

    out = sandbox.run_code("python --version", language="shell")
    print(out.stdout)
    assert out.stdout.startswith("Python 3."), out  # check:


@pytest.fixture
def data_csv(tmp_path, monkeypatch):
    """setup: ./data.csv in the working directory, as the seed's upload snippets expect."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.csv").write_text(sales_csv(500))
    return tmp_path / "data.csv"


def test_file_uploads(data_csv):
    from pandastack import Sandbox

    sandbox = Sandbox.create(template="code-interpreter", ttl_seconds=3600)

    sandbox.filesystem.write("/workspace/data.csv", open("./data.csv", "r").read())
    result = sandbox.run_code("""
import pandas as pd
df = pd.read_csv('/workspace/data.csv')
print(df.describe())
""", language="python")
    print(result.stdout)
    assert result.exit_code == 0, result.stderr  # check:
    assert "count" in result.stdout and "500.0" in result.stdout and "revenue" in result.stdout  # check:


def test_upload_and_download_helpers(data_csv, tmp_path):
    from pandastack import Sandbox

    sandbox = Sandbox.create(template="code-interpreter", ttl_seconds=3600)

    sandbox.filesystem.upload("./data.csv", "/workspace/data.csv")
    made = sandbox.run_code(  # setup: the result file the seed downloads
        "import pandas as pd; pd.read_csv('/workspace/data.csv').groupby('region').sum().to_csv('/workspace/result.csv')"
    )
    assert made.exit_code == 0, made.stderr
    sandbox.filesystem.download("/workspace/result.csv", "./result.csv")

    result = (tmp_path / "result.csv").read_text()  # check: the aggregate of what was uploaded
    rows = list(csv.DictReader(io.StringIO(data_csv.read_text())))
    north = sum(int(r["units"]) for r in rows if r["region"] == "north")
    assert result.startswith("region,"), result[:200]
    assert any(line.startswith("north,") and f",{north}," in line for line in result.splitlines()), result


def test_persistence_set_ttl_download_kill(tmp_path, monkeypatch):
    from pandastack import NotFoundError, Sandbox

    monkeypatch.chdir(tmp_path)
    sandbox = Sandbox.create(template="code-interpreter", ttl_seconds=3600)
    notebook = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    sandbox.filesystem.write("/workspace/notebook.ipynb", json.dumps(notebook))  # setup:

    sandbox.set_ttl(7200)
    assert sandbox.lifecycle()["ttl_seconds"] == 7200  # check:
    sandbox.filesystem.download("/workspace/notebook.ipynb", "./notebook.ipynb")
    sandbox.kill()

    assert json.loads((tmp_path / "notebook.ipynb").read_text()) == notebook  # check:
    with pytest.raises(NotFoundError):  # check: kill removed it
        Sandbox.get(sandbox.id)
