#!/bin/sh
# Run by mmdebstrap as a --customize-hook script, with the rootfs path as $1.
# Shapes every template rootfs the same way; its text is part of the recipe hash.
set -eu
root="$1"

# Mount points and working directories the sandbox runtime expects.
mkdir -p "$root/workspace" "$root/data" "$root/home/panda" "$root/.pandastack"
chmod 1777 "$root/tmp"

echo sandbox > "$root/etc/hostname"
cat > "$root/etc/hosts" <<'HOSTS'
127.0.0.1 localhost sandbox
::1 localhost ip6-localhost ip6-loopback
HOSTS

# Smaller rootfs: mmdebstrap's own cleanup drops the apt lists and .deb cache;
# these are the caches it does not know about.
rm -rf "$root/root/.cache" "$root/var/cache/debconf/"*-old
find "$root/var/log" -type f \( -name '*.log' -o -name '*.gz' \) -delete
