// Command shardhost runs shardhost hosts and talks to them: start a host, start a local
// three-node cluster for development, deploy entity modules, and send messages to
// entities. Run "shardhost help" for the commands.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/shardhost/shardhost/host"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "shardhost:", oneLine(withFlagNames(err).Error()))
		os.Exit(1)
	}
}

// configFieldFlags names the flag that sets each host.Config field a host.ConfigError names.
var configFieldFlags = map[string]string{
	"BindAddr": "--bind", "TransportAddr": "--transport", "APIAddr": "--api", "StateStore": "--state-store",
}

// withFlagNames says which flag set a bad value: the library names its Config field,
// the command line names its flag.
func withFlagNames(err error) error {
	var ce *host.ConfigError
	if errors.As(err, &ce) {
		if flag, ok := configFieldFlags[ce.Field]; ok {
			return fmt.Errorf("%s %q: %w", flag, ce.Value, ce.Err)
		}
	}
	return err
}
