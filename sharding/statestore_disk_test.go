package sharding

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// syncBuffer is a log sink safe for the disk's writer goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDockerFullDataDirectory (e2e) found that a member whose data directory was full
// refused every replica write without a word: the writers' majorities hid it. Here the
// disk refuses writes (the file reopened read-only: bbolt refuses every write
// transaction): the refusal reaches the writer, and the log says so once per interval,
// with the count of the refusals it did not log.
func TestFullDataDirectoryRefusedWritesAreLogged(t *testing.T) {
	d, err := openStateDisk(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	d.log = slog.New(slog.NewTextHandler(&logs, nil))
	d.writeLog.interval = time.Hour // one line for this whole test
	write := func(seq uint64) error {
		_, err := d.applyWrite(&stateWriteReq{Type: "t", Shard: 1, Epoch: 1, Fence: true,
			Records: []stateRecord{{Kind: stateKindSnapshot, ID: "e", Epoch: 1, Seq: seq, Data: []byte("state")}}})
		return err
	}
	if err := write(1); err != nil {
		t.Fatal(err)
	}
	if logs.String() != "" {
		t.Fatalf("a write that landed was logged: %s", logs.String())
	}
	// The same file, read-only. The writer goroutine reads d.db only after it receives
	// the next write, which the channel orders after this.
	if err := d.db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := bolt.Open(d.path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d.db = ro
	defer d.close()
	for seq := uint64(2); seq <= 4; seq++ {
		if err := write(seq); err == nil || !strings.Contains(err.Error(), "read-only mode") {
			t.Fatalf("write %d on a read-only file: %v, want bbolt's read-only error", seq, err)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "level=ERROR") || !strings.Contains(lines[0], "disk refused a write") ||
		!strings.Contains(lines[0], d.path) || !strings.Contains(lines[0], "read-only mode") {
		t.Fatalf("logged %q, want one error line naming the file and bbolt's error", logs.String())
	}
	// The next line, once the interval has passed, counts the two it left out.
	d.writeLog.interval = 0
	if err := write(5); err == nil {
		t.Fatal("write 5 landed on a read-only file")
	}
	if !strings.Contains(logs.String(), "suppressed=2") {
		t.Fatalf("the second line does not count the 2 refusals left out:\n%s", logs.String())
	}
}
