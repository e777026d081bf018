// Package netaddr resolves the host names that members may be given instead of IP
// addresses (--bind, --join): a member's address is an IP, which other members dial
// and rank replicas by.
package netaddr

import (
	"context"
	"fmt"
	"net"
	"time"
)

// LookupIP resolves a host name to its first IPv4 address, else its first address,
// within 5 s. An IP is returned as it is.
func LookupIP(host string) (net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("%s has no address", host)
	}
	for _, ip := range ips {
		if ip.To4() != nil {
			return ip, nil
		}
	}
	return ips[0], nil
}

// Resolve returns addr (HOST:PORT) with its host replaced by LookupIP's address; an
// empty host, or an IP, is kept as it is.
func Resolve(addr string) (string, error) {
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if h == "" || net.ParseIP(h) != nil {
		return addr, nil
	}
	ip, err := LookupIP(h)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(ip.String(), port), nil
}
