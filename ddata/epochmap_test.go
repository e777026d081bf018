package ddata

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// epochMapValues are the values random writes use, "" among them (a cleared key).
var epochMapValues = []string{"", "10.0.0.1:7946", "10.0.0.2:7946", "b", "a"}

func epochMapUpdate(r *rand.Rand, _ NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
	key := uint64(r.Intn(6))
	if r.Intn(8) == 0 {
		key = math.MaxUint64 - uint64(r.Intn(2))
	}
	return cur.(EpochMap).Put(key, uint64(r.Intn(4)), epochMapValues[r.Intn(len(epochMapValues))])
}

func genEpochMap(r *rand.Rand) ReplicatedData {
	return genByUpdates(EpochMap{}, epochMapUpdate)(r)
}

func TestEpochMapLaws(t *testing.T) {
	checkLaws(t, genEpochMap)
}

func TestEpochMapDeltas(t *testing.T) {
	checkDeltas(t, genEpochMap, epochMapUpdate)
}

// TestEpochMapConvergence: replicas that write at random, with deltas lost, duplicated
// and reordered, converge to the model: per key, the highest epoch written, and at that
// epoch the least value.
func TestEpochMapConvergence(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		model := map[uint64]EpochEntry{}
		update := func(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
			next, delta := epochMapUpdate(r, node, cur)
			for e := range delta.(EpochMap).All() {
				if m, ok := model[e.Key]; !ok || e.Epoch > m.Epoch || e.Epoch == m.Epoch && e.Value < m.Value {
					model[e.Key] = e
				}
			}
			return next, delta
		}
		final := checkConvergence(t, seed, 3+int(seed%2), EpochMap{}, update).(EpochMap)
		if final.Len() != len(model) {
			t.Fatalf("seed %d: %d keys, model %d", seed, final.Len(), len(model))
		}
		for key, want := range model {
			if got, ok := final.Get(key); !ok || got != want {
				t.Errorf("seed %d: key %d = %+v, want %+v", seed, key, got, want)
			}
		}
		checkValueJSON(t, final)
	}
}

// TestEpochMapConcurrentWrites: two writers (two coordinators active for a moment) that
// write different keys of one map from the same start both keep their writes after a
// merge; on one key, the higher epoch stands, and at one epoch the cleared key.
func TestEpochMapConcurrentWrites(t *testing.T) {
	var start EpochMap
	for k := range uint64(1000) {
		start, _ = start.Put(k, 5<<24|k, fmt.Sprintf("10.0.0.%d:7946", k%7))
	}
	a, da1 := start.Put(3, 9<<24|1, "10.0.0.1:7946") // writer A moves shard 3
	a, da2 := a.Put(17, 5<<24|17, "")                // and hands shard 17 off
	b, db1 := start.Put(400, 9<<24|2, "10.0.0.2:7946")
	b, db2 := b.Put(3, 8<<24|2, "10.0.0.2:7946")   // an older epoch than A's
	b, db3 := b.Put(17, 5<<24|17, "10.0.0.6:7946") // at the cleared epoch: loses
	want := map[uint64]EpochEntry{
		3:   {3, 9<<24 | 1, "10.0.0.1:7946"},
		17:  {17, 5<<24 | 17, ""},
		400: {400, 9<<24 | 2, "10.0.0.2:7946"},
		999: {999, 5<<24 | 999, "10.0.0.5:7946"},
	}
	check := func(name string, m EpochMap) {
		t.Helper()
		if m.Len() != 1000 {
			t.Fatalf("%s: %d keys", name, m.Len())
		}
		for k, w := range want {
			if got, _ := m.Get(k); got != w {
				t.Errorf("%s: key %d = %+v, want %+v", name, k, got, w)
			}
		}
	}
	ab, ba := mustMerge(t, a, b).(EpochMap), mustMerge(t, b, a).(EpochMap)
	check("a ⊔ b", ab)
	check("b ⊔ a", ba)
	// The deltas alone, in any order, into the start give the same.
	d := start
	for _, delta := range []EpochMap{db3, da2, db1, da1, db2, da1} {
		d = mustMerge(t, d, delta).(EpochMap)
	}
	check("deltas", d)
	if !equal(t, ab, d) {
		t.Fatalf("deltas %v, states %v", d, ab)
	}
}

func TestEpochMap(t *testing.T) {
	var m EpochMap
	if m.Len() != 0 || m.Type() != TypeEpochMap || m.RequiresCausalDeliveryOfDeltas() {
		t.Fatal("zero value")
	}
	if _, ok := m.Get(1); ok {
		t.Fatal("Get on the empty map")
	}
	m1, d := m.Put(7, 3, "x")
	if got, ok := m1.Get(7); !ok || got != (EpochEntry{7, 3, "x"}) || d.Len() != 1 || m.Len() != 0 {
		t.Fatalf("Put: %v, delta %v, receiver %v", m1, d, m)
	}
	// A write that does not stand leaves the map unchanged; the delta carries it.
	for _, w := range []EpochEntry{{7, 2, "a"}, {7, 3, "y"}} {
		m2, d := m1.Put(w.Key, w.Epoch, w.Value)
		if !equal(t, m2, m1) || d.entries[0] != w {
			t.Errorf("Put %+v: %v, delta %v", w, m2, d)
		}
	}
	for _, w := range []EpochEntry{{7, 4, "z"}, {7, 3, ""}, {7, 3, "w"}} {
		if m2, _ := m1.Put(w.Key, w.Epoch, w.Value); !equal(t, m2, EpochMap{entries: []EpochEntry{w}}) {
			t.Errorf("Put %+v: %v", w, m2)
		}
	}
	for _, other := range []ReplicatedData{nil, Flag{}, LWWMap{}, (*EpochMap)(nil)} {
		if _, err := m1.Merge(other); !errors.Is(err, ErrTypeMismatch) {
			t.Errorf("Merge(%T) = %v", other, err)
		}
	}
	if got, err := m.Merge(&m1); err != nil || !equal(t, got, m1) {
		t.Errorf("Merge(*EpochMap) = %v, %v", got, err)
	}
	if e, err := Empty(TypeEpochMap); err != nil || e.Type() != TypeEpochMap {
		t.Errorf("Empty = %v, %v", e, err)
	}
	m3, _ := m1.Put(2, 1, "b")
	m3, _ = m3.Put(9, 1, "c")
	var keys []uint64
	for e := range m3.All() {
		keys = append(keys, e.Key)
	}
	if fmt.Sprint(keys) != "[2 7 9]" {
		t.Errorf("All yields keys %v", keys)
	}
	for range m3.All() {
		break // stops early without a panic
	}
}

// TestEpochMapEncoding pins the compact encoding and its CBOR envelope.
func TestEpochMapEncoding(t *testing.T) {
	m, _ := EpochMap{}.Put(1000, 1<<40, "b")
	m, _ = m.Put(1001, 1, "a")
	m, _ = m.Put(1003, 2, "b")
	m, _ = m.Put(1004, 300, "")
	for _, tc := range []struct {
		m    EpochMap
		want string
	}{
		{EpochMap{}, "010000"},
		// format 1; 3 values "", "a", "b"; 4 entries: key 1000 (e8 07), value 2, epoch
		// 2^40 (80 80 80 80 80 20); gap 0, value 1, epoch 1; gap 1, value 2, epoch 2;
		// gap 0, value 0, epoch 300 (ac 02).
		{m, "01" + "03" + "00" + "0161" + "0162" + "04" + "e807" + "02" + "808080808020" + "000101" + "010202" + "0000ac02"},
	} {
		if got := fmt.Sprintf("%x", tc.m.appendCompact(nil)); got != tc.want {
			t.Errorf("compact encoding of %v: %s, want %s", tc.m, got, tc.want)
		}
		back, err := decodeCompact(tc.m.appendCompact(nil))
		if err != nil || !equal(t, back, tc.m) {
			t.Errorf("decode of %v: %v, %v", tc.m, back, err)
		}
	}
	// The envelope: {1: "epochmap", 2: h'010000'}.
	if got := fmt.Sprintf("%x", mustEncode(t, EpochMap{})); got != "a20168"+fmt.Sprintf("%x", "epochmap")+"0243010000" {
		t.Errorf("encoding of the empty map: %s", got)
	}
	// 1,000 keys of a bucket over 300 regions, epochs as the coordinator gives them: about
	// 10 bytes a key.
	var big EpochMap
	for k := range uint64(1000) {
		big, _ = big.Put(99_000+k, (100_000+k)<<24|0xabcdef, fmt.Sprintf("10.0.%d.%d:7946", k%300/250, k%300%250))
	}
	if n := len(mustEncode(t, big)); n > 15_000 {
		t.Errorf("1,000 keys over 300 values: %d bytes", n)
	} else {
		t.Logf("1,000 keys over 300 values: %d bytes", n)
	}
}

// TestEpochMapDecodeRefuses: every way the compact encoding can be wrong is an error
// wrapping ErrMalformed through Decode.
func TestEpochMapDecodeRefuses(t *testing.T) {
	good, _ := EpochMap{}.Put(5, 7, "a")
	enc := good.appendCompact(nil) // 01 01 0161 01 05 00 07
	if fmt.Sprintf("%x", enc) != "0101016101050007" {
		t.Fatalf("encoding %x", enc)
	}
	for name, compact := range map[string]string{
		"empty":                  "",
		"format 2":               "020000",
		"truncated":              "0101016101050007"[:14],
		"value count too large":  "01ff01",
		"value length too large": "010105",
		"values not ascending":   "010201620161020000000100",
		"values equal":           "010201610161020000000100",
		"value unused":           "01020161016201050007",
		"value index too large":  "01010161010501" + "07",
		"entries too many":       "010101610905",
		"trailing byte":          "0101016101050007" + "00",
		"varint not minimal":     "0101016101058000" + "07",
		"varint overflows":       "01010161010500ffffffffffffffffffff01",
		"key overflows":          "0101016102" + "ffffffffffffffffff01" + "0000" + "000000",
		"entries without values": "0100010000" + "00",
	} {
		_, err := decodeCompact(mustHex(compact))
		if err == nil {
			t.Errorf("%s: %s decoded", name, compact)
			continue
		}
		cbor, err := encMode.Marshal(mustHex(compact))
		if err != nil {
			t.Fatal(err)
		}
		checkDecodeFails(t, name, encodeRawState(t, TypeEpochMap, fmt.Sprintf("%x", cbor)))
	}
	checkDecodeFails(t, "null state", encodeRawState(t, TypeEpochMap, "f6"))
	checkDecodeFails(t, "text state", encodeRawState(t, TypeEpochMap, "63010000"))
}

// FuzzEpochMapCompact: the compact decoder never panics, and what it accepts is the
// canonical encoding: it re-encodes to the same bytes.
func FuzzEpochMapCompact(f *testing.F) {
	m, _ := EpochMap{}.Put(1000, 1<<40, "b")
	m, _ = m.Put(1001, 1, "a")
	m, _ = m.Put(math.MaxUint64, 2, "")
	for _, s := range [][]byte{EpochMap{}.appendCompact(nil), m.appendCompact(nil), mustHex("0101016101050007"), mustHex("01ff01")} {
		f.Add(s)
		if len(s) > 0 {
			f.Add(s[:len(s)-1])
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeCompact(b)
		if err != nil {
			if !errors.Is(err, errCompact) {
				t.Fatalf("error %v does not wrap errCompact", err)
			}
			return
		}
		if enc := d.appendCompact(nil); !bytes.Equal(enc, b) {
			t.Fatalf("accepted %x, re-encodes to %x", b, enc)
		}
		if !equal(t, mustMerge(t, d, d), d) {
			t.Fatalf("merge with itself changed %v", d)
		}
	})
}

// BenchmarkEpochMapDecode decodes a bucket of 1,000 keys over 10 values through Decode,
// as a replica's read reply is decoded; beside it, the same content in an LWWMap of
// "value|epoch" strings (the shard coordinator's layout before EpochMap).
func BenchmarkEpochMapDecode(b *testing.B) {
	var m EpochMap
	var l LWWMap
	clock := DefaultClock(func() int64 { return 1 })
	for k := range uint64(1000) {
		region, epoch := fmt.Sprintf("10.0.0.%d:7946", k%10), (100_000+k)<<24|0xabcdef
		m, _ = m.Put(k, epoch, region)
		l, _ = l.Put(nodes[0], fmt.Sprint(k), fmt.Appendf(nil, "%s|%d", region, epoch), clock)
	}
	for _, v := range []ReplicatedData{m, l} {
		enc := mustEncode(b, v)
		b.Run(string(v.Type()), func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(string(v.Type())+"-encode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Encode(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
