package ddata

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"
)

func flagUpdate(r *rand.Rand, _ NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
	return cur.(Flag).SwitchOn()
}

// genFlag returns the flag off or on; updates switch it on, so genByUpdates mostly
// gives flags that are on.
func genFlag(r *rand.Rand) ReplicatedData {
	if r.Intn(2) == 0 {
		return Flag{}
	}
	return genByUpdates(Flag{}, flagUpdate)(r)
}

func TestFlagLaws(t *testing.T) {
	checkLaws(t, genFlag)
}

func TestFlagDeltas(t *testing.T) {
	checkDeltas(t, genFlag, flagUpdate)
}

func TestFlagConvergence(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		switched := false
		update := func(r *rand.Rand, node NodeID, cur ReplicatedData) (ReplicatedData, ReplicatedData) {
			if r.Intn(20) != 0 { // rarely, so that some runs end off
				return cur, Flag{}
			}
			switched = true
			return cur.(Flag).SwitchOn()
		}
		final := checkConvergence(t, seed, 3+int(seed%2), Flag{}, update).(Flag)
		if final.Enabled() != switched {
			t.Fatalf("seed %d: converged to %v, want %v", seed, final.Enabled(), switched)
		}
		checkValueJSON(t, final)
	}
}

func TestFlag(t *testing.T) {
	var off Flag
	on, d := off.SwitchOn()
	if off.Enabled() || !on.Enabled() || !d.Enabled() || off.Value() != false || on.Value() != true {
		t.Fatal("SwitchOn")
	}
	again, d2 := on.SwitchOn()
	if !again.Enabled() || !d2.Enabled() {
		t.Fatal("SwitchOn of a flag that is on")
	}
	for _, tc := range []struct{ a, b, want Flag }{{off, off, off}, {off, on, on}, {on, off, on}, {on, on, on}} {
		if m := mustMerge(t, tc.a, tc.b).(Flag); m != tc.want {
			t.Errorf("%v ⊔ %v = %v", tc.a, tc.b, m)
		}
	}
	if off.Type() != TypeFlag || off.RequiresCausalDeliveryOfDeltas() {
		t.Fatal("type or causal delivery")
	}
	for _, other := range []ReplicatedData{nil, GSet{}, (*Flag)(nil)} {
		if _, err := off.Merge(other); !errors.Is(err, ErrTypeMismatch) {
			t.Errorf("Merge(%T) = %v", other, err)
		}
	}
	if m, err := off.Merge(&on); err != nil || m != on {
		t.Errorf("Merge(*Flag) = %v, %v", m, err)
	}
}

func TestFlagEncoding(t *testing.T) {
	on, _ := Flag{}.SwitchOn()
	for _, tc := range []struct {
		f    Flag
		want string
	}{{Flag{}, "a20164666c616702a0"}, {on, "a20164666c616702a101f5"}} {
		if got := fmt.Sprintf("%x", mustEncode(t, tc.f)); got != tc.want {
			t.Errorf("encoding of %v: %s, want %s", tc.f, got, tc.want)
		}
	}
	// {1: false} is accepted as off.
	if d, err := Decode(encodeRawState(t, TypeFlag, "a101f4")); err != nil || d != (Flag{}) {
		t.Errorf("{1: false}: %v, %v", d, err)
	}
	enc := mustEncode(t, on)
	for name, b := range map[string][]byte{
		"truncated":       enc[:len(enc)-1],
		"null state":      encodeRawState(t, TypeFlag, "f6"),
		"integer":         encodeRawState(t, TypeFlag, "a10101"),
		"text":            encodeRawState(t, TypeFlag, "a1016174"),
		"duplicate field": encodeRawState(t, TypeFlag, "a201f501f5"),
		"bare true":       encodeRawState(t, TypeFlag, "f5"),
	} {
		checkDecodeFails(t, name, b)
	}
}
