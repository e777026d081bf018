//go:build !linux

package host

import "errors"

// Images are copied into each slot here (cowimage.go): no memfd.

func newCowFile(*preImage, int) (int, error) {
	return -1, errors.New("host: no images mapped copy-on-write on this system")
}

func closeCowFile(int) {}

func mapCowFile([]byte, int) error {
	return errors.New("host: no images mapped copy-on-write on this system")
}

func unmapCowFile([]byte) error { return nil }

func maxMapCount() int { return 0 }

func cowFileBytes(int) int64 { return 0 }
