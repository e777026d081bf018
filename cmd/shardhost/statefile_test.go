package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/shardhost/shardhost/sharding"
)

// An export reads back as written; a truncated, altered or foreign file is refused
// with an error that says which.
func TestStateFileRoundTripAndDamage(t *testing.T) {
	shards := []*sharding.StoredShard{
		{Type: "a", Shard: 0, Epoch: 3, Snapshots: []sharding.StoredSnapshot{{ID: "x", Epoch: 3, Seq: 1, State: []byte("state of x")}}},
		{Type: "a", Shard: 7, Remembered: []string{"p", "q"}},
		{Type: "b", Shard: 1, Snapshots: []sharding.StoredSnapshot{{ID: "e", State: []byte{}}, {ID: "f", State: bytes.Repeat([]byte{7}, 1000)}}, Remembered: []string{"e"}},
	}
	var buf bytes.Buffer
	w, err := newStateFileWriter(&buf, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		if err := w.add(sh); err != nil {
			t.Fatal(err)
		}
	}
	want, err := w.finish()
	if err != nil {
		t.Fatal(err)
	}
	if want.Shards != 3 || want.Snapshots != 3 || want.Remembered != 3 || want.Bytes != 1010 {
		t.Fatalf("digest %s", want)
	}
	file := buf.Bytes()
	var read []string
	got, err := readStateFile(bytes.NewReader(file), func(sh *sharding.StoredShard) error {
		read = append(read, sh.Type)
		return nil
	})
	if err != nil || !got.Equal(want) || strings.Join(read, "") != "aab" {
		t.Fatalf("read back: %v %v %q", got, err, read)
	}

	// Out of order shards are refused when written.
	w2, _ := newStateFileWriter(&bytes.Buffer{}, "test")
	w2.add(shards[1])
	if err := w2.add(shards[0]); err == nil {
		t.Fatal("a shard out of order was written")
	}

	dec := cbor.NewDecoder(bytes.NewReader(file))
	var h stateFileHeader
	if err := dec.Decode(&h); err != nil || h.Source != "test" {
		t.Fatalf("header %+v %v", h, err)
	}
	headerLen := dec.NumBytesRead()
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"truncated", file[:len(file)-40], "truncated"},
		{"cut after the header", file[:headerLen], "truncated"},
		{"altered", bytes.Replace(file, []byte("state of x"), []byte("state of y"), 1), "does not match its trailer"},
		{"foreign", []byte("hello, not an export"), "not a shardhost state export"},
		{"empty", nil, "not a shardhost state export"},
	} {
		if _, err := readStateFile(bytes.NewReader(c.data), func(*sharding.StoredShard) error { return nil }); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
