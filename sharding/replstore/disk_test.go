package replstore

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"

	"github.com/shardhost/shardhost/cluster/clustertest"
	bolt "go.etcd.io/bbolt"
)

type syncBuffer = testutil.SyncBuffer

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
	d.writeLog.Interval = time.Hour // one line for this whole test
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
	d.writeLog.Interval = 0
	if err := write(5); err == nil {
		t.Fatal("write 5 landed on a read-only file")
	}
	if !strings.Contains(logs.String(), "suppressed=2") {
		t.Fatalf("the second line does not count the 2 refusals left out:\n%s", logs.String())
	}
}

// TestAStateDirectoryIsNewUntilItsMemberSeesAnother: a state directory is new (its
// member alone may found a cluster on it, ring.go) when its store opens it,
// if no process that had it open saw another member or answered one: e2e
// TestComposeFile on a loaded machine had its first seed fail to join within
// --seed-node-timeout and then form the cluster with a second store on the directory
// the first had made, which took it for one that had been in a cluster and waited for
// members that never were. Once its members see each other, a directory is no longer
// new (fault seed 82074: members that had joined a cluster, back first after it was
// downed whole, must not found a new one).
func TestAStateDirectoryIsNewUntilItsMemberSeesAnother(t *testing.T) {
	reopen := func(t *testing.T, dir string) bool {
		t.Helper()
		d, err := openStateDisk(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = d.close() }()
		return d.created
	}
	dir := t.TempDir()
	if !reopen(t, dir) {
		t.Fatal("a directory made now is not new")
	}
	if !reopen(t, dir) {
		t.Fatal("a directory opened before by a process that took no part in a cluster is not new")
	}

	c := &ssCluster{tb: t, network: clustertest.NewNetwork(), lc: clustertest.Tolerant()}
	t.Cleanup(c.stopAll)
	a := c.start(dir)
	if !a.store.newFile() {
		t.Fatal("the store of a new directory does not say so")
	}
	b := c.start(filepath.Join(t.TempDir(), "state"))
	c.waitUp()
	if !a.store.newFile() || !b.store.newFile() {
		t.Fatal("a store's directory stopped being new while it runs: members started together on new directories would not admit each other")
	}
	c.stopAll()
	for _, n := range []*ssNode{a, b} {
		if reopen(t, n.dir) {
			t.Errorf("%s's directory is still new after its member saw another", n.transport)
		}
	}
}

// A write queued with a callback (tryWrite) is refused, not queued, while the writer's
// queue is full; each queued one gets its outcome exactly once: on disk, or
// errStateClosed when the disk closes before its commit. After close, none is queued.
func TestQueuedWritesWithCallbacksGetOneOutcome(t *testing.T) {
	d, err := openStateDisk(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Hold the writer in a transaction until release.
	held, release := make(chan struct{}), make(chan struct{})
	first, err := d.submit(0, func(eb, rb *bolt.Bucket) (bool, error) {
		close(held)
		<-release
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	<-held
	write := func(id string) *stateWriteReq {
		return &stateWriteReq{Type: "t", Shard: 1, Epoch: 1, Fence: true,
			Records: []stateRecord{{Kind: stateKindSnapshot, ID: id, Epoch: 1, Seq: 1, Data: []byte("state")}}}
	}
	var mu sync.Mutex
	outcomes := map[int][]error{}
	queued := 0
	for i := 0; ; i++ {
		ok := d.tryWrite(write(strings.Repeat("e", 1+i%7)+string(rune('a'+i%26))), func(_ uint64, err error) {
			mu.Lock()
			outcomes[i] = append(outcomes[i], err)
			mu.Unlock()
		})
		if !ok {
			break
		}
		queued++
		if queued > 2*stateDiskQueue {
			t.Fatalf("%d writes queued behind a held writer; the queue holds %d", queued, stateDiskQueue)
		}
	}
	if queued != stateDiskQueue {
		t.Fatalf("%d writes queued before the queue was full, want %d", queued, stateDiskQueue)
	}
	closed := make(chan error, 1)
	go func() { closed <- d.close() }()
	close(release)
	if err := d.await(first); err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 0; i < queued; i++ {
		if errs := outcomes[i]; len(errs) != 1 || (errs[0] != nil && !errors.Is(errs[0], errStateClosed)) {
			t.Fatalf("write %d: outcomes %v, want one: on disk or closed", i, errs)
		}
	}
	if ok := d.tryWrite(write("late"), func(_ uint64, err error) {
		if !errors.Is(err, errStateClosed) {
			t.Errorf("a write after close: %v, want errStateClosed", err)
		}
	}); !ok {
		t.Fatal("a write after close was neither queued nor refused")
	}
}
