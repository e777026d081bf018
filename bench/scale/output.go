package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

func writeCSV(path string, header []string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write(header)
	w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func ff(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// fd is a phase's simulated seconds for a CSV: empty when not reached, "not run".
func fd(d time.Duration) string {
	if d == notRun {
		return "not run"
	}
	return ff(secondsOrNaN(d))
}

func writeMembership(dir string, rows []memRow) error {
	var out [][]string
	for _, r := range rows {
		out = append(out, []string{strconv.Itoa(r.N), fd(r.Converge), fd(r.Unreachable),
			fd(r.Downed), fd(r.Removed), fd(r.LeaveRemoved),
			fd(r.PartitionSplit), ff(r.RestBytes), ff(r.RestMsgs), ff(r.RestCPU), ff(r.HeapPerMember),
			ff(r.Wall.Seconds()), ff(r.JoinBytes), ff(r.CrashBytes)})
	}
	return writeCSV(filepath.Join(dir, "membership.csv"), []string{"members", "converge_s", "crash_unreachable_s",
		"crash_downed_s", "crash_removed_s", "leave_removed_s", "partition_third_s", "rest_gossip_bytes_per_member_s",
		"rest_msgs_per_member_s", "rest_cpu_s_per_member_s", "heap_bytes_per_member", "wall_s",
		"join_gossip_bytes_per_member_s", "crash_gossip_bytes_per_member_s"}, out)
}

func writeCoordinator(dir string, rows []shardRow) error {
	var out [][]string
	for _, r := range rows {
		out = append(out, []string{r.Strategy, strconv.Itoa(r.Shards), strconv.Itoa(r.Members), ff(r.Allocate.Seconds()),
			ff(r.Rebalance.Seconds()), strconv.Itoa(r.Moves), ff(r.Replace.Seconds())})
	}
	return writeCSV(filepath.Join(dir, "coordinator.csv"), []string{"strategy", "shards", "members", "allocate_s",
		"rebalance_s", "rebalance_moves", "replace_member_shards_s"}, out)
}

func writeState(dir string, rows []stateRow) error {
	var out [][]string
	for _, r := range rows {
		out = append(out, []string{strconv.Itoa(r.Shards), strconv.Itoa(r.Members), strconv.Itoa(r.Bytes),
			ff(r.Put.Seconds()), ff(r.Write.Seconds()), ff(r.ReadBack.Seconds()), r.Err, strconv.Itoa(r.MaxKey), ff(r.ReadCPU.Seconds()),
			r.Layout, ff(r.IdleCPU)})
	}
	return writeCSV(filepath.Join(dir, "coordinator_state.csv"), []string{"shards", "members", "state_bytes", "put_s", "write_s",
		"read_majority_s", "error", "largest_key_bytes", "read_cpu_s", "layout", "idle_cpu_s_per_s"}, out)
}

type series struct {
	name string
	xs   []float64
	ys   []float64
}

// logPlot draws series on log-log axes into path.
func logPlot(path, title, xlabel, ylabel string, ss []series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text, p.Y.Label.Text = xlabel, ylabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	drawn := 0
	for i, s := range ss {
		var pts plotter.XYs
		for j := range s.xs {
			if s.ys[j] > 0 && !math.IsNaN(s.ys[j]) {
				pts = append(pts, plotter.XY{X: s.xs[j], Y: s.ys[j]})
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		c := plotutil.Color(i)
		l.Color, sc.Color = c, c
		sc.Shape = plotutil.Shape(i)
		p.Add(l, sc)
		p.Legend.Add(s.name, l, sc)
		drawn++
	}
	if drawn == 0 {
		return nil
	}
	p.Add(plotter.NewGrid())
	_ = color.Black
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func plotAll(dir string, mem []memRow, sh []shardRow, st []stateRow) error {
	if len(mem) > 0 {
		var xs []float64
		get := func(f func(memRow) float64) []float64 {
			var ys []float64
			for _, r := range mem {
				ys = append(ys, f(r))
			}
			return ys
		}
		for _, r := range mem {
			xs = append(xs, float64(r.N))
		}
		if err := logPlot(filepath.Join(dir, "membership_times.png"), "Membership: simulated seconds", "members",
			"seconds (simulated)", []series{
				{"converge after join", xs, get(func(r memRow) float64 { return secondsOrNaN(r.Converge) })},
				{"crash: all see unreachable", xs, get(func(r memRow) float64 { return secondsOrNaN(r.Unreachable) })},
				{"crash: all see down", xs, get(func(r memRow) float64 { return secondsOrNaN(r.Downed) })},
				{"crash: removed everywhere", xs, get(func(r memRow) float64 { return secondsOrNaN(r.Removed) })},
				{"leave: removed everywhere", xs, get(func(r memRow) float64 { return secondsOrNaN(r.LeaveRemoved) })},
				{"partition of 1/3: majority alone", xs, get(func(r memRow) float64 { return secondsOrNaN(r.PartitionSplit) })},
			}); err != nil {
			return err
		}
		if err := logPlot(filepath.Join(dir, "membership_cost.png"), "Membership: gossip (at rest, n joining, after a crash) and cost at rest, per member", "members",
			"per member", []series{
				{"gossip bytes/s at rest", xs, get(func(r memRow) float64 { return r.RestBytes })},
				{"gossip bytes/s, n joining", xs, get(func(r memRow) float64 { return r.JoinBytes })},
				{"gossip bytes/s, after a crash", xs, get(func(r memRow) float64 { return r.CrashBytes })},
				{"heap bytes / 100", xs, get(func(r memRow) float64 { return r.HeapPerMember / 100 })},
				{"CPU µs per simulated s", xs, get(func(r memRow) float64 { return r.RestCPU * 1e6 })},
			}); err != nil {
			return err
		}
	}
	if len(sh) > 0 {
		for _, metric := range []struct{ name, title string }{
			{"allocate", "Shard coordinator: one allocation decision"},
			{"rebalance", "Shard coordinator: one rebalance round after a member joined"},
			{"replace", "Shard coordinator: re-placing a crashed member's shards"},
		} {
			var ss []series
			for _, strat := range []string{"least", "priority"} {
				byMembers := map[int]*series{}
				var order []int
				for _, r := range sh {
					if r.Strategy != strat {
						continue
					}
					s := byMembers[r.Members]
					if s == nil {
						s = &series{name: fmt.Sprintf("%s, %d members", strat, r.Members)}
						byMembers[r.Members] = s
						order = append(order, r.Members)
					}
					s.xs = append(s.xs, float64(r.Shards))
					v := r.Allocate
					switch metric.name {
					case "rebalance":
						v = r.Rebalance
					case "replace":
						v = r.Replace
					}
					s.ys = append(s.ys, v.Seconds()*1e3)
				}
				for _, m := range order {
					ss = append(ss, *byMembers[m])
				}
			}
			if err := logPlot(filepath.Join(dir, "coordinator_"+metric.name+".png"), metric.title, "shards",
				"milliseconds", ss); err != nil {
				return err
			}
		}
	}
	if len(st) > 0 {
		// One curve per layout and member count: runs on different members do not make one.
		var ss []series
		idx := map[string]int{}
		for _, r := range st {
			id := fmt.Sprintf("%s, %d members", r.Layout, r.Members)
			i, ok := idx[id]
			if !ok {
				i = len(ss)
				idx[id] = i
				ss = append(ss, series{name: "state KB (" + id + ")"},
					series{name: "read back ms (" + id + ")"},
					series{name: "CPU during read back ms (" + id + ")"})
			}
			rb, cpu := r.ReadBack.Seconds()*1e3, r.ReadCPU.Seconds()*1e3
			if r.Err != "" {
				rb, cpu = math.NaN(), math.NaN()
			}
			x := float64(r.Shards)
			for j, y := range []float64{float64(r.Bytes) / 1e3, rb, cpu} {
				ss[i+j].xs, ss[i+j].ys = append(ss[i+j].xs, x), append(ss[i+j].ys, y)
			}
		}
		if err := logPlot(filepath.Join(dir, "coordinator_state.png"), "Coordinator state in distributed data (buckets of 1,000 shards)",
			"shards", "KB / ms", ss); err != nil {
			return err
		}
	}
	return nil
}

func dur(d time.Duration) string {
	if d == notRun {
		return "not run"
	}
	if d < 0 {
		return "not reached"
	}
	return d.String()
}

// summary prints the figures and each curve's fitted growth as markdown.
func summary(w io.Writer, mem []memRow, sh []shardRow, st []stateRow) {
	if len(mem) > 0 {
		fmt.Fprintln(w, "| members | converge | crash: unreachable | down | removed | leave: removed | 1/3 partition | gossip B/s/member at rest | while joining | after a crash | CPU µs/s/member | heap/member | wall |")
		fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, r := range mem {
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f KB | %s |\n", r.N, dur(r.Converge),
				dur(r.Unreachable), dur(r.Downed), dur(r.Removed), dur(r.LeaveRemoved), dur(r.PartitionSplit),
				r.RestBytes, r.JoinBytes, r.CrashBytes, r.RestCPU*1e6, r.HeapPerMember/1024, r.Wall.Round(time.Second))
		}
		var xs []float64
		for _, r := range mem {
			xs = append(xs, float64(r.N))
		}
		fmt.Fprintln(w, "\n| membership curve | log-log slope | growth |\n|---|---:|---|")
		for _, c := range []struct {
			name string
			f    func(memRow) float64
		}{
			{"converge after join", func(r memRow) float64 { return secondsOrNaN(r.Converge) }},
			{"crash: removed everywhere", func(r memRow) float64 { return secondsOrNaN(r.Removed) }},
			{"leave: removed everywhere", func(r memRow) float64 { return secondsOrNaN(r.LeaveRemoved) }},
			{"1/3 partition: majority alone", func(r memRow) float64 { return secondsOrNaN(r.PartitionSplit) }},
			{"gossip bytes/s per member", func(r memRow) float64 { return r.RestBytes }},
			{"gossip bytes/s per member while joining", func(r memRow) float64 { return r.JoinBytes }},
			{"gossip bytes/s per member after a crash", func(r memRow) float64 { return r.CrashBytes }},
			{"CPU per member", func(r memRow) float64 { return r.RestCPU }},
			{"heap per member", func(r memRow) float64 { return r.HeapPerMember }},
		} {
			var ys []float64
			for _, r := range mem {
				ys = append(ys, c.f(r))
			}
			k, name := growth(xs, ys)
			fmt.Fprintf(w, "| %s | %.2f | %s |\n", c.name, k, name)
		}
	}
	if len(sh) > 0 {
		fmt.Fprintln(w, "\n| strategy | shards | members | allocate | rebalance (moves) | re-place a crashed member's shards |\n|---|---:|---:|---:|---:|---:|")
		for _, r := range sh {
			fmt.Fprintf(w, "| %s | %d | %d | %v | %v (%d) | %v |\n", r.Strategy, r.Shards, r.Members, r.Allocate.Round(time.Microsecond),
				r.Rebalance.Round(time.Microsecond), r.Moves, r.Replace.Round(time.Microsecond))
		}
		fmt.Fprintln(w, "\n| coordinator curve (over shards) | members | log-log slope | growth |\n|---|---:|---:|---|")
		type key struct {
			strat string
			m     int
		}
		var keys []key
		seen := map[key]bool{}
		for _, r := range sh {
			k := key{r.Strategy, r.Members}
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			for _, metric := range []string{"allocate", "rebalance", "re-place"} {
				var xs, ys []float64
				for _, r := range sh {
					if r.Strategy == k.strat && r.Members == k.m {
						xs = append(xs, float64(r.Shards))
						switch metric {
						case "allocate":
							ys = append(ys, r.Allocate.Seconds())
						case "rebalance":
							ys = append(ys, r.Rebalance.Seconds())
						default:
							ys = append(ys, r.Replace.Seconds())
						}
					}
				}
				slope, name := growth(xs, ys)
				fmt.Fprintf(w, "| %s %s | %d | %.2f | %s |\n", k.strat, metric, k.m, slope, name)
			}
		}
	}
	if len(st) > 0 {
		fmt.Fprintln(w, "\n| layout | shards | members | state | largest key | one Put (per allocation) | write (WriteMajority, a bucket an Update) | read back (ReadMajority) | CPU during read back | of which at rest (est.) | error |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
		for _, r := range st {
			write, read := r.Write.Round(time.Millisecond).String(), r.ReadBack.Round(time.Millisecond).String()
			cpu, idle := "—", "—" // not measured (a run before the column)
			if r.ReadCPU > 0 {
				cpu = r.ReadCPU.Round(time.Millisecond).String()
			}
			if r.IdleCPU > 0 {
				idle = time.Duration(r.IdleCPU * float64(r.ReadBack)).Round(time.Millisecond).String()
			}
			if r.Err != "" {
				write, read = "—", "—"
			}
			fmt.Fprintf(w, "| %s | %d | %d | %d KB | %d KB | %v | %s | %s | %v | %s | %s |\n", r.Layout, r.Shards, r.Members, r.Bytes/1000, r.MaxKey/1000,
				r.Put.Round(time.Microsecond), write, read, cpu, idle, r.Err)
		}
		// Fitted growth per layout and member count: runs on different members do not
		// make a curve.
		type curve struct {
			layout  string
			members int
		}
		var curves []curve
		for _, r := range st {
			if c := (curve{r.Layout, r.Members}); !slices.Contains(curves, c) {
				curves = append(curves, c)
			}
		}
		fmt.Fprintln(w)
		for _, c := range curves {
			var xs, bs, rs, cs []float64
			for _, r := range st {
				if r.Layout != c.layout || r.Members != c.members {
					continue
				}
				rb, cpu := r.ReadBack.Seconds(), r.ReadCPU.Seconds()
				if r.Err != "" {
					rb, cpu = math.NaN(), math.NaN()
				}
				xs, bs, rs, cs = append(xs, float64(r.Shards)), append(bs, float64(r.Bytes)), append(rs, rb), append(cs, cpu)
			}
			kb, nb := growth(xs, bs)
			kr, nr := growth(xs, rs)
			kc, nc := growth(xs, cs)
			fmt.Fprintf(w, "%s on %d members: state size slope %.2f (%s); read back slope %.2f (%s); its CPU slope %.2f (%s)\n",
				c.layout, c.members, kb, nb, kr, nr, kc, nc)
		}
	}
}
