// Package boltfile holds what shardhost's two bbolt files share: ddata's durable store
// (ddata.BoltStore) and the entity state store's replica data (sharding's stateDisk).
// bbolt reacts to some corrupt pages by panicking, and a page mapped past the end of a
// shrunken file faults; both become errors here. A write transaction that changed
// nothing is rolled back, so it costs no fsync.
package boltfile

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// Guard runs fn, turning a panic (bbolt's reaction to some corrupt pages) or a memory
// fault (a page of the map past the end of a shrunken file) into an error that says
// "corrupt database". bbolt has rolled its transaction back by the time a panic
// reaches here.
func Guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt database: panic: %v", r)
		}
	}()
	return fn()
}

// errNoChange rolls back a transaction that changed nothing.
var errNoChange = errors.New("boltfile: no change")

// Update runs fn in a write transaction under Guard. When fn reports that it changed
// nothing (and no error), the transaction is rolled back: nothing is written and
// nothing synced. Otherwise it is committed, and fsynced unless the database was opened
// with NoSync. Errors: fn's, bbolt's, or a corrupt database.
func Update(db *bolt.DB, fn func(tx *bolt.Tx) (changed bool, err error)) error {
	err := Guard(func() error {
		return db.Update(func(tx *bolt.Tx) error {
			changed, err := fn(tx)
			if err == nil && !changed {
				return errNoChange
			}
			return err
		})
	})
	if errors.Is(err, errNoChange) {
		return nil
	}
	return err
}

// View runs fn in a read transaction under Guard. fn must not keep the slices bbolt
// gives it after it returns: they point into the memory map.
func View(db *bolt.DB, fn func(tx *bolt.Tx) error) error {
	return Guard(func() error { return db.View(fn) })
}

// SyncDir fsyncs a directory, making the entries created in it durable: bbolt fsyncs a
// new file, not the directory entry that names it.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
