package e2e

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// testDNS is a DNS server inside the test: it answers A queries for shardhost.test.
// with the addresses it is given, and SRV queries for _gossip._tcp.shardhost.test. with
// one target per address.
type testDNS struct {
	addr   string
	port   int // the gossip port of the SRV answers
	mu     sync.Mutex
	ips    []string
	server *dns.Server
}

func startTestDNS(t *testing.T, port int) *testDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &testDNS{addr: pc.LocalAddr().String(), port: port}
	d.server = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(d.serve)}
	go d.server.ActivateAndServe()
	t.Cleanup(func() { d.server.Shutdown() })
	return d
}

func (d *testDNS) set(ips ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ips = append([]string(nil), ips...)
}

func (d *testDNS) serve(w dns.ResponseWriter, req *dns.Msg) {
	d.mu.Lock()
	ips := append([]string(nil), d.ips...)
	d.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	for _, q := range req.Question {
		switch {
		case q.Qtype == dns.TypeA && q.Name == "shardhost.test.":
			for _, ip := range ips {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0}, A: net.ParseIP(ip)})
			}
		case q.Qtype == dns.TypeA && strings.HasSuffix(q.Name, ".members.shardhost.test."):
			ip := strings.ReplaceAll(strings.TrimSuffix(q.Name, ".members.shardhost.test."), "-", ".")
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0}, A: net.ParseIP(ip)})
		case q.Qtype == dns.TypeSRV && q.Name == "_gossip._tcp.shardhost.test.":
			for _, ip := range ips {
				m.Answer = append(m.Answer, &dns.SRV{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 0},
					Port: uint16(d.port), Target: strings.ReplaceAll(ip, ".", "-") + ".members.shardhost.test."})
			}
		}
	}
	w.WriteMsg(m)
}

// launchDiscovered starts members on the loopback addresses ips (one gossip port for
// all), at the same moment, each finding the others through the test's DNS server, and
// waits until each serves its API.
func launchDiscovered(t *testing.T, d *testDNS, name string, required int, ips ...string) []*host {
	hosts := make([]*host, len(ips))
	var wg sync.WaitGroup
	for i, ip := range ips {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// startChecked launches it again on other transport and API ports when one
			// was taken meanwhile (the gossip address stays: DNS names it).
			hosts[i] = startChecked(t, healthy, func() *host {
				return launchHostWith(t, t.TempDir(), fmt.Sprintf("%s:%d", ip, d.port), "",
					"--discovery", "dns:"+name, "--discovery-dns-server", d.addr,
					"--required-contact-points", fmt.Sprint(required), "--contact-points-stable", "1s", "--seed-node-timeout", "1s")
			})
		}()
	}
	wg.Wait()
	return hosts
}

// oneCluster waits until every host sees the same n members up, and fails if two of them
// formed clusters of their own.
func oneCluster(t *testing.T, hosts []*host, n int) {
	t.Helper()
	var first map[string]string
	for _, h := range hosts {
		waitView(t, h, 60*time.Second, fmt.Sprintf("%d members up", n), allUpView(n))
		ms, _ := members(t, h)
		uids := map[string]string{}
		for _, m := range ms {
			uids[m.Address] = m.UID
		}
		if first == nil {
			first = uids
		} else if fmt.Sprint(uids) != fmt.Sprint(first) {
			t.Fatalf("two clusters: %s sees %v, %s sees %v", hosts[0].bind, first, h.bind, uids)
		}
	}
}

func killAll(hosts []*host) {
	for _, h := range hosts {
		h.cmd.Process.Kill()
		err := <-h.done
		h.done <- err
	}
}

// TestDiscoveryFormsOneCluster: five members started at the same moment, finding each
// other through DNS (A records), form exactly one cluster, 20 times over; a member
// started later joins it; and with SRV records too.
func TestDiscoveryFormsOneCluster(t *testing.T) {
	port := freePorts(t, 1)[0]
	d := startTestDNS(t, port)
	ips := []string{"127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14", "127.0.0.15"}
	d.set(ips...)
	rounds := 20
	if testing.Short() {
		rounds = 2
	}
	for round := range rounds {
		hosts := launchDiscovered(t, d, "shardhost.test", 5, ips...)
		oneCluster(t, hosts, 5)
		if round == rounds-1 {
			d.set(append(ips, "127.0.0.16")...)
			late := launchDiscovered(t, d, "shardhost.test", 5, "127.0.0.16")
			oneCluster(t, append(hosts, late...), 6)
			hosts = append(hosts, late...)
			d.set(ips...)
		}
		killAll(hosts)
	}
	hosts := launchDiscovered(t, d, "_gossip._tcp.shardhost.test", 5, ips...)
	oneCluster(t, hosts, 5)
	killAll(hosts)
}

// TestDiscoveryWithChangingAnswers: DNS names three of five members at first, then all
// five, then four, while they bootstrap (at least three required): they still form one
// cluster of five.
func TestDiscoveryWithChangingAnswers(t *testing.T) {
	port := freePorts(t, 1)[0]
	d := startTestDNS(t, port)
	ips := []string{"127.0.0.21", "127.0.0.22", "127.0.0.23", "127.0.0.24", "127.0.0.25"}
	d.set(ips[2:]...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(700 * time.Millisecond) // changes in the midst of the bootstrap, not a wait for something
		d.set(ips...)
		time.Sleep(700 * time.Millisecond)
		d.set(ips[1:]...)
		time.Sleep(700 * time.Millisecond)
		d.set(ips...)
	}()
	hosts := launchDiscovered(t, d, "shardhost.test", 3, ips...)
	<-done
	oneCluster(t, hosts, 5)
	killAll(hosts)
}
