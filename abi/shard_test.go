package abi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// shardVector is one line of testdata/shard_ids.txt.
type shardVector struct {
	shards int
	id     string
	shard  int
}

func readVectors(t *testing.T) []shardVector {
	t.Helper()
	f, err := os.Open("testdata/shard_ids.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var vs []shardVector
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 4 {
			t.Fatalf("bad vector line %q", line)
		}
		n, _ := strconv.Atoi(fields[0])
		var id string
		if err := json.Unmarshal([]byte(fields[1]), &id); err != nil {
			t.Fatalf("bad id in %q: %v", line, err)
		}
		s, _ := strconv.Atoi(fields[3])
		vs = append(vs, shardVector{n, id, s})
	}
	if len(vs) < 50 {
		t.Fatalf("only %d vectors", len(vs))
	}
	return vs
}

func TestShardIDVectors(t *testing.T) {
	for _, v := range readVectors(t) {
		if got := ShardID(v.id, v.shards); got != v.shard {
			t.Errorf("ShardID(%q, %d) = %d, want %d", v.id, v.shards, got, v.shard)
		}
	}
}

func TestShardIDInRangeAndSpread(t *testing.T) {
	const n = 100
	counts := make([]int, n)
	for i := 0; i < 100_000; i++ {
		s := ShardID("entity-"+strconv.Itoa(i), n)
		if s < 0 || s >= n {
			t.Fatalf("shard %d out of range", s)
		}
		counts[s]++
	}
	// 1000 expected per shard; a uniform hash stays well within ±25%.
	for s, c := range counts {
		if c < 750 || c > 1250 {
			t.Errorf("shard %d has %d of 100000 entities", s, c)
		}
	}
}

func TestShardIDPanicsOnNonPositive(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for 0 shards")
		}
	}()
	ShardID("x", 0)
}

func TestVersionMarker(t *testing.T) {
	if got := VersionMarker(Version); got != "shardhost_abi_v1" {
		t.Fatalf("marker %q", got)
	}
	if got := VersionMarker(12); got != "shardhost_abi_v12" {
		t.Fatalf("marker %q", got)
	}
}

func ExampleShardID() {
	fmt.Println(ShardID("alice", DefaultNumberOfShards))
	// Output: 83
}
