package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardhost/shardhost/internal/pki"
	"github.com/shardhost/shardhost/internal/testutil"
)

// memberTLS returns the member TLS configuration of a certificate issued by ca: a
// member certificate, or a client certificate with a role when role is not "".
func memberTLS(t testing.TB, ca *pki.CA, role string) *tls.Config {
	t.Helper()
	var is pki.Issued
	var err error
	if role == "" {
		is, err = ca.Member([]string{"127.0.0.1"}, time.Hour)
	} else {
		is, err = ca.Client("c", role, time.Hour)
	}
	if err != nil {
		t.Fatal(err)
	}
	pair, err := is.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return pki.MemberTLSConfig(pair, ca.PoolOf())
}

// strangerTrusting is the configuration of a process that knows the cluster's CA
// certificate (it is no secret) but has a member certificate of its own CA: it accepts
// the members, who must refuse it.
func strangerTrusting(t testing.TB, ca *pki.CA) *tls.Config {
	t.Helper()
	tc := memberTLS(t, newTestCA(t), "")
	return pki.MemberTLSConfig(tc.Certificates[0], ca.PoolOf())
}

func newTestCA(t testing.TB) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// tlsMember starts a membership gossiping over mutual TLS on a free port of 127.0.0.1.
func tlsMember(t *testing.T, tc *tls.Config, seeds ...string) *Membership {
	t.Helper()
	cfg := DefaultMembershipConfig()
	cfg.BindAddr = "127.0.0.1:0"
	cfg.Profile = "local"
	cfg.Lifecycle = DefaultLocalCoreConfig()
	cfg.Logger = quiet
	cfg.TransportAddr = "t"
	cfg.TLS = tc
	cfg.Seeds = seeds
	m, err := NewMembership(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return m
}

// TestMembershipOverMutualTLS: members with member certificates of one CA form a
// cluster over TLS alone (no UDP); a process with a member certificate of another CA, or
// with a client certificate of the same CA, cannot join, and the members never see it.
func TestMembershipOverMutualTLS(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	ca := newTestCA(t)
	first := tlsMember(t, memberTLS(t, ca, ""))
	seed := first.Self().Address
	ms := []*Membership{first, tlsMember(t, memberTLS(t, ca, ""), seed), tlsMember(t, memberTLS(t, ca, ""), seed)}
	testutil.Eventually(t, 20*time.Second, "3 up members over mutual TLS", func() bool { return allUp(ms) })
	if first.tlsGossip == nil {
		t.Fatal("gossip does not run over TLS")
	}

	for name, tc := range map[string]*tls.Config{
		"another CA's member":                 memberTLS(t, newTestCA(t), ""),
		"another CA's member trusting the CA": strangerTrusting(t, ca),
		"a client certificate, own CA":        memberTLS(t, ca, "admin"),
	} {
		intruder := tlsMember(t, tc, seed)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := intruder.Join(ctx)
		cancel()
		if !errors.Is(err, ErrJoinFailed) || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("%s: join: %v, want ErrJoinFailed naming the TLS failure", name, err)
		}
		intruder.Shutdown()
	}
	for _, m := range ms {
		if n := len(m.View().Members); n != 3 {
			t.Errorf("%s sees %d members", m.Self().Address, n)
		}
		if n := m.ml.NumMembers(); n != 3 {
			t.Errorf("%s's memberlist has %d members", m.Self().Address, n)
		}
	}
	if st := first.tlsGossip.Stats(); st.HandshakeFailures == 0 {
		t.Errorf("the seed counted no failed handshake: %+v", st)
	}
}

// TestTLSGossipTransportCapsUnauthenticatedConnections: past MaxPendingConns inbound
// connections that have not completed their handshake, a new connection is closed at
// once; one that never handshakes is closed after HandshakeTimeout; plaintext and bad
// kinds get nothing.
func TestTLSGossipTransportCapsUnauthenticatedConnections(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tr, err := newTLSGossipTransport(tlsGossipConfig{BindAddr: "127.0.0.1:0", TLS: memberTLS(t, newTestCA(t), ""),
		MaxPendingConns: 2, HandshakeTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown()
	addr := tr.Addr().String()
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	testutil.EventuallyNil(t, 10*time.Second, "a third connection closed at once", func() error { return closedAtOnce(addr) })
	if st := tr.Stats(); st.RefusedConns == 0 {
		t.Errorf("no refused connection counted: %+v", st)
	}
	// The held ones never handshake: closed after HandshakeTimeout.
	for _, c := range held {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadAll(c); err != nil {
			t.Errorf("a connection that never handshakes: %v", err)
		}
	}
	select {
	case p := <-tr.PacketCh():
		t.Fatalf("a packet from nobody: %v", p)
	default:
	}
}

// TestTLSGossipTransportPackets: packets between two transports arrive whole, with the
// sender's gossip address, and a stream carries bytes both ways.
func TestTLSGossipTransportPackets(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ca := newTestCA(t)
	a, err := newTLSGossipTransport(tlsGossipConfig{BindAddr: "127.0.0.1:0", TLS: memberTLS(t, ca, "")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	b, err := newTLSGossipTransport(tlsGossipConfig{BindAddr: "127.0.0.1:0", TLS: memberTLS(t, ca, "")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	if _, _, err := a.FinalAdvertiseAddr("", 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, err := a.WriteTo([]byte{byte(i), 1, 2, 3}, b.Addr().String()); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		select {
		case p := <-b.PacketCh():
			if p.Buf[0] != byte(i) || len(p.Buf) != 4 || p.From.String() != a.Addr().String() {
				t.Fatalf("packet %d: %v from %v", i, p.Buf, p.From)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("packet %d did not arrive", i)
		}
	}
	if _, err := a.WriteTo(make([]byte, 65<<10), b.Addr().String()); err == nil {
		t.Error("a packet over MaxPacketSize was taken")
	}
	conn, err := a.DialTimeout(b.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var in net.Conn
	select {
	case in = <-b.StreamCh():
	case <-time.After(10 * time.Second):
		t.Fatal("no stream")
	}
	defer in.Close()
	conn.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(in, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("stream: %q %v", buf, err)
	}
}

// TestTCPTransportMemberTLSRefusesStrangers: with the member TLS configuration, frames
// flow between members of one CA; a transport with another CA's member certificate, or
// with a client certificate of the same CA, cannot get a single frame to the handler.
func TestTCPTransportMemberTLSRefusesStrangers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ca := newTestCA(t)
	with := func(tc *tls.Config) func(*TCPConfig) {
		return func(c *TCPConfig) { c.TLSConfig = tc; c.Logger = nil }
	}
	h, frames := chanHandler(100)
	a := newTestTCP(t, h, with(memberTLS(t, ca, "")))
	defer a.Close()
	for name, tc := range map[string]*tls.Config{
		"another CA's member":                 memberTLS(t, newTestCA(t), ""),
		"another CA's member trusting the CA": strangerTrusting(t, ca),
		"a client certificate, own CA":        memberTLS(t, ca, "read"),
	} {
		rogue := newTestTCP(t, func(*Frame) {}, with(tc))
		for i := 0; i < 10; i++ {
			rogue.Send(a.LocalAddr(), seqFrame(i))
		}
		// Under TLS 1.3 a client's handshake ends before the server checks its
		// certificate: the rogue may believe it wrote its frames; none reach a's handler.
		waitCond(t, 10*time.Second, name+": its frames out of its hands", func() bool {
			st := rogue.Stats()
			return st.FramesDropped+st.FramesSent >= 10
		})
		rogue.Close()
	}
	member := newTestTCP(t, func(*Frame) {}, with(memberTLS(t, ca, "")))
	defer member.Close()
	if err := member.Send(a.LocalAddr(), seqFrame(42)); err != nil {
		t.Fatal(err)
	}
	if f := recvFrame(t, frames, 10*time.Second); f.ID != seqFrame(42).ID {
		t.Fatalf("the first frame to arrive is %+v: a stranger's got through", f)
	}
	if got := a.Stats().FramesReceived; got != 1 {
		t.Fatalf("%d frames received, want only the member's", got)
	}
}
