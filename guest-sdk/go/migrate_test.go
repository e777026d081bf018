package shardhost

import (
	"errors"
	"strconv"
	"testing"
)

// ledgerV2 keeps, since version 2 of its module, a balance in cents as decimal text;
// version 1 kept whole units as an Int64. Its Migrate converts a version-1 state.
type ledgerV2 struct {
	Stateful[Bytes, *Bytes]
}

func (l *ledgerV2) Receive(ctx *Context, msg []byte) ([]byte, error) { return l.State, nil }

func (l *ledgerV2) Migrate(from uint64, state []byte) error {
	if from != 1 {
		return errors.New("ledger: no migration from version " + strconv.FormatUint(from, 10))
	}
	var units Int64
	if err := units.UnmarshalBinary(state); err != nil {
		return err
	}
	l.State = Bytes(strconv.FormatInt(int64(units)*100, 10))
	return nil
}

// Migrate takes up another version's state through the entity's Migrator; a refused
// migration keeps nothing of it, and an entity without Migrator gets the state through
// Restore.
func TestHarnessMigrate(t *testing.T) {
	v1 := Int64(12)
	old, _ := v1.MarshalBinary()
	h := NewHarness("ledger", "a", func(string) Entity { return &ledgerV2{} })
	if err := h.Migrate(1, old); err != nil {
		t.Fatal(err)
	}
	if out, err := h.Send([]byte("get")); err != nil || string(out) != "1200" {
		t.Fatalf("after the migration: %q %v", out, err)
	}
	if err := h.Migrate(1, old); !errors.Is(err, ErrRestoreAfterStart) {
		t.Fatalf("a second migration: %v", err)
	}
	h = NewHarness("ledger", "b", func(string) Entity { return &ledgerV2{} })
	if err := h.Migrate(7, old); err == nil || err.Error() != "ledger: no migration from version 7" {
		t.Fatalf("from version 7: %v", err)
	}
	if out, err := h.Send([]byte("get")); err != nil || string(out) != "" {
		t.Fatalf("after a refused migration the entity starts fresh: %q %v", out, err)
	}
	// Without Migrator: Restore.
	h = NewHarness("counter", "c", func(string) Entity { return &explicitCounter{} })
	if err := h.Migrate(3, old); err != nil {
		t.Fatal(err)
	}
	if out, err := h.Send([]byte("get")); err != nil || string(out) != "12" {
		t.Fatalf("restored without Migrator: %q %v", out, err)
	}
}

type explicitCounter struct {
	Stateful[Int64, *Int64]
}

func (c *explicitCounter) Receive(ctx *Context, msg []byte) ([]byte, error) {
	return strconv.AppendInt(nil, int64(c.State), 10), nil
}
