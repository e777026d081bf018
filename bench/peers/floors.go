package main

import (
	"context"
	"io"
	"net"
	"time"

	"github.com/tetratelabs/wazero"
)

// floors are the physical limits under the workloads, measured in the same run.
type floors struct {
	tcpRTT    time.Duration // p50 of a 64-byte ping-pong on one loopback TCP connection
	wasmCall  time.Duration // mean of a call into an empty exported wasm function
	chanRound time.Duration // mean of a round trip between two goroutines (two hops)
}

// emptyModule is a wasm module exporting "f", a function of no arguments and no
// results with an empty body.
var emptyModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type section: () -> ()
	0x03, 0x02, 0x01, 0x00, // function section: one function of type 0
	0x07, 0x05, 0x01, 0x01, 'f', 0x00, 0x00, // export section: "f" = function 0
	0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b, // code section: no locals, end
}

func measureFloors(ctx context.Context) (floors, error) {
	var f floors
	var err error
	if f.tcpRTT, err = tcpRoundTrip(20000); err != nil {
		return f, err
	}
	if f.wasmCall, err = emptyWasmCall(ctx, 2_000_000); err != nil {
		return f, err
	}
	f.chanRound = channelRoundTrip(1_000_000)
	return f, nil
}

func tcpRoundTrip(n int) (time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		buf := make([]byte, 64)
		for {
			if _, err := io.ReadFull(conn, buf); err != nil {
				return
			}
			if _, err := conn.Write(buf); err != nil {
				return
			}
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 64)
	samples := make(latencies, 0, n)
	for i := 0; i < n+1000; i++ {
		start := time.Now()
		if _, err := conn.Write(buf); err != nil {
			conn.Close()
			return 0, err
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
			conn.Close()
			return 0, err
		}
		if i >= 1000 { // after the warm-up
			samples = append(samples, time.Since(start))
		}
	}
	conn.Close()
	<-done
	return samples.quantile(0.5), nil
}

func emptyWasmCall(ctx context.Context, n int) (time.Duration, error) {
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	mod, err := rt.Instantiate(ctx, emptyModule)
	if err != nil {
		return 0, err
	}
	fn := mod.ExportedFunction("f")
	stack := make([]uint64, 1)
	for i := 0; i < 1000; i++ {
		if err := fn.CallWithStack(ctx, stack); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := fn.CallWithStack(ctx, stack); err != nil {
			return 0, err
		}
	}
	return time.Since(start) / time.Duration(n), nil
}

func channelRoundTrip(n int) time.Duration {
	ping, pong := make(chan struct{}), make(chan struct{})
	go func() {
		for range ping {
			pong <- struct{}{}
		}
		close(pong)
	}()
	start := time.Now()
	for i := 0; i < n; i++ {
		ping <- struct{}{}
		<-pong
	}
	d := time.Since(start) / time.Duration(n)
	close(ping)
	<-pong
	return d
}
