// Command shardhost runs shardhost hosts and talks to them: start a host, start a local
// three-node cluster for development, deploy entity modules, and send messages to
// entities. Run "shardhost help" for the commands.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "shardhost:", oneLine(err.Error()))
		os.Exit(1)
	}
}
