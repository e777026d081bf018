package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/shardhost/shardhost/sharding"
)

// A state export file is a CBOR sequence: a header, one item per shard in (type,
// shard) order, and a trailer with the counts and digest of the shards (a
// sharding.StateDigest), which a reader recomputes and checks: a truncated or altered
// file is refused.

const stateFileMagic = "shardhost-state-export"

type stateFileHeader struct {
	Magic   string `cbor:"1,keyasint"`
	Version int    `cbor:"2,keyasint"`
	Created string `cbor:"3,keyasint,omitempty"`
	Source  string `cbor:"4,keyasint,omitempty"`
}

// stateFileItem is a shard, or (End set) the trailer.
type stateFileItem struct {
	Shard *sharding.StoredShard `cbor:"1,keyasint,omitempty"`
	End   *sharding.StateDigest `cbor:"2,keyasint,omitempty"`
}

var stateDecMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{MaxArrayElements: 1 << 26, MaxMapPairs: 1 << 20, MaxNestedLevels: 16}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// stateFileWriter writes an export.
type stateFileWriter struct {
	w      *bufio.Writer
	enc    *cbor.Encoder
	digest sharding.StateDigest
}

func newStateFileWriter(w io.Writer, source string) (*stateFileWriter, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	sw := &stateFileWriter{w: bw, enc: cbor.NewEncoder(bw)}
	h := stateFileHeader{Magic: stateFileMagic, Version: 1, Created: time.Now().UTC().Format(time.RFC3339), Source: source}
	if err := sw.enc.Encode(&h); err != nil {
		return nil, err
	}
	return sw, nil
}

func (sw *stateFileWriter) add(sh *sharding.StoredShard) error {
	if err := sw.digest.Add(sh); err != nil {
		return err
	}
	return sw.enc.Encode(&stateFileItem{Shard: sh})
}

// finish writes the trailer and flushes; it returns the digest of what was written.
func (sw *stateFileWriter) finish() (*sharding.StateDigest, error) {
	d := sw.digest
	if err := sw.enc.Encode(&stateFileItem{End: &d}); err != nil {
		return nil, err
	}
	return &sw.digest, sw.w.Flush()
}

// readStateFile calls fn with each shard of an export and returns its digest, once
// the trailer has matched what was read. fn has seen every shard before the check: an
// importer must keep its writes uncommitted until readStateFile returns nil.
func readStateFile(r io.Reader, fn func(*sharding.StoredShard) error) (*sharding.StateDigest, error) {
	dec := stateDecMode.NewDecoder(bufio.NewReaderSize(r, 1<<20))
	var h stateFileHeader
	if err := dec.Decode(&h); err != nil || h.Magic != stateFileMagic {
		return nil, fmt.Errorf("not a shardhost state export (%v)", err)
	}
	if h.Version != 1 {
		return nil, fmt.Errorf("state export format version %d: this shardhost reads version 1", h.Version)
	}
	var digest sharding.StateDigest
	for {
		var it stateFileItem
		if err := dec.Decode(&it); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("the state export is truncated after %d shards (no trailer)", digest.Shards)
			}
			return nil, fmt.Errorf("the state export is damaged after %d shards: %v", digest.Shards, err)
		}
		if it.End != nil {
			if !digest.Equal(it.End) {
				return nil, fmt.Errorf("the state export does not match its trailer: read %s; the trailer says %s", &digest, it.End)
			}
			return &digest, nil
		}
		if it.Shard == nil {
			return nil, fmt.Errorf("the state export is damaged after %d shards: an empty item", digest.Shards)
		}
		if err := it.Shard.Validate(); err != nil {
			return nil, fmt.Errorf("the state export holds a bad shard: %w", err)
		}
		if err := digest.Add(it.Shard); err != nil {
			return nil, fmt.Errorf("the state export is damaged: %w", err)
		}
		if err := fn(it.Shard); err != nil {
			return nil, err
		}
	}
}
