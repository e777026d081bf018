//go:build !tinygo

package main

import "net"

// dial opens a TCP connection to addr and closes it.
func dial(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}
