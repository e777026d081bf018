package sharding

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// The reminder record's hand-written encoding writes the bytes cbor.Marshal writes,
// and its reader reads what cbor.Unmarshal reads, of sets of every shape (intervals and
// payloads or none, negative and large numbers, no reminders); a record in another
// CBOR shape (indefinite lengths, keys out of order, another integer width) still
// reads, through cbor.Unmarshal; what is not CBOR of reminders is refused.
func TestReminderRecordCodec(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	nums := []int64{0, 1, 23, 24, 255, 256, 65535, 65536, 1 << 32, math.MaxInt64, -1, -24, -25, -256, -1 << 40, math.MinInt64}
	for n := range 300 {
		var rs []Reminder
		for i := range n % 12 {
			r := Reminder{Name: strings.Repeat("n", rnd.IntN(30)) + string(rune('a'+i)), Due: nums[rnd.IntN(len(nums))]}
			if rnd.IntN(2) == 0 {
				r.Interval = nums[rnd.IntN(len(nums))]
			}
			if k := rnd.IntN(3); k > 0 {
				r.Payload = make([]byte, rnd.IntN(300)*k)
			}
			rs = append(rs, r)
		}
		if n%12 == 0 {
			rs = []Reminder{}
		}
		slices.Reverse(rs) // EncodeReminderRecord sorts by name
		want, err := cbor.Marshal(sortedReminders(rs))
		if err != nil {
			t.Fatal(err)
		}
		got, err := EncodeReminderRecord(rs)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("set %d: encoded %x %v, cbor.Marshal %x", n, got, err, want)
		}
		var ref []Reminder
		if err := cbor.Unmarshal(want, &ref); err != nil {
			t.Fatal(err)
		}
		dec, err := DecodeReminderRecord(got)
		if err != nil || !slices.EqualFunc(dec, ref, equalReminderRecord) {
			t.Fatalf("set %d: decoded %+v %v, cbor.Unmarshal %+v", n, dec, err, ref)
		}
		dues, err := ReminderRecordDues(got)
		if err != nil || len(dues) != len(ref) {
			t.Fatalf("set %d: dues %v %v", n, dues, err)
		}
		for i := range ref {
			if dues[i] != ref[i].Due {
				t.Fatalf("set %d: dues %v, want those of %+v", n, dues, ref)
			}
		}
	}
	// Other shapes of the same reminders: cbor.Unmarshal reads them.
	want := []Reminder{{Name: "a", Due: 5, Interval: 1000, Payload: []byte("p")}, {Name: "b", Due: 7}}
	for _, b := range [][]byte{
		{0x9f, 0xa4, 0x01, 0x61, 'a', 0x02, 0x05, 0x03, 0x19, 0x03, 0xe8, 0x04, 0x41, 'p', 0xa2, 0x01, 0x61, 'b', 0x02, 0x07, 0xff},          // indefinite array
		{0x82, 0xa4, 0x04, 0x41, 'p', 0x03, 0x19, 0x03, 0xe8, 0x02, 0x05, 0x01, 0x61, 'a', 0xa2, 0x02, 0x07, 0x01, 0x61, 'b'},                // keys out of order
		{0x82, 0xa4, 0x01, 0x61, 'a', 0x02, 0x1a, 0, 0, 0, 0x05, 0x03, 0x19, 0x03, 0xe8, 0x04, 0x41, 'p', 0xa2, 0x01, 0x61, 'b', 0x02, 0x07}, // a wide due
	} {
		got, err := DecodeReminderRecord(b)
		if err != nil || !slices.EqualFunc(got, want, equalReminderRecord) {
			t.Fatalf("%x: %+v %v, want %+v", b, got, err, want)
		}
		dues, err := ReminderRecordDues(b)
		if err != nil || !slices.Equal(dues, []int64{5, 7}) {
			t.Fatalf("%x: dues %v %v", b, dues, err)
		}
	}
	for _, b := range [][]byte{{0x82, 0xa1, 0x01}, {0x01}, {0xa1, 0x01, 0x02}, {0x81, 0xa1, 0x01, 0x61, 'a', 0x00}} {
		if rs, err := DecodeReminderRecord(b); err == nil {
			t.Fatalf("%x: decoded %+v, want an error", b, rs)
		}
	}
}

func equalReminderRecord(a, b Reminder) bool {
	return a.Name == b.Name && a.Due == b.Due && a.Interval == b.Interval && bytes.Equal(a.Payload, b.Payload)
}
