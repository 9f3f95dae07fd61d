"""Deletes every sandbox and database (and every template the workspace built) of the given
workspaces through a PandaStack server's REST API.

Used by scripts/test.sh's exit trap (stdlib only, so it runs even when the test venv is
missing) and by the pytest harness. Keys come from --keys (one per line) and --admin-env
(the `export PANDASTACK_API_KEY=...` file a fresh server writes).

    python3 tests/e2e/sweep.py --url http://127.0.0.1:PORT --keys FILE --admin-env FILE
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path


def admin_key(admin_env: Path) -> str | None:
    """The key in an admin.env file, or None when the file is missing."""
    try:
        text = admin_env.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("export PANDASTACK_API_KEY="):
            return line.split("=", 1)[1].strip()
    return None


def _call(url: str, key: str, method: str, path: str, timeout: float) -> object:
    req = urllib.request.Request(url + path, method=method, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read()
    return json.loads(body) if body else None


def sweep(url: str, keys: list[str], timeout: float = 60.0) -> list[str]:
    """Deletes all sandboxes, databases and built templates visible to each key; returns the
    ids of sandboxes and databases it could not delete."""
    failed: list[str] = []
    for key in dict.fromkeys(k for k in keys if k):
        for kind, one in (("sandboxes", "sandbox"), ("databases", "database")):
            try:
                listed = _call(url, key, "GET", f"/v1/{kind}", timeout)
            except (urllib.error.URLError, OSError, ValueError) as e:
                print(f"sweep: listing {kind} failed: {e}", file=sys.stderr)
                continue
            items = listed.get("items", []) if isinstance(listed, dict) else listed or []
            for it in items:
                try:
                    _call(url, key, "DELETE", f"/v1/{kind}/{it['id']}", timeout)
                    print(f"sweep: deleted {one} {it['id']}")
                except urllib.error.HTTPError as e:
                    if e.code != 404:
                        failed.append(it["id"])
                        print(f"sweep: deleting {it['id']} failed: HTTP {e.code}", file=sys.stderr)
                except (urllib.error.URLError, OSError) as e:
                    failed.append(it["id"])
                    print(f"sweep: deleting {it['id']} failed: {e}", file=sys.stderr)
        sweep_templates(url, key, timeout)
    return failed


def sweep_templates(url: str, key: str, timeout: float) -> None:
    """Deletes the templates a workspace built (the built-ins are global and stay)."""
    try:
        templates = _call(url, key, "GET", "/v1/templates", timeout) or []
    except (urllib.error.URLError, OSError, ValueError) as e:
        print(f"sweep: listing templates failed: {e}", file=sys.stderr)
        return
    for t in templates:
        if t.get("is_global", True):
            continue
        try:
            _call(url, key, "DELETE", f"/v1/templates/{t['name']}", timeout)
            print(f"sweep: deleted template {t['name']}")
        except (urllib.error.URLError, OSError) as e:
            print(f"sweep: deleting template {t['name']} failed: {e}", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--keys", type=Path)
    ap.add_argument("--admin-env", type=Path)
    a = ap.parse_args()
    keys = []
    if a.admin_env:
        keys.append(admin_key(a.admin_env) or "")
    if a.keys and a.keys.exists():
        keys += [line.strip() for line in a.keys.read_text().splitlines()]
    return 1 if sweep(a.url.rstrip("/"), keys) else 0


if __name__ == "__main__":
    sys.exit(main())
