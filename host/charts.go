package host

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/sharding"
)

// The console's charts (/ui/charts): each member keeps a ring of one-second samples of
// what its regions handled (sharding.Counters) for the last 15 minutes; the page asks
// every member for its ring and draws SVG on the server: messages per second and p99
// latency by type, active entities and shards by member, dead letters and failures.

const (
	// sampleEvery is the time between two samples.
	sampleEvery = time.Second
	// sampleRing is how many samples a member keeps: 15 minutes of them.
	sampleRing = 900
	// topicSamples is the member-to-member request for a member's samples: no body,
	// reply a JSON []memberSample, oldest first.
	topicSamples = "host/console-samples"
)

// typeSample is what one region did in one second.
type typeSample struct {
	Type string `json:"type"`
	// Handled and Failed are the messages that ended in the second.
	Handled uint64 `json:"handled,omitempty"`
	Failed  uint64 `json:"failed,omitempty"`
	// P99 is the upper bound (sharding.LatencyBounds) of the bucket that holds the
	// 99th percentile of their latencies, in seconds; 0 without a message. The charts
	// use Latency; P99 is for a member that sends no Latency (an older version).
	P99 float64 `json:"p99,omitempty"`
	// Latency counts their latencies by bucket: Latency[i] ended within
	// sharding.LatencyBounds[i] (the last index past every bound); trailing zeros are
	// left out, nil without a message. The p99 chart merges these across members.
	Latency []uint64 `json:"latency,omitempty"`
	// Active and Shards are its active entities and hosted shards at the sample.
	Active int `json:"active,omitempty"`
	Shards int `json:"shards,omitempty"`
}

// memberSample is one second of a member.
type memberSample struct {
	// At is the sample's time, in Unix seconds.
	At int64 `json:"at"`
	// DeadLetters counts the messages that became dead letters in the second.
	DeadLetters uint64       `json:"dead_letters,omitempty"`
	Types       []typeSample `json:"types,omitempty"`
}

// sampler keeps a member's samples: a ring of sampleRing, made from its running counts.
// Its methods may be called concurrently.
type sampler struct {
	mu       sync.Mutex
	ring     [sampleRing]memberSample
	next, n  int
	prev     map[string]sharding.TypeCounters
	prevDead uint64
	primed   bool
}

// add makes the sample of time at from the running counts, the difference with the
// last ones. The first call only takes the counts. A count lower than before (a
// region made anew) counts from zero.
func (s *sampler) add(at time.Time, counters []sharding.TypeCounters, deadLetters uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.prev
	s.prev = make(map[string]sharding.TypeCounters, len(counters))
	for _, c := range counters {
		s.prev[c.Type] = c
	}
	dead := delta(deadLetters, s.prevDead)
	s.prevDead = deadLetters
	if !s.primed {
		s.primed = true
		return
	}
	ms := memberSample{At: at.Unix(), DeadLetters: dead, Types: make([]typeSample, 0, len(counters))}
	for _, c := range counters {
		p := prev[c.Type]
		ts := typeSample{Type: c.Type, Handled: delta(c.Handled, p.Handled), Failed: delta(c.Failed, p.Failed), Active: c.Active, Shards: c.Shards}
		var buckets [len(sharding.LatencyBounds) + 1]uint64
		var total uint64
		for i := range buckets {
			buckets[i] = delta(c.Latency[i], p.Latency[i])
			total += buckets[i]
		}
		ts.P99 = percentile(buckets[:], total, 0.99)
		if total > 0 {
			last := len(buckets)
			for buckets[last-1] == 0 {
				last--
			}
			ts.Latency = append([]uint64(nil), buckets[:last]...)
		}
		ms.Types = append(ms.Types, ts)
	}
	s.ring[s.next] = ms
	s.next = (s.next + 1) % sampleRing
	s.n = min(s.n+1, sampleRing)
}

func delta(now, before uint64) uint64 {
	if now < before {
		return now
	}
	return now - before
}

// percentile returns the upper bound, in seconds, of the bucket that holds quantile q
// of total counts (the last bucket, past every bound, gives twice the last bound);
// 0 when total is 0.
func percentile(buckets []uint64, total uint64, q float64) float64 {
	if total == 0 {
		return 0
	}
	var cum uint64
	for i, b := range buckets {
		cum += b
		if float64(cum) >= q*float64(total) {
			if i < len(sharding.LatencyBounds) {
				return sharding.LatencyBounds[i].Seconds()
			}
			break
		}
	}
	return 2 * sharding.LatencyBounds[len(sharding.LatencyBounds)-1].Seconds()
}

// samples returns the kept samples, oldest first.
func (s *sampler) samples() []memberSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]memberSample, 0, s.n)
	for i := range s.n {
		out = append(out, s.ring[(s.next-s.n+i+sampleRing)%sampleRing])
	}
	return out
}

// sample runs until the node stops, taking a sample every sampleEvery.
func (n *Node) sample() {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	n.samples.add(time.Now(), n.sharding.Counters(), n.sharding.DeadLetters())
	for {
		select {
		case <-n.owner.Done():
			return
		case now := <-t.C:
			n.samples.add(now, n.sharding.Counters(), n.sharding.DeadLetters())
		}
	}
}

func (n *Node) handleSamples(req *cluster.Request) {
	b, err := json.Marshal(n.samples.samples())
	req.Reply(b, err)
}

// memberSamples asks m for its samples (this member without a request).
func (n *Node) memberSamples(ctx context.Context, m cluster.Member) ([]memberSample, error) {
	if m.Address == n.membership.Self().Address {
		return n.samples.samples(), nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, err := n.messenger.Request(ctx, m.TransportAddr, topicSamples, nil)
	if err != nil {
		return nil, fmt.Errorf("samples of %s: %w", m.Address, err)
	}
	var out []memberSample
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("samples of %s: %w", m.Address, err)
	}
	return out, nil
}

// chart is one chart of the page: its title and SVG.
type chart struct {
	ID, Title string
	SVG       template.HTML
}

// series is one line of a chart: its name and a value per second (Unix seconds).
type series struct {
	Name   string
	Values map[int64]float64
}

func (s *series) add(at int64, v float64) {
	if s.Values == nil {
		s.Values = map[int64]float64{}
	}
	s.Values[at] += v
}

func (s *series) max(at int64, v float64) {
	if s.Values == nil {
		s.Values = map[int64]float64{}
	}
	s.Values[at] = math.Max(s.Values[at], v)
}

// seriesSet is a chart's lines by name.
type seriesSet map[string]*series

func (ss seriesSet) get(name string) *series {
	if ss[name] == nil {
		ss[name] = &series{Name: name}
	}
	return ss[name]
}

func (ss seriesSet) sorted() []*series {
	out := make([]*series, 0, len(ss))
	for _, s := range ss {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// buildCharts draws the charts of the members' samples (by member address) over the
// sampleRing seconds up to now.
func buildCharts(byMember map[string][]memberSample, now time.Time) []chart {
	rates, p99, active, shards, trouble := seriesSet{}, seriesSet{}, seriesSet{}, seriesSet{}, seriesSet{}
	// The p99 of a type at a second is that of the latencies every member counted in
	// it: their buckets merged, not the slowest member's p99 (one slow message on an
	// idle member would otherwise hide a thousand fast ones elsewhere).
	type typeSecond struct {
		typ string
		at  int64
	}
	merged := map[typeSecond]*[len(sharding.LatencyBounds) + 1]uint64{}
	for member, samples := range byMember {
		for _, s := range samples {
			var a, sh float64
			var failed uint64
			for _, t := range s.Types {
				rates.get(t.Type).add(s.At, float64(t.Handled+t.Failed))
				switch {
				case len(t.Latency) > 0:
					k := typeSecond{t.Type, s.At}
					b := merged[k]
					if b == nil {
						b = new([len(sharding.LatencyBounds) + 1]uint64)
						merged[k] = b
					}
					for i, n := range t.Latency[:min(len(t.Latency), len(b))] {
						b[i] += n
					}
				case t.Handled+t.Failed > 0:
					// A member that sends no buckets: its own p99, at most.
					p99.get(t.Type).max(s.At, t.P99*1000)
				}
				a += float64(t.Active)
				sh += float64(t.Shards)
				failed += t.Failed
			}
			active.get(member).add(s.At, a)
			shards.get(member).add(s.At, sh)
			trouble.get("dead letters").add(s.At, float64(s.DeadLetters))
			trouble.get("failures").add(s.At, float64(failed))
		}
	}
	for k, b := range merged {
		var total uint64
		for _, n := range b {
			total += n
		}
		p99.get(k.typ).max(k.at, percentile(b[:], total, 0.99)*1000)
	}
	to := now.Unix()
	from := to - sampleRing
	return []chart{
		{ID: "chart-rate", Title: "Messages per second, by type", SVG: svgChart(from, to, rates.sorted(), false)},
		{ID: "chart-p99", Title: "p99 latency (ms, at most; of all members' messages), by type", SVG: svgChart(from, to, p99.sorted(), true)},
		{ID: "chart-active", Title: "Active entities, by member", SVG: svgChart(from, to, active.sorted(), false)},
		{ID: "chart-shards", Title: "Shards, by member", SVG: svgChart(from, to, shards.sorted(), false)},
		{ID: "chart-trouble", Title: "Dead letters and failed messages per second", SVG: svgChart(from, to, trouble.sorted(), false)},
	}
}

// chartColors are the lines' colors, in turn.
var chartColors = []string{"#1f6feb", "#d1242f", "#1a7f37", "#bf8700", "#8250df", "#0a7ea4", "#cf222e", "#57606a"}

// Geometry of a chart, in SVG user units.
const (
	chartW, chartH          = 760, 190
	chartLeft, chartRight   = 56, 10
	chartTop, chartBottom   = 10, 24
	chartPlotW, chartPlotH  = chartW - chartLeft - chartRight, chartH - chartTop - chartBottom
	chartTicksX, chartTicks = 3, 2
)

// svgChart draws lines over the seconds from..to: a y axis from 0 to a round number at
// least the largest value, the x axis in minutes before to, a legend. sparse: draw
// only the seconds a line has (a latency), rather than 0 for the others.
func svgChart(from, to int64, lines []*series, sparse bool) template.HTML {
	top := 0.0
	for _, l := range lines {
		for at, v := range l.Values {
			if at > from && at <= to {
				top = math.Max(top, v)
			}
		}
	}
	top = niceCeil(top)
	x := func(at int64) float64 { return chartLeft + float64(at-from)/float64(to-from)*chartPlotW }
	y := func(v float64) float64 { return chartTop + chartPlotH - v/top*chartPlotH }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" class="chart" role="img">`, chartW, chartH+18*((len(lines)+3)/4), chartW, chartH+18*((len(lines)+3)/4))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fff" stroke="#dde1e8"/>`, chartLeft, chartTop, chartPlotW, chartPlotH)
	for i := 0; i <= chartTicks; i++ {
		v := top * float64(i) / chartTicks
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eef1f5"/>`, chartLeft, chartLeft+chartPlotW, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" font-size="11" fill="#6b7385">%s</text>`, chartLeft-4, y(v)+4, formatTick(v))
	}
	for i := 0; i <= chartTicksX; i++ {
		at := from + int64(i)*(to-from)/chartTicksX
		label := "now"
		if at != to {
			label = fmt.Sprintf("−%d min", (to-at)/60)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="11" fill="#6b7385">%s</text>`, x(at), chartTop+chartPlotH+16, label)
	}
	for i, l := range lines {
		color := chartColors[i%len(chartColors)]
		var pts, dots strings.Builder
		for at := from + 1; at <= to; at++ {
			v, ok := l.Values[at]
			if !ok && sparse {
				continue
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(at), y(v))
			if sparse {
				// A second alone between gaps: a dot, as a line needs two.
				fmt.Fprintf(&dots, `<circle cx="%.1f" cy="%.1f" r="2" fill="%s"/>`, x(at), y(v), color)
			}
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"><title>%s</title></polyline>%s`,
			color, strings.TrimSpace(pts.String()), template.HTMLEscapeString(l.Name), dots.String())
		lx, ly := chartLeft+(i%4)*(chartPlotW/4), chartH+18*(i/4)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="4" fill="%s"/><text x="%d" y="%d" font-size="12" fill="#1d2330" class="legend">%s</text>`,
			lx, ly-4, color, lx+16, ly+1, template.HTMLEscapeString(l.Name))
	}
	if len(lines) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" font-size="12" fill="#6b7385">no data yet</text>`, chartLeft+chartPlotW/2, chartTop+chartPlotH/2)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built here from numbers and escaped names
}

// niceCeil returns the smallest of 1, 2 and 5 times a power of ten that is at least v
// (1 for v ≤ 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// formatTick formats an axis value: whole numbers as they are, others with two
// significant digits.
func formatTick(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

// consoleCharts is GET /ui/charts[?live=1]: the charts of every member's samples; live
// reloads the page every 5 s.
func (n *Node) consoleCharts(w http.ResponseWriter, r *http.Request) {
	members := n.membership.Members()
	replies, errs := askEveryMember(members, func(m cluster.Member) ([]memberSample, error) {
		return n.memberSamples(r.Context(), m)
	})
	byMember := map[string][]memberSample{}
	var failed []string
	for i, m := range members {
		if errs[i] != nil {
			failed = append(failed, errs[i].Error())
			continue
		}
		byMember[m.Address] = replies[i]
	}
	charts := buildCharts(byMember, time.Now())
	n.renderConsole(w, r, "charts", "Charts", func(p *consolePage) {
		p.Charts, p.Errors, p.Live = charts, failed, r.URL.Query().Get("live") == "1"
	})
}
