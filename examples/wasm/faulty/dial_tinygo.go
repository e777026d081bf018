//go:build tinygo

package main

import "errors"

// dial fails: TinyGo has no net package for wasip1 (and WASI preview 1 has no way to open
// a connection: a guest can only use sockets the host hands it, and shardhost hands it
// none).
func dial(addr string) error {
	return errors.New("dial tcp " + addr + ": no network in a TinyGo guest")
}
