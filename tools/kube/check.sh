#!/usr/bin/env bash
# tools/kube/check.sh (make kube-check): applies deploy/kubernetes to a single-node
# cluster brought up here (tools/kube/up.sh) and drives it through what only a real
# cluster shows (docs/kubernetes.md):
#
#   1. three ready pods that formed one cluster through the headless Service's DNS;
#   2. the examples deployed through the API Service;
#   3. under load from two senders asking counters through the API Service
#      (tools/kube/load, the journal checkpoint policy): a rollout restart, a scale to 5
#      and straight back to 3 (two pods deleted at once), the coordinator's pod deleted, and a drain of
#      the node, which the PodDisruptionBudget must block after one eviction; after each
#      step every member's state store ring must settle (/ready?state=settled);
#   4. what the probes, the preStop leave and the grace period did, from the events.
#
# The last line: kube-check: N acked, N lost, N failed, p99 D. Exits non-zero when a step
# fails or anything was lost or failed. The cluster is torn down on any exit.
# Needs: root, docker (make image), the parts tools/kube/up.sh names; tools/kube/build.sh
# is run first (the first time it builds for tens of minutes; after, it checks only).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
IMAGE=${IMAGE:-shardhost:kube-check}
say() { echo "$(date -u +%H:%M:%S) kube-check: $*" >&2; }
die() { say "FAILED: $*"; exit 1; }

# make image builds the Go examples with TinyGo when it is on PATH (smaller, faster).
if ! command -v tinygo >/dev/null && t=$(ls -d "$HOME"/.cache/shardhost/tinygo-*/bin 2>/dev/null | tail -1) && [ -n "$t" ]; then
	export PATH=$t:$PATH TINYGO=$t/tinygo
fi
command -v docker >/dev/null || die "docker is missing (make image builds the image with it): apt-get install docker.io"
say "building the components (tools/kube/build.sh; cached after the first time)"
start=$(date +%s)
BIN=$("$here/build.sh" | tail -1) || die "tools/kube/build.sh failed"
say "components ready in $(($(date +%s) - start)) s"

D=$(mktemp -d /tmp/shardhost-kube.XXXXXX)
LOADPID=
cleanup() {
	rc=$?
	set +e # every step of the teardown runs, whatever fails
	if [ -n "$LOADPID" ]; then kill -TERM "$LOADPID" 2>/dev/null; fi
	if [ "$rc" -ne 0 ] && [ -d "$D/logs" ]; then
		mkdir -p /tmp/shardhost-kube-logs
		cp -r "$D/logs" "$D"/*.txt "$D"/load.out /tmp/shardhost-kube-logs/ 2>/dev/null
		say "logs kept in /tmp/shardhost-kube-logs"
	fi
	if [ -f "$D/pids/events" ]; then kill "$(cat "$D/pids/events")" 2>/dev/null; fi
	rm -f "$D/pids/events"
	if [ -f "$D/env" ]; then
		"$here/down.sh" "$D" || { say "tools/kube/down.sh $D failed: see above"; rc=1; }
	else
		rm -rf "$D" # up.sh started nothing
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$here/up.sh" "$D" >/dev/null || die "tools/kube/up.sh failed"
set -a
. "$D/env"
set +a
ctr="ctr --address $CONTAINERD_ADDRESS -n k8s.io"

# --- the image, the tokens, the volumes -------------------------------------------------------
say "make image IMAGE=$IMAGE"
(cd "$repo" && make image IMAGE="$IMAGE" >"$D/logs/make-image.log" 2>&1) || die "make image failed: $(tail -5 "$D/logs/make-image.log")"
docker save "$IMAGE" | $ctr images import - >/dev/null || die "importing $IMAGE into containerd failed"
SH=$repo/bin/shardhost
mkdir -p "$D/overlay"
admin=$("$SH" tokens create --role admin --tokens-file "$D/tokens")
clientt=$("$SH" tokens create --role client --tokens-file "$D/tokens")
echo "$admin" >"$D/admin-token"
echo "$clientt" >"$D/client-token"
for n in 0 1 2 3 4; do
	mkdir -p "$D/pv/$n"
	chown 65532:65532 "$D/pv/$n"
	cat <<PV
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: shardhost-data-$n
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: "$D/pv/$n", type: Directory}
PV
done | kubectl apply -f - >/dev/null

# --- apply -------------------------------------------------------------------------------------------
mkdir -p "$D/overlay/base" "$D/overlay/check"
cp "$repo"/deploy/kubernetes/*.yaml "$D/overlay/base/"
tag=${IMAGE##*:}
cat >"$D/overlay/check/kustomization.yaml" <<K
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [../base]
images:
  - name: shardhost
    newTag: "$tag"
patches:
  - path: secret.yaml
  # 5 members at the manifests' 500m each would not fit a 2-core node.
  - target: {kind: StatefulSet, name: shardhost}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/resources/requests/cpu
        value: 100m
K
cat >"$D/overlay/check/secret.yaml" <<S
apiVersion: v1
kind: Secret
metadata:
  name: shardhost-secret
stringData:
  tokens: |
$(sed 's/^/    /' "$D/tokens")
  leave-token: "$admin"
S
say "kustomize build | kubectl apply"
kustomize build "$D/overlay/check" >"$D/manifests.yaml" || die "kustomize build failed"
kubectl apply -f "$D/manifests.yaml" >/dev/null || die "kubectl apply failed"
kubectl get events -A -w -o json >"$D/events.json" 2>/dev/null &
echo $! >"$D/pids/events"

ready() { # N: wait for N ready pods of the StatefulSet and no other
	local n=$1 i
	for ((i = 0; i < 600; i++)); do
		local s
		s=$(kubectl get statefulset shardhost -o jsonpath='{.status.readyReplicas}/{.status.replicas}/{.status.updatedReplicas}/{.status.currentRevision}/{.status.updateRevision}' 2>/dev/null || true)
		IFS=/ read -r r t u cur upd <<<"$s"
		if [ "${r:-0}" = "$n" ] && [ "${t:-0}" = "$n" ] && [ "$cur" = "$upd" ] &&
			[ "$(kubectl get pods -l app.kubernetes.io/component=member --no-headers 2>/dev/null | wc -l)" = "$n" ]; then
			return 0
		fi
		sleep 1
	done
	kubectl get pods -o wide >&2
	die "no $n ready pods after 600 s"
}
members_up() { # POD: the members up in the view of POD's member
	local ip
	ip=$(kubectl get pod "$1" -o jsonpath='{.status.podIP}')
	curl -sf -H "Authorization: Bearer $admin" "http://$ip:8080/v1/cluster" | jq '[.members[] | select(.status == "up")] | length'
}
one_cluster() { # N: every pod sees the same N members up
	local n=$1 i p ok
	for ((i = 0; i < 120; i++)); do
		ok=yes
		for p in $(kubectl get pods -l app.kubernetes.io/component=member -o name); do
			[ "$(members_up "${p#pod/}" 2>/dev/null)" = "$n" ] || ok=no
		done
		[ $ok = yes ] && return 0
		sleep 1
	done
	die "the pods do not see one cluster of $n members"
}

settled() { # every pod's state store ring settled (/ready?state=settled), within 300 s
	local i p ip out
	for ((i = 0; i < 300; i++)); do
		out=
		for p in $(kubectl get pods -l app.kubernetes.io/component=member -o name); do
			# Each command may fail (a pod without an IP yet, an API not listening yet):
			# that pod is not settled, and the loop goes on (set -e, pipefail).
			ip=$(kubectl get "$p" -o jsonpath='{.status.podIP}' 2>/dev/null || true)
			if [ -z "$ip" ]; then
				out="$out ${p#pod/}: no pod IP;"
			elif ! curl -sf -o /dev/null "http://$ip:8080/ready?state=settled" 2>/dev/null; then
				out="$out ${p#pod/}: $(curl -s "http://$ip:8080/ready?state=settled" 2>/dev/null | jq -r .reason 2>/dev/null || echo "no answer");"
			fi
		done
		[ -z "$out" ] && return 0
		sleep 1
	done
	die "the state store's ring did not settle in 300 s:$out"
}

start=$(date +%s)
ready 3
one_cluster 3
settled
say "3 pods ready, one cluster of 3 through DNS discovery, in $(($(date +%s) - start)) s"
kubectl logs shardhost-0 | grep -i 'dns\|discover\|contact' | head -5 >"$D/discovery.txt" || true

API=$(kubectl get service shardhost-api -o jsonpath='{.spec.clusterIP}'):8080
say "deploying the examples through the API Service ($API)"
SHARDHOST_TOKEN=$admin "$SH" deploy --api "$API" "$repo"/bin/wasm/*.wasm >"$D/deploy.txt" 2>&1 || die "deploy: $(cat "$D/deploy.txt")"

(cd "$repo" && go build -o "$D/load" ./tools/kube/load) || die "building tools/kube/load failed"
"$D/load" -api "$API" -token-file "$D/client-token" -senders 2 -entities 8 >"$D/load.out" 2>"$D/logs/load.log" &
LOADPID=$!
sleep 10

say "kubectl rollout restart statefulset/shardhost"
t0=$(date +%s)
kubectl rollout restart statefulset/shardhost >/dev/null
kubectl rollout status statefulset/shardhost --timeout=900s >/dev/null || die "the rollout restart did not finish"
ready 3
one_cluster 3
settled
say "rollout restart done in $(($(date +%s) - t0)) s"

say "kubectl scale --replicas=5"
t0=$(date +%s)
kubectl scale statefulset/shardhost --replicas=5 >/dev/null
ready 5
one_cluster 5
settled
# Straight back to 3: podManagementPolicy Parallel deletes both condemned pods at once;
# their preStop leaves hand their replicas over before they are gone (statefulset.yaml).
say "kubectl scale --replicas=3"
kubectl scale statefulset/shardhost --replicas=3 >/dev/null
ready 3
one_cluster 3
settled
say "scaled 3 -> 5 -> 3 in $(($(date +%s) - t0)) s"

# The shard coordinator is a singleton on the oldest member up (docs/sharding.md).
oldest=$(curl -sf -H "Authorization: Bearer $admin" "http://$(kubectl get pod shardhost-0 -o jsonpath='{.status.podIP}'):8080/v1/cluster" |
	jq -r '[.members[] | select(.status == "up")] | min_by(.up_number) | .address')
coord=$(kubectl get pods -l app.kubernetes.io/component=member -o json | jq -r --arg ip "${oldest%:*}" '.items[] | select(.status.podIP == $ip) | .metadata.name')
[ -n "$coord" ] || die "no pod has the coordinator's address $oldest"
say "kubectl delete pod $coord (the coordinator's member, $oldest)"
t0=$(date +%s)
kubectl delete pod "$coord" >/dev/null
sleep 2
ready 3
one_cluster 3
settled
say "the coordinator's pod deleted and back in $(($(date +%s) - t0)) s"

say "kubectl drain $KUBE_NODE --disable-eviction=false (the PDB must block it after one eviction)"
t0=$(date +%s)
if kubectl drain "$KUBE_NODE" --ignore-daemonsets --delete-emptydir-data --disable-eviction=false \
	--pod-selector app.kubernetes.io/component=member --timeout=90s >"$D/drain.txt" 2>&1; then
	die "the drain was not blocked: $(tail -3 "$D/drain.txt")"
fi
evicted=$(grep -c 'evicted$' "$D/drain.txt" || true)
grep -q 'disruption budget' "$D/drain.txt" || die "the drain failed, but not on the disruption budget: $(tail -3 "$D/drain.txt")"
say "drain blocked by the PDB after $evicted eviction(s) in $(($(date +%s) - t0)) s"
kubectl uncordon "$KUBE_NODE" >/dev/null
ready 3
one_cluster 3
settled
[ "$evicted" = 1 ] || die "the drain evicted $evicted pods, the PDB allows 1"
sleep 10

kill -TERM "$LOADPID"
loadrc=0
wait "$LOADPID" || loadrc=$?
LOADPID=

# --- what the probes, the preStop hooks and the grace periods did -------------------------------------
kill "$(cat "$D/pids/events")" 2>/dev/null || true
rm -f "$D/pids/events"
jq -rs '[.[] | (.items // [.])[]] | group_by(.metadata.uid) | map(last) | .[] | select(.involvedObject.kind == "Pod") | "\(.count // 1)\t\(.reason)\t\(.involvedObject.name)\t\(.message)"' "$D/events.json" >"$D/events.txt" 2>/dev/null || true
sum() { # REGEX: the events whose "REASON<tab>MESSAGE" matches
	# grep finds none: 0, not a failed pipeline (pipefail) ending the run under set -e.
	{ grep -E "$1" "$D/events.txt" 2>/dev/null || true; } | awk -F'\t' '{s += $1} END {print s + 0}'
}
liveness=$(sum $'\tUnhealthy\t.*\tLiveness probe failed')
readiness=$(sum $'\tUnhealthy\t.*\tReadiness probe failed')
startup=$(sum $'\tUnhealthy\t.*\tStartup probe failed')
prestop=$(sum $'\tFailedPreStopHook\t')
grace=$(sum $'\tExceededGracePeriod\t')
restarts=$(kubectl get pods -l app.kubernetes.io/component=member -o jsonpath='{range .items[*]}{.status.containerStatuses[0].restartCount}{"\n"}{end}' | awk '{s += $1} END {print s + 0}')
say "probes: $liveness liveness, $readiness readiness and $startup startup probe failures; $restarts container restarts"
say "preStop leave: $prestop FailedPreStopHook events"
say "grace period: $grace ExceededGracePeriod events"
grep -E 'Unhealthy|FailedPreStopHook|ExceededGracePeriod' "$D/events.txt" | head -20 >&2 || true
cp "$D/events.txt" "$D/logs/" 2>/dev/null || true
[ "$liveness$restarts$prestop$grace" = 0000 ] || loadrc=1
line=$(tail -1 "$D/load.out")
echo "$line"
exit "$loadrc"
