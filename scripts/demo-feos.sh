#!/usr/bin/env bash
# One cluster, two kinds of pod (issue 18), as root: `kube32-cli up --feos-nodes 2` starts a control
# plane, a Wasm worker and two FeOS nodes (feosd in network namespaces of their own); a Deployment of a
# microVM pod (examples/feos-counter: a busybox container that counts once a second into its log) runs on
# one FeOS node; `kubectl drain` of that node moves it to the other, hibernated into the nodes' object
# store and restored there, and its count goes on from where it was. Exits non-zero when a step fails.
#
#   sudo bash scripts/demo-feos.sh                   set up (scripts/setup.sh), then run the demo
#   sudo SKIP_SETUP=1 bash scripts/demo-feos.sh      on an already built checkout
#   DEMO_DIR=/some/dir   the cluster's data dir (default: a new temp dir; at most ~34 bytes, for unix sockets)
#   FEOS_ACCEL=tcg       feosd's --accel (default auto: KVM when it works, else TCG, where a boot takes a minute or two)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

bold() { if [ -t 1 ]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }
step() { printf '\n'; bold "==> $*"; }
show() { printf '$ %s\n' "$*"; "$@"; }
fail() { echo "demo-feos: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "run it as root (sudo bash scripts/demo-feos.sh): FeOS nodes are feosd in network namespaces, with microVMs"
if [ "${SKIP_SETUP:-0}" != 1 ]; then
  step "Install what the project needs and build it (scripts/setup.sh)"
  bash scripts/setup.sh
  hash -r
fi
command -v kubectl >/dev/null || fail "kubectl is not on PATH; install kubectl v1.32 (https://kubernetes.io/docs/tasks/tools/)"
command -v docker-registry >/dev/null || fail "docker-registry is missing: run scripts/setup.sh (or apt-get install docker-registry)"

DIR=${DEMO_DIR:-$(mktemp -d /tmp/k32feos.XXXXXX)}
mkdir -p "$DIR"
UP_PID=
REG_PID=
cleanup() {
  if [ -n "$UP_PID" ] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -TERM "$UP_PID"
    wait "$UP_PID" || true
  fi
  UP_PID=
  if [ -n "$REG_PID" ]; then kill "$REG_PID" 2>/dev/null || true; wait "$REG_PID" 2>/dev/null || true; fi
  REG_PID=
}
trap cleanup EXIT

step "A registry on this host's loopback with the feos-counter image (examples/feos-counter)"
PORT=$(node -e "const s=require('node:net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
REGISTRY=127.0.0.1:$PORT
cat >"$DIR/registry.yml" <<EOF2
version: 0.1
log: { level: error }
storage: { filesystem: { rootdirectory: $DIR/registry } }
http: { addr: $REGISTRY }
EOF2
printf '$ docker-registry serve %s &\n' "$DIR/registry.yml"
docker-registry serve "$DIR/registry.yml" >"$DIR/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 1 60); do curl -sf "http://$REGISTRY/v2/" >/dev/null && break; sleep 0.5; done
curl -sf "http://$REGISTRY/v2/" >/dev/null || fail "the registry did not answer on $REGISTRY; see $DIR/registry.log"
show bash examples/feos-counter/build-image.sh "$REGISTRY"

step "Start a cluster: a control plane, a Wasm worker and two FeOS nodes (kube32-cli up, in the background)"
printf '$ kube32-cli up --data-dir %s --port 0 --workers 1 --feos-nodes 2 --feos-registry %s --feos-accel %s &\n' "$DIR" "$REGISTRY" "${FEOS_ACCEL:-auto}"
node "$ROOT/bin/kube32-cli.js" up --data-dir "$DIR" --port 0 --workers 1 --feos-nodes 2 --feos-registry "$REGISTRY" --feos-accel "${FEOS_ACCEL:-auto}" --ready-timeout 180 >"$DIR/up.out" 2>&1 &
UP_PID=$!
# Its last line once ready (the control plane, the worker, each FeOS node Ready; a guest built if none is).
for _ in $(seq 1 2400); do
  grep -q 'Press Ctrl-C to stop' "$DIR/up.out" && break
  kill -0 "$UP_PID" 2>/dev/null || { cat "$DIR/up.out"; fail "kube32-cli up exited; logs in $DIR/logs"; }
  sleep 0.5
done
cat "$DIR/up.out"
grep -q 'Press Ctrl-C to stop' "$DIR/up.out" || fail "the cluster was not ready in 20 minutes; logs in $DIR/logs"
export KUBECONFIG=$DIR/kubeconfig
show kubectl get nodes -L kube32.io/runtime
show kubectl get runtimeclass

step "A Deployment of one microVM pod (runtimeClassName: feos) whose container counts"
sed "s|127.0.0.1:5000|$REGISTRY|" examples/feos-counter/counter.yaml >"$DIR/feos-counter.yaml"
show kubectl apply -f "$DIR/feos-counter.yaml"
# A microVM boots, then pulls its image in the guest: seconds under KVM, a minute or two under TCG.
show kubectl rollout status deployment/feos-counter --timeout=15m || { kubectl get events --sort-by=.lastTimestamp | tail -20; fail "the microVM pod did not run in 15 minutes; logs in $DIR/logs"; }
show kubectl get pods -o wide -l app=feos-counter
POD=$(kubectl get pods -l app=feos-counter -o jsonpath='{.items[0].metadata.name}')
NODE=$(kubectl get pods -l app=feos-counter -o jsonpath='{.items[0].spec.nodeName}')
last_count() { kubectl logs "$POD" --tail 5 2>/dev/null | awk '/^count [0-9]+$/ { n = $2 } END { print n + 0 }'; }
for _ in $(seq 1 120); do [ "$(last_count)" -ge 10 ] && break; sleep 1; done
show kubectl logs "$POD" --tail 3
show kubectl exec "$POD" -- cat /proc/uptime
BEFORE=$(last_count)
[ "$BEFORE" -ge 10 ] || fail "the container did not count to 10 (it says $BEFORE)"

step "Drain $NODE, the FeOS node that runs $POD, with the real kubectl"
show kubectl drain "$NODE" --ignore-daemonsets --timeout=10m || fail "the drain of $NODE failed; logs in $DIR/logs"
for _ in $(seq 1 300); do
  ON=$(kubectl get pods -l app=feos-counter -o jsonpath='{range .items[?(@.status.phase=="Running")]}{.spec.nodeName}{end}')
  [ -n "$ON" ] && [ "$ON" != "$NODE" ] && break
  sleep 1
done
[ -n "$ON" ] && [ "$ON" != "$NODE" ] || fail "the pod is not Running on the other FeOS node after the drain"
show kubectl get pods -o wide -l app=feos-counter

step "It runs on $ON with its name, a new uid, and its count goes on from where it was ($BEFORE)"
AFTER=0
for _ in $(seq 1 60); do AFTER=$(last_count); [ "$AFTER" -gt "$BEFORE" ] && break; sleep 1; done
show kubectl logs "$POD" --tail 3
show kubectl exec "$POD" -- cat /proc/uptime
[ "$AFTER" -gt "$BEFORE" ] || fail "the count did not go on: $AFTER after the drain, $BEFORE before"
echo "count before the drain: $BEFORE; after it, on $ON: $AFTER (a container started afresh would count from 1)"

step "The Checkpoint that carried the move (KIND microvm), and the events"
show kubectl get ckpt -o wide
show kubectl get events --field-selector involvedObject.name="$POD" --sort-by=.lastTimestamp
show kubectl uncordon "$NODE"

step "Stop the cluster (the FeOS nodes suspend their pods and go, then the worker, then the control plane)"
printf '$ kill -TERM %s   # as Ctrl-C on kube32-cli up\n' "$UP_PID"
kill -TERM "$UP_PID"
wait "$UP_PID" || fail "kube32-cli up did not stop cleanly; see $DIR/up.out"
UP_PID=
tail -n 4 "$DIR/up.out"
echo
bold "Done: a microVM pod moved by kubectl drain with its count going on ($BEFORE, then $AFTER). Data dir: $DIR"
