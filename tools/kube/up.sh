#!/usr/bin/env bash
# tools/kube/up.sh [DIR]: brings up a single-node Kubernetes cluster on this machine
# (docs/kubernetes.md): etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# containerd (its own instance, socket and state), the kubelet on it with the bridge CNI,
# kube-proxy (iptables) and CoreDNS, the certificates made here with openssl.
#
# Everything lives under DIR (default: a new temporary directory), the binaries in the
# cache tools/kube/build.sh fills. Prints DIR last; DIR/env has KUBECONFIG and the rest.
# tools/kube/down.sh DIR stops it all and removes DIR. If bringing it up fails, it is torn
# down at once (nothing left running or mounted). Needs root (mounts, iptables, netns).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
KUBE_VERSION=${KUBE_VERSION:-v1.34.4}
CACHE=${KUBE_CACHE:-$HOME/.cache/shardhost/kube-$KUBE_VERSION}
BIN=$CACHE/bin
NODE=${KUBE_NODE:-shardhost-kube}
POD_CIDR=${KUBE_POD_CIDR:-10.244.0.0/24}
SERVICE_CIDR=${KUBE_SERVICE_CIDR:-10.96.0.0/24}
SERVICE_IP=10.96.0.1
BRIDGE=kcni0

die() { echo "kube up: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (mounts, iptables, network namespaces): run it as root"

# --- every part, before anything starts -------------------------------------------------
need_cmd() { # command how-to-get
	command -v "$1" >/dev/null 2>&1 || die "$1 is missing: $2"
}
need_cmd etcd "apt-get install etcd-server (Debian bookworm: etcd 3.4)"
need_cmd containerd "apt-get install containerd"
need_cmd ctr "apt-get install containerd"
need_cmd runc "apt-get install runc"
need_cmd openssl "apt-get install openssl"
need_cmd iptables "apt-get install iptables"
need_cmd ip "apt-get install iproute2"
need_cmd curl "apt-get install curl"
CNI_BIN=${CNI_BIN:-/usr/lib/cni}
for p in bridge host-local loopback portmap; do
	[ -x "$CNI_BIN/$p" ] || die "the CNI plugin $p is missing from $CNI_BIN: apt-get install containernetworking-plugins (or set CNI_BIN)"
done
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl coredns; do
	[ -x "$BIN/$b" ] || die "$b is missing from $BIN: run tools/kube/build.sh (builds it from the Go module proxy; about 20-60 minutes the first time)"
done
[ -f "$CACHE/pause.tar" ] || die "the pause image is missing ($CACHE/pause.tar): run tools/kube/build.sh"
PAUSE_IMAGE=$(cat "$CACHE/pause.name")
NODE_IP=${KUBE_NODE_IP:-$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')}
[ -n "$NODE_IP" ] || die "no node IP: no default route; set KUBE_NODE_IP"
busy=$(ss -Hltnu 2>/dev/null | awk '{print $5}' | grep -E "(:2379|:2380|:6443|:10248|:10249|:10250|:10256|:10257|:10259|$NODE_IP:53|0.0.0.0:53|\*:53)$" || true)
[ -z "$busy" ] && ! ip link show "$BRIDGE" >/dev/null 2>&1 ||
	die "ports or the bridge $BRIDGE already in use ($busy): another cluster runs here; stop it with tools/kube/down.sh DIR"

# --- the directory and the teardown ---------------------------------------------------------
D=${1:-$(mktemp -d /tmp/shardhost-kube.XXXXXX)}
mkdir -p "$D"/{pki,logs,pids,etcd,containerd/root,containerd/state,cni/net.d,cni/ipam,kubelet,pv}
D=$(cd "$D" && pwd)
ok=no
keep_logs() { # on a failure: the components' logs outlive DIR
	rm -rf "${D}-logs"
	cp -r "$D/logs" "${D}-logs" 2>/dev/null && echo "kube up: the components' logs are in ${D}-logs" >&2
}
trap '[ "$ok" = yes ] || { keep_logs; "$here/down.sh" "$D"; }' EXIT
trap 'exit 130' INT TERM

cat >"$D/env" <<ENV
KUBE_DIR=$D
KUBECONFIG=$D/admin.kubeconfig
KUBE_BIN=$BIN
KUBE_NODE=$NODE
KUBE_NODE_IP=$NODE_IP
CONTAINERD_ADDRESS=$D/containerd.sock
PATH=$BIN:\$PATH
ENV
export KUBECONFIG=$D/admin.kubeconfig PATH=$BIN:$PATH

start() { # name command...: runs it in its own session, its log under logs/, its pid under pids/
	local name=$1
	shift
	setsid "$@" >"$D/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$D/pids/$name"
}
wait_for() { # what seconds log command...: polls command until it succeeds, while
	# the process whose log is log (logs/NAME.log, pids/NAME) runs
	local what=$1 secs=$2 log=$3 i name
	shift 3
	name=$(basename "$log" .log)
	for ((i = 0; i < secs * 2; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		if [ -f "$D/pids/$name" ] && ! kill -0 "$(cat "$D/pids/$name")" 2>/dev/null; then
			echo "kube up: $name exited; the end of $log:" >&2
			tail -20 "$log" >&2 || true
			exit 1
		fi
		sleep 0.5
	done
	echo "kube up: $what not ready after ${secs}s; the end of $log:" >&2
	tail -20 "$log" >&2 || true
	exit 1
}

# --- certificates ---------------------------------------------------------------------------
P=$D/pki
cert() { # name subject [sans]: a key and a certificate signed by the CA
	local name=$1 subj=$2 sans=${3:-}
	openssl genrsa -out "$P/$name.key" 2048 2>/dev/null
	openssl req -new -key "$P/$name.key" -subj "$subj" -out "$P/$name.csr" 2>/dev/null
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=serverAuth,clientAuth"
		[ -n "$sans" ] && echo "subjectAltName=$sans"
	} >"$P/$name.ext"
	openssl x509 -req -in "$P/$name.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial \
		-days 2 -sha256 -extfile "$P/$name.ext" -out "$P/$name.crt" 2>/dev/null
}
openssl genrsa -out "$P/ca.key" 2048 2>/dev/null
openssl req -x509 -new -key "$P/ca.key" -subj "/CN=shardhost-kube-ca" -days 2 -sha256 -out "$P/ca.crt" 2>/dev/null
cert apiserver "/CN=kube-apiserver" \
	"DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$SERVICE_IP,IP:$NODE_IP"
cert admin "/O=system:masters/CN=kubernetes-admin"
cert kubelet "/O=system:nodes/CN=system:node:$NODE" "DNS:$NODE,IP:$NODE_IP,IP:127.0.0.1"
openssl genrsa -out "$P/sa.key" 2048 2>/dev/null
openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
kubeconfig() { # file user
	cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    certificate-authority: $P/ca.crt
    server: https://$NODE_IP:6443
users:
- name: $2
  user:
    client-certificate: $P/$2.crt
    client-key: $P/$2.key
contexts:
- name: local
  context: {cluster: local, user: $2}
current-context: local
KC
}
kubeconfig "$D/admin.kubeconfig" admin
kubeconfig "$D/kubelet.kubeconfig" kubelet

# --- etcd ---------------------------------------------------------------------------------------
start etcd etcd --name shardhost-kube --data-dir "$D/etcd" \
	--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
	--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
	--initial-cluster shardhost-kube=http://127.0.0.1:2380 --unsafe-no-fsync
wait_for etcd 60 "$D/logs/etcd.log" curl -sf http://127.0.0.1:2379/health

# --- the control plane ------------------------------------------------------------------------------
start kube-apiserver "$BIN/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
	--advertise-address "$NODE_IP" --bind-address 0.0.0.0 --secure-port 6443 \
	--service-cluster-ip-range "$SERVICE_CIDR" \
	--client-ca-file "$P/ca.crt" --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" \
	--kubelet-client-certificate "$P/admin.crt" --kubelet-client-key "$P/admin.key" \
	--service-account-issuer https://kubernetes.default.svc.cluster.local \
	--service-account-key-file "$P/sa.pub" --service-account-signing-key-file "$P/sa.key" \
	--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
	--kubelet-preferred-address-types InternalIP \
	--allow-privileged --profiling=false
wait_for kube-apiserver 180 "$D/logs/kube-apiserver.log" \
	curl -sf --cacert "$P/ca.crt" --cert "$P/admin.crt" --key "$P/admin.key" "https://$NODE_IP:6443/readyz"
start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$D/admin.kubeconfig" \
	--authentication-kubeconfig "$D/admin.kubeconfig" --authorization-kubeconfig "$D/admin.kubeconfig" \
	--bind-address 127.0.0.1 --leader-elect=false \
	--service-account-private-key-file "$P/sa.key" --root-ca-file "$P/ca.crt" \
	--cluster-signing-cert-file "$P/ca.crt" --cluster-signing-key-file "$P/ca.key" \
	--service-cluster-ip-range "$SERVICE_CIDR"
start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$D/admin.kubeconfig" \
	--authentication-kubeconfig "$D/admin.kubeconfig" --authorization-kubeconfig "$D/admin.kubeconfig" \
	--bind-address 127.0.0.1 --leader-elect=false

# --- containerd and the CNI -----------------------------------------------------------------------------
cat >"$D/containerd.toml" <<TOML
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$D/containerd.sock"
[ttrpc]
  address = "$D/containerd.sock.ttrpc"
[debug]
  address = "$D/containerd-debug.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  netns_mounts_under_state_dir = true
  # A container here may not lower its oom_score_adj below the machine's (the pause
  # sandbox asks for -998: runc fails "failed to update /proc/self/oom_score_adj:
  # Permission denied"): keep every container's at containerd's or above.
  restrict_oom_score_adj = true
  enable_unprivileged_ports = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$D/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
TOML
# The firewall plugin accepts the pods' traffic in FORWARD: Docker's policy there is DROP,
# which, with bridge-nf-call-iptables, dropped even pod-to-pod traffic on the bridge.
cat >"$D/cni/net.d/10-shardhost-kube.conflist" <<CNI
{
  "cniVersion": "0.4.0",
  "name": "shardhost-kube",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$D/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall"}
  ]
}
CNI
modprobe br_netfilter 2>/dev/null || true
sysctl -qw net.ipv4.ip_forward=1 || true
[ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null)" = 1 ] ||
	die "net.bridge.bridge-nf-call-iptables is not 1 (modprobe br_netfilter; sysctl -w net.bridge.bridge-nf-call-iptables=1): Services would not reach pods on the bridge"
start containerd containerd --config "$D/containerd.toml"
wait_for containerd 60 "$D/logs/containerd.log" ctr --address "$D/containerd.sock" version
ctr --address "$D/containerd.sock" -n k8s.io images import "$CACHE/pause.tar" >/dev/null ||
	die "importing the pause image ($CACHE/pause.tar) into containerd failed"

# --- CoreDNS: on the node, at its IP, the pods' nameserver --------------------------------------------------
cat >"$D/Corefile" <<COREFILE
.:53 {
    bind $NODE_IP
    errors
    health 127.0.0.1:18080
    ready 127.0.0.1:18181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $D/admin.kubeconfig local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
}
COREFILE
start coredns "$BIN/coredns" -conf "$D/Corefile"

# --- the kubelet and kube-proxy ----------------------------------------------------------------------------------
cat >"$D/kubelet.yaml" <<KUBELET
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$P/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$P/kubelet.crt"
tlsPrivateKeyFile: "$P/kubelet.key"
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: "unix://$D/containerd.sock"
clusterDomain: cluster.local
clusterDNS: ["$NODE_IP"]
resolvConf: /etc/resolv.conf
podLogsDir: "$D/pod-logs"
readOnlyPort: 0
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
KUBELET
start kubelet "$BIN/kubelet" --config "$D/kubelet.yaml" --kubeconfig "$D/kubelet.kubeconfig" \
	--root-dir "$D/kubelet" --cert-dir "$P" --hostname-override "$NODE" --node-ip "$NODE_IP"
cat >"$D/kube-proxy.yaml" <<PROXY
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$D/admin.kubeconfig"}
mode: iptables
clusterCIDR: "$POD_CIDR"
hostnameOverride: "$NODE"
bindAddress: "$NODE_IP"
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
PROXY
start kube-proxy "$BIN/kube-proxy" --config "$D/kube-proxy.yaml"

wait_for "the node $NODE" 180 "$D/logs/kubelet.log" kubectl wait --for=condition=Ready "node/$NODE" --timeout=1s
wait_for "the default ServiceAccount" 120 "$D/logs/kube-controller-manager.log" kubectl get serviceaccount default
wait_for "kube-proxy" 60 "$D/logs/kube-proxy.log" curl -sf http://127.0.0.1:10256/healthz
wait_for CoreDNS 60 "$D/logs/coredns.log" curl -sf http://127.0.0.1:18181/ready
ok=yes
echo "kube up: ready ($(kubectl version -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1) on $NODE, $NODE_IP); . $D/env; stop with tools/kube/down.sh $D" >&2
echo "$D"
