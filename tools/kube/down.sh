#!/usr/bin/env bash
# tools/kube/down.sh DIR: stops the cluster tools/kube/up.sh brought up in DIR and removes
# DIR: every container and pod sandbox (their shims too), every daemon (by the pid up.sh
# recorded), every mount under DIR, the CNI bridge and the iptables rules of kube-proxy
# and of the CNI. Safe to run twice, and on a half-started cluster.
set -uo pipefail

D=${1:?usage: tools/kube/down.sh DIR (the directory tools/kube/up.sh printed)}
[ -d "$D" ] || exit 0
D=$(cd "$D" && pwd)
[ -f "$D/env" ] || { echo "kube down: $D is not a directory tools/kube/up.sh made (no env)" >&2; exit 1; }
BRIDGE=kcni0
BIN=$(sed -n 's/^KUBE_BIN=//p' "$D/env")
SOCK=$D/containerd.sock

stop() { # name [grace seconds]: SIGTERM, then SIGKILL, the process up.sh started as name
	local f=$D/pids/$1 pid i
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null
		for ((i = 0; i < ${2:-10} * 10; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$f"
}

ours() { # the pids of the shims serving this containerd (their -address is its socket)
	local f pid
	for f in /proc/[0-9]*/cmdline; do
		pid=${f#/proc/}
		pid=${pid%/cmdline}
		{ tr '\0' ' ' <"$f"; } 2>/dev/null | grep -q "^/[^ ]*containerd-shim[^ ]* .*-address $SOCK " && echo "$pid"
	done
}
alive() { [ -f "$D/pids/$1" ] && kill -0 "$(cat "$D/pids/$1")" 2>/dev/null; }

# The kubelet first, so that it restarts nothing; then every container, through
# containerd, which removes them and their network namespaces (through the CNI). If
# containerd died and left shims behind, it is started again to end their containers.
stop kubelet 20
if ! alive containerd && [ -n "$(ours)" ] && [ -f "$D/containerd.toml" ]; then
	setsid containerd --config "$D/containerd.toml" >>"$D/logs/containerd.log" 2>&1 </dev/null &
	echo $! >"$D/pids/containerd"
	for ((i = 0; i < 100; i++)); do ctr --address "$SOCK" version >/dev/null 2>&1 && break; sleep 0.2; done
fi
if alive containerd; then
	ctr="ctr --address $SOCK -n k8s.io"
	for t in $($ctr tasks ls -q 2>/dev/null); do
		$ctr tasks kill -a -s SIGKILL "$t" >/dev/null 2>&1
	done
	for ((i = 0; i < 50; i++)); do
		$ctr tasks ls 2>/dev/null | awk 'NR > 1 && $3 != "STOPPED"' | grep -q . || break
		sleep 0.2
	done
	for t in $($ctr tasks ls -q 2>/dev/null); do
		$ctr tasks delete -f "$t" >/dev/null 2>&1
	done
	for c in $($ctr containers ls -q 2>/dev/null); do
		$ctr containers delete "$c" >/dev/null 2>&1
	done
fi
for p in kube-proxy coredns kube-scheduler kube-controller-manager kube-apiserver containerd etcd; do
	stop "$p" 20
done
for pid in $(ours); do
	kill -KILL "$pid" 2>/dev/null
done

# Every mount under DIR, deepest first (volumes, tmpfs secrets, overlay rootfs, netns).
for i in 1 2 3; do
	mounts=$(awk -v d="$D/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r)
	[ -z "$mounts" ] && break
	for m in $mounts; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
	done
done

# The network: the bridge, kube-proxy's rules (it removes its own), the CNI's NAT chains.
ip link show "$BRIDGE" >/dev/null 2>&1 && ip link delete "$BRIDGE"
[ -x "$BIN/kube-proxy" ] && "$BIN/kube-proxy" --cleanup >/dev/null 2>&1
# Left then: the CNI's chains and the kubelet's (KUBE-FIREWALL, KUBE-KUBELET-CANARY);
# no one else on the machine makes KUBE-* or CNI-* chains.
for ipt in iptables ip6tables; do
	command -v $ipt >/dev/null || continue
	for t in filter nat mangle; do
		for chain in $($ipt -t $t -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(CNI-|KUBE-)/ {print $2}'); do
			$ipt -t $t -S 2>/dev/null | grep -- "-j $chain\( \|$\)" | grep -v "^-N" | sed 's/^-A/-D/' |
				while read -r rule; do eval $ipt -t $t "$rule" 2>/dev/null; done
		done
		for chain in $($ipt -t $t -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(CNI-|KUBE-)/ {print $2}'); do
			$ipt -t $t -F "$chain" 2>/dev/null
		done
		for chain in $($ipt -t $t -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(CNI-|KUBE-)/ {print $2}'); do
			$ipt -t $t -X "$chain" 2>/dev/null
		done
	done
done

left=$(awk -v d="$D/" 'index($2, d) == 1 {print $2}' /proc/self/mounts)
if [ -n "$left" ]; then
	echo "kube down: still mounted (left $D in place): $left" >&2
	exit 1
fi
rm -rf "$D"
echo "kube down: stopped and removed $D" >&2
