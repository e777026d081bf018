// Command faulty is an entity that misbehaves on request, for testing the host's sandbox.
//
// Messages: "echo X" replies X; "loop" never returns; "grow" allocates memory without
// end; "trap" panics; "print X" writes X to stdout and "eprint X" to stderr, then
// replies "printed"; "log LEVEL X" passes X to the log host function at LEVEL (debug,
// info, warn or error) and replies "logged"; "fail" returns an error; "read PATH" tries to read a file and
// "dial ADDR" to open a TCP connection, replying what happened (the sandbox gives a
// guest no filesystem and no network, so both fail). Anything else is an error.
//
// It keeps no state: the memory "grow" hoards is not state (the trap that ends it
// discards the instance). Its explicit state (Snapshot and Restore) is empty, so a
// redeploy reaches every faulty entity at its next activation (docs/state.md).
//
// Build: tinygo build -target=wasip1 -buildmode=c-shared -no-debug -scheduler=none -o faulty.wasm .
// or, with Go's port, GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o faulty.wasm .
package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

type faulty struct{ hoard [][]byte }

var sink int

func (f *faulty) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
	s := string(msg)
	switch {
	case strings.HasPrefix(s, "echo "):
		return []byte(strings.TrimPrefix(s, "echo ")), nil
	case s == "loop":
		for i := 0; ; i++ {
			sink += i
		}
	case s == "grow":
		grow(&f.hoard)
	case s == "trap":
		panic("faulty: trap requested")
	case strings.HasPrefix(s, "print "):
		fmt.Println(strings.TrimPrefix(s, "print "))
		return []byte("printed"), nil
	case strings.HasPrefix(s, "eprint "):
		fmt.Fprintln(os.Stderr, strings.TrimPrefix(s, "eprint "))
		return []byte("printed"), nil
	case strings.HasPrefix(s, "log "):
		level, text, _ := strings.Cut(strings.TrimPrefix(s, "log "), " ")
		lv, ok := map[string]shardhost.LogLevel{"debug": shardhost.LevelDebug, "info": shardhost.LevelInfo,
			"warn": shardhost.LevelWarn, "error": shardhost.LevelError}[level]
		if !ok {
			return nil, errors.New("faulty: unknown log level " + level)
		}
		ctx.Log(lv, text)
		return []byte("logged"), nil
	case s == "fail":
		return nil, errors.New("faulty: failure requested")
	case strings.HasPrefix(s, "read "):
		b, err := os.ReadFile(strings.TrimPrefix(s, "read "))
		if err != nil {
			return []byte("refused: " + err.Error()), nil
		}
		return []byte("read " + strconv.Itoa(len(b)) + " bytes"), nil
	case strings.HasPrefix(s, "dial "):
		if err := dial(strings.TrimPrefix(s, "dial ")); err != nil {
			return []byte("refused: " + err.Error()), nil
		}
		return []byte("connected"), nil
	}
	return nil, errors.New("faulty: unknown message " + s)
}

// Snapshot implements shardhost.Snapshotter: the explicit state is empty.
func (f *faulty) Snapshot() ([]byte, error) { return nil, nil }

// Restore implements shardhost.Snapshotter: it takes up only the empty state Snapshot
// gives.
func (f *faulty) Restore(state []byte) error {
	if len(state) != 0 {
		return errors.New("faulty: keeps no state, got " + strconv.Itoa(len(state)) + " bytes")
	}
	return nil
}

// grow allocates memory without end, writing to every page so that the memory is really
// used, and keeping all of it reachable from hoard so that the collector frees none.
func grow(hoard *[][]byte) {
	for {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = byte(i>>12) | 1
		}
		*hoard = append(*hoard, b)
	}
}

func init() {
	shardhost.Register(func(string) shardhost.Entity { return &faulty{} })
}

func main() {}
