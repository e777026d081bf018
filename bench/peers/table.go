package main

import (
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

type unit int

const (
	seconds unit = iota // a latency
	perSecond
	bytesEach
)

// row is one line of the table.
type row struct {
	key, label string
	unit       unit
	floor      func(floors) string
}

func rows(o options) []row {
	serialFloor := func(f floors) string {
		return "goroutine round trip " + formatValue(f.chanRound.Seconds(), seconds) + "; empty wasm call " + formatValue(f.wasmCall.Seconds(), seconds)
	}
	tcpFloor := func(f floors) string { return "TCP round trip " + formatValue(f.tcpRTT.Seconds(), seconds) }
	none := func(floors) string { return "" }
	// What the rows compare: shardhost under the counter type's checkpoint policy, and
	// Proto.Actor, whose actors keep their state in memory only.
	durability := " (shardhost: each message's record durable in the journal before its effects; Proto.Actor: in memory)"
	switch o.checkpoint {
	case "", "journal":
	case "passivation":
		durability = " (both in memory: shardhost saves at passivation)"
	default:
		durability = " (shardhost: checkpoint " + o.checkpoint + "; Proto.Actor: in memory)"
	}
	const inMemory = ", both in memory (shardhost: a counter type saved at passivation)"
	rs := []row{
		{"serial-p50", "serial local ask into a warm entity, p50", seconds, serialFloor},
		{"serial-p99", "serial local ask, p99", seconds, none},
		{"concurrent", fmt.Sprintf("concurrent asks, %d askers over %s entities, 1 member", o.askers, thousands(o.entities)), perSecond, none},
		{"concurrent-cpu", "concurrent asks: CPU time of the process per ask (user and system)", seconds, none},
		{"tells", fmt.Sprintf("tells, %s from %d senders over %s entities, until all are applied%s", thousands(o.tells), o.tellers, thousands(o.entities), durability), perSecond, none},
		{"tells-cpu", "tells: CPU time of the process per tell (user and system; the sends, the handling and the reads that wait for it)", seconds, none},
		{"tells-mem", "tells" + inMemory, perSecond, none},
		{"tells-cpu-mem", "tells" + inMemory + ": CPU time per tell", seconds, none},
		{"activation-p50", "activation (first message to a new ID), one at a time, p50", seconds, none},
		{"activation-p99", "activation, p99", seconds, none},
		{"activation-rate", fmt.Sprintf("activations, %d askers", o.askers), perSecond, none},
		{"remote-p50", "remote ask, member 1 into member 2, p50", seconds, tcpFloor},
		{"remote-p99", "remote ask, p99", seconds, none},
		{"remote-rate", fmt.Sprintf("remote asks, %d askers on member 1 over %s entities on member 2%s", o.askers, thousands(o.entities), durability), perSecond, none},
		{"remote-cpu", "remote asks: CPU time of the process (both members) per ask", seconds, none},
		{"remote-rate-mem", "remote asks" + inMemory, perSecond, none},
		{"remote-cpu-mem", "remote asks" + inMemory + ": CPU time per ask", seconds, none},
	}
	for _, n := range o.rssSizes {
		rs = append(rs, row{"rss-" + strconv.Itoa(n), "memory per active entity (Pss), " + thousands(n) + " active", bytesEach, none})
	}
	return rs
}

func printTable(w io.Writer, o options, m machine, fl floors, systems []system, res results, notes []string) {
	fmt.Fprintf(w, "shardhost beside Proto.Actor, one process, one run: %s; %s, %d cores (GOMAXPROCS %d), %.0f GiB; %s; %s; load average %s at the start, %s at the end.\n\n",
		m.date, m.cpu, m.cores, m.gomaxprocs, float64(m.memTotal)/(1<<30), m.kernel, runtime.Version(), m.loadStart, m.loadEnd)
	head := []string{"workload", "floor (same run)"}
	for _, s := range systems {
		head = append(head, s.name)
	}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for _, r := range rows(o) {
		cells := []string{r.label, r.floor(fl)}
		any := false
		base, hasBase := res["proto"][r.key]
		for _, s := range systems {
			v, ok := res[s.key][r.key]
			if !ok {
				cells = append(cells, "–")
				continue
			}
			any = true
			cell := formatValue(v, r.unit)
			if s.key != "proto" && hasBase && base > 0 {
				cell += fmt.Sprintf(" (×%s)", ratio(v/base))
			}
			cells = append(cells, cell)
		}
		if any {
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "(×N) is the shardhost figure divided by Proto.Actor's in the same row: above 1 is slower (or costlier) for latencies, CPU time and memory, below 1 is slower for rates.")
	fmt.Fprintf(w, "Each timed workload ran for %v per system, in %d rounds in which the systems took turns; the counters take \"inc\" (add one, reply with the count as text) and \"get\".\n", o.dur, o.rounds)
	fmt.Fprintln(w, "Proto.Actor: github.com/asynkron/protoactor-go v0.0.0-20240822202345-3c0e61ca19c9, native Go actors spawned by name at their first message; remote over its gRPC transport (protobuf BytesValue messages). shardhost: host.Start members with their defaults, the remote pair over its TCP transport.")
	fmt.Fprintf(w, "shardhost's in-memory recovery (host.Config.Recovery): %v.\n", map[bool]string{true: "on, the default", false: "off (-recovery=false)"}[o.recovery])
	if o.checkpoint == "" {
		fmt.Fprintln(w, "The counter type's checkpoint policy: the journal, the default (each message's record durable before its reply or effects leave; the records of messages queued together appended together).")
	} else {
		fmt.Fprintf(w, "The counter type's checkpoint policy: %s (-checkpoint).\n", o.checkpoint)
	}
	if o.memRows() {
		fmt.Fprintln(w, "Proto.Actor's actors keep their state in memory only. The rows \"both in memory\" compare like with like: shardhost's counters of a second type, deployed with checkpoints at passivation (nothing written per message), measured in the same turns; Proto.Actor's figure in them is the one of the row above.")
	}
	fmt.Fprintln(w, "Hollywood (github.com/anthdm/hollywood) and Ergo (ergo.services/ergo) are not measured: neither is on the Go module proxy this build uses.")
	for _, s := range systems {
		if s.wasm != nil {
			file := s.wasmFile
			if rel, err := filepath.Rel(o.wasmDir, file); err == nil {
				file = rel
			}
			fmt.Fprintf(w, "%s: %s (in -wasm), %s bytes.\n", s.name, file, thousands(len(s.wasm)))
		}
	}
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	if o.profileDir != "" {
		fmt.Fprintf(w, "CPU and allocation profiles were taken during the serial, concurrent, activation and remote workloads (in %s): those figures carry the profiler's cost.\n", o.profileDir)
	}
}

func formatValue(v float64, u unit) string {
	switch u {
	case seconds:
		d := time.Duration(v * 1e9)
		switch {
		case d < 10*time.Microsecond:
			return fmt.Sprintf("%.2f µs", v*1e6)
		case d < time.Millisecond:
			return fmt.Sprintf("%.0f µs", v*1e6)
		default:
			return fmt.Sprintf("%.1f ms", v*1e3)
		}
	case perSecond:
		if v >= 1_000_000 {
			return fmt.Sprintf("%.2fM/s", v/1e6)
		}
		if v >= 10_000 {
			return fmt.Sprintf("%.0fk/s", v/1000)
		}
		return thousands(int(v+0.5)) + "/s"
	default:
		if v < 10*1024 {
			return fmt.Sprintf("%.1f KiB", v/1024)
		}
		return thousands(int(v/1024+0.5)) + " KiB"
	}
}

func ratio(r float64) string {
	if r < 10 {
		return fmt.Sprintf("%.2f", r)
	}
	return fmt.Sprintf("%.0f", r)
}

// thousands formats n with commas: 50,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
