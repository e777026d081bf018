package ddata

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolterrors "go.etcd.io/bbolt/errors"
)

func openBoltT(t testing.TB, dir string) *BoltStore {
	t.Helper()
	s, err := OpenBoltStore(dir)
	if err != nil {
		t.Fatalf("OpenBoltStore(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestBoltStoreCreatesPrivateFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node", "ddata")
	s := openBoltT(t, dir)
	if want := filepath.Join(dir, BoltFileName); s.Path() != want {
		t.Errorf("Path = %s, want %s", s.Path(), want)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, s.Path(): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("mode of %s = %v, want %v", path, got, want)
		}
	}
}

func TestBoltStoreEmptyDirRejected(t *testing.T) {
	if _, err := OpenBoltStore(""); !errors.Is(err, ErrStoreFailure) {
		t.Fatalf("OpenBoltStore(\"\"): err = %v, want ErrStoreFailure", err)
	}
}

// An empty ddata.db (a crash right after the file was created) opens as an empty store.
func TestBoltStoreEmptyFileIsNew(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, BoltFileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := openBoltT(t, dir)
	mustLoadEqual(t, s, map[string][]byte{})
}

func TestBoltStoreSecondOpenFailsFast(t *testing.T) {
	dir := t.TempDir()
	s := openBoltT(t, dir)
	mustStore(t, s, map[string][]byte{"a": []byte("1")})

	start := time.Now()
	s2, err := OpenBoltStore(dir)
	elapsed := time.Since(start)
	if err == nil {
		_ = s2.Close()
		t.Fatal("second OpenBoltStore of an open directory succeeded")
	}
	checkInUse(t, err)
	t.Logf("second open failed after %v: %v", elapsed.Round(time.Millisecond), err)

	// Once the first store is closed, the directory opens again.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mustLoadEqual(t, openBoltT(t, dir), map[string][]byte{"a": []byte("1")})
}

func checkInUse(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrStoreFailure) || !errors.Is(err, bolterrors.ErrTimeout) {
		t.Errorf("err = %v, want ErrStoreFailure wrapping bbolt's ErrTimeout", err)
	}
	if !strings.Contains(err.Error(), "in use") {
		t.Errorf("err = %q, want it to say the directory is in use", err)
	}
}

// boltHelperEnv names the directory a helper process opens; see TestBoltStoreHelperProcess.
const boltHelperEnv = "SHARDHOST_DDATA_BOLT_HELPER_DIR"

// TestBoltStoreHelperProcess is not a test: run as a child process by
// TestBoltStoreOtherProcess, it opens the store in $SHARDHOST_DDATA_BOLT_HELPER_DIR,
// stores one entry, prints "stored" and holds the store open until killed.
func TestBoltStoreHelperProcess(t *testing.T) {
	dir := os.Getenv(boltHelperEnv)
	if dir == "" {
		t.Skip("helper process only")
	}
	s, err := OpenBoltStore(dir)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	if err := s.Store(map[string][]byte{"from": []byte("child")}); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("stored")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent kills us
	os.Exit(0)
}

// TestBoltStoreOtherProcess: a store held open by another process makes Open fail with
// the "in use" error; once that process is killed (SIGKILL, no Close), the directory
// opens and what it stored before dying is there.
func TestBoltStoreOtherProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBoltStoreHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), boltHelperEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "stored\n" {
		t.Fatalf("helper said %q, %v", line, err)
	}

	s, err := OpenBoltStore(dir)
	if err == nil {
		_ = s.Close()
		t.Fatal("OpenBoltStore of a directory another process holds succeeded")
	}
	checkInUse(t, err)

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	mustLoadEqual(t, openBoltT(t, dir), map[string][]byte{"from": []byte("child")})
}

// checkCorruptOpen opens dir, whose ddata.db is not a valid store, and wants a clear
// error.
func checkCorruptOpen(t *testing.T, dir string) {
	t.Helper()
	s, err := OpenBoltStore(dir)
	if err == nil {
		_ = s.Close()
		t.Fatal("OpenBoltStore of a corrupt file succeeded")
	}
	if !errors.Is(err, ErrStoreFailure) || !strings.Contains(err.Error(), "not a valid store") {
		t.Fatalf("err = %v, want ErrStoreFailure saying it is not a valid store", err)
	}
	t.Logf("%v", err)
}

func TestBoltStoreGarbageFile(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	random := make([]byte, 64<<10)
	r.Read(random)
	for name, content := range map[string][]byte{
		"text":      []byte("hello, this is not a database\n"),
		"one byte":  {0},
		"zeros":     make([]byte, 16<<10),
		"random":    random,
		"ones page": bytes.Repeat([]byte{0xff}, 4096),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, BoltFileName), content, 0o600); err != nil {
				t.Fatal(err)
			}
			checkCorruptOpen(t, dir)
			// The failed open released the file: another attempt fails the same way,
			// not with "in use".
			checkCorruptOpen(t, dir)
		})
	}
}

// writeBoltFixture creates a store in a new directory with n entries of size bytes,
// closes it, and returns the directory and the file's content.
func writeBoltFixture(t testing.TB, n, size int) (string, []byte) {
	dir := t.TempDir()
	s, err := OpenBoltStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	entries := make(map[string][]byte, n)
	for i := range n {
		entries[fmt.Sprintf("key/%06d", i)] = bytes.Repeat([]byte{byte(i)}, size)
	}
	if err := s.Store(entries); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(filepath.Join(dir, BoltFileName))
	if err != nil {
		t.Fatal(err)
	}
	return dir, content
}

// A file cut short (a copy interrupted, a full disk) is refused at Open; read through
// the memory map it would fault.
func TestBoltStoreTruncatedFile(t *testing.T) {
	_, content := writeBoltFixture(t, 10_000, 100)
	for _, size := range []int{len(content) / 2, 3 * 4096, 2 * 4096} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, BoltFileName), content[:size], 0o600); err != nil {
				t.Fatal(err)
			}
			checkCorruptOpen(t, dir)
		})
	}
}

// TestBoltStoreCorruptPages flips bytes in the pages of a valid file. Open may fail or
// succeed (a byte in free space harms nothing); whatever it does, nothing panics, and a
// store that opens loads and stores or fails with ErrStoreFailure.
func TestBoltStoreCorruptPages(t *testing.T) {
	_, pristine := writeBoltFixture(t, 2000, 50)
	r := rand.New(rand.NewSource(7))
	rejected := 0
	const rounds = 60
	for round := range rounds {
		content := bytes.Clone(pristine)
		for range 1 + r.Intn(8) {
			content[2*4096+r.Intn(len(content)-2*4096)] ^= byte(1 + r.Intn(255))
		}
		if round%4 == 0 { // sometimes a meta page too
			content[r.Intn(2*4096)] ^= byte(1 + r.Intn(255))
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, BoltFileName), content, 0o600); err != nil {
			t.Fatal(err)
		}
		if !exerciseBoltFile(t, dir) {
			rejected++
		}
	}
	t.Logf("%d of %d corrupted files refused at Open", rejected, rounds)
}

// exerciseBoltFile opens the store in dir and, if it opens, loads, stores and closes it;
// every error must wrap ErrStoreFailure. It reports whether the store opened.
func exerciseBoltFile(t testing.TB, dir string) bool {
	t.Helper()
	s, err := OpenBoltStore(dir)
	if err != nil {
		if !errors.Is(err, ErrStoreFailure) {
			t.Errorf("Open: err = %v, want ErrStoreFailure", err)
		}
		if errors.Is(err, bolterrors.ErrTimeout) {
			t.Errorf("Open: %v: a failed open left the file locked", err)
		}
		return false
	}
	defer s.Close()
	if _, err := s.Load(); err != nil && !errors.Is(err, ErrStoreFailure) {
		t.Errorf("Load: err = %v, want ErrStoreFailure", err)
	}
	if err := s.Store(map[string][]byte{"key/000001": nil, "new": []byte("v")}); err != nil && !errors.Is(err, ErrStoreFailure) {
		t.Errorf("Store: err = %v, want ErrStoreFailure", err)
	}
	if err := s.Close(); err != nil && !errors.Is(err, ErrStoreFailure) {
		t.Errorf("Close: err = %v, want ErrStoreFailure", err)
	}
	return true
}

// FuzzBoltStoreOpen opens arbitrary bytes as ddata.db: an error or a working store,
// never a panic.
func FuzzBoltStoreOpen(f *testing.F) {
	_, small := writeBoltFixture(f, 20, 10)
	f.Add(small)
	f.Add([]byte{})
	f.Add([]byte("not a database"))
	f.Add(small[:len(small)/2])
	f.Fuzz(func(t *testing.T, content []byte) {
		if len(content) > 1<<20 {
			return
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, BoltFileName), content, 0o600); err != nil {
			t.Fatal(err)
		}
		exerciseBoltFile(t, dir)
	})
}

// BenchmarkBoltStore measures Store on the disk under the test's temporary directory
// (set TMPDIR to measure another). Each op is one transaction, so txn/s is bound by the
// disk's fsync latency; entries/s shows what batching gains.
func BenchmarkBoltStore(b *testing.B) {
	for _, perTxn := range []int{1, 100} {
		b.Run(fmt.Sprintf("entries=%d/value=200B", perTxn), func(b *testing.B) {
			s := openBoltT(b, b.TempDir())
			value := bytes.Repeat([]byte{0xab}, 200)
			const keySpace = 10_000 // updates of existing keys once warm, like a replicator's
			batch := make(map[string][]byte, perTxn)
			next := 0
			b.ReportAllocs()
			for b.Loop() {
				clear(batch)
				for range perTxn {
					batch[fmt.Sprintf("key/%05d", next%keySpace)] = value
					next++
				}
				if err := s.Store(batch); err != nil {
					b.Fatal(err)
				}
			}
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/secs, "txn/s")
			b.ReportMetric(float64(b.N*perTxn)/secs, "entries/s")
		})
	}
}

// BenchmarkBoltStoreOpenLoad measures a restart: OpenBoltStore (with its consistency
// check) and Load of 10k entries of 200 bytes.
func BenchmarkBoltStoreOpenLoad(b *testing.B) {
	dir, _ := writeBoltFixture(b, 10_000, 200)
	for b.Loop() {
		s, err := OpenBoltStore(dir)
		if err != nil {
			b.Fatal(err)
		}
		m, err := s.Load()
		if err != nil || len(m) != 10_000 {
			b.Fatalf("Load: %d entries, %v", len(m), err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBoltStoreVerifyEveryByte changes each byte of a small valid file, in turn, and
// runs the structure check on it: it must return, never panic, whatever it reads.
func TestBoltStoreVerifyEveryByte(t *testing.T) {
	_, pristine := writeBoltFixture(t, 40, 30)
	if err := verifyBoltFile(pristine); err != nil {
		t.Fatalf("verifyBoltFile of a valid file: %v", err)
	}
	rejected := 0
	content := bytes.Clone(pristine)
	for i := range content {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			content[i] ^= x
			if verifyBoltFile(content) != nil {
				rejected++
			}
			content[i] ^= x
		}
	}
	t.Logf("%d of %d one-byte changes refused", rejected, 3*len(content))
}
