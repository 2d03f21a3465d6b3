#!/usr/bin/env bash
# A real S3 server on loopback for tests, benchmarks and demos: OpenStack Swift from Debian (swift-proxy,
# swift-object, swift-container, swift-account; scripts/setup.sh installs them) with its s3api middleware,
# one replica on one device in DIR (../shared/design/s3-on-swift.md: what was measured of it here).
#
#   bash scripts/s3-server.sh start DIR [PROXY_PORT]   configure DIR (once: a later PROXY_PORT other than its
#                                                      first is refused), start the four servers, wait
#                                                      until the proxy answers; prints the S3 settings as
#                                                      shell assignments (S3_ENDPOINT, AWS_ACCESS_KEY_ID, ...)
#   bash scripts/s3-server.sh stop DIR                 stop them (the data in DIR stays)
#   bash scripts/s3-server.sh env DIR                  print the settings again
#
# The proxy listens on 127.0.0.1:PROXY_PORT (default 28080), the storage servers on the three ports after it
# (choose a PROXY_PORT below 32768, Linux's first ephemeral port: a client's connection may hold one above).
# The access key is test:tester, the secret testing (tempauth). Logs go to DIR/log/<server>.log. Swift runs
# with Debian's /usr/bin/python3: the python3 first on PATH may lack Debian's modules.
set -euo pipefail

usage() {
  echo "usage: $0 start DIR [PROXY_PORT] | stop DIR | env DIR" >&2
  exit 2
}
[ $# -ge 2 ] || usage
cmd=$1
dir=$(realpath -m "$2")
PY=/usr/bin/python3
SERVERS=(account container object proxy)

print_env() {
  local port
  port=$(cat "$dir/proxy.port")
  echo "S3_ENDPOINT=http://127.0.0.1:$port"
  echo "AWS_ACCESS_KEY_ID=test:tester"
  echo "AWS_SECRET_ACCESS_KEY=testing"
  echo "AWS_REGION=us-east-1"
}

stop_all() {
  local s pid
  # The proxy first: a client then gets connection refused, not the proxy's answer for storage servers that
  # are gone (s3api says NoSuchBucket when the container server does not answer).
  for s in proxy object container account; do
    [ -f "$dir/run/$s.pid" ] || continue
    pid=$(cat "$dir/run/$s.pid")
    # The server's process group: swift's servers fork workers.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done
  for s in "${SERVERS[@]}"; do
    [ -f "$dir/run/$s.pid" ] || continue
    pid=$(cat "$dir/run/$s.pid")
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    rm -f "$dir/run/$s.pid"
  done
}

configure() {
  local proxy=$1 account=$(($1 + 1)) container=$(($1 + 2)) object=$(($1 + 3)) user
  user=$(id -un)
  mkdir -p "$dir/etc" "$dir/srv/d1" "$dir/run" "$dir/log" "$dir/cache"
  cat > "$dir/etc/swift.conf" <<EOF
[swift-hash]
swift_hash_path_suffix = $(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
swift_hash_path_prefix = $(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
[storage-policy:0]
name = Policy-0
default = yes
EOF
  local common="swift_dir = $dir/etc
devices = $dir/srv
mount_check = false
bind_ip = 127.0.0.1
workers = 1
user = $user
log_address = /dev/null
log_udp_host =
log_level = WARNING"
  local s port
  for s in account container object; do
    case $s in account) port=$account ;; container) port=$container ;; object) port=$object ;; esac
    cat > "$dir/etc/$s-server.conf" <<EOF
[DEFAULT]
$common
bind_port = $port
[pipeline:main]
pipeline = $s-server
[app:$s-server]
use = egg:swift#$s
EOF
    (cd "$dir/etc" && $PY /usr/bin/swift-ring-builder "$s.builder" create 8 1 1 >/dev/null &&
      $PY /usr/bin/swift-ring-builder "$s.builder" add "r1z1-127.0.0.1:$port/d1" 100 >/dev/null &&
      $PY /usr/bin/swift-ring-builder "$s.builder" rebalance >/dev/null) || {
      echo "s3-server: swift-ring-builder failed for the $s ring" >&2
      exit 1
    }
  done
  # s3api before the auth middleware, slo and dlo after it (multipart uploads). tempauth needs a cache
  # object: the memcache middleware pointed at a port nothing serves (every lookup a miss) is enough.
  cat > "$dir/etc/proxy-server.conf" <<EOF
[DEFAULT]
$common
bind_port = $proxy
[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = testing .admin
[filter:s3api]
use = egg:swift#s3api
location = us-east-1
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$(($1 + 4))
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
EOF
  echo "$proxy" > "$dir/proxy.port"
}

case $cmd in
  start)
    for b in swift-proxy-server swift-object-server swift-container-server swift-account-server swift-ring-builder; do
      [ -x "/usr/bin/$b" ] || { echo "s3-server: /usr/bin/$b is missing: apt-get install swift swift-proxy swift-object swift-container swift-account (scripts/setup.sh does, as root)" >&2; exit 1; }
    done
    [ -x "$PY" ] || { echo "s3-server: $PY is missing (Debian's python3)" >&2; exit 1; }
    port=${3:-28080}
    if [ ! -f "$dir/proxy.port" ]; then
      configure "$port"
    elif [ $# -ge 3 ] && [ "$3" != "$(cat "$dir/proxy.port")" ]; then
      # The rings name the storage servers' ports: a DIR keeps the port it was set up with.
      echo "s3-server: $dir is set up for port $(cat "$dir/proxy.port"), not $3: start it without a port (or with $(cat "$dir/proxy.port")), or give another DIR" >&2
      exit 2
    fi
    stop_all
    for s in "${SERVERS[@]}"; do
      # setsid: each server leads a process group of its own, which stop ends whole.
      setsid "$PY" "/usr/bin/swift-$s-server" "$dir/etc/$s-server.conf" >"$dir/log/$s.log" 2>&1 < /dev/null &
      echo $! > "$dir/run/$s.pid"
    done
    proxy_port=$(cat "$dir/proxy.port")
    url="http://127.0.0.1:$proxy_port/healthcheck"
    # Ready when the proxy's healthcheck says OK and each storage server answers HTTP at all (any status): a
    # proxy up before its container server makes s3api answer NoSuchBucket for a bucket that exists.
    storage_up() {
      local p code
      for p in $((proxy_port + 1)) $((proxy_port + 2)) $((proxy_port + 3)); do
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$p/" 2>/dev/null || true)
        [ -n "$code" ] && [ "$code" != 000 ] || return 1
      done
    }
    for _ in $(seq 300); do
      if [ "$(curl -s --max-time 2 "$url" 2>/dev/null)" = OK ] && storage_up; then
        print_env
        exit 0
      fi
      for s in "${SERVERS[@]}"; do
        if ! kill -0 "$(cat "$dir/run/$s.pid")" 2>/dev/null; then
          echo "s3-server: swift-$s-server ended; its log ($dir/log/$s.log):" >&2
          tail -n 20 "$dir/log/$s.log" >&2
          stop_all
          exit 1
        fi
      done
      sleep 0.2
    done
    echo "s3-server: the proxy did not answer $url within 60 s" >&2
    stop_all
    exit 1
    ;;
  stop) stop_all ;;
  env) print_env ;;
  *) usage ;;
esac
