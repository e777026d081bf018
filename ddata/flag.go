package ddata

// Flag is a boolean that starts false and can be switched on, after which it stays on:
// merge is logical or, so true wins (Akka's Flag; an "enable-wins flag" in the CRDT
// literature, here without disable).
//
// A Flag is immutable; the zero value is the flag off. Its deltas need no causal
// delivery, and it keeps no per-node data.
type Flag struct {
	enabled bool
}

var (
	_ DeltaReplicatedData = Flag{}
	_ DeltaReplicatedData = (*Flag)(nil)
)

// SwitchOn returns the flag on and its delta, also the flag on (switching on a flag that
// is already on returns it unchanged, and the delta still carries the switch, as
// Akka's full-state Flag does).
func (f Flag) SwitchOn() (Flag, Flag) {
	on := Flag{enabled: true}
	return on, on
}

// Enabled reports whether the flag is on.
func (f Flag) Enabled() bool { return f.enabled }

// Type returns TypeFlag.
func (f Flag) Type() DataType { return TypeFlag }

// Merge returns the flag that is on if either is. other must be a Flag (or a non-nil
// *Flag); otherwise the error wraps ErrTypeMismatch.
func (f Flag) Merge(other ReplicatedData) (ReplicatedData, error) {
	o, err := mergeOperand[Flag, *Flag](TypeFlag, other)
	if err != nil {
		return nil, err
	}
	return Flag{enabled: f.enabled || o.enabled}, nil
}

// Value returns Enabled(): a bool.
func (f Flag) Value() any { return f.enabled }

// RequiresCausalDeliveryOfDeltas returns false: a delta is a whole flag.
func (f Flag) RequiresCausalDeliveryOfDeltas() bool { return false }

// MarshalCBOR encodes the flag's state deterministically: {1: true} when on, {} when
// off. Encode calls it.
func (f Flag) MarshalCBOR() ([]byte, error) {
	return encMode.Marshal(flagState{Enabled: f.enabled})
}

// flagState is Flag's encoded state.
type flagState struct {
	Enabled bool `cbor:"1,keyasint,omitempty"`
}

func init() { registerDecoder(TypeFlag, decodeFlag) }

// decodeFlag decodes a Flag's state.
func decodeFlag(b []byte) (ReplicatedData, error) {
	var s *flagState
	if err := decodeState(b, &s); err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errNullState
	}
	return Flag{enabled: s.Enabled}, nil
}
