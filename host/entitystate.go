package host

import (
	"bytes"
	"fmt"
)

// The saved state of an entity, as the sharding StateStore holds it: a header that says
// which kind of snapshot follows (abi/SPEC.md, "State: snapshots").
//
//	"SHES" 0x01 kind payload
//
// kind stateGuest: the payload is the guest's own encoding, from shardhost_snapshot,
// given back to shardhost_restore. kind stateInstance: the payload is a transparent
// Snapshot's MarshalBinary.
const (
	stateMagic   = "SHES"
	stateVersion = 1

	stateGuest    byte = 'g'
	stateInstance byte = 'i'
)

// encodeState frames a payload of the given kind.
func encodeState(kind byte, payload []byte) []byte {
	b := make([]byte, 0, len(stateMagic)+2+len(payload))
	b = append(b, stateMagic...)
	b = append(b, stateVersion, kind)
	return append(b, payload...)
}

// decodeState splits a saved state into its kind and payload. Errors wrap ErrBadSnapshot.
func decodeState(b []byte) (kind byte, payload []byte, err error) {
	if len(b) < len(stateMagic)+2 || !bytes.Equal(b[:len(stateMagic)], []byte(stateMagic)) {
		return 0, nil, fmt.Errorf("%w: not a shardhost entity state (%d bytes)", ErrBadSnapshot, len(b))
	}
	if v := b[len(stateMagic)]; v != stateVersion {
		return 0, nil, fmt.Errorf("%w: entity state version %d, this host reads %d", ErrBadSnapshot, v, stateVersion)
	}
	kind = b[len(stateMagic)+1]
	if kind != stateGuest && kind != stateInstance {
		return 0, nil, fmt.Errorf("%w: unknown entity state kind %q", ErrBadSnapshot, kind)
	}
	return kind, b[len(stateMagic)+2:], nil
}
