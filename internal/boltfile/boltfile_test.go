package boltfile

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func openTemp(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "t.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// txID returns the ID of the last committed transaction.
func txID(t *testing.T, db *bolt.DB) int {
	t.Helper()
	var id int
	if err := db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil }); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestGuardTurnsAPanicIntoAnError(t *testing.T) {
	err := Guard(func() error { panic("bad page") })
	if err == nil || !strings.Contains(err.Error(), "corrupt database") || !strings.Contains(err.Error(), "bad page") {
		t.Fatalf("Guard = %v, want a corrupt-database error naming the panic", err)
	}
	want := errors.New("plain")
	if err := Guard(func() error { return want }); err != want {
		t.Fatalf("Guard = %v, want fn's error unchanged", err)
	}
}

func TestUpdateCommitsOnlyWhatChanged(t *testing.T) {
	db := openTemp(t)
	before := txID(t, db)
	if err := Update(db, func(tx *bolt.Tx) (bool, error) {
		_, err := tx.CreateBucket([]byte("b"))
		return true, err
	}); err != nil {
		t.Fatal(err)
	}
	created := txID(t, db)
	if created != before+1 {
		t.Fatalf("a change committed no transaction: tx %d after %d", created, before)
	}
	// A transaction that reports no change is rolled back, even if it wrote.
	if err := Update(db, func(tx *bolt.Tx) (bool, error) {
		return false, tx.Bucket([]byte("b")).Put([]byte("k"), []byte("v"))
	}); err != nil {
		t.Fatalf("Update without change = %v, want nil", err)
	}
	if id := txID(t, db); id != created {
		t.Fatalf("Update without change committed tx %d", id)
	}
	if err := View(db, func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte("b")).Get([]byte("k")); v != nil {
			return errors.New("the rolled-back write is visible")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := errors.New("refused")
	if err := Update(db, func(tx *bolt.Tx) (bool, error) { return true, want }); !errors.Is(err, want) {
		t.Fatalf("Update = %v, want fn's error", err)
	}
	if err := View(db, func(tx *bolt.Tx) error { panic("fault") }); err == nil {
		t.Fatal("View let a panic through as nil")
	}
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Fatal("SyncDir of a missing directory succeeded")
	}
}
