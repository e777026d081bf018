package main

import (
	"strings"
	"testing"

	"github.com/shardhost/shardhost/host"
)

func TestParseTarget(t *testing.T) {
	for _, c := range []struct{ in, typ, id string }{
		{"counter/alice", "counter", "alice"},
		{"counter/a/b/c", "counter", "a/b/c"},
		{"counter/日本 語", "counter", "日本 語"},
	} {
		typ, id, err := parseTarget(c.in)
		if err != nil || typ != c.typ || id != c.id {
			t.Errorf("parseTarget(%q) = %q %q %v", c.in, typ, id, err)
		}
	}
	for _, bad := range []string{"counter", "/alice", "counter/", ""} {
		if _, _, err := parseTarget(bad); err == nil {
			t.Errorf("parseTarget(%q) accepted", bad)
		}
	}
}

func TestClientBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8081":         "http://127.0.0.1:8081",
		"http://h:1/":            "http://h:1",
		"https://example.com:99": "https://example.com:99",
	} {
		c, err := (&globals{api: in}).client()
		if err != nil || c.base != want {
			t.Errorf("--api %q: %q %v, want %q", in, c.base, err, want)
		}
	}
	for _, bad := range []string{"ftp://h:1", "http://", "::::"} {
		if _, err := (&globals{api: bad}).client(); err == nil {
			t.Errorf("--api %q accepted", bad)
		}
	}
}

func TestPayloadArg(t *testing.T) {
	if b, _ := payloadArg("inc 5", nil); string(b) != "inc 5" {
		t.Fatalf("%q", b)
	}
	if b, _ := payloadArg("-", strings.NewReader("from stdin")); string(b) != "from stdin" {
		t.Fatalf("%q", b)
	}
}

func TestOneLine(t *testing.T) {
	if got := oneLine("first\nsecond"); got != "first" {
		t.Fatalf("%q", got)
	}
}

func TestConfigErrorsNameTheirFlag(t *testing.T) {
	cfg := host.DefaultConfig()
	cfg.BindAddr, cfg.DataDir = "no-port", t.TempDir()
	err := cfg.Validate()
	if err == nil || strings.Contains(err.Error(), "--") {
		t.Fatalf("library error %v: want one that names the Config field, not a flag", err)
	}
	if got := withFlagNames(err).Error(); !strings.HasPrefix(got, `--bind "no-port": `) {
		t.Fatalf("CLI error %q: want it to name --bind", got)
	}
	_, err = host.ParseStateStore("mysql://x")
	if got := withFlagNames(err).Error(); !strings.HasPrefix(got, `--state-store "mysql://x": want builtin`) {
		t.Fatalf("CLI error %q: want it to name --state-store", got)
	}
}
