"""PandaStack kernel driver, started by pandastack-guest as `python3 -u kernel.py`.

Private protocol with the guest daemon, JSON lines over the driver's original stdin/stdout
(both one end of a socket pair):
  driver -> guest, once at start: {"ready": true, "ipython": bool, "python": "3.11.2"}
  guest -> driver, per run:        {"seq": n, "nonce": "<32 hex>", "code": "..."}
  driver -> guest, per run:        {"seq": n, "nonce": "<the run's>", "results": [{mime: str}],
                                    "stdout": str, "stderr": str, "error": str | null,
                                    "exit_code": 0 | 1, "duration_ms": int}

The channel is protected from user code: at start fds 0/1 are duplicated to private fds and
fds 0, 1, 2 are pointed at /dev/null, so nothing a cell (or its subprocesses) writes to fd 1
can corrupt a reply. The private fds are close-on-exec and closed in children made by
os.fork(), and the driver is not dumpable (no other process may ptrace it); the channel is a
socket, which cannot be reopened through /proc/<pid>/fd. The guest accepts a reply only with
the run's nonce, a fresh random token per run: whatever a cell writes into the channel can
never become the result of a later run. Each reply starts with a newline, so a partial line a
cell left in the channel cannot merge with it. Driver diagnostics go to a private copy of the
original stderr.

With IPython importable, cells run in an InteractiveShell whose display publisher and display
hook capture MIME bundles (display(), figures via matplotlib_inline, the last expression).
Without it (lean templates), a plain exec/eval kernel returns text/plain reprs.

SIGINT interrupts a running cell (KeyboardInterrupt becomes the cell's error, state is kept);
while idle it is ignored.
"""

import ast
import base64
import builtins
import contextlib
import io
import json
import linecache
import os
import re
import signal
import sys
import time
import traceback

# Largest stdout / stderr kept per cell, characters; the rest is dropped with a marker, so a
# reply stays far below the protocol's 16 MiB header limit.
MAX_STREAM_CHARS = 4 * 1024 * 1024
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Cell:
    """What one run collects."""

    def __init__(self):
        self.results = []
        self.error = None


class State:
    running = False
    cell = Cell()


class CappedIO(io.StringIO):
    """A StringIO that keeps at most MAX_STREAM_CHARS characters."""

    def __init__(self):
        super().__init__()
        self.kept = 0
        self.dropped = 0

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        written = len(s)
        room = MAX_STREAM_CHARS - self.kept
        if len(s) > room:
            self.dropped += len(s) - max(room, 0)
            s = s[: max(room, 0)]
        self.kept += len(s)
        super().write(s)
        return written

    def text(self):
        value = self.getvalue()
        if self.dropped:
            value += "\n[... %d characters truncated]\n" % self.dropped
        return value


def to_text(mime, value):
    """A MIME bundle value as the string the protocol carries."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, str):
        if mime.startswith("image/") and not mime.startswith("image/svg"):
            # Already base64 (IPython wraps it at 76 columns): one unbroken line.
            return "".join(value.split())
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)


def bundle(data):
    return {str(mime): to_text(mime, value) for mime, value in (data or {}).items()}


def on_sigint(signum, frame):
    if State.running:
        raise KeyboardInterrupt


DRIVER_PID = os.getpid()
PR_SET_DUMPABLE = 4


def take_channel():
    """Moves the protocol to private fds and points fds 0, 1, 2 at /dev/null."""
    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8", newline="\n")
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    diag = os.fdopen(os.dup(2), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    private = (proto_in.fileno(), proto_out.fileno())

    def drop_channel_in_child():
        # A process forked by a cell runs the cell's code, never the protocol.
        for fd in private:
            try:
                os.close(fd)
            except OSError:
                pass

    os.register_at_fork(after_in_child=drop_channel_in_child)
    return proto_in, proto_out, diag


def make_undumpable(diag):
    """No other process of the sandbox may ptrace the driver or read its memory."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")
    except (ImportError, OSError, AttributeError) as e:
        diag.write("kernel.py: cannot make the driver undumpable: %s\n" % e)
        diag.flush()


class IPythonKernel:
    """Cells run in an IPython InteractiveShell; display output is captured as MIME bundles."""

    def __init__(self):
        from IPython.core.displayhook import DisplayHook
        from IPython.core.displaypub import DisplayPublisher
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        class CapturePublisher(DisplayPublisher):
            def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
                State.cell.results.append(bundle(data))

            def clear_output(self, wait=False):
                pass

        class CaptureHook(DisplayHook):
            def write_output_prompt(self):
                pass

            def write_format_data(self, format_dict, md_dict=None):
                State.cell.results.append(bundle(format_dict))

            def finish_displayhook(self):
                pass

        class Shell(InteractiveShell):
            def _showtraceback(self, etype, evalue, stb):
                State.cell.error = ANSI.sub("", self.InteractiveTB.stb2text(stb))

        config = Config()
        config.HistoryManager.enabled = False
        self.shell = Shell.instance(
            config=config,
            colors="NoColor",
            display_pub_class=CapturePublisher,
            displayhook_class=CaptureHook,
        )

    def run(self, code):
        result = self.shell.run_cell(code, store_history=True)
        failed = result.error_before_exec or result.error_in_exec
        if failed is not None and State.cell.error is None:
            State.cell.error = "".join(traceback.format_exception_only(type(failed), failed))


class PlainKernel:
    """Fallback without IPython: exec the cell, eval its last expression, return its repr."""

    def __init__(self):
        self.ns = {"__name__": "__main__", "__builtins__": builtins}
        self.count = 0

    def run(self, code):
        self.count += 1
        filename = "<cell-%d>" % self.count
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            tree = ast.parse(code, filename=filename, mode="exec")
        except SyntaxError:
            etype, value = sys.exc_info()[:2]
            State.cell.error = "".join(traceback.format_exception_only(etype, value))
            return
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        try:
            exec(compile(tree, filename, "exec"), self.ns)
            if last is not None:
                value = eval(compile(last, filename, "eval"), self.ns)
                if value is not None:
                    self.ns["_"] = value
                    State.cell.results.append({"text/plain": repr(value)})
        except BaseException:
            etype, value, tb = sys.exc_info()
            State.cell.error = "".join(traceback.format_exception(etype, value, tb.tb_next))


def make_kernel(diag):
    try:
        import IPython  # noqa: F401
    except ImportError:
        return PlainKernel(), False
    try:
        from importlib.util import find_spec

        if os.environ.get("MPLBACKEND", "Agg") == "Agg" and find_spec("matplotlib_inline"):
            # As ipykernel does: figures then come out through display() as image/png.
            os.environ["MPLBACKEND"] = INLINE_BACKEND
        return IPythonKernel(), True
    except Exception:
        diag.write("kernel.py: IPython failed, using the plain kernel:\n" + traceback.format_exc())
        diag.flush()
        return PlainKernel(), False


def run_cell(kernel, code):
    State.cell = cell = Cell()
    out, err = CappedIO(), CappedIO()
    started = time.monotonic()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            State.running = True
            try:
                kernel.run(code)
            finally:
                State.running = False
    except KeyboardInterrupt:
        State.running = False
        if cell.error is None:
            cell.error = "KeyboardInterrupt"
    except BaseException:
        State.running = False
        if cell.error is None:
            cell.error = traceback.format_exc()
    stdout = out.text()
    results = cell.results
    if not results and stdout:
        # Product rule: a cell that printed but displayed nothing has its stdout as result.
        results = [{"text/plain": stdout.rstrip("\n")}]
    return {
        "results": results,
        "stdout": stdout,
        "stderr": err.text(),
        "error": cell.error,
        "exit_code": 1 if cell.error is not None else 0,
        "duration_ms": int((time.monotonic() - started) * 1000),
    }


def send(proto_out, message):
    proto_out.write("\n" + json.dumps(message) + "\n")
    proto_out.flush()


def main():
    signal.signal(signal.SIGINT, on_sigint)
    proto_in, proto_out, diag = take_channel()
    make_undumpable(diag)
    # Cells import from the working directory, as in Jupyter, not from this file's directory.
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        sys.path[0] = ""
    kernel, ipython = make_kernel(diag)
    send(proto_out, {"ready": True, "ipython": ipython, "python": sys.version.split()[0]})
    while True:
        try:
            line = proto_in.readline()
            if not line:
                return
            request = json.loads(line)
            reply = run_cell(kernel, request.get("code", ""))
            if os.getpid() != DRIVER_PID:
                # A child a cell forked finished the cell: it has no channel and no next run.
                os._exit(0)
            reply["seq"] = request.get("seq")
            reply["nonce"] = request.get("nonce")
            send(proto_out, reply)
        except KeyboardInterrupt:
            State.running = False
        except (ValueError, TypeError) as e:
            diag.write("kernel.py: bad request: %s\n" % e)
            diag.flush()


if __name__ == "__main__":
    main()
