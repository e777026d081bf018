package cluster

import (
	"context"
	"net"
	"testing"
	"time"
)

// FuzzTCPInboundFromStranger feeds arbitrary bytes to a member's node-to-node port from
// a peer that is no member (plain TCP, as a cluster without TLS lets anyone connect):
// length prefixes, frames of any kind and topic, requests to real handlers. The
// transport and the messenger must neither panic nor stop serving: after each input a
// member's request still gets its reply.
func FuzzTCPInboundFromStranger(f *testing.F) {
	for _, fr := range sampleFrames()[:3] {
		f.Add(stream(f, fr))
	}
	req, _ := EncodeFrame(&Frame{Kind: FrameRequest, ID: 9, From: "127.0.0.1:1", Topic: "echo", Body: []byte("x")})
	f.Add(stream(f, &Frame{Kind: FrameRequest, ID: 9, From: "127.0.0.1:1", Topic: "echo", Body: []byte("x")}))
	f.Add(append([]byte{0, 0, 0, byte(len(req))}, req...))
	f.Add(stream(f, &Frame{Kind: FrameResponse, ID: 1, Topic: "echo"}, &Frame{Kind: FrameOneWay, Topic: "nobody"}))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))

	newM := func() *Messenger {
		m, err := NewMessenger(func(h FrameHandler) (Transport, error) {
			cfg := DefaultLocalTCPConfig()
			cfg.MaxFrameSize = 1 << 16
			cfg.WriteTimeout = time.Second
			return NewTCPTransport(cfg, h)
		}, nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { m.Close() })
		return m
	}
	member, peer := newM(), newM()
	member.Handle("echo", func(r *Request) { r.Reply(r.Body, nil) })
	member.Handle("later", func(r *Request) { go r.Reply(nil, nil) })

	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("tcp", member.LocalAddr())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(data)
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := peer.Request(ctx, member.LocalAddr(), "echo", []byte("still here"))
		if err != nil || string(b) != "still here" {
			t.Fatalf("after a stranger's %d bytes the member does not answer: %q %v", len(data), b, err)
		}
	})
}
