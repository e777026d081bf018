#!/usr/bin/env bash
# tools/kube/build.sh: builds, once, the parts of a single-node Kubernetes cluster that
# Debian does not package, and caches them under ~/.cache/shardhost/kube-$KUBE_VERSION/bin:
#
#   kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl
#       from k8s.io/kubernetes (Go module proxy), its staging modules replaced by their
#       published k8s.io/* v0.x releases (a throwaway module: require + replace lines);
#   kustomize   sigs.k8s.io/kustomize/kustomize/v5;
#   coredns     github.com/coredns/coredns;
#   pause       a static binary that sleeps until SIGTERM, and pause.tar, an OCI image
#               FROM scratch holding it, named as the kubelet expects (registry.k8s.io/pause).
#
# A binary already in the cache is not built again; delete the directory to rebuild.
# Heavy: about 2.5 GB of module downloads and build cache; builds run under nice -n 19
# with GOFLAGS=-p=2 (KUBE_BUILD_P changes it). Prints the cache's bin directory last.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.34.4}
STAGING_VERSION=v0.${KUBE_VERSION#v1.}
KUSTOMIZE_VERSION=${KUSTOMIZE_VERSION:-v5.8.2}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
PAUSE_IMAGE=${PAUSE_IMAGE:-registry.k8s.io/pause:3.10.1}
CACHE=${KUBE_CACHE:-$HOME/.cache/shardhost/kube-$KUBE_VERSION}
BIN=$CACHE/bin
P=${KUBE_BUILD_P:-2}

die() { echo "kube build: $*" >&2; exit 1; }
command -v go >/dev/null || die "go is missing: install Go >= 1.26 (https://go.dev/dl/)"
mkdir -p "$BIN" "$CACHE/src"
export CGO_ENABLED=0 GOFLAGS="-p=$P -trimpath -buildvcs=false"

# --- Kubernetes -----------------------------------------------------------------------
K8S_CMDS="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl"
need=""
for c in $K8S_CMDS; do [ -x "$BIN/$c" ] || need="$need $c"; done
if [ -n "$need" ]; then
	src=$CACHE/src/kubernetes
	mkdir -p "$src"
	if [ ! -f "$src/go.sum" ]; then
		modfile=$(mktemp)
		go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" >"$modfile" ||
			die "k8s.io/kubernetes@$KUBE_VERSION: the Go module proxy did not serve it (GOPROXY=$(go env GOPROXY))"
		gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' "$modfile")
		rm -f "$modfile"
		{
			echo "module shardhost.local/kubebuild"
			echo
			echo "go 1.24.0"
			echo
			echo "godebug default=go1.24"
			echo
			echo "require k8s.io/kubernetes $KUBE_VERSION"
			echo
			echo "replace ("
			# Every staging module that k8s.io/kubernetes replaces by ./staging/src/...
			sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$gomod" |
				while read -r m; do echo "	$m => $m $STAGING_VERSION"; done
			echo ")"
		} >"$src/go.mod"
		# The rest of k8s.io/kubernetes's requirements, at the versions it pins.
		sed -n '/^require (/,/^)/p' "$gomod" | grep -v '^require\|^)' |
			grep -v 'k8s.io/[a-z0-9-]* v0.0.0$' |
			sed 's#//.*##' | awk 'NF==2 {print "require " $1 " " $2}' >>"$src/go.mod"
		(cd "$src" && go mod download k8s.io/kubernetes && GOFLAGS=-mod=mod go list -deps $(for c in $need; do echo k8s.io/kubernetes/cmd/$c; done) >/dev/null) ||
			die "resolving k8s.io/kubernetes@$KUBE_VERSION's modules failed (see above)"
	fi
	ld="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld="$ld -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2)"
		ld="$ld -X $p.gitTreeState=clean -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	done
	echo "kube build: building$need ($KUBE_VERSION, staging $STAGING_VERSION) into $BIN" >&2
	start=$(date +%s)
	(cd "$src" && GOFLAGS="$GOFLAGS -mod=mod" nice -n 19 go build -ldflags "$ld" -o "$BIN/" \
		$(for c in $need; do echo k8s.io/kubernetes/cmd/$c; done)) ||
		die "building$need from k8s.io/kubernetes@$KUBE_VERSION failed (see above)"
	echo "kube build: kubernetes built in $(($(date +%s) - start)) s" >&2
fi

# --- kustomize, CoreDNS ---------------------------------------------------------------
install_mod() { # name module@version
	[ -x "$BIN/$1" ] && return
	echo "kube build: building $2" >&2
	start=$(date +%s)
	GOBIN=$BIN nice -n 19 go install -ldflags "-s -w" "$2" || die "building $2 failed (see above)"
	echo "kube build: $1 built in $(($(date +%s) - start)) s" >&2
}
install_mod kustomize "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
install_mod coredns "github.com/coredns/coredns@$COREDNS_VERSION"

# --- pause ----------------------------------------------------------------------------
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$CACHE/pause.tar" ] || [ ! -x "$BIN/pause" ]; then
	(cd "$here/pause" && nice -n 19 go build -ldflags "-s -w" -o "$BIN/pause" .) || die "building the pause binary failed"
	(cd "$here/ocitar" && go run . -binary "$BIN/pause" -name "$PAUSE_IMAGE" -entrypoint /pause -o "$CACHE/pause.tar") ||
		die "writing the pause image failed"
fi
echo "$PAUSE_IMAGE" >"$CACHE/pause.name"
echo "$KUBE_VERSION" >"$CACHE/version"
echo "$BIN"
