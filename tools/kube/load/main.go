// Command load is the steady load of make kube-check (docs/kubernetes.md): senders that
// ask counter entities "inc" through one API address (the Service) until SIGTERM or
// SIGINT, then read every counter back and print one line:
//
//	kube-check: N acked, N lost, N failed, p99 D
//
// Each sender owns its entities and asks them one after another, each ask with an
// idempotency key and the client's retries for up to -timeout, so an ask that fails is
// one no retry within that time could deliver. acked counts the increments answered;
// lost counts acknowledged increments a counter no longer holds (a reply or the final
// read below the increments acknowledged before it); failed counts the asks that
// failed; p99 is that of the acknowledged asks' latencies, retries included. Errors go
// to stderr with their time, so that a gap can be matched with what the cluster did.
//
//	load -api 10.96.0.5:8080 -token-file client-token -senders 2 -entities 8
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shardhost/shardhost/client"
	"github.com/shardhost/shardhost/internal/owner"
)

func main() {
	api := flag.String("api", "", "the API address, HOST:PORT")
	tokenFile := flag.String("token-file", "", "a file holding a client token")
	typ := flag.String("type", "counter", "the entity type (a counter: \"inc\" replies with the new count, \"get\" with the count)")
	senders := flag.Int("senders", 2, "concurrent senders")
	entities := flag.Int("entities", 8, "entities per sender")
	timeout := flag.Duration("timeout", 30*time.Second, "an ask's deadline, retries included")
	prefix := flag.String("prefix", "kc", "the entity IDs' prefix (SENDER-N follows)")
	flag.Parse()
	if *api == "" || *tokenFile == "" {
		fmt.Fprintln(os.Stderr, "usage: load -api HOST:PORT -token-file FILE [-senders N] [-entities N] [-timeout D]")
		os.Exit(2)
	}
	token, err := os.ReadFile(*tokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
	c, err := client.New([]string{*api}, client.WithToken(strings.TrimSpace(string(token))),
		client.WithRetry(1000, 50*time.Millisecond, time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
	stop, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	r := run(stop, c, *typ, *prefix, *senders, *entities, *timeout)
	fmt.Println(r.line())
	if r.lost > 0 || r.failed > 0 || r.acked == 0 {
		os.Exit(1)
	}
}

type result struct {
	acked, lost, failed, extra int
	lat                        []time.Duration
}

func (r *result) line() string {
	return fmt.Sprintf("kube-check: %d acked, %d lost, %d failed, p99 %s", r.acked, r.lost, r.failed, p99(r.lat))
}

func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[(len(lat)*99+99)/100-1].Round(time.Millisecond)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s load: %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// run sends until stop ends, then reads every counter back.
func run(stop context.Context, c *client.Client, typ, prefix string, senders, entities int, timeout time.Duration) *result {
	g := owner.New()
	var mu sync.Mutex
	total := &result{}
	acked := make(map[string]int)   // per entity: increments acknowledged
	unknown := make(map[string]int) // per entity: failed asks, which may have counted
	for s := range senders {
		g.Go(func() {
			var r result
			for n := 0; stop.Err() == nil; n++ {
				id := fmt.Sprintf("%s-%d-%d", prefix, s, n%entities)
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				start := time.Now()
				reply, err := c.Ask(ctx, typ, id, []byte("inc"), client.WithIdempotencyKey(fmt.Sprintf("%s-%d", id, n)))
				cancel()
				took := time.Since(start)
				mu.Lock()
				if err != nil {
					r.failed++
					unknown[id]++
					logf("%s: ask %d failed after %s: %v", id, n, took.Round(time.Millisecond), err)
				} else {
					acked[id]++
					r.acked++
					r.lat = append(r.lat, took)
					if v, perr := strconv.Atoi(string(reply)); perr != nil || v < acked[id] {
						r.lost += acked[id] - v
						logf("%s: ask %d answered %q with %d increments acknowledged: lost", id, n, reply, acked[id])
					}
					if took > 2*time.Second {
						logf("%s: ask %d took %s", id, n, took.Round(time.Millisecond))
					}
				}
				mu.Unlock()
			}
			mu.Lock()
			total.acked += r.acked
			total.failed += r.failed
			total.lost += r.lost
			total.lat = append(total.lat, r.lat...)
			mu.Unlock()
		})
	}
	<-stop.Done()
	g.Wait()
	g.Close()
	// The counters read back, all at once (a store that refuses them costs one
	// timeout, not one per entity): each must hold every acknowledged increment.
	reads := owner.New()
	for id, n := range acked {
		reads.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			reply, err := c.Ask(ctx, typ, id, []byte("get"), client.WithIdempotencyKey(fmt.Sprintf("%s-final-%d", id, time.Now().UnixNano())))
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				logf("%s: the final read failed: %v", id, err)
				total.failed++
				return
			}
			v, err := strconv.Atoi(string(reply))
			switch {
			case err != nil:
				logf("%s: the final read answered %q", id, reply)
				total.lost += n
			case v < n:
				logf("%s: holds %d, %d increments acknowledged: %d lost", id, v, n, n-v)
				total.lost += n - v
			case v > n+unknown[id]:
				logf("%s: holds %d, more than the %d acknowledged and %d failed increments", id, v, n, unknown[id])
				total.extra += v - n - unknown[id]
			}
		})
	}
	reads.Wait()
	reads.Close()
	if total.extra > 0 {
		logf("%d increments counted that were never sent", total.extra)
	}
	if errors.Is(stop.Err(), context.Canceled) {
		logf("stopped: %d senders, %d entities each", senders, entities)
	}
	return total
}
