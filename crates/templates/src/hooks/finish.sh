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

# Every sandbox sees the same network inside (10.0.2.100, gateway 10.0.2.2); the host forwards
# 10.0.2.3 to its own resolver. A file, not the host's copy, so images never carry host details.
rm -f "$root/etc/resolv.conf"
cat > "$root/etc/resolv.conf" <<'RESOLV'
nameserver 10.0.2.3
options timeout:2 attempts:2
RESOLV

# pip installs into the system Python of a disposable sandbox without --break-system-packages
# (PEP 668 would refuse it otherwise).
if [ -x "$root/usr/bin/pip3" ]; then
    cat > "$root/etc/pip.conf" <<'PIP'
[global]
break-system-packages = true
root-user-action = ignore
disable-pip-version-check = true
PIP
fi

# Certificate authorities the host trusts beyond Debian's bundle, staged by the baker in
# $PANDASTACK_CA_DIR: pip, git and curl read the system bundle; npm gets it named.
if [ -n "${PANDASTACK_CA_DIR:-}" ] && [ -x "$root/usr/sbin/update-ca-certificates" ]; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    for ca in "$PANDASTACK_CA_DIR"/*.crt; do
        [ -f "$ca" ] && cp "$ca" "$root/usr/local/share/ca-certificates/"
    done
    chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin update-ca-certificates >/dev/null
fi
if [ -x "$root/usr/bin/npm" ]; then
    cat > "$root/etc/npmrc" <<'NPM'
cafile=/etc/ssl/certs/ca-certificates.crt
fund=false
audit=false
update-notifier=false
NPM
fi

# Smaller rootfs: mmdebstrap's own cleanup drops the apt lists and .deb cache;
# these are the caches it does not know about.
rm -rf "$root/root/.cache" "$root/var/cache/debconf/"*-old
find "$root/var/log" -type f \( -name '*.log' -o -name '*.gz' \) -delete
