package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// dnsDiscovery finds a cluster's contact points through DNS, as Akka Cluster
// Bootstrap's DNS discovery does: the A/AAAA records of a name (a Kubernetes headless
// Service's, say) with a port of our own, or, for a name starting with "_", its SRV
// records (target and port each).
type dnsDiscovery struct {
	name     string
	port     int           // the port of A/AAAA answers
	resolver *net.Resolver // the system's, or one asking a given server
}

// newDNSDiscovery parses --discovery ("dns:NAME") with the port of A/AAAA answers and
// the DNS server to ask ("" for the system's resolver).
func newDNSDiscovery(spec string, port int, server string) (*dnsDiscovery, error) {
	name, ok := strings.CutPrefix(spec, "dns:")
	if !ok || name == "" {
		return nil, fmt.Errorf("--discovery %q: want dns:NAME (A/AAAA records, with --discovery-port) or dns:_SERVICE._PROTO.NAME (SRV records)", spec)
	}
	d := &dnsDiscovery{name: name, port: port, resolver: net.DefaultResolver}
	if server != "" {
		if _, _, err := net.SplitHostPort(server); err != nil {
			return nil, fmt.Errorf("--discovery-dns-server %q: %v (want HOST:PORT)", server, err)
		}
		d.resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var dialer net.Dialer
			return dialer.DialContext(ctx, network, server)
		}}
	}
	return d, nil
}

// lookup returns the contact points the name answers now, as IP:PORT in address order
// (IP, then port), without duplicates.
func (d *dnsDiscovery) lookup(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var points []netip.AddrPort
	if strings.HasPrefix(d.name, "_") {
		_, srvs, err := d.resolver.LookupSRV(ctx, "", "", d.name)
		if err != nil {
			return nil, err
		}
		for _, srv := range srvs {
			ips, err := d.resolver.LookupNetIP(ctx, "ip", srv.Target)
			if err != nil {
				return nil, fmt.Errorf("SRV target %s: %v", srv.Target, err)
			}
			for _, ip := range ips {
				points = append(points, netip.AddrPortFrom(ip.Unmap(), srv.Port))
			}
		}
	} else {
		ips, err := d.resolver.LookupNetIP(ctx, "ip", d.name)
		if err != nil {
			return nil, err
		}
		for _, ip := range ips {
			points = append(points, netip.AddrPortFrom(ip.Unmap(), uint16(d.port)))
		}
	}
	slices.SortFunc(points, func(a, b netip.AddrPort) int { return a.Compare(b) })
	points = slices.Compact(points)
	out := make([]string, len(points))
	for i, p := range points {
		out[i] = p.String()
	}
	return out, nil
}

// bootstrap waits until the discovery has answered the same contact points, at least
// required of them, for stable in a row, and returns them with the lowest address first:
// Akka Cluster Bootstrap's rule, with the seed-node rule (startMember) doing the rest.
// Given them as --join, the lowest member tries the others and, when no existing
// cluster answers, forms a new one; every other member joins through them. So members
// started together form one cluster, and a member started later (the lowest included)
// joins the cluster that exists. It polls every interval until ctx ends.
func bootstrap(ctx context.Context, d *dnsDiscovery, required int, stable, interval time.Duration, log *slog.Logger) ([]string, error) {
	var last []string
	var since time.Time
	lastLog := time.Time{}
	for {
		points, err := d.lookup(ctx)
		now := time.Now()
		switch {
		case err != nil:
			last = nil
			if now.Sub(lastLog) > 5*time.Second {
				log.Warn("discovery: no contact points yet", "name", d.name, "err", err)
				lastLog = now
			}
		case !slices.Equal(points, last):
			last, since = points, now
			log.Info("discovery: contact points", "name", d.name, "points", points, "required", required)
		case len(points) >= required && now.Sub(since) >= stable:
			return points, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("discovery through %s: %w (last contact points: %v, %d required)", d.name, ctx.Err(), last, required)
		case <-time.After(interval):
		}
	}
}

// discoveryPort returns --discovery-port, or the port of --bind when it is 0.
func discoveryPort(port int, bind string) (int, error) {
	if port != 0 {
		return port, nil
	}
	_, p, err := net.SplitHostPort(bind)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(p)
}
