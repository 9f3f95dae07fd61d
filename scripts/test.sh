#!/usr/bin/env bash
# Runs every test of PandaStack on this host (root, Debian bookworm): setup, release build,
# template bakes, fmt + clippy + cargo test, then the end-to-end suites that drive the real
# server binary and real gVisor sandboxes through the published SDKs (PyPI pandastack==0.10.0,
# npm @pandastack/sdk@0.9.0).
#
#   scripts/test.sh
#
# Everything heavy is cached under PANDASTACK_TEST_DATA_DIR (default /var/lib/pandastack-ci),
# outside the git tree, so a second run on the same machine is warm: the cargo target dir
# (CARGO_TARGET_DIR), baked templates (the server data dir "$DATA/server"), the Python venv and
# the npm cache. Each phase prints its wall time; a failed phase does not stop independent
# later ones, and the script exits non-zero if any phase failed. On exit, a trap stops the
# test servers and destroys every sandbox they left, touching only processes whose command line
# names this data dir (other PandaStack servers on the machine are left alone).
#
# Every background process gets stdin from /dev/null and stdout/stderr in a log file under
# "$DATA/logs/": a process that inherited the caller's stdout would keep CI waiting forever.
set -uo pipefail
exec </dev/null
cd "$(dirname "$0")/.."
ROOT=$PWD

DATA=${PANDASTACK_TEST_DATA_DIR:-/var/lib/pandastack-ci}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$DATA/target}
DIST=$DATA/dist
SERVER_DATA=$DATA/server
VENV=$DATA/venv
RUN=$DATA/run
LOGS=$DATA/logs/$(date -u +%Y%m%dT%H%M%SZ)

mkdir -p "$DATA" "$LOGS"
# One run per data dir at a time: a second one would share (and clean up) the first's servers.
exec 9>"$DATA/.test.lock"
if ! flock -n 9; then
  echo "test.sh: another run is using $DATA; waiting for it (set PANDASTACK_TEST_DATA_DIR to run beside it)"
  flock -w 2400 9 || { echo "test.sh: gave up waiting for $DATA" >&2; exit 1; }
fi
rm -rf "$RUN" && mkdir -p "$RUN"
export PANDASTACK_TEST_BIN=$DIST/pandastack
export PANDASTACK_TEST_SERVER_DATA=$SERVER_DATA
export PANDASTACK_TEST_RUN_DIR=$RUN
export PANDASTACK_TEST_LOG_DIR=$LOGS
export ROOT DATA DIST SERVER_DATA VENV RUN LOGS

T0=$(date +%s)
FAILED=()
SUMMARY=()

# phase NAME TIMEOUT CMD...: runs CMD under `timeout`, prints and records its wall time.
phase() {
  local name=$1 limit=$2 start rc
  shift 2
  echo
  echo "=== phase $name (limit $limit) ==="
  start=$(date +%s)
  # `bash -c` so that CMD may be one of the exported functions below.
  # fd 9 (the run lock) stays with this shell: a process a phase leaks must not hold it.
  timeout --kill-after=30 "$limit" bash -c '"$@"' phase "$@" 9>&-
  rc=$?
  local took=$(($(date +%s) - start))
  if [ $rc -eq 0 ]; then
    SUMMARY+=("$(printf '%-12s %5ss  ok' "$name" "$took")")
  else
    [ $rc -eq 124 ] && echo "phase $name: timed out after $limit"
    SUMMARY+=("$(printf '%-12s %5ss  FAILED (exit %s)' "$name" "$took" "$rc")")
    FAILED+=("$name")
  fi
  echo "=== phase $name: exit $rc in ${took}s ==="
  return $rc
}

skip() {
  SUMMARY+=("$(printf '%-12s %5s   SKIPPED (%s)' "$1" - "$2")")
  FAILED+=("$1")
  echo "=== phase $1: not run: $2 ==="
}

# PIDs of pandastack / runsc processes whose command line names directory $1.
scoped_pids() {
  local dir=$1 p cmd exe
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = "$$" ] && continue
    cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
    case "$cmd " in *"$dir/"* | *"$dir "* | *"=$dir "*) ;; *) continue ;; esac
    exe=${cmd%% *}
    exe=${exe##*/}
    case "$exe" in pandastack | runsc | runsc-*) echo "${p#/proc/}" ;; esac
  done
}

# PIDs of processes whose root directory is $1 (guest daemons left by the chroot tests).
rooted_pids() {
  local dir p
  dir=$(realpath -m "$1")
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$dir" ] && echo "${p#/proc/}"
  done
}

# PIDs of PostgreSQL postmasters whose data dir is under $1 (database clusters of test servers:
# they outlive a server that was killed).
postgres_pids() {
  local dir=$1 p cmd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    case "$cmd" in */bin/postgres\ -D\ "$dir"/*) echo "${p#/proc/}" ;; esac
  done
}

# Mount points under $1 (database storage of test servers), deepest first.
mounts_under() {
  awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

kill_pids() {
  local sig=$1 pids
  shift
  pids=$(echo "$@" | xargs)
  [ -n "$pids" ] && kill "-$sig" $pids 2>/dev/null
  return 0
}

# Server for the TypeScript suite (pytest starts and stops its own in tests/e2e/conftest.py).
# Whichever test server is up writes its pid and URL to "$RUN/server.pid" and "$RUN/server.url".
start_ts_server() {
  local port url
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  url=http://127.0.0.1:$port
  setsid "$PANDASTACK_TEST_BIN" server --listen "127.0.0.1:$port" --data-dir "$SERVER_DATA" \
    </dev/null >>"$LOGS/server-ts.log" 2>&1 &
  TS_SERVER_PID=$!
  echo "$TS_SERVER_PID" >"$RUN/server.pid"
  echo "$url" >"$RUN/server.url"
  for _ in $(seq 1 120); do
    if curl -fsS -m 2 "$url/health" >/dev/null 2>&1; then
      export PANDASTACK_API=$url
      export PANDASTACK_API_KEY
      PANDASTACK_API_KEY=$(sed -n 's/^export PANDASTACK_API_KEY=//p' "$SERVER_DATA/admin.env")
      echo "ts server: $url (pid $TS_SERVER_PID, log $LOGS/server-ts.log)"
      return 0
    fi
    kill -0 "$TS_SERVER_PID" 2>/dev/null || break
    sleep 0.5
  done
  echo "ts server did not come up; last log lines:" >&2
  tail -20 "$LOGS/server-ts.log" >&2
  return 1
}

stop_ts_server() {
  [ -n "${TS_SERVER_PID:-}" ] || return 0
  sweep_sandboxes
  kill -TERM "$TS_SERVER_PID" 2>/dev/null
  for _ in $(seq 1 30); do kill -0 "$TS_SERVER_PID" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$TS_SERVER_PID" 2>/dev/null
  wait "$TS_SERVER_PID" 2>/dev/null
  TS_SERVER_PID=
}

# Deletes, through the API of whichever test server is up, every sandbox of every workspace
# whose key the tests recorded.
sweep_sandboxes() {
  [ -s "$RUN/server.url" ] || return 0
  timeout 300 python3 "$ROOT/tests/e2e/sweep.py" --url "$(cat "$RUN/server.url")" \
    --keys "$RUN/keys" --admin-env "$SERVER_DATA/admin.env" || true
}

# Stops what a phase left running under $DATA: a server pytest left behind (killed by a
# timeout) is swept first, then every pandastack/runsc process and runsc container of this run.
stop_leftovers() {
  local left root dir c
  if [ -s "$RUN/server.pid" ] && kill -0 "$(cat "$RUN/server.pid")" 2>/dev/null; then
    sweep_sandboxes
  fi
  # Servers of this run (the main one, and any a test started on its own data dir under
  # $DATA), their shims and their runsc processes; nothing outside $DATA.
  left=$(scoped_pids "$DATA")
  if [ -n "$left" ]; then
    echo "cleanup: stopping leftover processes under $DATA: $(echo $left)"
    kill_pids TERM $left
    sleep 2
    kill_pids KILL $(scoped_pids "$DATA")
  fi
  for root in "$DATA"/*/runsc; do
    [ -d "$root" ] && command -v runsc >/dev/null || continue
    dir=$(dirname "$root")
    for c in $(runsc --root="$root" list -quiet 2>/dev/null); do
      echo "cleanup: deleting leftover runsc container $c of $dir"
      timeout 30 runsc --root="$root" delete -force "$c" >/dev/null 2>&1
      # With its container gone the next server start cannot tell it from a live orphan.
      case "$c" in ps-*) rm -rf "${dir:?}/instances/$c" ;; esac
    done
  done
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  echo
  echo "=== cleanup ==="
  stop_leftovers
  kill_pids KILL $(rooted_pids "$DATA/ci-rootfs/current")
  # Database clusters and their storage mounts (a mount's loop device goes with it).
  left=$(postgres_pids "$DATA")
  if [ -n "$left" ]; then
    echo "cleanup: stopping leftover database clusters under $DATA: $(echo $left)"
    kill_pids QUIT $left
    sleep 2
    kill_pids KILL $(postgres_pids "$DATA")
  fi
  for m in $(mounts_under "$DATA"); do
    echo "cleanup: unmounting $m"
    umount "$m" 2>/dev/null || umount -l "$m"
  done
  stop_postgres
  stop_garage
  echo "cleanup: done"
  print_summary
  if [ ${#FAILED[@]} -gt 0 ] || [ $rc -ne 0 ]; then
    echo "test.sh: FAILED (${FAILED[*]:-exit $rc}); logs in $LOGS"
    exit 1
  fi
  echo "test.sh: all phases passed; logs in $LOGS"
  exit 0
}
trap cleanup EXIT
trap 'echo "test.sh: interrupted"; FAILED+=(interrupted); exit 1' INT TERM

print_summary() {
  echo
  echo "=== summary (total $(($(date +%s) - T0))s) ==="
  printf '%s\n' "${SUMMARY[@]}"
}

# A previous run killed before its trap ran may have left servers under $DATA.
stale=$(scoped_pids "$DATA")
if [ -n "$stale" ]; then
  echo "test.sh: stopping processes a previous run left under $DATA: $(echo $stale)"
  kill_pids KILL $stale
fi

# A private copy of the baked code-interpreter rootfs for the guest's chroot kernel tests
# (they write into it; PANDASTACK_CI_ROOTFS points at it), refreshed when the template is
# re-baked.
link_guest_ci_rootfs() {
  local dir=$SERVER_DATA/templates/code-interpreter build src copy
  # `current` names the current build (a file holding its id; a link in older stores).
  if [ -L "$dir/current" ]; then build=$(basename "$(realpath "$dir/current")"); else build=$(tr -d '[:space:]' <"$dir/current"); fi
  src=$dir/$build/rootfs
  [ -x "$src/usr/bin/python3" ] || { echo "no baked code-interpreter rootfs at $src" >&2; return 1; }
  copy=$DATA/ci-rootfs/$build
  if [ ! -x "$copy/usr/bin/python3" ]; then
    rm -rf "$DATA/ci-rootfs" && mkdir -p "$DATA/ci-rootfs"
    cp -a "$src" "$copy.partial" && mv "$copy.partial" "$copy" || return 1
  fi
  ln -sfn "$copy" "$DATA/ci-rootfs/current"
  echo "guest kernel tests: rootfs $copy"
}

# A throwaway PostgreSQL cluster for the store's tests and the cluster tests (as the postgres
# user: initdb refuses root; fsync off: nothing here must survive a host crash), on a free
# port, in $DATA/postgres; stopped by the cleanup trap.
start_postgres() {
  local bin=/usr/lib/postgresql/15/bin dir=$DATA/postgres port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  stop_postgres # one a killed earlier run left
  mkdir -p "$dir" && chown postgres: "$dir"
  runuser -u postgres -- "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$LOGS/postgres-init.log" 2>&1 || return 1
  runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=300" start >/dev/null || return 1
  echo "postgres://postgres@127.0.0.1:$port/postgres" >"$RUN/postgres.url"
  echo "postgres: $(cat "$RUN/postgres.url")"
}

stop_postgres() {
  local dir=$DATA/postgres
  [ -d "$dir/data" ] || return 0
  runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$dir/data" -m immediate -w stop >/dev/null 2>&1
  rm -rf "$dir"
}

# Garage 2.5.0, a real S3-compatible object store, for the cluster tests' image storage
# (issue 12): built once with `cargo install` (~8-15 min cold) into $DATA/garage (cached), in
# the background from the start of the run; its exit code lands in $RUN/garage-install.rc.
GARAGE=$DATA/garage/bin/garage
install_garage() {
  if [ ! -x "$GARAGE" ]; then
    CARGO_TARGET_DIR=$DATA/garage-build cargo install garage --locked --version 2.5.0 --root "$DATA/garage" || return 1
    rm -rf "$DATA/garage-build"
  fi
}

# A throwaway single-node Garage with one bucket and key (notes/cluster-parts.md) on free
# ports, in $DATA/garage-run; its settings for the tests land in $RUN/garage.env. Stopped by
# the cleanup trap.
start_garage() {
  local dir=$DATA/garage-run i s3 rpc admin key secret
  while [ ! -f "$RUN/garage-install.rc" ]; do sleep 2; done
  [ "$(cat "$RUN/garage-install.rc")" = 0 ] || { cat "$LOGS/garage-install.log"; return 1; }
  stop_garage
  mkdir -p "$dir"
  read -r s3 rpc admin < <(python3 -c 'import socket
ss=[socket.socket() for _ in range(3)]
[s.bind(("127.0.0.1", 0)) for s in ss]
print(*[s.getsockname()[1] for s in ss])')
  cat >"$dir/garage.toml" <<TOML
metadata_dir = "$dir/meta"
data_dir = "$dir/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$rpc"
rpc_public_addr = "127.0.0.1:$rpc"
rpc_secret = "$(openssl rand -hex 32)"
[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$s3"
[admin]
api_bind_addr = "127.0.0.1:$admin"
TOML
  key=GK$(openssl rand -hex 12)
  secret=$(openssl rand -hex 32)
  GARAGE_DEFAULT_ACCESS_KEY=$key GARAGE_DEFAULT_SECRET_KEY=$secret GARAGE_DEFAULT_BUCKET=pandastack \
    setsid "$GARAGE" -c "$dir/garage.toml" server --single-node --default-bucket >"$LOGS/garage.log" 2>&1 &
  echo $! >"$dir/pid"
  for i in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$admin/health" >/dev/null && break
    sleep 0.2
  done
  curl -sf "http://127.0.0.1:$admin/health" >/dev/null || { tail -20 "$LOGS/garage.log"; return 1; }
  cat >"$RUN/garage.env" <<ENV
PANDASTACK_TEST_S3_ENDPOINT=http://127.0.0.1:$s3
PANDASTACK_TEST_S3_BUCKET=pandastack
PANDASTACK_TEST_S3_KEY_ID=$key
PANDASTACK_TEST_S3_SECRET=$secret
ENV
  echo "garage: http://127.0.0.1:$s3 (bucket pandastack)"
}

stop_garage() {
  local dir=$DATA/garage-run
  [ -s "$dir/pid" ] && kill -KILL "$(cat "$dir/pid")" 2>/dev/null
  rm -rf "$dir"
}

cargo_test() {
  local started=$SECONDS rc p
  # Into a file, not a pipe: a guest daemon a test leaks would hold a pipe open forever.
  cargo test --workspace --no-fail-fast >"$LOGS/cargo-test.log" 2>&1
  rc=$?
  cat "$LOGS/cargo-test.log"
  # Guest daemons the chroot tests left running (only ones started during this phase).
  for p in $(rooted_pids "$DATA/ci-rootfs/current"); do
    [ "$(ps -o etimes= -p "$p" 2>/dev/null | tr -d ' ')" -le $((SECONDS - started + 1)) ] 2>/dev/null &&
      echo "cargo test: killing leaked guest pid $p" && kill -KILL "$p" 2>/dev/null
  done
  # The kernel tests print SKIPPED when they find no rootfs; this script provides one, so a
  # skip here means the wiring broke and the tests proved nothing.
  if grep -q '^SKIPPED:' "$LOGS/cargo-test.log"; then
    echo "cargo test: some tests were skipped:" && grep '^SKIPPED:' "$LOGS/cargo-test.log" | sort | uniq -c
    return 1
  fi
  return "$rc"
}

make_venv() {
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" || return 1
  "$VENV/bin/pip" install -q --disable-pip-version-check \
    'pandastack==0.10.0' pytest pytest-timeout requests prometheus_client 'mcp==2.3.0' \
    'schemathesis==4.32.5' 'openapi-spec-validator==0.9.0' 'boto3==1.40.61'
}

npm_install() {
  (cd tests/ts && npm ci --no-audit --no-fund --cache "$DATA/npm-cache" --loglevel=error)
}

pytest_e2e() {
  # --basetemp under the run dir: other pytest runs of the same user on this host prune the
  # shared /tmp/pytest-of-<user>/ directories.
  "$VENV/bin/python" -m pytest tests/e2e --timeout=300 -v -rfEs --basetemp="$RUN/pytest" \
    --junitxml="$LOGS/pytest.xml" -p no:cacheprovider
}

node_tests() {
  start_ts_server || return 1
  echo "$PANDASTACK_API_KEY" >>"$RUN/keys"
  node --test --test-timeout=300000 tests/ts/
  local rc=$?
  stop_ts_server
  return $rc
}

export -f scoped_pids rooted_pids postgres_pids mounts_under kill_pids start_ts_server stop_ts_server sweep_sandboxes \
  link_guest_ci_rootfs cargo_test make_venv npm_install pytest_e2e node_tests start_postgres stop_postgres \
  install_garage start_garage stop_garage
export GARAGE

phase setup 15m bash scripts/setup.sh || exit 1
# In the background while the other phases run (it only costs time when Garage is not cached).
(install_garage; echo $? >"$RUN/garage-install.rc") >"$LOGS/garage-install.log" 2>&1 9>&- &
if phase postgres 2m start_postgres; then
  export PANDASTACK_TEST_POSTGRES_URL
  PANDASTACK_TEST_POSTGRES_URL=$(cat "$RUN/postgres.url")
  export PANDASTACK_REQUIRE_POSTGRES=1
fi
phase build 30m bash scripts/build.sh "$DIST" || exit 1
phase bake 20m "$DIST/pandastack" template-bake base code-interpreter --data-dir "$SERVER_DATA"
baked=$?
phase fmt 5m cargo fmt --all -- --check
phase layout 1m python3 scripts/check_layout.py
phase clippy 20m cargo clippy --workspace --all-targets -- -D warnings
if [ $baked -eq 0 ] && phase ci-rootfs 10m link_guest_ci_rootfs; then
  # The guest's kernel tests chroot into this copy; sandbox tests missing a prerequisite fail.
  export PANDASTACK_CI_ROOTFS=$DATA/ci-rootfs/current
  export PANDASTACK_REQUIRE_SANDBOX_TESTS=1
  # A real mmdebstrap bake of `base` into a scratch store (crates/templates/tests/bake_real.rs).
  export PANDASTACK_REAL_BAKE_TESTS=base
  # The gVisor engine's integration test (crates/gvisor/tests/engine.rs) boots the baked base
  # rootfs with the built guest and shim.
  base_dir=$SERVER_DATA/templates/base
  if [ -L "$base_dir/current" ]; then base_build=$(basename "$(realpath "$base_dir/current")"); else base_build=$(tr -d '[:space:]' <"$base_dir/current"); fi
  export PANDASTACK_TEST_ROOTFS=$base_dir/$base_build/rootfs
  export PANDASTACK_TEST_GUEST_DIR=$DIST
  export PANDASTACK_TEST_SHIM=$DIST/pandastack
  phase cargo-test 20m cargo_test
else
  skip cargo-test "no baked code-interpreter rootfs for the guest kernel tests"
fi
phase venv 10m make_venv
venv_ok=$?
phase npm 10m npm_install
npm_ok=$?
if phase garage 30m start_garage; then
  set -a
  # shellcheck disable=SC1091
  . "$RUN/garage.env"
  set +a
fi
if [ $baked -eq 0 ] && [ $venv_ok -eq 0 ]; then
  phase e2e-python 40m pytest_e2e
  # A timed-out pytest leaves its server holding the data dir the next phase needs.
  stop_leftovers
else
  skip e2e-python "needs the baked templates and the venv"
fi
if [ $baked -eq 0 ] && [ $npm_ok -eq 0 ]; then
  phase e2e-ts 15m node_tests
else
  skip e2e-ts "needs the baked templates and node_modules"
fi
