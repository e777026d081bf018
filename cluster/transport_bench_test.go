package cluster

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// benchOneWay measures one-way frames with 64-byte bodies from a sender to a
// receiver, counted when the receiver's handler has seen them all. A full queue
// makes the sender yield and retry, so no frame is lost.
func benchOneWay(b *testing.B, newPair func(b *testing.B, h FrameHandler) (from Transport, to string, closeAll func())) {
	var got atomic.Int64
	target := make(chan struct{})
	var want atomic.Int64
	h := func(*Frame) {
		if got.Add(1) == want.Load() {
			close(target)
		}
	}
	want.Store(-1)
	from, to, closeAll := newPair(b, h)
	defer closeAll()

	// Warm the connection up before timing.
	if err := from.Send(to, &Frame{Kind: FrameOneWay, Topic: "warm"}); err != nil {
		b.Fatal(err)
	}
	waitCond(b, 10*time.Second, "warm-up frame", func() bool { return got.Load() == 1 })
	got.Store(0)
	want.Store(int64(b.N))

	f := &Frame{Kind: FrameOneWay, Topic: "bench/oneway", Body: make([]byte, 64)}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for {
			err := from.Send(to, f)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrQueueFull) {
				b.Fatal(err)
			}
			runtime.Gosched()
		}
	}
	select {
	case <-target:
	case <-time.After(time.Minute):
		b.Fatalf("received %d of %d frames", got.Load(), b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
}

func BenchmarkTCPOneWay64B(b *testing.B) {
	benchOneWay(b, func(b *testing.B, h FrameHandler) (Transport, string, func()) {
		rx := newTestTCP(b, h)
		tx := newTestTCP(b, func(*Frame) {})
		return tx, rx.LocalAddr(), func() { _ = tx.Close(); _ = rx.Close() }
	})
}

func BenchmarkInmemOneWay64B(b *testing.B) {
	benchOneWay(b, func(b *testing.B, h FrameHandler) (Transport, string, func()) {
		net := NewInmemNetwork()
		rx := newTestInmem(b, net, "rx", h)
		tx := newTestInmem(b, net, "tx", func(*Frame) {})
		return tx, "rx", func() { _ = tx.Close(); _ = rx.Close() }
	})
}

// benchMessengers returns a requester and the address of a responder serving an
// "echo" topic over TCP on loopback.
func benchMessengers(b *testing.B) (*Messenger, string, func()) {
	ms, closeAll := benchMessengerPair(b)
	return ms[0], ms[1].LocalAddr(), closeAll
}

// benchMessengerPair returns a requester (ms[0]) and a responder serving an "echo"
// topic (ms[1]) over TCP on loopback, after one warm-up request.
func benchMessengerPair(b *testing.B) ([]*Messenger, func()) {
	ms, _, closeAll := newTestMessengers(b, "tcp", 2)
	ms[1].Handle("echo", func(r *Request) { r.Reply(r.Body, nil) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ms[0].Request(ctx, ms[1].LocalAddr(), "echo", nil); err != nil {
		b.Fatal(err)
	}
	return ms, closeAll
}

// processCPU returns the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// tcpWrites returns the frames sent and the writes that carried them, over the TCP
// transports of ms.
func tcpWrites(ms []*Messenger) (frames, writes uint64) {
	for _, m := range ms {
		s := m.Transport().(*TCPTransport).Stats()
		frames += s.FramesSent
		writes += s.Writes
	}
	return frames, writes
}

// BenchmarkMessengerRequestTCP measures sequential request round trips with
// 64-byte bodies over TCP on loopback, and reports their p50 and p99.
func BenchmarkMessengerRequestTCP(b *testing.B) {
	m, addr, closeAll := benchMessengers(b)
	defer closeAll()
	body := make([]byte, 64)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := m.Request(ctx, addr, "echo", body); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkMessengerRequestTCPParallel measures request throughput over TCP on
// loopback with many requests in flight (GOMAXPROCS×16 goroutines). It reports the
// process's CPU time per request (both ends: what bounds throughput when they share
// the machine's cores) and the frames each write to a socket carried.
func BenchmarkMessengerRequestTCPParallel(b *testing.B) {
	ms, closeAll := benchMessengerPair(b)
	defer closeAll()
	m, addr := ms[0], ms[1].LocalAddr()
	frames0, writes0 := tcpWrites(ms)
	cpu0 := processCPU(b)
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		body := make([]byte, 64)
		ctx := context.Background()
		for pb.Next() {
			if _, err := m.Request(ctx, addr, "echo", body); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	cpu := processCPU(b) - cpu0
	frames, writes := tcpWrites(ms)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-µs/req")
	b.ReportMetric(float64(frames-frames0)/float64(max(writes-writes0, 1)), "frames/write")
}

// BenchmarkMessengerRequestAsyncTCP measures the callback form, with a timeout, with
// up to 256 requests in flight from one goroutine, and reports the process's CPU time
// per request.
func BenchmarkMessengerRequestAsyncTCP(b *testing.B) {
	m, addr, closeAll := benchMessengers(b)
	defer closeAll()
	body := make([]byte, 64)
	var completed atomic.Int64
	n := int64(b.N)
	all := make(chan struct{})
	inFlight := make(chan struct{}, 256)
	cb := func(_ []byte, err error) {
		if err != nil {
			b.Error(err)
		}
		<-inFlight
		if completed.Add(1) == n {
			close(all)
		}
	}
	cpu0 := processCPU(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		inFlight <- struct{}{}
		m.RequestAsync(addr, "echo", body, 10*time.Second, cb)
	}
	<-all
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/req")
}

func BenchmarkFrameEncodeDecode64B(b *testing.B) {
	f := &Frame{Kind: FrameRequest, ID: 12345, From: "127.0.0.1:7947", Topic: "sharding/deliver", Body: make([]byte, 64)}
	b.ReportAllocs()
	for b.Loop() {
		enc, err := EncodeFrame(f)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeFrame(enc); err != nil {
			b.Fatal(err)
		}
	}
}
