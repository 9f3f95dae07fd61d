"""Files through the SDK: a 1 GiB upload and download byte-identical while the server stays
small, binary-safe round trips, listings and stat."""

from __future__ import annotations

import hashlib
import os
import threading
import time

import pytest

GIB = 1 << 30
MIB = 1 << 20
RSS_LIMIT_KIB = 200 * 1024


class RssSampler:
    """Samples the server's VmRSS every 50 ms in a thread; keeps the peak."""

    def __init__(self, server) -> None:
        self.server = server
        self.peak_kib = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kib = max(self.peak_kib, self.server.rss_kib())
            self.samples += 1
            self._stop.wait(0.05)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def write_pattern_file(path, size: int) -> str:
    """`size` bytes that are neither compressible nor periodic; returns their sha256."""
    digest = hashlib.sha256()
    block = bytearray(os.urandom(MIB))
    with open(path, "wb") as f:
        for i in range(size // MIB):
            block[:8] = i.to_bytes(8, "little")
            digest.update(block)
            f.write(block)
    return digest.hexdigest()


def sha256_file(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * MIB):
            digest.update(chunk)
    return digest.hexdigest()


def test_one_gib_upload_and_download_are_identical_and_server_rss_stays_small(server, tmp_path):
    from pandastack import Sandbox

    src = tmp_path / "big.bin"
    want = write_pattern_file(src, GIB)
    sb = Sandbox.create(template="base")
    # requests' read timeout bounds each wait for bytes, not the whole transfer: 60 s of
    # silence is a stall, not a slow link.
    sb._client.timeout = 60.0
    idle_kib = server.rss_kib()

    with RssSampler(server) as up:
        start = time.monotonic()
        sb.filesystem.upload(src, "/workspace/big.bin")
        up_s = time.monotonic() - start
    print(f"1 GiB upload {up_s:.1f} s; server RSS idle {idle_kib // 1024} MiB, "
          f"peak {up.peak_kib // 1024} MiB over {up.samples} samples")
    assert up.samples > 5
    assert up.peak_kib < RSS_LIMIT_KIB, f"server RSS reached {up.peak_kib // 1024} MiB during the upload"
    assert sb.filesystem.stat("/workspace/big.bin").size == GIB
    inside = sb.exec("sha256sum /workspace/big.bin", timeout_seconds=120)
    assert inside.stdout.split()[0] == want, inside

    dst = tmp_path / "back.bin"
    with RssSampler(server) as down:
        start = time.monotonic()
        sb.filesystem.download("/workspace/big.bin", dst)
        down_s = time.monotonic() - start
    print(f"1 GiB download {down_s:.1f} s; server RSS peak {down.peak_kib // 1024} MiB over {down.samples} samples")
    assert dst.stat().st_size == GIB
    assert sha256_file(dst) == want
    assert down.samples > 5
    assert down.peak_kib < RSS_LIMIT_KIB, f"server RSS reached {down.peak_kib // 1024} MiB during the download"


@pytest.mark.parametrize("size", [0, 1, 4 * MIB - 1, 4 * MIB + 1, 16 * MIB + 3])
def test_binary_round_trip(size):
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    data = os.urandom(size)
    sb.filesystem.write("/workspace/blob.bin", data)
    assert sb.filesystem.read("/workspace/blob.bin") == data
    assert sb.exec("wc -c < /workspace/blob.bin").stdout.strip() == str(size)
    assert sb.exec("echo still answering").stdout == "still answering\n"


def test_listdir_stat_exists_and_overwrite():
    from pandastack import Sandbox

    sb = Sandbox.create(template="base")
    sb.filesystem.write("/workspace/a.txt", "first version, longer")
    sb.filesystem.write("/workspace/a.txt", "second")
    assert sb.filesystem.read("/workspace/a.txt") == b"second"
    assert sb.exec("mkdir -p /workspace/sub && echo hi > /workspace/sub/b.txt").exit_code == 0

    entries = {e.name: e for e in sb.filesystem.listdir("/workspace")}
    assert {"a.txt", "sub"} <= set(entries), entries
    assert entries["sub"].is_dir and not entries["a.txt"].is_dir
    assert entries["a.txt"].size == 6
    st = sb.filesystem.stat("/workspace/sub/b.txt")
    assert st.size == 3 and not st.is_dir and st.mtime > 1_600_000_000
    assert sb.filesystem.exists("/workspace/sub") and not sb.filesystem.exists("/workspace/nope")
