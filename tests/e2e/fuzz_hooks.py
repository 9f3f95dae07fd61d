"""Schemathesis hooks of the fuzz run (tests/e2e/test_openapi.py), loaded through
SCHEMATHESIS_HOOKS. One `before_call` hook, applied to every request of every phase right before
it is sent (schemathesis then re-checks whether the case is still valid or invalid, so its checks
judge what was actually sent). It bounds the run's cost and time, not its findings:

- a create of `code-interpreter` (named, or the default when neither template nor snapshot is
  given; the fuzzer learns the name from replies) asks for `base` instead, so the run's dozens
  of sandboxes and forks cost ~15 MiB each, not ~110 (the rest of the e2e suite drives
  `code-interpreter`);
- a command or cell whose timeout is absent, 0 (no limit) or longer than 5 s gets 5 s: a
  generated command line can wait forever (`x &` keeps its output open), and a streaming exec
  keeps its connection alive with pings, so no request timeout would end it;
- a log read asks for `follow=false`: a followed log streams until its sandbox is gone;
- a database create, clone or update asks for the `1g` tier (a valid `size` or `memory_mb` of
  a larger tier becomes `1g` / 1024) and at most the default 5120 MiB of storage, so the run's
  PostgreSQL clusters stay small (test_databases.py drives the tiers and growth).

Values the description forbids (the negative cases) are left as generated; no response is
touched and no failure is filtered.

And one check, `a_503_is_the_host_at_capacity`: the run's config lets any operation answer 503,
because the fuzzer's own sandboxes and forks fill the host's memory budget (issue 8's admission:
503 with Retry-After, described for every operation as starts include implicit wakes), but a 503
passes only as that refusal; any other 503 (a guest that cannot be reached) is a failure."""

from __future__ import annotations

import schemathesis

COMMAND_TIMEOUT_S = 5
DATABASE_STORAGE_MB = 5120  # the default storage of a database
DATABASE_TIERS = {"1g": 1024, "4g": 4096, "16g": 16384}  # the description's sizes and memory_mb
MAX_TIMEOUT_S = 30 * 24 * 3600  # the description's maximum of timeout_seconds


def _too_long(value, bound: int, maximum: int) -> bool:
    """True for a timeout that is absent, or allowed by the description but 0 or above `bound`."""
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        return False
    return value == 0 or bound < value <= maximum


@schemathesis.hook
def before_call(context, case, kwargs) -> None:
    method, path = case.method.upper(), case.operation.path
    body = case.body if isinstance(case.body, dict) else None
    if method == "POST" and path == "/v1/sandboxes":
        if body is None and not isinstance(case.body, (list, str, bytes, int, float, bool)):
            case.body = {"template": "base"}  # no body at all
        elif body is not None and body.get("from_snapshot") is None and body.get("template") in (None, "code-interpreter"):
            body["template"] = "base"
    elif method == "POST" and path in ("/v1/sandboxes/{id}/exec", "/v1/sandboxes/{id}/exec/stream"):
        if body is not None and _too_long(body.get("timeout_seconds"), COMMAND_TIMEOUT_S, MAX_TIMEOUT_S):
            body["timeout_seconds"] = COMMAND_TIMEOUT_S
    elif method == "POST" and path == "/v1/sandboxes/{id}/repl/sessions/{ctx}/run":
        if body is not None and _too_long(body.get("timeout_ms"), COMMAND_TIMEOUT_S * 1000, MAX_TIMEOUT_S * 1000):
            body["timeout_ms"] = COMMAND_TIMEOUT_S * 1000
    elif (method, path) in (("POST", "/v1/databases"), ("POST", "/v1/databases/{id}/clone"),
                            ("PATCH", "/v1/databases/{id}")):
        if body is not None:
            _small_database(body)
    elif method == "GET" and path == "/v1/sandboxes/{id}/logs":
        if isinstance(case.query, dict) and case.query.get("follow") in ("true", "1"):
            case.query["follow"] = "false"


def _small_database(body: dict) -> None:
    """The `1g` tier and at most the default storage, for values the description allows."""
    size = body.get("size")
    if isinstance(size, str) and size.lower() in DATABASE_TIERS:
        body["size"] = "1g"
    if body.get("memory_mb") in DATABASE_TIERS.values() and not isinstance(body.get("memory_mb"), bool):
        body["memory_mb"] = 1024
    storage = body.get("storage_mb")
    if (isinstance(storage, (int, float)) and not isinstance(storage, bool) and storage == int(storage)
            and DATABASE_STORAGE_MB < storage <= 1048576):
        body["storage_mb"] = DATABASE_STORAGE_MB


@schemathesis.check
def a_503_is_the_host_at_capacity(ctx, response, case) -> None:
    """A 503 must be the admission's refusal: `Retry-After` and a message saying so."""
    if response.status_code != 503:
        return None
    try:
        message = response.json().get("error", "")
    except (ValueError, AttributeError):
        message = ""
    has_retry_after = any(name.lower() == "retry-after" for name in response.headers)
    if not has_retry_after or "host at capacity" not in message:
        raise AssertionError(f"503 other than the host at capacity: {response.text[:300]!r}")
    return None
