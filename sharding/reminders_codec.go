package sharding

import (
	"slices"
	"strings"

	"github.com/fxamacker/cbor/v2"
	"github.com/shardhost/shardhost/internal/wirecbor"
)

// The reminder record's encoding (RecordReminders), written and read without
// reflection: the bytes cbor.Marshal writes of a []Reminder (an array of maps keyed by
// the fields' integer keys, 1 to 4 in order, Interval and Payload left out when zero,
// shortest heads), so that records of either encoder read alike. A record the fast
// reader does not take (another shape, as another encoder may write it) is read by
// cbor.Unmarshal.

// appendReminderRecord appends the encoding of rs, in its order.
func appendReminderRecord(b []byte, rs []Reminder) []byte {
	b = wirecbor.AppendHead(b, wirecbor.MajorArray, uint64(len(rs)))
	for i := range rs {
		r := &rs[i]
		n := uint64(2)
		if r.Interval != 0 {
			n++
		}
		if len(r.Payload) != 0 {
			n++
		}
		b = wirecbor.AppendHead(b, wirecbor.MajorMap, n)
		b = wirecbor.AppendText(append(b, 1), r.Name)
		b = appendInt(append(b, 2), r.Due)
		if r.Interval != 0 {
			b = appendInt(append(b, 3), r.Interval)
		}
		if len(r.Payload) != 0 {
			b = wirecbor.AppendBytes(append(b, 4), r.Payload)
		}
	}
	return b
}

// appendInt appends a signed integer (RFC 8949 §3.1: major type 1 holds -1-n).
func appendInt(b []byte, v int64) []byte {
	if v < 0 {
		return wirecbor.AppendHead(b, 1, uint64(-1-v)) // major type 1: a negative integer
	}
	return wirecbor.AppendUint(b, uint64(v))
}

// readReminderRecord reads a record as appendReminderRecord writes it (non-negative due
// times and intervals); with dues alone, only the due times are read, into dues, and
// rs is nil. It reports false for any other shape.
func readReminderRecord(b []byte, duesOnly bool) (rs []Reminder, dues []int64, ok bool) {
	r := wirecbor.NewReader(b)
	n, ok := r.ArrayHead()
	if !ok || n > len(b) {
		return nil, nil, false
	}
	if duesOnly {
		dues = make([]int64, 0, n)
	} else {
		rs = make([]Reminder, n)
	}
	for i := range n {
		m, ok := r.MapHead()
		if !ok {
			return nil, nil, false
		}
		var rem Reminder
		var seen uint8
		for range m {
			k, ok := r.Uint()
			if !ok || k < 1 || k > 4 || seen&(1<<k) != 0 {
				return nil, nil, false
			}
			seen |= 1 << k
			switch k {
			case 1:
				if duesOnly {
					_, ok = r.TextBytes()
				} else {
					rem.Name, ok = r.Text()
				}
			case 2, 3:
				var v uint64
				v, ok = r.Uint()
				if ok && v > 1<<63-1 {
					ok = false
				}
				if k == 2 {
					rem.Due = int64(v)
				} else {
					rem.Interval = int64(v)
				}
			case 4:
				if duesOnly {
					_, ok = r.BytesShared()
				} else {
					rem.Payload, ok = r.Bytes()
				}
			}
			if !ok {
				return nil, nil, false
			}
		}
		if duesOnly {
			dues = append(dues, rem.Due)
		} else {
			rs[i] = rem
		}
	}
	if !r.Done() {
		return nil, nil, false
	}
	return rs, dues, true
}

// EncodeReminderRecord returns the data of a reminder record (RecordReminders) of the
// entity's reminders rs, sorted by name (rs is left as it is): what
// DecodeReminderRecord reads, and the bytes cbor.Marshal writes of them. rs is not
// checked (CheckReminderSet). Errors: none (the error is kept for other encoders).
func EncodeReminderRecord(rs []Reminder) ([]byte, error) {
	if !slices.IsSortedFunc(rs, func(a, b Reminder) int { return strings.Compare(a.Name, b.Name) }) {
		rs = sortedReminders(rs)
	}
	size := 1
	for i := range rs {
		size += 32 + len(rs[i].Name) + len(rs[i].Payload)
	}
	return appendReminderRecord(make([]byte, 0, size), rs), nil
}

// DecodeReminderRecord reads the data of a reminder record (the snapshot of a
// ReminderIDPrefix ID, RecordReminders) back: the entity's reminders, by name. An empty
// record has none. Errors: a record that does not decode (CBOR).
func DecodeReminderRecord(b []byte) ([]Reminder, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if rs, _, ok := readReminderRecord(b, false); ok {
		if len(rs) == 0 {
			return nil, nil
		}
		return rs, nil
	}
	var rs []Reminder
	if err := cbor.Unmarshal(b, &rs); err != nil {
		return nil, err
	}
	return rs, nil
}

// ReminderRecordDues returns the due times of the reminders in a reminder record's
// data (DecodeReminderRecord), in the record's order, without the rest: for a store's
// index of due times. Errors: DecodeReminderRecord's.
func ReminderRecordDues(b []byte) ([]int64, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if _, dues, ok := readReminderRecord(b, true); ok {
		return dues, nil
	}
	rs, err := DecodeReminderRecord(b)
	if err != nil {
		return nil, err
	}
	dues := make([]int64, len(rs))
	for i := range rs {
		dues[i] = rs[i].Due
	}
	return dues, nil
}
