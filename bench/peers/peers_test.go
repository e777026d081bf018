package main

import (
	"context"
	"testing"
)

// The Proto.Actor counter answers as the wasm counters do (examples/wasm/counter).
func TestCounterActorMessages(t *testing.T) {
	var a counterActor
	for _, c := range []struct{ msg, want string }{
		{"get", "0"}, {"inc", "1"}, {"inc 41", "42"}, {" inc  -2 ", "40"}, {"get", "40"},
		{"inc x", "counter: inc wants an integer"}, {"dec", "counter: unknown message"}, {"get", "40"},
	} {
		if got := string(a.handle([]byte(c.msg))); got != c.want {
			t.Errorf("%q: %q, want %q", c.msg, got, c.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{thousands(0), "0"}, {thousands(999), "999"}, {thousands(1000), "1,000"}, {thousands(1234567), "1,234,567"},
		{formatValue(3.18e-6, seconds), "3.18 µs"}, {formatValue(484e-6, seconds), "484 µs"}, {formatValue(4.04e-3, seconds), "4.0 ms"},
		{formatValue(747, perSecond), "747/s"}, {formatValue(236_600, perSecond), "237k/s"}, {formatValue(2_126_000, perSecond), "2.13M/s"},
		{formatValue(2150, bytesEach), "2.1 KiB"}, {formatValue(453*1024, bytesEach), "453 KiB"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

// The floors' hand-written module is valid wasm whose export can be called.
func TestFloors(t *testing.T) {
	d, err := emptyWasmCall(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 {
		t.Errorf("empty call %v", d)
	}
	if d := channelRoundTrip(10); d <= 0 {
		t.Errorf("channel round trip %v", d)
	}
	if d, err := tcpRoundTrip(10); err != nil || d <= 0 {
		t.Errorf("TCP round trip %v, %v", d, err)
	}
}

func TestLatencyQuantile(t *testing.T) {
	l := latencies{5, 1, 4, 2, 3}
	if l.quantile(0.5) != 3 || l.quantile(0) != 1 || l.quantile(1) != 5 {
		t.Errorf("quantiles of %v: %v %v %v", l, l.quantile(0), l.quantile(0.5), l.quantile(1))
	}
	if l[0] != 5 {
		t.Error("quantile sorted the samples in place")
	}
}
