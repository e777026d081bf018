package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// side is one system in a phase of the run: its way into its counters, the IDs of its
// warm counters, and how to stop it; for shardhost with the in-memory rows
// (options.memRows), its way into the memCounterType counters too, and their IDs.
type side struct {
	sys    system
	c      counters
	ids    []string
	mem    counters
	memIDs []string
	stop   func()
}

// rate accumulates a count over rounds, and the process's CPU time meanwhile.
type rate struct {
	n       int64
	elapsed time.Duration
	cpu     time.Duration
}

func (r *rate) add(n int64, d time.Duration) { r.n += n; r.elapsed += d }

// cpuPerOp is the process's CPU time (user and system, every goroutine) per operation,
// in seconds: on a shared machine it moves less than the rate does.
func (r rate) cpuPerOp() float64 {
	if r.n <= 0 {
		return 0
	}
	return r.cpu.Seconds() / float64(r.n)
}

func (r rate) perSecond() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.n) / r.elapsed.Seconds()
}

// rateTable holds the rates of one workload, by system.
type rateTable map[string]*rate

// add counts n operations in d for the system key.
func (rs rateTable) add(key string, n int64, d time.Duration) {
	if rs[key] == nil {
		rs[key] = &rate{}
	}
	rs[key].add(n, d)
}

// measured runs f, which counts its operations with rs.add, and adds the process's CPU
// time during f to key's.
func (rs rateTable) measured(key string, f func() error) error {
	before := processCPU()
	err := f()
	if rs[key] == nil {
		rs[key] = &rate{}
	}
	rs[key].cpu += processCPU() - before
	return err
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// turns runs each round of a workload on every side, the sides taking turns (the first
// of each round moves on by one), so that a shared machine's load weighs on all alike.
// Each turn starts after a garbage collection, as each run of a Go benchmark does
// (testing.B), so that no turn pays for collecting what an earlier one left: the
// Go guest's activations leave gigabytes behind.
func turns(o options, sides []side, f func(round int, s side) error) error {
	for r := 0; r < o.rounds; r++ {
		for k := range sides {
			s := sides[(r+k)%len(sides)]
			runtime.GC()
			if err := f(r, s); err != nil {
				return fmt.Errorf("%s: %w", s.sys.name, err)
			}
		}
	}
	return nil
}

func stopAll(sides []side) {
	for _, s := range sides {
		s.stop()
	}
}

// localPhase starts every system on one member, activates o.entities counters in each,
// and runs the serial, concurrent, tell and activation workloads, the systems taking
// turns round by round.
func localPhase(ctx context.Context, o options, systems []system, cache string, res results, progress func(string, ...any)) error {
	var sides []side
	defer func() { stopAll(sides) }()
	for _, sys := range systems {
		progress("%s: one member, %d counters", sys.name, o.entities)
		s := side{sys: sys}
		if sys.wasm == nil {
			as := quietActorSystem()
			s.c, s.stop = newProtoCounters(as), as.Shutdown
		} else {
			cl, err := startShardCluster(ctx, 1, sys.wasm, cache, o.recovery, o.checkpoint, o.memRows())
			if err != nil {
				return fmt.Errorf("%s: %w", sys.name, err)
			}
			s.c, s.stop = shardCounters{cl.nodes[0].Sharding(), counterType}, cl.stop
			if o.memRows() {
				s.mem = shardCounters{cl.nodes[0].Sharding(), memCounterType}
			}
		}
		sides = append(sides, s)
		if err := homeAllShards(ctx, s.c); err != nil {
			return fmt.Errorf("%s: %w", sys.name, err)
		}
		for i := 0; i < o.entities; i++ {
			s.ids = append(s.ids, "e-"+strconv.Itoa(i))
		}
		sides[len(sides)-1] = s
		if err := activate(ctx, s.c, s.ids, o.askers); err != nil {
			return fmt.Errorf("%s: %w", sys.name, err)
		}
		if s.mem != nil && o.runs("tells") {
			s.memIDs = s.ids
			sides[len(sides)-1] = s
			if err := homeAllShards(ctx, s.mem); err != nil {
				return fmt.Errorf("%s: %w", sys.name, err)
			}
			if err := activate(ctx, s.mem, s.memIDs, o.askers); err != nil {
				return fmt.Errorf("%s: %w", sys.name, err)
			}
		}
	}
	slice := o.dur / time.Duration(o.rounds)
	if o.runs("serial") {
		progress("serial asks")
		samples := map[string]latencies{}
		err := turns(o, sides, func(r int, s side) error {
			return profiled(o.profileDir, s.sys.key+"-serial-r"+strconv.Itoa(r), func() error {
				l, err := serialAsks(ctx, s.c, s.ids[0], slice, o.serialMax/o.rounds)
				samples[s.sys.key] = append(samples[s.sys.key], l...)
				return err
			})
		})
		if err != nil {
			return err
		}
		for k, l := range samples {
			res.set(k, "serial-p50", l.quantile(0.5).Seconds())
			res.set(k, "serial-p99", l.quantile(0.99).Seconds())
		}
	}
	if o.runs("concurrent") {
		progress("concurrent asks")
		rates := rateTable{}
		err := turns(o, sides, func(r int, s side) error {
			return profiled(o.profileDir, s.sys.key+"-concurrent-r"+strconv.Itoa(r), func() error {
				return rates.measured(s.sys.key, func() error {
					n, d, err := concurrentAsks(ctx, s.c, s.ids, o.askers, slice)
					rates.add(s.sys.key, n, d)
					return err
				})
			})
		})
		if err != nil {
			return err
		}
		for k, r := range rates {
			res.set(k, "concurrent", r.perSecond())
			res.set(k, "concurrent-cpu", r.cpuPerOp())
		}
	}
	if o.runs("tells") {
		progress("tells")
		rates, memRates := rateTable{}, rateTable{}
		err := turns(o, sides, func(r int, s side) error {
			n := o.tells / o.rounds
			err := profiled(o.profileDir, s.sys.key+"-tells-r"+strconv.Itoa(r), func() error {
				return rates.measured(s.sys.key, func() error {
					d, sent, err := tellLoad(ctx, s.c, s.ids, o.tellers, n)
					rates.add(s.sys.key, int64(n), d)
					progress("tells: %s: %d sent in %v, applied in %v", s.sys.name, n, sent, d)
					return err
				})
			})
			if err != nil || s.mem == nil {
				return err
			}
			return profiled(o.profileDir, s.sys.key+"-tells-mem-r"+strconv.Itoa(r), func() error {
				return memRates.measured(s.sys.key, func() error {
					d, sent, err := tellLoad(ctx, s.mem, s.memIDs, o.tellers, n)
					memRates.add(s.sys.key, int64(n), d)
					progress("tells: %s, in memory: %d sent in %v, applied in %v", s.sys.name, n, sent, d)
					return err
				})
			})
		})
		if err != nil {
			return err
		}
		for k, r := range rates {
			res.set(k, "tells", r.perSecond())
			res.set(k, "tells-cpu", r.cpuPerOp())
		}
		setMemRows(o, res, memRates, "tells", "tells-mem", "tells-cpu", "tells-cpu-mem")
	}
	if o.runs("activation") {
		progress("activations")
		samples := map[string]latencies{}
		rates := rateTable{}
		err := turns(o, sides, func(r int, s side) error {
			return profiled(o.profileDir, s.sys.key+"-activation-r"+strconv.Itoa(r), func() error {
				l, err := serialActivations(ctx, s.c, "a"+strconv.Itoa(r)+"-", slice, o.activations/o.rounds)
				samples[s.sys.key] = append(samples[s.sys.key], l...)
				if err != nil {
					return err
				}
				n, d, err := activationRate(ctx, s.c, "b"+strconv.Itoa(r)+"-", o.askers, slice, o.rateMax/o.rounds)
				rates.add(s.sys.key, n, d)
				return err
			})
		})
		if err != nil {
			return err
		}
		for k, l := range samples {
			res.set(k, "activation-p50", l.quantile(0.5).Seconds())
			res.set(k, "activation-p99", l.quantile(0.99).Seconds())
			res.set(k, "activation-rate", rates[k].perSecond())
		}
	}
	return nil
}

// remotePhase starts every system as two members on loopback (Proto.Actor: two actor
// systems with remote; shardhost: two nodes over its TCP transport), activates
// o.entities counters on the second, and asks them from the first: one at a time and
// with o.askers goroutines, the systems taking turns round by round.
func remotePhase(ctx context.Context, o options, systems []system, cache string, res results, progress func(string, ...any)) error {
	var sides []side
	defer func() { stopAll(sides) }()
	for _, sys := range systems {
		progress("%s: two members, %d counters on the second", sys.name, o.entities)
		s := side{sys: sys}
		if sys.wasm == nil {
			p := startProtoPair()
			s.c, s.stop = p.remote, p.stop
			sides = append(sides, s)
			for i := 0; i < o.entities; i++ {
				s.ids = append(s.ids, "r-"+strconv.Itoa(i))
			}
			if err := activate(ctx, p.local, s.ids, o.askers); err != nil { // spawned on the server
				return fmt.Errorf("%s: %w", sys.name, err)
			}
		} else {
			cl, err := startShardCluster(ctx, 2, sys.wasm, cache, o.recovery, o.checkpoint, o.memRows())
			if err != nil {
				return fmt.Errorf("%s: %w", sys.name, err)
			}
			s.c, s.stop = shardCounters{cl.nodes[0].Sharding(), counterType}, cl.stop
			sides = append(sides, s)
			types := []string{counterType}
			if o.memRows() {
				s.mem = shardCounters{cl.nodes[0].Sharding(), memCounterType}
				types = append(types, memCounterType)
			}
			for _, typ := range types {
				ids, err := cl.remoteIDs(ctx, typ, "r-", o.entities)
				if err != nil {
					return fmt.Errorf("%s: %w", sys.name, err)
				}
				c := shardCounters{cl.nodes[0].Sharding(), typ}
				if err := activate(ctx, c, ids, o.askers); err != nil {
					return fmt.Errorf("%s: %w", sys.name, err)
				}
				r, err := cl.nodes[0].Sharding().Ask(ctx, typ, ids[0], msgGet)
				if err != nil {
					return fmt.Errorf("%s: %w", sys.name, err)
				}
				if r.Node != cl.nodes[1].Self().Address {
					return fmt.Errorf("%s: counter %s/%s answered from %s, not member 2", sys.name, typ, ids[0], r.Node)
				}
				if typ == counterType {
					s.ids = ids
				} else {
					s.memIDs = ids
				}
			}
		}
		sides[len(sides)-1] = s
	}
	slice := o.dur / time.Duration(o.rounds)
	progress("remote asks")
	samples := map[string]latencies{}
	rates, memRates := rateTable{}, rateTable{}
	err := turns(o, sides, func(r int, s side) error {
		err := profiled(o.profileDir, s.sys.key+"-remote-serial-r"+strconv.Itoa(r), func() error {
			l, err := serialAsks(ctx, s.c, s.ids[0], slice, o.serialMax/o.rounds)
			samples[s.sys.key] = append(samples[s.sys.key], l...)
			return err
		})
		if err != nil {
			return err
		}
		err = profiled(o.profileDir, s.sys.key+"-remote-rate-r"+strconv.Itoa(r), func() error {
			return rates.measured(s.sys.key, func() error {
				n, d, err := concurrentAsks(ctx, s.c, s.ids, o.askers, slice)
				rates.add(s.sys.key, n, d)
				return err
			})
		})
		if err != nil || s.mem == nil {
			return err
		}
		return profiled(o.profileDir, s.sys.key+"-remote-rate-mem-r"+strconv.Itoa(r), func() error {
			return memRates.measured(s.sys.key, func() error {
				n, d, err := concurrentAsks(ctx, s.mem, s.memIDs, o.askers, slice)
				memRates.add(s.sys.key, n, d)
				return err
			})
		})
	})
	if err != nil {
		return err
	}
	for k, l := range samples {
		res.set(k, "remote-p50", l.quantile(0.5).Seconds())
		res.set(k, "remote-p99", l.quantile(0.99).Seconds())
		res.set(k, "remote-rate", rates[k].perSecond())
		res.set(k, "remote-cpu", rates[k].cpuPerOp())
	}
	setMemRows(o, res, memRates, "remote-rate", "remote-rate-mem", "remote-cpu", "remote-cpu-mem")
	return nil
}

// setMemRows sets the in-memory rows (options.memRows) of a rate workload: shardhost's
// from memRates, under memRow (and the CPU time per operation under memCPURow, if not
// empty); Proto.Actor's, whose actors live in memory anyway, are its figures of the
// same workload (row, cpuRow), measured in the same turns.
func setMemRows(o options, res results, memRates rateTable, row, memRow, cpuRow, memCPURow string) {
	if !o.memRows() {
		return
	}
	for k, r := range memRates {
		res.set(k, memRow, r.perSecond())
		if memCPURow != "" {
			res.set(k, memCPURow, r.cpuPerOp())
		}
	}
	if v, ok := res["proto"][row]; ok {
		res.set("proto", memRow, v)
		if v, ok := res["proto"][cpuRow]; ok && memCPURow != "" {
			res.set("proto", memCPURow, v)
		}
	}
}
