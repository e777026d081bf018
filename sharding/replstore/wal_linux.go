package replstore

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync flushes the file's data and the metadata needed to read it back (its size),
// not its times.
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("fdatasync %s: %w", f.Name(), err)
		}
		return nil
	}
}
