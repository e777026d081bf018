package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/host"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.1.2.3:1": true, "[::1]:8080": true, "localhost:8080": true,
		"0.0.0.0:8080": false, ":8080": false, "10.0.0.1:8080": false, "[::]:8080": false, "example.com:80": false, "bad": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v", addr, got)
		}
	}
}

// TestStartRefusesAnOpenAPI: a non-loopback API without a tokens file is refused unless
// --api-insecure; with a tokens file (or on loopback) it starts.
func TestStartRefusesAnOpenAPI(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("admin 0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		api   string
		flags secureFlags
		err   string
	}{
		{"0.0.0.0:8080", secureFlags{}, "refusing to serve"},
		{"10.0.0.1:8080", secureFlags{}, "refusing to serve"},
		{"0.0.0.0:8080", secureFlags{apiInsecure: true}, ""},
		{"0.0.0.0:8080", secureFlags{apiTokensFile: tokens}, ""},
		{"127.0.0.1:8080", secureFlags{}, ""},
		{"127.0.0.1:8080", secureFlags{apiAuthAll: true}, "--api-auth-all needs"},
		{"127.0.0.1:8080", secureFlags{apiTokensFile: tokens + ".missing"}, "--api-tokens-file"},
	} {
		cfg := host.DefaultConfig()
		cfg.APIAddr = tc.api
		tc.flags.apiMaxRequests = 10
		err := tc.flags.apply(&cfg, log)
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s %+v: %v, want %q", tc.api, tc.flags, err, tc.err)
		}
	}
}

func TestTokenFromFileOrEnvironment(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("  the-token-0123456789\n"), 0o600)
	two := filepath.Join(dir, "two")
	os.WriteFile(two, []byte("a b\n"), 0o600)
	t.Setenv("SHARDHOST_TOKEN", "from-env")
	if tok, err := (&globals{}).token(); err != nil || tok != "from-env" {
		t.Errorf("env: %q %v", tok, err)
	}
	if tok, err := (&globals{tokenFile: good}).token(); err != nil || tok != "the-token-0123456789" {
		t.Errorf("file: %q %v", tok, err)
	}
	for _, bad := range []string{two, filepath.Join(dir, "missing")} {
		if _, err := (&globals{tokenFile: bad}).token(); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestGossipKeySources(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	key := "MDEyMzQ1Njc4OWFiY2RlZg==" // 16 bytes
	file := filepath.Join(dir, "gossip.key")
	os.WriteFile(file, []byte(key+"\n"), 0o600)
	t.Setenv("SHARDHOST_GOSSIP_KEY", "")
	for _, tc := range []struct {
		f   nodeFlags
		env string
		ok  bool
		nil bool
	}{
		{nodeFlags{}, "", true, true},
		{nodeFlags{gossipKeyFile: file}, "", true, false},
		{nodeFlags{gossipKey: key}, "", true, false},
		{nodeFlags{}, key, true, false},
		{nodeFlags{gossipKeyFile: file, gossipKey: key}, "", false, true},
		{nodeFlags{gossipKeyFile: filepath.Join(dir, "missing")}, "", false, true},
		{nodeFlags{gossipKey: "c2hvcnQ="}, "", false, true},
		{nodeFlags{}, "not base64!", false, true},
	} {
		t.Setenv("SHARDHOST_GOSSIP_KEY", tc.env)
		k, err := tc.f.readGossipKey(log)
		if (err == nil) != tc.ok || (k == nil) != tc.nil {
			t.Errorf("%+v env %q: %q %v", tc.f, tc.env, k, err)
		}
	}
}
