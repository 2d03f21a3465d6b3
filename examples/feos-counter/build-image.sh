#!/usr/bin/env bash
# Builds the feos-counter container image offline and pushes it to a registry (docs/feos/feosd.md,
# "Images without the internet"): the machine's busybox and its applets, with a command that counts
# once a second into the container's log, as `count N`. Needs umoci and skopeo (scripts/setup.sh).
#
#   bash examples/feos-counter/build-image.sh 127.0.0.1:5000      # pushes 127.0.0.1:5000/feos-counter:1
set -euo pipefail
REGISTRY=${1:?usage: build-image.sh REGISTRY_HOST:PORT (a registry that takes plain HTTP pushes)}
for tool in umoci skopeo; do
  command -v "$tool" >/dev/null || { echo "build-image.sh: $tool is missing: run scripts/setup.sh (or apt-get install $tool)" >&2; exit 1; }
done
[ -x /bin/busybox ] || { echo "build-image.sh: /bin/busybox is missing: apt-get install busybox" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/feos-counter-image.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
umoci init --layout "$WORK/layout"
umoci new --image "$WORK/layout:1"
umoci unpack --rootless --image "$WORK/layout:1" "$WORK/bundle"
mkdir -p "$WORK/bundle/rootfs/bin"
cp /bin/busybox "$WORK/bundle/rootfs/bin/"
for a in $(/bin/busybox --list | grep -vx busybox); do ln -s busybox "$WORK/bundle/rootfs/bin/$a"; done
umoci repack --image "$WORK/layout:1" "$WORK/bundle"
# The count lives in the shell's memory only: it goes on after a move only if the process does.
umoci config --image "$WORK/layout:1" --config.env PATH=/bin \
  --config.cmd /bin/sh --config.cmd -c --config.cmd 'i=0; while true; do i=$((i+1)); echo "count $i"; sleep 1; done'
skopeo copy --quiet --dest-tls-verify=false "oci:$WORK/layout:1" "docker://$REGISTRY/feos-counter:1"
echo "$REGISTRY/feos-counter:1"
