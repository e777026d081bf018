package pgtest

import (
	"os"
	"testing"
)

// The server starts, serves SQL, survives Kill and Restart, and is gone (its directory
// too) after Stop.
func TestServerStartKillRestartStop(t *testing.T) {
	s := Start(t, Options{})
	if err := s.SQL("postgres", "CREATE TABLE t (x int); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if s.Running() {
		t.Fatal("running after Kill")
	}
	if err := s.SQL("postgres", "SELECT 1"); err == nil {
		t.Fatal("a killed server answered")
	}
	s.Restart()
	if err := s.SQL("postgres", "SELECT x FROM t"); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	dir := s.dir
	s.Stop()
	if s.Running() {
		t.Fatal("running after Stop")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the directory went before the test ended: %v", err)
	}
}
