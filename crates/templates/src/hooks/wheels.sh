#!/bin/sh
# Run by mmdebstrap as a --customize-hook script, with the rootfs path as $1.
# Installs the wheels staged on the host in $PANDASTACK_WHEEL_DIR. pip inside the
# chroot never touches the network (--no-index): the host downloaded the wheels,
# because the chroot lacks the host's CA bundle. Its text is part of the recipe hash.
set -eu
root="$1"
stage="$root/tmp/pandastack-wheels"
mkdir -p "$stage"
cp "$PANDASTACK_WHEEL_DIR"/*.whl "$stage/"
# env -i: host PIP_* settings (find-links, cert) must not leak into the chroot.
chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    sh -c 'pip3 install --break-system-packages --no-index --no-deps --no-cache-dir --root-user-action=ignore /tmp/pandastack-wheels/*.whl'
rm -rf "$stage"
