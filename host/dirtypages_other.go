//go:build !linux

package host

import "errors"

// writeProtect is the kernel's write tracking, which only Linux has here.
type writeProtect struct{}

func openWriteProtect() (*writeProtect, error) {
	return nil, errors.New("host: no kernel write tracking on this system")
}

func (w *writeProtect) close() {}

func (m *linearMemory) startWriteTracking(int) (writeTracker, error) {
	return nil, errors.New("host: no kernel write tracking on this system")
}
