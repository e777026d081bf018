//go:build !linux

package replstore

import "os"

// fdatasync flushes the file (fsync: no cheaper call here).
func fdatasync(f *os.File) error { return f.Sync() }
