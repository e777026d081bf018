package ddata

import (
	"crypto/sha256"
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// Encoding: deterministic CBOR (RFC 8949 core deterministic encoding, map keys sorted),
// so that equal values have equal bytes and equal SHA-256 digests, which gossip compares.
// An encoded value is {1: data type, 2: the type's state}.

type encoded struct {
	Type  DataType        `cbor:"1,keyasint"`
	State cbor.RawMessage `cbor:"2,keyasint"`
}

// decoders holds each type's decoder. It is filled by the init functions of the type
// files and never changed afterwards.
var decoders = map[DataType]func(state []byte) (ReplicatedData, error){}

// registerDecoder is called from the init function of each type's file.
func registerDecoder(t DataType, decode func(state []byte) (ReplicatedData, error)) {
	if _, dup := decoders[t]; dup {
		panic("ddata: two decoders for " + string(t))
	}
	decoders[t] = decode
}

var (
	encMode = func() cbor.EncMode {
		em, err := cbor.CoreDetEncOptions().EncMode()
		if err != nil {
			panic(err)
		}
		return em
	}()
	// decMode bounds what a peer can make a member allocate: nesting (maps of maps of
	// sets), element counts, and duplicate keys are refused.
	decMode = func() cbor.DecMode {
		dm, err := cbor.DecOptions{
			MaxNestedLevels:  16,
			MaxArrayElements: 1 << 20,
			MaxMapPairs:      1 << 20,
			DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return dm
	}()
)

// Encode returns the deterministic CBOR encoding of d with its type. Each type's state
// encodes through its MarshalCBOR method.
func Encode(d ReplicatedData) ([]byte, error) {
	state, err := encMode.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("ddata: encoding %s: %w", d.Type(), err)
	}
	return encMode.Marshal(encoded{Type: d.Type(), State: state})
}

// Decode reads a value written by Encode. Errors wrap ErrMalformed or ErrUnknownType;
// a malformed input never panics.
func Decode(b []byte) (ReplicatedData, error) {
	var e encoded
	if err := decMode.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(e.State) == 0 || e.State[0] == 0xf6 || e.State[0] == 0xf7 {
		return nil, fmt.Errorf("%w: %s: no state (null or undefined)", ErrMalformed, e.Type)
	}
	decode, ok := decoders[e.Type]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownType, e.Type)
	}
	d, err := decode(e.State)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, e.Type, err)
	}
	return d, nil
}

// Digest returns the SHA-256 of d's encoding: equal values have equal digests.
func Digest(d ReplicatedData) ([32]byte, error) {
	b, err := Encode(d)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// decodeState decodes a type's state with the package's limits.
func decodeState(b []byte, v any) error { return decMode.Unmarshal(b, v) }
