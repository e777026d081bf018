package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func TestInmemGossipOneWayAndFixedAddress(t *testing.T) {
	n := NewInmemGossipNetwork()
	a := n.NewTransport()
	defer a.Shutdown()
	b, err := n.NewTransportAt("127.0.0.1:7946")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.NewTransportAt(b.Addr()); err == nil {
		t.Fatal("a second transport at a used address")
	}
	recv := func(tr *InmemGossipTransport) string {
		t.Helper()
		select {
		case p := <-tr.PacketCh():
			return string(p.Buf)
		case <-time.After(5 * time.Second):
			t.Fatal("no packet")
			return ""
		}
	}
	n.DisconnectOneWay(a.Addr(), b.Addr())
	if _, err := a.WriteToAddress([]byte("a-to-b"), memberlist.Address{Addr: b.Addr()}); err == nil {
		t.Fatal("a packet crossed a one-way cut")
	}
	if _, err := b.WriteToAddress([]byte("b-to-a"), memberlist.Address{Addr: a.Addr()}); err != nil {
		t.Fatal(err)
	}
	if got := recv(a); got != "b-to-a" {
		t.Fatalf("a got %q", got)
	}
	// A stream needs both directions.
	if _, err := b.DialAddressTimeout(memberlist.Address{Addr: a.Addr()}, time.Second); err == nil {
		t.Fatal("a stream across a one-way cut")
	}
	n.Heal()
	if _, err := a.WriteToAddress([]byte("healed"), memberlist.Address{Addr: b.Addr()}); err != nil {
		t.Fatal(err)
	}
	if got := recv(b); got != "healed" {
		t.Fatalf("b got %q", got)
	}
	// A restart at the same address: the old transport's shutdown frees it.
	b.Shutdown()
	b2, err := n.NewTransportAt(b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Shutdown()
	b.Shutdown()
	if _, err := a.WriteToAddress([]byte("restarted"), memberlist.Address{Addr: b2.Addr()}); err != nil {
		t.Fatal(err)
	}
	if got := recv(b2); got != "restarted" {
		t.Fatalf("b2 got %q", got)
	}
}
