//go:build !linux

package host

import "errors"

// reserveMemory is not implemented here: linear memories stay on the Go heap.
func reserveMemory(int) ([]byte, error) {
	return nil, errors.New("host: no linear-memory arena on this system")
}

func releaseMemory([]byte) error { return nil }

func unreserveMemory([]byte) {}

func populateMemory([]byte) error { return errors.New("host: no page population on this system") }

func residentRuns([]byte, int) []pageRun { return []pageRun{} }

func (a *memArena) pageStates([]byte) []pageState { return nil }

func closePagemap(int) {}

func physicalMemory() uint64 { return 0 }
