package host

import (
	"context"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// The two state models through a redeploy (docs/state.md), with the bank examples:
// version 2 is the bank that refuses deposits over 1,000. An account with explicit state
// (the examples' default build) answers with version 2's code after its passivation,
// its balance kept; one with transparent state (the examples built transparent) stays on
// the module its state was made by, while a new account gets version 2.
func TestRedeployReachesExplicitStateAndNotTransparent(t *testing.T) {
	n := startNode(t, nil, nil)
	waitMembers(t, []*Node{n})
	tinygo := func(tags ...string) func(t *testing.T) []byte {
		return func(t *testing.T) []byte {
			return testwasm.TinyGoBytesWith(t, "bank", append(append([]string(nil), testwasm.TinyGoFlags...), tags...))
		}
	}
	goPort := func(tags ...string) func(t *testing.T) []byte {
		return func(t *testing.T) []byte { return testwasm.BytesWith(t, "bank", tags...) }
	}
	rust := func(flags ...string) func(t *testing.T) []byte {
		return func(t *testing.T) []byte { return testwasm.RustBytesWith(t, "bank-rust", flags...) }
	}
	for _, c := range []struct {
		name        string
		v1, v2      func(t *testing.T) []byte
		transparent bool
	}{
		{"tinygo-explicit", tinygo(), tinygo("-tags=banklimit"), false},
		{"tinygo-transparent", tinygo("-tags=transparent"), tinygo("-tags=transparent,banklimit"), true},
		{"go-explicit", goPort(), goPort("-tags=banklimit"), false},
		{"go-transparent", goPort("-tags=transparent"), goPort("-tags=transparent,banklimit"), true},
		{"rust-explicit", rust(), rust("--cfg", "bank_limit"), false},
		{"rust-transparent", rust("--cfg", "transparent"), rust("--cfg", "transparent", "--cfg", "bank_limit"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			typ := "bank-" + c.name
			ask := func(id, msg string) (string, error) {
				t.Helper()
				r, err := n.Sharding().Ask(ctx, typ, id, []byte(msg))
				return string(r.Payload), err
			}
			if _, err := n.Deploy(ctx, c.v1(t), sharding.TypeSettings{Name: typ}); err != nil {
				t.Fatal(err)
			}
			if out, err := ask("alice", "deposit 2000"); err != nil || out != "2000" {
				t.Fatalf("deposit 2000 on version 1: %q %v", out, err)
			}
			res, err := n.Deploy(ctx, c.v2(t), sharding.TypeSettings{Name: typ})
			if err != nil || res.Type.Version != 2 {
				t.Fatalf("deploy of version 2: %+v %v", res.Type, err)
			}
			if r := client(t, n).do("POST", "/v1/passivate?type="+typ+"&id=alice", nil); r.status != 200 {
				t.Fatalf("passivate: %d %s", r.status, r.body)
			}
			waitPassivated(t, n, typ, "alice")
			out, err := ask("alice", "deposit 1001")
			if c.transparent {
				// Version 1's code, which takes any deposit: the state is its memory.
				if err != nil || out != "3001" {
					t.Fatalf("deposit 1001 on transparent state: %q %v, want 3001 from version 1", out, err)
				}
			} else if err == nil || !strings.Contains(err.Error(), "at most 1000") {
				t.Fatalf("deposit 1001 on explicit state: %q %v, want version 2's refusal", out, err)
			}
			want := "2000"
			if c.transparent {
				want = "3001"
			}
			if out, err := ask("alice", "balance"); err != nil || out != want {
				t.Fatalf("balance: %q %v, want %s", out, err, want)
			}
			// A new account runs version 2 in both models.
			if out, err := ask("bob", "deposit 1001"); err == nil || !strings.Contains(err.Error(), "at most 1000") {
				t.Fatalf("deposit 1001 on a new account: %q %v, want version 2's refusal", out, err)
			}
		})
	}
}
