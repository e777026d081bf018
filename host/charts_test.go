package host

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// counters returns the running counts of one type: handled and failed messages, and
// latencies in the bucket of bound b (an index of sharding.LatencyBounds) for each.
func counters(typ string, handled, failed uint64, buckets map[int]uint64, active, shards int) sharding.TypeCounters {
	c := sharding.TypeCounters{Type: typ, Handled: handled, Failed: failed, Active: active, Shards: shards}
	for i, n := range buckets {
		c.Latency[i] = n
	}
	return c
}

// TestSamplerTakesDifferences: a sample is the difference of the running counts with
// the last ones; the first call only primes; a count that went down (a region made
// anew) counts from zero; p99 is the bound of the bucket holding the 99th percentile.
func TestSamplerTakesDifferences(t *testing.T) {
	var s sampler
	t0 := time.Unix(1_000_000, 0)
	s.add(t0, []sharding.TypeCounters{counters("a", 10, 0, map[int]uint64{0: 10}, 1, 2)}, 5)
	if got := s.samples(); len(got) != 0 {
		t.Fatalf("after the first call: %+v, want no sample", got)
	}
	// 100 more messages: 98 fast, 2 in the bucket of LatencyBounds[8]: p99 is there.
	s.add(t0.Add(time.Second), []sharding.TypeCounters{
		counters("a", 105, 5, map[int]uint64{0: 108, 8: 2}, 3, 2),
		counters("b", 0, 0, nil, 0, 1),
	}, 7)
	got := s.samples()
	if len(got) != 1 || got[0].At != t0.Unix()+1 || got[0].DeadLetters != 2 || len(got[0].Types) != 2 {
		t.Fatalf("samples: %+v", got)
	}
	a := got[0].Types[0]
	if a.Type != "a" || a.Handled != 95 || a.Failed != 5 || a.Active != 3 || a.Shards != 2 || a.P99 != sharding.LatencyBounds[8].Seconds() {
		t.Fatalf("a's sample: %+v (want p99 %v)", a, sharding.LatencyBounds[8].Seconds())
	}
	if want := []uint64{98, 0, 0, 0, 0, 0, 0, 0, 2}; !slices.Equal(a.Latency, want) {
		t.Fatalf("a's latency buckets: %v, want %v (trailing zeros left out)", a.Latency, want)
	}
	if b := got[0].Types[1]; b.Type != "b" || b.Handled != 0 || b.P99 != 0 || b.Latency != nil || b.Shards != 1 {
		t.Fatalf("b's sample: %+v", b)
	}
	// A region made anew: its counts restart.
	s.add(t0.Add(2*time.Second), []sharding.TypeCounters{counters("a", 4, 0, map[int]uint64{len(sharding.LatencyBounds): 4}, 1, 1)}, 7)
	got = s.samples()
	if a := got[1].Types[0]; a.Handled != 4 || a.P99 != 2*sharding.LatencyBounds[len(sharding.LatencyBounds)-1].Seconds() || got[1].DeadLetters != 0 {
		t.Fatalf("after a restart of the counts: %+v", got[1])
	}
}

// TestSamplerKeepsFifteenMinutes: the ring keeps the last sampleRing samples, oldest
// first.
func TestSamplerKeepsFifteenMinutes(t *testing.T) {
	var s sampler
	t0 := time.Unix(2_000_000, 0)
	for i := range sampleRing + 11 {
		s.add(t0.Add(time.Duration(i)*time.Second), nil, uint64(i))
	}
	got := s.samples()
	if len(got) != sampleRing {
		t.Fatalf("%d samples, want %d", len(got), sampleRing)
	}
	for i, m := range got {
		if want := t0.Unix() + 11 + int64(i); m.At != want || m.DeadLetters != 1 {
			t.Fatalf("sample %d: %+v, want at %d with one dead letter", i, m, want)
		}
	}
}

// TestChartP99MergesMembers: the p99 of a type at a second is computed from the latency
// buckets of every member merged. m1 handled 100 messages within 50 µs, m2 one within
// 50 ms: the merged p99 is 0.05 ms, where the slowest member's p99 would be 50 ms.
func TestChartP99MergesMembers(t *testing.T) {
	now := time.Unix(3_000_000, 0)
	at := now.Unix() - 10
	slow := make([]uint64, 10)
	slow[9] = 1
	byMember := map[string][]memberSample{
		"m1:1": {{At: at, Types: []typeSample{{Type: "counter", Handled: 100, P99: 0.00005, Latency: []uint64{100}}}}},
		"m2:1": {{At: at, Types: []typeSample{{Type: "counter", Handled: 1, P99: 0.05, Latency: slow}}}},
	}
	var svg string
	for _, c := range buildCharts(byMember, now) {
		if c.ID == "chart-p99" {
			svg = string(c.SVG)
		}
	}
	// The axis top is the largest value, rounded up: 0.05 (ms) merged, 50 the slowest's.
	if !strings.Contains(svg, ">0.05</text>") || strings.Contains(svg, ">50</text>") {
		t.Fatalf("the p99 chart's axis is not topped at the merged p99, 0.05 ms:\n%s", svg)
	}
	// With 3 slow messages out of 103 the merged p99 is in the slow bucket: 50 ms.
	slow[9] = 3
	for _, c := range buildCharts(byMember, now) {
		if c.ID == "chart-p99" && !strings.Contains(string(c.SVG), ">50</text>") {
			t.Fatalf("3 slow messages of 103: the p99 chart's axis is not topped at 50 ms:\n%s", c.SVG)
		}
	}
}

// TestBuildCharts: rates add up over members, the p99 is the slowest member's (for
// members that send no latency buckets: an older version), active
// entities and shards are per member, and names are escaped in the SVG.
func TestBuildCharts(t *testing.T) {
	now := time.Unix(3_000_000, 0)
	at := now.Unix() - 10
	byMember := map[string][]memberSample{
		"m1:1": {{At: at, DeadLetters: 3, Types: []typeSample{{Type: "counter", Handled: 40, Failed: 2, P99: 0.005, Active: 7, Shards: 4}}}},
		"m2:1": {{At: at, Types: []typeSample{{Type: "counter", Handled: 58, P99: 0.05, Active: 1, Shards: 6}, {Type: "<x>", Shards: 1}}}},
	}
	charts := buildCharts(byMember, now)
	if len(charts) != 5 {
		t.Fatalf("%d charts", len(charts))
	}
	svg := map[string]string{}
	for _, c := range charts {
		svg[c.ID] = string(c.SVG)
		if !strings.HasPrefix(svg[c.ID], "<svg") || !strings.HasSuffix(svg[c.ID], "</svg>") {
			t.Fatalf("%s is not an SVG: %s", c.ID, c.SVG)
		}
	}
	// The rate chart's top is 100 (40+2+58 at one second), the p99's 50 ms.
	for id, want := range map[string][]string{
		"chart-rate":    {">100</text>", "<title>counter</title>", "&lt;x&gt;"},
		"chart-p99":     {">50</text>", "<title>counter</title>"},
		"chart-active":  {">10</text>", "<title>m1:1</title>", "<title>m2:1</title>"},
		"chart-shards":  {">10</text>", "<title>m2:1</title>"},
		"chart-trouble": {">5</text>", "<title>dead letters</title>", "<title>failures</title>"},
	} {
		for _, w := range want {
			if !strings.Contains(svg[id], w) {
				t.Errorf("%s lacks %q:\n%s", id, w, svg[id])
			}
		}
	}
	if strings.Contains(svg["chart-rate"], "<x>") {
		t.Error("a name reached the SVG unescaped")
	}
	// The p99 chart draws only the seconds with messages: one point a line.
	if pts := between(svg["chart-p99"], `points="`, `"`); strings.Count(pts, ",") != 1 {
		t.Errorf("the p99 line's points: %q, want one", pts)
	}
	if n := strings.Count(svg["chart-p99"], "<circle"); n != 1 {
		t.Errorf("the p99 chart has %d dots, want one (a second alone)", n)
	}
	if empty := svgChart(0, 900, nil, false); !strings.Contains(string(empty), "no data yet") {
		t.Errorf("a chart without lines: %s", empty)
	}
}

func between(s, from, to string) string {
	_, after, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(after, to)
	return v
}

func TestNiceCeil(t *testing.T) {
	for v, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 1.5: 2, 3: 5, 7: 10, 42: 50, 100: 100, 101: 200} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}
