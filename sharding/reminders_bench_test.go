package sharding

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/testutil"
)

// BenchmarkReminderFiring sets b.N reminders, ten per entity, on one member with the
// in-memory store, makes them all due, and measures how fast the member fires them: each
// an ask of its entity and the store's deletion of the one-shot.
// It reports reminders/s, and the heap the reminders take (B/reminder: the in-memory
// store's records and the member's state alike, an upper bound on the home's share,
// which is a due time and a timer per shard).
func BenchmarkReminderFiring(b *testing.B) {
	tc := newTestCluster(b, 1, withSharedStateStore(), withConfig(func(c *Config) { c.AskTimeout = time.Minute }))
	n := tc.nodes[0]
	ctx := context.Background()
	const perEntity = 10
	entities := (b.N + perEntity - 1) / perEntity
	for e := 0; e < entities; e++ {
		if _, err := n.sharding.Ask(ctx, "counter", "b"+strconv.Itoa(e), []byte("get")); err != nil {
			b.Fatal(err)
		}
	}
	// Every shard is hosted now; passivate nothing, so that the firing measures delivery
	// and the store, not activations.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	far := time.Now().Add(time.Hour).UnixMilli()
	for i := 0; i < b.N; i++ {
		id := "b" + strconv.Itoa(i/perEntity)
		if err := n.sharding.SetReminder(ctx, "counter", id, Reminder{Name: "r" + strconv.Itoa(i%perEntity), Due: far, Payload: []byte("x")}); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perReminder := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(b.N)
	// Now make them all due, in the store itself (each entity's ten in one write, at
	// its shard's epoch), and have each shard's home read them, as when the shard comes
	// to a member: the firing alone is timed.
	r := n.sharding.region("counter")
	r.mu.Lock()
	var shards []*shard
	r.eachHostedLocked(func(sh *shard) { shards = append(shards, sh) })
	r.mu.Unlock()
	epochs := map[int]uint64{}
	for _, sh := range shards {
		epochs[sh.id] = sh.epoch
	}
	past := time.Now().Add(-time.Second).UnixMilli()
	for e := 0; e < entities; e++ {
		id := "b" + strconv.Itoa(e)
		var rs []Reminder
		for k := 0; k < perEntity && e*perEntity+k < b.N; k++ {
			rs = append(rs, Reminder{Name: "r" + strconv.Itoa(k), Due: past, Payload: []byte("x")})
		}
		shardID := abiShard(id, r.settings.NumberOfShards)
		if err := tc.states.SaveReminders(ctx, EntityKey{Type: "counter", Shard: shardID, ID: id}, epochs[shardID], rs); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	for _, sh := range shards {
		n.sharding.owner.Go(func() { r.scanReminders(sh) })
	}
	testutil.Eventually(b, 10*time.Minute, "every reminder fired", func() bool {
		tc.acts.mu.Lock()
		defer tc.acts.mu.Unlock()
		return len(tc.acts.reminded) >= b.N
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reminders/s")
	b.ReportMetric(perReminder, "B/reminder") // after ResetTimer, which drops metrics
}

// The sizes of BenchmarkReminderSteadyState; small by default, the figures of
// bench/README.md ("Reminders") with -args -remind-reminders 1000000
// -remind-entities 100000.
var (
	remindN       = flag.Int("remind-reminders", 20000, "BenchmarkReminderSteadyState: reminders set in all")
	remindE       = flag.Int("remind-entities", 2000, "BenchmarkReminderSteadyState: entities they are spread over")
	remindRate    = flag.Int("remind-rate", 3000, "BenchmarkReminderSteadyState: reminders falling due per second over the cluster")
	remindWarm    = flag.Duration("remind-warmup", 2*time.Second, "BenchmarkReminderSteadyState: firing before the measurement")
	remindMeasure = flag.Duration("remind-measure", 3*time.Second, "BenchmarkReminderSteadyState: the measurement")
	remindProfile = flag.String("remind-cpuprofile", "", "BenchmarkReminderSteadyState: write a CPU profile of the measurement here")
	remindLead    = flag.Duration("remind-lead", time.Second, "BenchmarkReminderSteadyState: how long after the sets the first reminder falls due (time to write the due times)")
)

// BenchmarkReminderSteadyState sets -remind-reminders interval reminders over
// -remind-entities entities of a type of abi.DefaultNumberOfShards shards, on 3 members
// sharing the in-memory store (the in-memory transport between them), each set on its
// shard's home as an entity sets it. It reports the rate of the sets and the heap per
// stored reminder (after a collection, before and after the sets: the store's records
// and whatever the members keep). Then it makes their due times fall evenly, -remind-rate
// a second over the cluster (the interval is reminders/rate) from -remind-lead after
// the sets (writing the due times must take less, or the first are late from the
// start: it says so), and after -remind-warmup
// measures for -remind-measure the firings delivered per second on each member, their
// lateness (delivery time minus due time), and the process's CPU time (cpu-µs/firing)
// and allocations (allocs/firing, B/firing) per firing, the 3 members together. With a rate over what the members
// fire, the delivered rate is their capacity and the lateness grows. Run once:
//
//	go test -run '^$' -bench BenchmarkReminderSteadyState -benchtime 1x ./sharding/ \
//	    -args -remind-reminders 1000000 -remind-entities 100000 -remind-rate 30000
func BenchmarkReminderSteadyState(b *testing.B) {
	benchReminderSteadyState(b, withSharedStateStore())
}

// RunReminderSteadyState is BenchmarkReminderSteadyState with a state store of each
// member's own, made by newStore (package replstore's: replstore_test.go), so that the
// firings' reads, journal records and write backs go through that store's replicas.
func RunReminderSteadyState(b *testing.B, newStore MemberStateStore) {
	benchReminderSteadyState(b, withMemberStateStores(newStore))
}

// benchReminderSteadyState runs BenchmarkReminderSteadyState on the store that store
// gives the members.
func benchReminderSteadyState(b *testing.B, store clusterOption) {
	const members = 3
	// The figures go out as they come (b.Logf's wait for the end, after the stop).
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	const typ = "remind"
	nRem, nEnt := *remindN, *remindE
	if nEnt <= 0 || nRem < nEnt || nRem%nEnt != 0 || nRem/nEnt > MaxRemindersPerEntity || *remindRate <= 0 {
		b.Fatalf("-remind-reminders %d must be a multiple of -remind-entities %d, at most %d per entity, and -remind-rate > 0",
			nRem, nEnt, MaxRemindersPerEntity)
	}
	perEntity := nRem / nEnt
	interval := int64(nRem) * 1000 / int64(*remindRate) // ms
	if interval < MinReminderInterval.Milliseconds() {
		b.Fatalf("reminders/rate gives an interval of %d ms, under %v", interval, MinReminderInterval)
	}
	var rec struct {
		sync.Mutex
		on       bool
		late     []int64 // µs
		byMember map[string]int
	}
	rec.byMember = map[string]int{}
	tc := newTestCluster(b, members, store, withConfig(func(c *Config) {
		c.AskTimeout = time.Minute
		// The default, not the tests' 50 ms: each member's idle sweep walks all its
		// active entities every ReconcileInterval.
		c.ReconcileInterval = DefaultConfig().ReconcileInterval
	}))
	for _, n := range tc.nodes {
		n.factory.onReminder = func(node string, due int64, at time.Time) {
			rec.Lock()
			if rec.on {
				rec.late = append(rec.late, at.UnixMicro()-due*1000)
				rec.byMember[node]++
			}
			rec.Unlock()
		}
	}
	ctx := context.Background()
	shards := abi.DefaultNumberOfShards
	ids := make([]string, nEnt)
	firstOf := make([]string, shards) // an entity of each shard
	for e := range ids {
		ids[e] = "e" + strconv.Itoa(e)
		if s := abi.ShardID(ids[e], shards); firstOf[s] == "" {
			firstOf[s] = ids[e]
		}
	}
	// Allocate every shard (an ask into one entity of each), then find each shard's home.
	for _, id := range firstOf {
		if id == "" {
			continue
		}
		if _, err := tc.nodes[0].sharding.Ask(ctx, typ, id, []byte("get")); err != nil {
			b.Fatal(err)
		}
	}
	home := make([]*testNode, shards)
	homeShard := make([]*shard, shards)
	epochs := make([]uint64, shards)
	for _, n := range tc.nodes {
		r := n.sharding.region(typ)
		if r == nil {
			continue
		}
		r.mu.Lock()
		r.eachHostedLocked(func(sh *shard) { home[sh.id], homeShard[sh.id], epochs[sh.id] = n, sh, sh.epoch })
		r.mu.Unlock()
	}
	hosted := map[string]int{}
	for s, id := range firstOf {
		if id != "" && home[s] == nil {
			b.Fatalf("shard %d is hosted nowhere", s)
		}
		if home[s] != nil {
			hosted[home[s].name]++
		}
	}
	logf("%d reminders, %d entities, %d shards (per member: %v), interval %d ms (%d/s due)",
		nRem, nEnt, shards, hosted, interval, *remindRate)

	// The sets, far ahead, on 8 goroutines.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	far := time.Now().Add(24 * time.Hour).UnixMilli()
	payload := []byte("x")
	setStart := time.Now()
	var wg sync.WaitGroup
	var setErr error
	var errOnce sync.Once
	const setters = 8
	for g := 0; g < setters; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := g; e < nEnt; e += setters {
				n := home[abi.ShardID(ids[e], shards)]
				for k := 0; k < perEntity; k++ {
					err := n.sharding.SetReminder(ctx, typ, ids[e], Reminder{Name: "r" + strconv.Itoa(k), Due: far, Interval: interval, Payload: payload})
					if err != nil {
						errOnce.Do(func() { setErr = err })
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if setErr != nil {
		b.Fatal(setErr)
	}
	setTime := time.Since(setStart)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perReminder := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(nRem)
	logf("set: %v, %.0f sets/s; heap %.1f → %.1f MiB, %.0f B/reminder",
		setTime.Round(time.Millisecond), float64(nRem)/setTime.Seconds(),
		float64(before.HeapAlloc)/(1<<20), float64(after.HeapAlloc)/(1<<20), perReminder)

	// Spread their due times evenly over one interval from t0, in the store itself (each
	// entity's reminders in one write at its shard's epoch), then wake each shard's home.
	t0 := time.Now().Add(*remindLead).UnixMilli()
	for e, id := range ids {
		s := abi.ShardID(id, shards)
		rs := make([]Reminder, perEntity)
		for k := range rs {
			// Reminder k of entity e is the (k*nEnt+e)-th to fall due.
			due := t0 + int64(k*nEnt+e)*interval/int64(nRem)
			rs[k] = Reminder{Name: "r" + strconv.Itoa(k), Due: due, Interval: interval, Payload: payload}
		}
		if err := home[s].sharding.reminders.SaveReminders(ctx, EntityKey{Type: typ, Shard: s, ID: id}, epochs[s], rs); err != nil {
			b.Fatal(err)
		}
	}
	if late := time.Since(time.UnixMilli(t0)); late > 0 {
		logf("the due times were written %v after the first fell due: a larger -remind-lead", late.Round(time.Millisecond))
	}
	for s, n := range home {
		if n != nil {
			n.sharding.region(typ).scheduleReminders(homeShard[s], t0)
		}
	}
	b.ResetTimer()
	time.Sleep(time.Until(time.UnixMilli(t0).Add(*remindWarm))) // the clock is the workload's
	if *remindProfile != "" {
		f, err := os.Create(*remindProfile)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
	}
	rec.Lock()
	rec.on = true
	rec.Unlock()
	activations := func() int {
		tc.acts.mu.Lock()
		defer tc.acts.mu.Unlock()
		return len(tc.acts.log)
	}
	act0 := activations()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0, _ := testutil.ProcessCPU()
	start := time.Now()
	time.Sleep(*remindMeasure)
	rec.Lock()
	rec.on = false
	took := time.Since(start)
	cpu1, haveCPU := testutil.ProcessCPU()
	goroutines := runtime.NumGoroutine()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if *remindProfile != "" {
		pprof.StopCPUProfile()
	}
	late, byMember := rec.late, rec.byMember
	rec.Unlock()
	act1 := activations()
	b.StopTimer()
	slices.Sort(late)
	pct := func(p float64) time.Duration {
		if len(late) == 0 {
			return 0
		}
		return time.Duration(late[min(len(late)-1, int(p*float64(len(late))))]) * time.Microsecond
	}
	rate := float64(len(late)) / took.Seconds()
	logf("steady state, %v: %d fired, %.0f/s (%.0f/s due), per member %v; lateness p50 %v p99 %v max %v",
		took.Round(time.Millisecond), len(late), rate, float64(nRem)*1000/float64(interval), byMember,
		pct(0.50), pct(0.99), pct(1))
	// The first firing of an entity activates it (none is active after the sets, but
	// one a shard); the later ones find it active.
	logf("activations in the measurement: %d (%.0f%% of the firings)", act1-act0, 100*float64(act1-act0)/float64(max(len(late), 1)))
	// A backlog (a rate over what the members fire) is due reminders queued, not
	// goroutines: their count and the heap say what it costs.
	logf("at the end of the measurement: %d goroutines, heap %.1f MiB", goroutines, float64(ms.HeapAlloc)/(1<<20))
	if haveCPU && len(late) > 0 {
		// The process's CPU time (user and system, the 3 members together) per firing:
		// what a firing costs whatever else shares the machine.
		perFiring := (cpu1 - cpu0) / time.Duration(len(late))
		logf("CPU time of the process: %v in the measurement (%.2f cores), %v per firing",
			(cpu1 - cpu0).Round(time.Millisecond), (cpu1-cpu0).Seconds()/took.Seconds(), perFiring)
		b.ReportMetric(float64(perFiring.Nanoseconds())/1000, "cpu-µs/firing")
	}
	if len(late) > 0 {
		// What the process allocated per firing (the 3 members together), which the
		// collector pays for; and its cycles in the measurement.
		allocs := float64(ms.Mallocs-ms0.Mallocs) / float64(len(late))
		bytes := float64(ms.TotalAlloc-ms0.TotalAlloc) / float64(len(late))
		logf("allocated per firing: %.0f allocations, %.0f B; %d collections in the measurement",
			allocs, bytes, ms.NumGC-ms0.NumGC)
		b.ReportMetric(allocs, "allocs/firing")
		b.ReportMetric(bytes, "B/firing")
	}
	b.ReportMetric(perReminder, "B/reminder")
	b.ReportMetric(float64(nRem)/setTime.Seconds(), "sets/s")
	b.ReportMetric(rate/members, "fired/s/member")
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "late-p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "late-p99-ms")
	// No more scans; the members stop without handling the firings still queued (the
	// backlog of a rate over their capacity), which a graceful stop would wait for.
	for _, sh := range homeShard {
		if sh != nil {
			sh.stopReminders()
		}
	}
	for _, n := range tc.nodes {
		actx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		if err := n.sharding.Abort(actx); err != nil {
			b.Errorf("stopping %s: %v", n.name, err)
		}
		cancel()
	}
}
