#!/usr/bin/env bash
# From a fresh Debian bookworm machine (as root) to a running PandaStack server and a demo:
# installs what is missing (scripts/setup.sh), builds ./dist, bakes the base and
# code-interpreter templates (cached: instant when already baked), starts the server in the
# background, then runs scripts/demo.py through the published Python SDK.
#
#   scripts/up.sh
#
# Environment: PANDASTACK_DATA_DIR (default /var/lib/pandastack), PANDASTACK_LISTEN (default
# 127.0.0.1:7700). Running it again rebuilds and restarts the server; running sandboxes are
# re-adopted by the new process.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${PANDASTACK_DATA_DIR:-/var/lib/pandastack}
LISTEN=${PANDASTACK_LISTEN:-127.0.0.1:7700}
URL=http://$LISTEN
PIDFILE=$DATA/server.pid
LOG=$DATA/server.log

bash scripts/setup.sh
bash scripts/build.sh dist
# The CLI on PATH, as the README's commands use it.
ln -sfn "$PWD/dist/pandastack" /usr/local/bin/pandastack
mkdir -p "$DATA"
./dist/pandastack template-bake base code-interpreter --data-dir "$DATA"

if [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "up: restarting the server (pid $(cat "$PIDFILE")) with the new build"
  kill "$(cat "$PIDFILE")"
  # A graceful stop removes the warm pool and waits for teardowns in flight (seconds).
  for _ in $(seq 1 450); do kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break; sleep 0.2; done
fi
if curl -fsS -m 2 "$URL/health" >/dev/null 2>&1; then
  echo "up: something else already answers on $LISTEN; set PANDASTACK_LISTEN to another address" >&2
  exit 1
fi
setsid nohup ./dist/pandastack server --listen "$LISTEN" --data-dir "$DATA" </dev/null >>"$LOG" 2>&1 &
echo $! >"$PIDFILE"
for _ in $(seq 1 150); do
  curl -fsS -m 2 "$URL/health" >/dev/null 2>&1 && break
  if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "up: the server exited; see $LOG:" >&2
    tail -20 "$LOG" >&2
    exit 1
  fi
  sleep 0.2
done
curl -fsS -m 2 "$URL/health" >/dev/null || { echo "up: server not healthy; see $LOG" >&2; exit 1; }
echo "up: server pid $(cat "$PIDFILE") on $URL, log $LOG"

[ -x "$DATA/venv/bin/python" ] || python3 -m venv "$DATA/venv"
"$DATA/venv/bin/pip" install -q --disable-pip-version-check 'pandastack==0.10.0'

KEY=$(sed -n 's/^export PANDASTACK_API_KEY=//p' "$DATA/admin.env")
PANDASTACK_API=$URL PANDASTACK_API_KEY=$KEY "$DATA/venv/bin/python" scripts/demo.py

cat <<EOF

PandaStack is running on $URL (pid $(cat "$PIDFILE"), data in $DATA, log $LOG).
The CLI is \`pandastack\` (linked to /usr/local/bin; \`pandastack --help\`).
Use it from Python or TypeScript:

  export PANDASTACK_API=$URL
  export PANDASTACK_API_KEY=\$(sed -n 's/^export PANDASTACK_API_KEY=//p' $DATA/admin.env)
  $DATA/venv/bin/python -c 'from pandastack import Sandbox; sb = Sandbox.create(template="base"); print(sb.exec("uname -a").stdout); sb.kill()'

Stop it with: kill \$(cat $PIDFILE)
Run all tests with: scripts/test.sh
EOF
