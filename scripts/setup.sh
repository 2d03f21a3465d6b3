#!/usr/bin/env bash
# Installs everything the project needs on a fresh Debian machine, then builds it:
#   Node.js 24 (where the machine's is older), the Debian packages its tests and examples use
#   (as root; skipped with SKIP_APT=1), the npm dependencies (npm ci) and the build (npm run build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-node.sh
hash -r
# Debian packages: compilers for the example pods, QEMU and a kernel for FeOS, the network tools (conntrack
# and tcpdump read the traffic records: src/feos/network/traffic.ts), OpenStack Swift, the S3 server of the
# tests (scripts/s3-server.sh); dpkg-dev, gnupg, systemd and init-system-helpers for FeOS's packages
# (npm run package, scripts/package-repo.ts, test/root/packages); the official Python client (python3-kubernetes,
# run with /usr/bin/python3) that test/apiserver/wire.test.ts and rbac.test.ts use; wireguard-go and wireguard-tools
# for the FeOS mesh (no WireGuard kernel module here); wrk, the load generator of bench/runtime.
APT_PACKAGES=(clang lld wabt qemu-system-x86 qemu-utils linux-image-amd64 busybox-static zstd cpio kmod
  crun nftables iproute2 dnsutils conntrack tcpdump docker-registry umoci skopeo etcd-server e2fsprogs binutils libc6-dev
  swift swift-proxy swift-object swift-container swift-account curl
  dpkg-dev gnupg systemd init-system-helpers util-linux python3 python3-kubernetes
  wireguard-go wireguard-tools wrk)
if [ "${SKIP_APT:-0}" != 1 ] && [ "$(id -u)" = 0 ]; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
elif [ "$(id -u)" != 0 ]; then
  echo "setup: not root: skipping Debian packages (${APT_PACKAGES[*]}); install them yourself for the examples and root suites"
fi
# Native addons (better-sqlite3) build against Node 24's own headers, not the machine's /usr ones.
node_home=$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")
[ -d "$node_home/include/node" ] && export npm_config_nodedir="$node_home"
npm ci --no-audit --no-fund
npm run build
