// Command shardhost runs shardhost hosts and talks to them: start a host, start a local
// three-node cluster for development, deploy entity modules, and send messages to
// entities. Run "shardhost help" for the commands.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/sharding"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "shardhost:", oneLine(withFlagNames(err).Error()))
		os.Exit(exitCode(err))
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

// The exit codes of a failure (docs/cli.md, "Exit codes"). ask and tell tell apart a
// message that was not delivered from one whose outcome is unknown; every other
// failure exits 1.
const (
	exitFailure = 1
	// exitNotDelivered is sysexits.h's EX_TEMPFAIL: the message never reached its entity
	// (or the request never reached the API), so sending it again is safe.
	exitNotDelivered = 75
	// exitOutcomeUnknown is what timeout(1) exits with when the command timed out: the
	// message may have been handled (no answer in time, or the connection broke), so
	// send it again only with an idempotency key, or if handling it twice does no harm.
	exitOutcomeUnknown = 124
)

// exitError is a failure with an exit code other than exitFailure.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode is the exit code of a failed command: an exitError's, else exitFailure.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitFailure
}

// messageOutcome gives the failure of an ask or a tell the exit code of its outcome: not
// delivered (the API's code not-delivered, or a request that did not reach the API) or
// unknown (the API's code outcome-unknown, or a request that may have reached the API
// and had no answer). Others are returned as they are; nil stays nil.
func messageOutcome(err error) error {
	if err == nil {
		return nil
	}
	var notDelivered, unknown bool
	var ae *apiError
	var re *requestError
	switch {
	case errors.As(err, &ae):
		notDelivered, unknown = ae.code == sharding.CodeNotDelivered, ae.code == sharding.CodeOutcomeUnknown
	case errors.As(err, &re):
		notDelivered, unknown = !re.sent, re.sent
	}
	switch {
	case notDelivered:
		return &exitError{exitNotDelivered, err}
	case unknown:
		return &exitError{exitOutcomeUnknown, err}
	}
	return err
}
