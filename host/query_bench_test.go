package host

import (
	"context"
	"strconv"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// BenchmarkQuery is the cost of one read-only query (Node.Query) of a counter that
// handled `records` messages under the journal since its base: a throwaway instance
// restored from the saved state, the records replayed, shardhost_query called.
func BenchmarkQuery(b *testing.B) {
	mods := []struct {
		name string
		wasm func(testing.TB) []byte
	}{
		{"rust", func(tb testing.TB) []byte { return testwasm.RustBytes(tb, "counter-rust") }},
		{"tinygo", func(tb testing.TB) []byte { return testwasm.TinyGoBytes(tb, "counter") }},
		{"go", func(tb testing.TB) []byte { return testwasm.Bytes(tb, "counter") }},
	}
	for _, m := range mods {
		for _, records := range []int{1, 100} {
			b.Run(m.name+"/records="+strconv.Itoa(records), func(b *testing.B) {
				n := startNode(b, nil, nil)
				ctx := context.Background()
				if _, err := n.Deploy(ctx, m.wasm(b), sharding.TypeSettings{Name: "counter", NumberOfShards: 2}); err != nil {
					b.Fatal(err)
				}
				for i := 0; i < records; i++ {
					if _, err := n.Sharding().Ask(ctx, "counter", "x", []byte("inc")); err != nil {
						b.Fatal(err)
					}
				}
				want := strconv.Itoa(records)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					out, err := n.Query(ctx, "counter", "x", []byte("get"))
					if err != nil || string(out) != want {
						b.Fatalf("query: %q, %v; want %s", out, err, want)
					}
				}
			})
		}
	}
}
