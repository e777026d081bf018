package host

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// The saved state of an entity, as the sharding StateStore holds it: a header that says
// which kind of snapshot follows, then what the host keeps for the entity beside the
// guest's state (abi/SPEC.md, "State: snapshots"):
//
//	"SHES" 0x02 kind uvarint(len(extras)) extras payload
//
// kind stateGuest: the payload is the guest's own encoding, from shardhost_snapshot,
// given back to shardhost_restore. kind stateInstance: the payload is a transparent
// Snapshot's MarshalBinary. extras is the deterministic CBOR of entityExtras (the
// entity's timers and subscriptions), empty when it has none. Version 0x01 (no extras)
// is still read.
const (
	stateMagic   = "SHES"
	stateVersion = 2

	stateGuest    byte = 'g'
	stateInstance byte = 'i'
)

// entityExtras is what the host saves of an entity beside its guest state.
type entityExtras struct {
	Timers []savedTimer `cbor:"1,keyasint,omitempty"`
	// Subscriptions are the distributed data keys the entity subscribed to, sorted.
	Subscriptions []string `cbor:"2,keyasint,omitempty"`
}

// savedTimer is a running timer in a saved state.
type savedTimer struct {
	Name    string `cbor:"1,keyasint"`
	Message []byte `cbor:"2,keyasint,omitempty"`
	// Due is when it fires next, in Unix nanoseconds (wall clock: it crosses hosts).
	Due int64 `cbor:"3,keyasint"`
	// Interval is its period in nanoseconds; 0 for a single shot.
	Interval int64 `cbor:"4,keyasint,omitempty"`
}

var extrasEncMode = func() cbor.EncMode {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

var extrasDecMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{MaxArrayElements: 1 << 16, MaxMapPairs: 1 << 10, MaxNestedLevels: 8}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// encodeState frames a payload of the given kind with the entity's extras.
func encodeState(kind byte, payload []byte, extras entityExtras) []byte {
	var ex []byte
	if len(extras.Timers) > 0 || len(extras.Subscriptions) > 0 {
		var err error
		if ex, err = extrasEncMode.Marshal(extras); err != nil {
			panic(fmt.Sprintf("host: encoding entity extras: %v", err)) // plain data: cannot fail
		}
	}
	b := make([]byte, 0, len(stateMagic)+2+binary.MaxVarintLen64+len(ex)+len(payload))
	b = append(b, stateMagic...)
	b = append(b, stateVersion, kind)
	b = binary.AppendUvarint(b, uint64(len(ex)))
	b = append(b, ex...)
	return append(b, payload...)
}

// decodeState splits a saved state into its kind, payload and extras. Errors wrap
// ErrBadSnapshot.
func decodeState(b []byte) (kind byte, payload []byte, extras entityExtras, err error) {
	if len(b) < len(stateMagic)+2 || !bytes.Equal(b[:len(stateMagic)], []byte(stateMagic)) {
		return 0, nil, extras, fmt.Errorf("%w: not a shardhost entity state (%d bytes)", ErrBadSnapshot, len(b))
	}
	v := b[len(stateMagic)]
	if v != 1 && v != stateVersion {
		return 0, nil, extras, fmt.Errorf("%w: entity state version %d, this host reads 1 and %d", ErrBadSnapshot, v, stateVersion)
	}
	kind = b[len(stateMagic)+1]
	if kind != stateGuest && kind != stateInstance {
		return 0, nil, extras, fmt.Errorf("%w: unknown entity state kind %q", ErrBadSnapshot, kind)
	}
	rest := b[len(stateMagic)+2:]
	if v == 1 {
		return kind, rest, extras, nil
	}
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return 0, nil, extras, fmt.Errorf("%w: entity state extras length", ErrBadSnapshot)
	}
	if n > 0 {
		if err := extrasDecMode.Unmarshal(rest[k:k+int(n)], &extras); err != nil {
			return 0, nil, extras, fmt.Errorf("%w: entity state extras: %v", ErrBadSnapshot, err)
		}
	}
	return kind, rest[k+int(n):], extras, nil
}
