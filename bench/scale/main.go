// Command scale measures how shardhost's costs grow with the cluster (docs/scale.md):
// the membership protocol for n members on a simulated network and clock, the shard
// coordinator's decisions for S shards over M members, and the coordinator's state in
// distributed data read back through real replicators on in-memory networks. It writes
// one CSV per experiment and PNG plots into -out, and prints a markdown summary with
// each curve's fitted growth.
//
//	go run . -out ../../docs/scale                          # make scale
//	go run . -smoke -out /tmp/scale                         # make scale-smoke
//	go run . -sizes 10,100,3000 -shards 1000 -out /tmp/s    # other sizes
//	go run . -replot -out ../../docs/scale                  # plots and summary from the CSVs
//
// Sizes whose estimated memory exceeds what the machine has available are refused
// before anything runs, with the estimate.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/sharding"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive size", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// Memory estimates, from the heap measured at 10-300 members and 1k-100k shards
// (docs/scale.md), with a margin: a member's core holds the whole membership state, so
// the simulation holds n² member records, and full states in flight during the join.
func membershipBytes(n int) float64 { return float64(n) * (64<<10 + float64(n)*1200) }

// The coordinator state experiment holds the state on each of the members' replicas,
// its encoding, and the harness's copies: about 400 bytes a shard a replica with the
// LWWMap layout, 100 with the EpochMap's (32 bytes an entry, its encoding of about 10,
// the replies of a read back in flight). Each real member (memberlist, messenger,
// replicator) takes about 4 MiB besides.
func stateBytes(layout string, shards, members int) float64 {
	perShard := 100.0
	if layout == stateLWWMap {
		perShard = 400
	}
	return float64(shards)*perShard*float64(members+4) + float64(members)*(4<<20)
}

// The distributed data experiment holds every key on each member's replica (a GCounter
// with its envelope and digest, a few hundred bytes), and the messages in flight.
func ddataBytes(keys, members int) float64 { return float64(keys) * 2000 * float64(members+2) }

// The routing experiment holds an active entity per shard, with its mailbox and the
// regions' slots, and M members' sharding and messenger.
func routeBytes(shards, members int) float64 {
	return float64(shards)*4000 + float64(members)*(2<<20)
}

func memAvailable() (float64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb float64
		if _, err := fmt.Sscanf(sc.Text(), "MemAvailable: %f kB", &kb); err == nil {
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no MemAvailable in /proc/meminfo")
}

func gib(b float64) string { return fmt.Sprintf("%.1f GiB", b/(1<<30)) }

func run() error {
	sizesF := flag.String("sizes", "10,30,100,300,1000", "membership sizes (members)")
	shardsF := flag.String("shards", "1000,10000,100000", "shard counts of the coordinator experiments")
	shardMembersF := flag.String("shard-members", "10,100,300", "member counts of the coordinator's decisions")
	stateMembersF := flag.String("state-members", "10", "member counts of the state read-back (real members on in-memory networks)")
	lwwMapMembers := flag.Int("state-lwwmap-members", 10, "largest member count that also runs the state's previous layout (an LWWMap a bucket)")
	ddataKeysF := flag.String("ddata-keys", "1000,10000,100000", "top-level key counts of the distributed data experiment")
	ringMembersF := flag.String("ring-members", "10,100,300", "member counts of the state store ring")
	ringShards := flag.Int("ring-shards", 1000, "shards of the state store ring's type")
	ringSnapshots := flag.Int("ring-snapshots", 1_000_000, "snapshots spread over the ring's shards")
	routeMembersF := flag.String("route-members", "10,100,300", "member counts of the routing experiment (its shard counts are -shards)")
	routeWarm := flag.Int("route-warm", 100_000, "messages of the routing experiment's warm phase (at least one per shard)")
	ddataMembersF := flag.String("ddata-members", "10", "member counts of the distributed data experiment (real members on in-memory networks)")
	out := flag.String("out", "docs/scale", "directory of the CSVs and plots")
	smoke := flag.Bool("smoke", false, "small sizes, a few minutes at most; a phase not reached fails the run")
	seed := flag.Int64("seed", 1, "seed of the simulation")
	churnMax := flag.Int("churn-max", 1000, "largest membership size that also runs the leave and partition phases")
	skipF := flag.String("skip", "", "membership phases not to run, of crash,leave (the partition then starts from the cluster as joined)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	pprofAddr := flag.String("pprof", "", "serve net/http/pprof on this address (localhost:6060) while running: profiles of a phase that does not end")
	phasesF := flag.String("phases", "membership,coordinator,state,ring,ddata,routing", "the phases to run, of membership, coordinator, state, ring, ddata and routing")
	replotOnly := flag.Bool("replot", false, "run nothing: read the CSVs in -out, draw the plots and print the summary again")
	flag.Parse()
	if *replotOnly {
		mem, sh, st, err := replot(*out)
		if err != nil {
			return err
		}
		if err := plotAll(*out, mem, sh, st); err != nil {
			return err
		}
		summary(os.Stdout, mem, sh, st)
		dd, err := replotDData(*out)
		if err != nil {
			return err
		}
		if err := plotDData(*out, dd); err != nil {
			return err
		}
		summaryDData(os.Stdout, dd)
		if rr, err := replotRouting(*out); err == nil {
			if err := plotRouting(*out, rr); err != nil {
				return err
			}
			summaryRouting(os.Stdout, rr)
		}
		return nil
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *pprofAddr != "" {
		ln, err := net.Listen("tcp", *pprofAddr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln) //nolint:errcheck // ends with the process
		defer srv.Close()
	}
	if *smoke {
		*sizesF, *shardsF, *shardMembersF, *stateMembersF = "10,30", "1000,5000", "10,100", "3"
		*ddataKeysF, *ddataMembersF = "100", "3"
		*ringMembersF, *ringSnapshots = "10,30", 10_000
		*routeMembersF, *routeWarm = "10", 10_000
	}
	sizes, err := ints(*sizesF)
	if err != nil {
		return err
	}
	shards, err := ints(*shardsF)
	if err != nil {
		return err
	}
	shardMembers, err := ints(*shardMembersF)
	if err != nil {
		return err
	}
	stateMembers, err := ints(*stateMembersF)
	if err != nil {
		return err
	}
	ddataKeys, err := ints(*ddataKeysF)
	if err != nil {
		return err
	}
	ddataMembers, err := ints(*ddataMembersF)
	if err != nil {
		return err
	}
	ringMembers, err := ints(*ringMembersF)
	if err != nil {
		return err
	}
	routeMembers, err := ints(*routeMembersF)
	if err != nil {
		return err
	}
	phases := map[string]bool{}
	for _, p := range strings.Split(*phasesF, ",") {
		switch p = strings.TrimSpace(p); p {
		case "membership", "coordinator", "state", "ring", "ddata", "routing":
			phases[p] = true
		case "":
		default:
			return fmt.Errorf("-phases: %q is no phase (membership, coordinator, state, ring, ddata, routing)", p)
		}
	}
	if !phases["membership"] {
		sizes = nil
	}
	if !phases["state"] {
		stateMembers = nil
	}
	if !phases["ring"] {
		ringMembers = nil
	}
	if !phases["ddata"] {
		ddataMembers = nil
	}
	if !phases["routing"] {
		routeMembers = nil
	}
	if *ringShards < 1 || *ringSnapshots < 0 {
		return fmt.Errorf("-ring-shards %d, -ring-snapshots %d: want at least one shard and no negative count", *ringShards, *ringSnapshots)
	}

	skip := map[string]bool{}
	for _, p := range strings.Split(*skipF, ",") {
		switch p = strings.TrimSpace(p); p {
		case "":
		case "crash", "leave":
			skip[p] = true
		default:
			return fmt.Errorf("-skip %q: want phases of crash,leave", p)
		}
	}

	// Refuse up front what the machine cannot hold.
	avail, err := memAvailable()
	if err != nil {
		return err
	}
	budget := 0.7 * avail
	var refused []string
	for _, n := range sizes {
		if need := membershipBytes(n); need > budget {
			refused = append(refused, fmt.Sprintf("%d members need about %s", n, gib(need)))
		}
	}
	for _, s := range shards {
		for _, m := range stateMembers {
			layout := stateEpochMap
			if m <= *lwwMapMembers {
				layout = stateLWWMap
			}
			if need := stateBytes(layout, s, m); need > budget {
				refused = append(refused, fmt.Sprintf("%d shards on %d members need about %s", s, m, gib(need)))
			}
		}
	}
	for _, k := range ddataKeys {
		for _, m := range ddataMembers {
			if need := ddataBytes(k, m); need > budget {
				refused = append(refused, fmt.Sprintf("%d keys on %d members need about %s", k, m, gib(need)))
			}
		}
	}
	for _, m := range routeMembers {
		for _, s := range shards {
			if need := routeBytes(s, m); need > budget {
				refused = append(refused, fmt.Sprintf("routing %d shards over %d members needs about %s", s, m, gib(need)))
			}
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("refused before starting: %s; this machine has %s available, of which the harness uses at most 70%% (%s)",
			strings.Join(refused, "; "), gib(avail), gib(budget))
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	logf := func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s "+f+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
	}

	// Membership.
	var memRows []memRow
	for _, n := range sizes {
		lc := cluster.DefaultCoreConfig()
		row, err := runMembership(n, lc, *seed, *churnMax, skip, logf)
		if err != nil {
			return fmt.Errorf("membership of %d: %w", n, err)
		}
		if *smoke && (row.Converge < 0 || row.Removed < 0 || row.LeaveRemoved < 0 || row.PartitionSplit < 0) {
			return fmt.Errorf("membership of %d: a phase did not end within %v simulated: %+v", n, phaseLimit, row)
		}
		memRows = append(memRows, row)
		if err := writeMembership(*out, memRows); err != nil {
			return err
		}
	}

	// The coordinator's decisions.
	var shardRows []shardRow
	for _, s := range shards {
		if !phases["coordinator"] {
			break
		}
		for _, m := range shardMembers {
			for _, st := range []struct {
				name  string
				strat sharding.ShardAllocationStrategy
			}{
				{"least", sharding.LeastShardAllocationStrategy{}},
				{"priority", sharding.PriorityAllocationStrategy{Type: "scale"}},
			} {
				row, err := runStrategy(st.name, st.strat, s, m)
				if err != nil {
					return fmt.Errorf("coordinator %s, %d shards, %d members: %w", st.name, s, m, err)
				}
				logf("coordinator %s %d shards %d members: allocate %v, rebalance %v (%d moves), replace a member's shards %v",
					st.name, s, m, row.Allocate, row.Rebalance, row.Moves, row.Replace)
				shardRows = append(shardRows, row)
			}
		}
		if err := writeCoordinator(*out, shardRows); err != nil {
			return err
		}
	}

	// The coordinator's state in distributed data.
	var stateRows []stateRow
	for _, m := range stateMembers {
		if len(shards) == 0 {
			break
		}
		// Real members join one after another: the time to form the cluster grows with
		// them (10 s a member is generous on a quiet machine, not at a load of 40).
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute+time.Duration(m)*10*time.Second)
		c, err := startStateCluster(ctx, m)
		if err != nil {
			cancel()
			return fmt.Errorf("%d members for the state: %w", m, err)
		}
		idle := c.idleCPU(3 * time.Second)
		logf("coordinator state: %d members at rest take %.3f CPU s/s", m, idle)
		for _, s := range shards {
			layouts := []string{stateEpochMap}
			if m <= *lwwMapMembers {
				layouts = append(layouts, stateLWWMap) // alternated in one run: before and after
			}
			for _, layout := range layouts {
				row := runState(ctx, c, layout, s)
				row.IdleCPU = idle
				logf("coordinator state (%s) %d shards on %d members: %d bytes, written in %v, read back in %v with %v of CPU %s",
					layout, s, m, row.Bytes, row.Write, row.ReadBack, row.ReadCPU, row.Err)
				stateRows = append(stateRows, row)
				if *smoke && row.Err != "" {
					c.close()
					cancel()
					return fmt.Errorf("coordinator state (%s) of %d shards on %d members: %s", layout, s, m, row.Err)
				}
			}
		}
		c.close()
		cancel()
		if err := writeState(*out, stateRows); err != nil {
			return err
		}
	}

	// The state store ring.
	var ringRows []ringRow
	for _, m := range ringMembers {
		row := runRing(m, *ringShards, *ringSnapshots)
		logf("state store ring on %d members: lookup %v, a replaced member repairs %d shards, %d snapshots",
			m, row.Lookup, row.Shards2, row.Repair)
		ringRows = append(ringRows, row)
	}
	if len(ringRows) > 0 {
		if err := writeRing(*out, ringRows); err != nil {
			return err
		}
		if err := plotRing(*out, ringRows); err != nil {
			return err
		}
	}

	// Distributed data alone.
	var ddataRows []ddataRow
	rest := 10 * time.Second
	if *smoke {
		rest = 2 * time.Second
	}
	for _, m := range ddataMembers {
		for _, k := range ddataKeys {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
			row := runDData(ctx, k, m, rest)
			cancel()
			logf("distributed data %d keys on %d members: spread %v (%.0f delta B/key), at rest %.0f B/s/member, full state %.0f B in %v, majority write %v, pruned in %v %s",
				k, m, row.Spread, row.DeltaPerKey, row.RestBytes, row.FullStateBytes, row.FullStateTime, row.MajorityWrite, row.Prune, row.Err)
			ddataRows = append(ddataRows, row)
			if *smoke && row.Err != "" {
				return fmt.Errorf("distributed data, %d keys on %d members: %s", k, m, row.Err)
			}
			if err := writeDData(*out, ddataRows); err != nil {
				return err
			}
		}
	}

	// Routing.
	var routeRows []routeRow
	for _, m := range routeMembers {
		if len(shards) == 0 {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		rows := runRouting(ctx, m, shards, *routeWarm, logf)
		cancel()
		routeRows = append(routeRows, rows...)
		if err := writeRouting(*out, routeRows); err != nil {
			return err
		}
		for _, r := range rows {
			if *smoke && r.Err != "" {
				return fmt.Errorf("routing, %d shards on %d members: %s", r.Shards, r.Members, r.Err)
			}
		}
	}
	if err := plotRouting(*out, routeRows); err != nil {
		return err
	}

	if err := plotAll(*out, memRows, shardRows, stateRows); err != nil {
		return err
	}
	if err := plotDData(*out, ddataRows); err != nil {
		return err
	}
	summary(os.Stdout, memRows, shardRows, stateRows)
	summaryDData(os.Stdout, ddataRows)
	summaryRing(os.Stdout, ringRows)
	summaryRouting(os.Stdout, routeRows)
	fmt.Fprintf(os.Stderr, "wrote %s\n", filepath.Clean(*out))
	return nil
}

// growth fits log y = a + k log x by least squares over the points with y > 0 and
// names the growth k suggests.
func growth(xs, ys []float64) (float64, string) {
	var lx, ly []float64
	for i := range xs {
		if ys[i] > 0 && !math.IsNaN(ys[i]) && !math.IsInf(ys[i], 0) {
			lx, ly = append(lx, math.Log(xs[i])), append(ly, math.Log(ys[i]))
		}
	}
	if len(lx) < 2 {
		return math.NaN(), "too few points"
	}
	var mx, my float64
	for i := range lx {
		mx += lx[i]
		my += ly[i]
	}
	mx /= float64(len(lx))
	my /= float64(len(ly))
	var num, den float64
	for i := range lx {
		num += (lx[i] - mx) * (ly[i] - my)
		den += (lx[i] - mx) * (lx[i] - mx)
	}
	if den == 0 {
		return math.NaN(), "one size only"
	}
	k := num / den
	switch {
	case k < 0.25:
		return k, "constant or log n"
	case k < 0.75:
		return k, "sublinear (between log n and linear)"
	case k < 1.15:
		return k, "linear"
	case k < 1.5:
		return k, "n log n"
	case k < 2.3:
		return k, "quadratic"
	default:
		return k, "cubic or worse"
	}
}
