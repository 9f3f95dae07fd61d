#!/usr/bin/env python3
"""A short tour of PandaStack through the published Python SDK (pandastack==0.10.0): a
code-interpreter sandbox, a persistent kernel with a DataFrame and a chart, a one-shot exec,
an upload and a download, a server inside reached through the port proxy, then kill. Runs against $PANDASTACK_API with $PANDASTACK_API_KEY.

    source /var/lib/pandastack/admin.env && python3 scripts/demo.py
"""

from __future__ import annotations

import base64
import os
import sys
import tempfile
import time
from pathlib import Path

from pandastack import Sandbox


def step(text: str) -> None:
    print(f"\n-> {text}", flush=True)


def main() -> int:
    if not os.environ.get("PANDASTACK_API_KEY"):
        print("set PANDASTACK_API and PANDASTACK_API_KEY first (source DATA_DIR/admin.env)", file=sys.stderr)
        return 2
    print(f"PandaStack demo against {os.environ.get('PANDASTACK_API')}")

    step('Sandbox.create(template="code-interpreter", ttl_seconds=600)')
    start = time.perf_counter()
    sandbox = Sandbox.create(template="code-interpreter", ttl_seconds=600)
    print(f"   sandbox {sandbox.id} is {sandbox.status} ({(time.perf_counter() - start) * 1000:.0f} ms)")
    try:
        step("upload a CSV to /workspace/sales.csv")
        rows = ["month,revenue"] + [f"{m},{1000 + 150 * m + (m % 3) * 90}" for m in range(1, 13)]
        sandbox.filesystem.write("/workspace/sales.csv", "\n".join(rows) + "\n")
        print(f"   {len(rows) - 1} rows written")

        step("a code context: the DataFrame stays alive between calls")
        ctx = sandbox.create_code_context()
        ctx.run_code("import pandas as pd; df = pd.read_csv('/workspace/sales.csv')")
        ex = ctx.run_code("int(df['revenue'].sum())")
        print(f"   total revenue: {ex.text}")
        ex = ctx.run_code("df.describe()")
        html = ex.results[0].html or ""
        print(f"   df.describe() came back as HTML: {html.count('<tr>')} table rows")

        step("a matplotlib chart comes back as a base64 PNG")
        ex = ctx.run_code("import matplotlib.pyplot as plt\ndf.plot(x='month', y='revenue')\nplt.show()")
        png = base64.b64decode(ex.png or "")
        out = Path(tempfile.gettempdir()) / "pandastack-demo-chart.png"
        out.write_bytes(png)
        is_png = png.startswith(b"\x89PNG\r\n\x1a\n")
        print(f"   {len(png)} bytes, PNG signature ok: {is_png}; saved to {out}")

        step('exec: python -c "print(2 + 2)"')
        result = sandbox.exec('python -c "print(2 + 2)"', timeout_seconds=30)
        print(f"   stdout {result.stdout!r}, exit {result.exit_code}, {result.duration_ms} ms inside")

        step("upload a local file, transform it in the sandbox, download the result")
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "words.txt"
            local.write_text("panda\nsandbox\nkernel\n")
            sandbox.filesystem.upload(local, "/workspace/words.txt")
            sandbox.exec("tr a-z A-Z < /workspace/words.txt > /workspace/WORDS.txt")
            back = Path(tmp) / "WORDS.txt"
            sandbox.filesystem.download("/workspace/WORDS.txt", back)
            print(f"   downloaded: {back.read_text().split()}")

        if sandbox.guest_ip:
            step("a web server inside, reached through the authenticated port proxy")
            sandbox.exec("mkdir -p /srv && echo 'hello from the sandbox' > /srv/index.html")
            sandbox.exec("setsid python3 -m http.server 8000 --directory /srv > /dev/null 2>&1 < /dev/null &")
            import requests

            url = f"{os.environ['PANDASTACK_API']}/v1/sandboxes/{sandbox.id}/proxy/8000/"
            headers = {"Authorization": f"Bearer {os.environ['PANDASTACK_API_KEY']}"}
            body = ""
            for _ in range(50):
                try:
                    r = requests.get(url, headers=headers, timeout=5)
                    if r.status_code == 200:
                        body = r.text.strip()
                        break
                except requests.RequestException:
                    pass
                time.sleep(0.2)
            print(f"   guest_ip {sandbox.guest_ip}, GET {url} -> {body!r}")
    finally:
        step("sandbox.kill()")
        sandbox.kill()
        print("   done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
