// Command pause is the sandbox container of the single-node cluster that tools/kube
// brings up (docs/kubernetes.md): the process that holds a pod's namespaces. It sleeps
// until SIGTERM or SIGINT and exits 0. tools/kube/build.sh builds it statically and
// packs it, alone, into an image under the name the kubelet expects.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
