#!/usr/bin/env bash
# Installs what PandaStack needs on a Debian bookworm host (run as root). Idempotent and quick
# when everything is there already: runsc from bookworm-backports (bookworm's own is from 2022),
# mmdebstrap for template bakes, nftables and iproute2 for sandbox networking, PostgreSQL 15
# and e2fsprogs for databases and as the store of a cluster (the server runs the clusters
# itself: Debian's own `main` cluster is not made), Python venv support for the SDK demo and tests.
set -euo pipefail

need=()
command -v runsc >/dev/null || need+=(runsc)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
command -v curl >/dev/null || need+=(curl)
command -v nft >/dev/null || need+=(nftables)
command -v ip >/dev/null || need+=(iproute2)
command -v nsenter >/dev/null || need+=(util-linux)
# PostgreSQL 15: the shared store of a cluster (issue 12) and, later, sandbox databases.
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql-15)
command -v cc >/dev/null || need+=(build-essential)
[ -x /usr/lib/postgresql/15/bin/postgres ] || need+=(postgresql-15)
command -v psql >/dev/null || need+=(postgresql-client-15)
command -v mkfs.ext4 >/dev/null && command -v resize2fs >/dev/null || need+=(e2fsprogs)
command -v losetup >/dev/null || need+=(mount)

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
    # Backports from the same mirror the machine already uses for bookworm.
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    if [ -z "$mirror" ]; then
      echo "setup: no bookworm apt source found to add bookworm-backports from" >&2
      exit 1
    fi
    echo "deb $mirror bookworm-backports main" > /etc/apt/sources.list.d/bookworm-backports.list
  fi
  apt-get update -qq
  export DEBIAN_FRONTEND=noninteractive
  # PandaStack makes one cluster per database; Debian's default cluster on port 5432 would
  # only hold memory and the port.
  mkdir -p /etc/postgresql-common/createcluster.d
  echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/pandastack.conf
  for p in "${need[@]}"; do
    if [ "$p" = runsc ]; then
      apt-get install -y -qq -t bookworm-backports runsc >/dev/null
    else
      apt-get install -y -qq "$p" >/dev/null
    fi
  done
fi

if ! command -v cargo >/dev/null; then
  echo "setup: cargo is missing; install a Rust toolchain (rustup) first" >&2
  exit 1
fi

# ptrace costs several host tasks per guest process; the default pid_max (32768) runs out with a
# few dozen busy sandboxes.
if [ "$(cat /proc/sys/kernel/pid_max)" -lt 4194304 ]; then
  sysctl -qw kernel.pid_max=4194304 || echo "setup: could not raise kernel.pid_max" >&2
fi
echo "setup: ok ($(runsc --version | head -1))"
