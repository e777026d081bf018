package sharding

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkTells sends b.N "inc" tells from 8 goroutines, round robin over 1,000 warm
// entities of one member (fake entities, no state store: the path region → mailbox →
// entity, as bench/peers' tells row puts it to the wasm counters), and waits until every
// entity shows its share. It reports the allocations per tell (-benchmem), and ns/op is
// the time per tell until all are applied.
func BenchmarkTells(b *testing.B) {
	tc := newTestCluster(b, 1, withConfig(func(c *Config) { c.AskTimeout = time.Minute }))
	s := tc.nodes[0].sharding
	ctx := context.Background()
	const entities, senders = 1000, 8
	ids := make([]string, entities)
	base := make([]int, entities)
	for i := range ids {
		ids[i] = "t" + strconv.Itoa(i)
		r, err := s.Ask(ctx, "counter", ids[i], []byte("get"))
		if err != nil {
			b.Fatal(err)
		}
		base[i], _ = strconv.Atoi(string(r.Payload))
	}
	inc := []byte("inc")
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for k := 0; k < senders; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			for i := k; i < b.N; i += senders {
				for {
					err := s.Tell(ctx, "counter", ids[i%entities], inc)
					if err == nil {
						break
					}
					if !errors.Is(err, ErrMailboxFull) {
						errs <- err
						return
					}
					time.Sleep(50 * time.Microsecond) // a full mailbox: the sender waits, as bench/peers' do
				}
			}
		}(k)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	for i, id := range ids {
		want := base[i] + b.N/entities
		if i < b.N%entities {
			want++
		}
		for {
			r, err := s.Ask(ctx, "counter", id, []byte("get"))
			if err != nil {
				b.Fatal(err)
			}
			if n, _ := strconv.Atoi(string(r.Payload)); n >= want {
				break
			}
			time.Sleep(100 * time.Microsecond) // tells still in its mailbox
		}
	}
}
