// Command loopback runs real shardhost members, one process each, on loopback addresses
// of this machine (127.0.0.x, 25 by default) and measures what docs/scale.md reports
// under "25 real members":
//
//   - the resident memory (VmRSS) of each idle member, with the counter type deployed;
//   - a restart of every member in turn (SIGTERM, which leaves the cluster, then the
//     same command again: a new incarnation on the same address), the time from the
//     new process's start until every member sees all of them up in a converged view;
//   - asks ("inc" to 200 counters, with idempotency keys) through every member at once
//     while 5 members are SIGKILLed together: the asks that failed through the members
//     that stayed, and, once the survivors have removed the killed ones, the acked
//     increments missing from the counters (lost).
//
// It is not part of make test: it takes 10 to 20 minutes and most of 2 cores.
//
//	make build && make examples    # bin/shardhost and bin/wasm/counter.wasm
//	nice -n 10 go run ./bench/loopback -bin bin/shardhost -wasm bin/wasm/counter.wasm
//
// Every process it starts is stopped by its process ID when it ends, whatever happens.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shardhost/shardhost/client"
)

type member struct {
	i        int
	bind     string
	api      string
	dir      string
	cmd      *exec.Cmd
	done     chan struct{}
	killed   atomic.Bool
	cl       *client.Client
	startups int
}

type run struct {
	bin, profile, logDir string
	seeds                []string
	members              []*member
	logf                 func(string, ...any)
}

func main() {
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "loopback:", err)
		os.Exit(1)
	}
}

func mainErr() error {
	bin := flag.String("bin", "bin/shardhost", "the shardhost binary (make build)")
	wasm := flag.String("wasm", "bin/wasm/counter.wasm", "the counter module (make examples)")
	n := flag.Int("n", 25, "members")
	kill := flag.Int("kill", 5, "members SIGKILLed together during the asks")
	base := flag.Int("base", 101, "last octet of the first member's address: members are 127.0.0.BASE, BASE+1, ...")
	profile := flag.String("profile", "dev", "--gossip-profile of the members (dev: one machine that may be busy)")
	before := flag.Duration("asks-before", 15*time.Second, "asks before the kill")
	after := flag.Duration("asks-after", 45*time.Second, "asks after the kill")
	restarts := flag.Bool("restarts", true, "restart every member in turn")
	flag.Parse()
	if *n < 3 || *kill < 1 || *kill > (*n-1)/2 || *base < 2 || *base+*n > 255 {
		return fmt.Errorf("-n %d -kill %d -base %d: want n ≥ 3, 1 ≤ kill < n/2 (a majority must stay) and addresses within 127.0.0.2-254", *n, *kill, *base)
	}
	module, err := os.ReadFile(*wasm)
	if err != nil {
		return fmt.Errorf("the counter module: %w (make examples)", err)
	}
	if _, err := os.Stat(*bin); err != nil {
		return fmt.Errorf("the binary: %w (make build)", err)
	}
	abs, err := filepath.Abs(*bin)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "loopback-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	r := &run{bin: abs, profile: *profile, logDir: tmp, logf: func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s "+f+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
	}}
	for i := range *n {
		ip := fmt.Sprintf("127.0.0.%d", *base+i)
		m := &member{i: i, bind: ip + ":7946", api: ip + ":8080", dir: filepath.Join(tmp, fmt.Sprintf("m%02d", i))}
		if m.cl, err = client.New([]string{m.api}); err != nil {
			return err
		}
		r.members = append(r.members, m)
	}
	for _, m := range r.members[:3] {
		r.seeds = append(r.seeds, m.bind)
	}
	defer r.stopAll()

	// Start: every member at once, the same three seeds.
	t0 := time.Now()
	for _, m := range r.members {
		if err := r.start(m); err != nil {
			return err
		}
	}
	conv, err := r.waitConverged(r.members, 5*time.Minute)
	if err != nil {
		return fmt.Errorf("the first start: %w", err)
	}
	r.logf("%d members converged %v after the first start", *n, conv.Round(time.Millisecond))
	fmt.Printf("start: %d members converged %.1f s after they were started together\n", *n, time.Since(t0).Seconds())

	ctx := context.Background()
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	_, err = r.members[0].cl.Deploy(dctx, "counter", module, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("deploying the counter: %w", err)
	}
	time.Sleep(10 * time.Second) // idle: the deploy's work done
	var rss []float64
	for _, m := range r.members {
		kb, err := vmRSS(m.cmd.Process.Pid)
		if err != nil {
			return err
		}
		rss = append(rss, kb/1024)
	}
	fmt.Printf("RSS per idle member (MiB, counter deployed, no entity active): %s\n", stats(rss))

	if *restarts {
		var times []float64
		for _, m := range r.members {
			if err := r.stop(m, syscall.SIGTERM, 2*time.Minute); err != nil {
				return err
			}
			t := time.Now()
			if err := r.start(m); err != nil {
				return err
			}
			if _, err := r.waitConverged(r.members, 5*time.Minute); err != nil {
				return fmt.Errorf("after restarting member %d: %w", m.i, err)
			}
			d := time.Since(t).Seconds()
			times = append(times, d)
			r.logf("member %d restarted: all converged after %.1f s", m.i, d)
		}
		fmt.Printf("restart of every member in turn (SIGTERM, start again, until all %d see all up and converged), s: %s\n", *n, stats(times))
	}

	// Asks through every member while kill of them are SIGKILLed together.
	res := r.asks(*before, *after, *kill)
	fmt.Println(res)
	return nil
}

// start launches m's process.
func (r *run) start(m *member) error {
	m.startups++
	logf, err := os.Create(filepath.Join(r.logDir, fmt.Sprintf("m%02d.%d.log", m.i, m.startups)))
	if err != nil {
		return err
	}
	cmd := exec.Command(r.bin, "start", "--bind", m.bind, "--api", m.api, "--data-dir", m.dir,
		"--gossip-profile", r.profile, "--log-level", "warn", "--join", strings.Join(r.seeds, ","))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	m.cmd, m.done = cmd, make(chan struct{})
	m.killed.Store(false)
	go func(done chan struct{}) {
		cmd.Wait()
		logf.Close()
		close(done)
	}(m.done)
	return nil
}

// stop signals m's process (by its ID) and waits for it to end, killing it after limit.
func (r *run) stop(m *member, sig syscall.Signal, limit time.Duration) error {
	if m.cmd == nil {
		return nil
	}
	m.killed.Store(true)
	if err := m.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-m.done:
	case <-time.After(limit):
		r.logf("member %d did not stop within %v of %v: killed", m.i, limit, sig)
		m.cmd.Process.Kill()
		<-m.done
	}
	m.cmd = nil
	return nil
}

func (r *run) stopAll() {
	for _, m := range r.members {
		if m.cmd != nil {
			m.cmd.Process.Kill()
			<-m.done
			m.cmd = nil
		}
	}
}

type view struct {
	Converged bool `json:"converged"`
	Members   []struct {
		Address   string `json:"address"`
		Status    string `json:"status"`
		Reachable bool   `json:"reachable"`
	} `json:"members"`
}

// waitConverged waits until every member of ms sees exactly ms, all up and reachable,
// in a converged view; it returns the time it waited.
func (r *run) waitConverged(ms []*member, limit time.Duration) (time.Duration, error) {
	want := map[string]bool{}
	for _, m := range ms {
		want[m.bind] = true
	}
	start := time.Now()
	last := ""
	for time.Since(start) < limit {
		ok := true
		for _, m := range ms {
			if why := r.notConverged(m, want); why != "" {
				ok, last = false, why
				break
			}
		}
		if ok {
			return time.Since(start), nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("not converged after %v: %s", limit, last)
}

func (r *run) notConverged(m *member, want map[string]bool) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := m.cl.Do(ctx, "GET", "/v1/cluster", nil)
	if err != nil {
		return fmt.Sprintf("member %d: %v", m.i, err)
	}
	var v view
	if err := json.Unmarshal(resp.Body, &v); err != nil {
		return fmt.Sprintf("member %d: %v", m.i, err)
	}
	if !v.Converged || len(v.Members) != len(want) {
		return fmt.Sprintf("member %d: converged %v, %d members", m.i, v.Converged, len(v.Members))
	}
	for _, x := range v.Members {
		if !want[x.Address] || x.Status != "up" || !x.Reachable {
			return fmt.Sprintf("member %d sees %s %s reachable %v", m.i, x.Address, x.Status, x.Reachable)
		}
	}
	return ""
}

func vmRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS for process %d", pid)
}

func stats(xs []float64) string {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return fmt.Sprintf("min %.1f, median %.1f, mean %.1f, max %.1f (%d)", s[0], s[len(s)/2], sum/float64(len(s)), s[len(s)-1], len(s))
}

// asks sends "inc" to 200 counters through every member, one asker per member, for
// before, SIGKILLs the last kill members together, goes on for after, then waits for
// the survivors to remove the killed and reads every counter back.
func (r *run) asks(before, after time.Duration, kill int) string {
	const counters = 200
	var mu sync.Mutex
	acked := make([]int, counters)
	var ok, failedLive, failedKilled atomic.Int64
	var errs sync.Map // error text → count, through live members
	stopAsk := make(chan struct{})
	var wg sync.WaitGroup
	var killedAt atomic.Int64
	var okAfter atomic.Int64
	for _, m := range r.members {
		wg.Add(1)
		go func(m *member) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(m.i)))
			for k := 0; ; k++ {
				select {
				case <-stopAsk:
					return
				default:
				}
				if m.killed.Load() {
					return // its process is gone: nothing more goes through it
				}
				id := rng.Intn(counters)
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				_, err := m.cl.Ask(ctx, "counter", "c"+strconv.Itoa(id), []byte("inc"),
					client.WithIdempotencyKey(fmt.Sprintf("m%d-%d", m.i, k)))
				cancel()
				switch {
				case err == nil:
					ok.Add(1)
					if killedAt.Load() != 0 {
						okAfter.Add(1)
					}
					mu.Lock()
					acked[id]++
					mu.Unlock()
				case m.killed.Load():
					failedKilled.Add(1)
				default:
					failedLive.Add(1)
					key := err.Error()
					if len(key) > 120 {
						key = key[:120]
					}
					v, _ := errs.LoadOrStore(key, new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
				}
			}
		}(m)
	}
	time.Sleep(before)
	victims := r.members[len(r.members)-kill:]
	killedAt.Store(time.Now().UnixNano())
	for _, m := range victims {
		m.killed.Store(true)
		m.cmd.Process.Signal(syscall.SIGKILL)
	}
	for _, m := range victims {
		<-m.done
		m.cmd = nil
	}
	r.logf("%d members SIGKILLed", kill)
	time.Sleep(after)
	close(stopAsk)
	wg.Wait()
	survivors := r.members[:len(r.members)-kill]
	r.logf("asks ended: acked %d (%d after the kill), failed through the members that stayed %d, in flight through the killed %d",
		ok.Load(), okAfter.Load(), failedLive.Load(), failedKilled.Load())
	removed, err := r.waitConverged(survivors, 3*time.Minute)
	removal := fmt.Sprintf("the survivors removed the killed %.1f s after the asks ended", removed.Seconds())
	if err != nil {
		removal = "the survivors did not remove the killed: " + err.Error()
	}
	// Read every counter back through the first member, each once (no retries: a
	// cluster that cannot host would otherwise take an hour to say so).
	reader, err := client.New([]string{survivors[0].api}, client.WithRetry(1, time.Millisecond, time.Millisecond))
	if err != nil {
		return err.Error()
	}
	lost, extra, unread := 0, 0, 0
	var unreadErr string
	for id := range counters {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := reader.Ask(ctx, "counter", "c"+strconv.Itoa(id), []byte("get"))
		cancel()
		if err != nil {
			unread++
			unreadErr = err.Error()
			continue
		}
		v, err := strconv.Atoi(string(out))
		if err != nil {
			unread++
			continue
		}
		if v < acked[id] {
			lost += acked[id] - v
		} else {
			extra += v - acked[id]
		}
	}
	var errLines []string
	errs.Range(func(k, v any) bool {
		errLines = append(errLines, fmt.Sprintf("    %d × %s", v.(*atomic.Int64).Load(), k))
		return true
	})
	sort.Strings(errLines)
	return fmt.Sprintf("asks through all %d members, %d SIGKILLed together after %v, %v more:\n"+
		"  acked %d (%d after the kill); failed through the members that stayed: %d; failed in flight through the killed: %d\n"+
		"  %s; counters read back: lost %d acked increments, %d more than acked (failed asks that took effect), %d counters unreadable (%s)\n%s",
		len(r.members), kill, before, after, ok.Load(), okAfter.Load(), failedLive.Load(), failedKilled.Load(),
		removal, lost, extra, unread, unreadErr, strings.Join(errLines, "\n"))
}
