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
// snapshot's MarshalBinary (instanceSnapshot). kind stateBase: a transparent snapshot
// that deltas may follow (checkpoint.go): uvarint(generation), the 16-byte nonce, then
// the snapshot's MarshalBinary. kind stateDelta: the payload is a delta
// (snapshotdelta.go) against the base it names; the store keeps it under the entity's
// delta key (deltastore.go).
// kind stateChain is what that store's Load returns for a base with its delta, never
// stored: uvarint(len(base)), the base's saved state, then the delta's saved state.
// extras is the deterministic CBOR of entityExtras (the entity's timers and
// subscriptions), empty when it has none; a delta's extras replace its base's. Version
// 0x01 (no extras) is still read.
const (
	stateMagic   = "SHES"
	stateVersion = 2

	stateGuest    byte = 'g'
	stateInstance byte = 'i'
	stateBase     byte = 'b'
	stateDelta    byte = 'd'
	stateChain    byte = 'c'
)

// entityExtras is what the host saves of an entity beside its guest state.
type entityExtras struct {
	Timers []savedTimer `cbor:"1,keyasint,omitempty"`
	// Subscriptions are the distributed data keys the entity subscribed to, sorted.
	Subscriptions []string `cbor:"2,keyasint,omitempty"`
	// Module is the digest of the module the entity ran: in a base, the module its
	// journal records after it were made by, until one names another (journal.go).
	// Empty in states saved before it was kept.
	Module string `cbor:"3,keyasint,omitempty"`
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
	if len(extras.Timers) > 0 || len(extras.Subscriptions) > 0 || extras.Module != "" {
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
	if kind != stateGuest && kind != stateInstance && kind != stateBase && kind != stateDelta && kind != stateChain {
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

// stateKind returns the kind of a saved state (0 when it is none), without decoding it.
func stateKind(b []byte) byte {
	if len(b) < len(stateMagic)+2 || string(b[:len(stateMagic)]) != stateMagic || b[len(stateMagic)] != stateVersion {
		return 0
	}
	return b[len(stateMagic)+1]
}

// encodeBaseState frames a base snapshot's encoding with its name.
func encodeBaseState(base snapshotBase, snap []byte, extras entityExtras) []byte {
	p := make([]byte, 0, binary.MaxVarintLen64+len(base.Nonce)+len(snap))
	p = binary.AppendUvarint(p, base.Gen)
	p = append(p, base.Nonce[:]...)
	return encodeState(stateBase, append(p, snap...), extras)
}

// splitBase splits a stateBase payload into the base's name and its snapshot's encoding.
func splitBase(payload []byte) (snapshotBase, []byte, error) {
	var base snapshotBase
	gen, k := binary.Uvarint(payload)
	if k <= 0 || gen == 0 || len(payload)-k < len(base.Nonce) {
		return base, nil, fmt.Errorf("%w: base snapshot header", ErrBadSnapshot)
	}
	base.Gen = gen
	copy(base.Nonce[:], payload[k:])
	return base, payload[k+len(base.Nonce):], nil
}

// savedBaseOf returns the name of the base a saved stateBase state is; ok is false for
// another kind or a malformed one.
func savedBaseOf(state []byte) (snapshotBase, bool) {
	if stateKind(state) != stateBase {
		return snapshotBase{}, false
	}
	rest := state[len(stateMagic)+2:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return snapshotBase{}, false
	}
	base, _, err := splitBase(rest[k+int(n):])
	return base, err == nil
}

// savedDeltaBaseOf returns the base a saved stateDelta state names (from the delta's
// header, unchecked: decoding it checks it); ok is false for another kind or a
// malformed one.
func savedDeltaBaseOf(state []byte) (snapshotBase, bool) {
	if stateKind(state) != stateDelta {
		return snapshotBase{}, false
	}
	rest := state[len(stateMagic)+2:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return snapshotBase{}, false
	}
	d := rest[k+int(n):]
	if len(d) < len(deltaMagic) || string(d[:len(deltaMagic)]) != deltaMagic {
		return snapshotBase{}, false
	}
	dec := decoder{b: d, off: len(deltaMagic)}
	dec.uvarint(1 << 32)
	dec.bytes(32)
	var base snapshotBase
	base.Gen = dec.uvarint(1<<64 - 1)
	copy(base.Nonce[:], dec.bytes(16))
	return base, dec.err == nil && base.Gen != 0
}

// encodeChain frames a saved base with its saved delta (the state store's Load).
func encodeChain(base, delta []byte) []byte {
	p := make([]byte, 0, binary.MaxVarintLen64+len(base)+len(delta))
	p = binary.AppendUvarint(p, uint64(len(base)))
	p = append(append(p, base...), delta...)
	return encodeState(stateChain, p, entityExtras{})
}

// splitChain splits a stateChain payload into the saved base and the saved delta.
func splitChain(payload []byte) (base, delta []byte, err error) {
	n, k := binary.Uvarint(payload)
	if k <= 0 || n > uint64(len(payload)-k) {
		return nil, nil, fmt.Errorf("%w: base and delta: length of the base", ErrBadSnapshot)
	}
	return payload[k : k+int(n)], payload[k+int(n):], nil
}
