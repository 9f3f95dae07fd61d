#!/usr/bin/env bash
# Builds the release `pandastack` binary and the static guest daemon and puts both, with the
# kernel driver, into one directory (default ./dist; the server finds the guest beside itself).
#   scripts/build.sh [OUT_DIR]
# Honours CARGO_TARGET_DIR (CI caches it under the data dir).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
target=${CARGO_TARGET_DIR:-target}
cargo build --release --locked -p pandastack
RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --locked -p pandastack-guest --target x86_64-unknown-linux-gnu
mkdir -p "$out"
install -m 0755 "$target/release/pandastack" "$out/pandastack.new" && mv -f "$out/pandastack.new" "$out/pandastack"
install -m 0755 "$target/x86_64-unknown-linux-gnu/release/pandastack-guest" "$out/pandastack-guest.new" && mv -f "$out/pandastack-guest.new" "$out/pandastack-guest"
install -m 0644 crates/guest/kernel.py "$out/kernel.py"
echo "build: $(realpath "$out")/pandastack"
