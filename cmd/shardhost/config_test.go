package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// printedConfig runs start --print-config with args and returns its settings by name:
// the value as printed, and its source.
func printedConfig(t *testing.T, args ...string) map[string][2]string {
	t.Helper()
	out, err := runCLI(t, append([]string{"start", "--print-config"}, args...)...)
	if err != nil {
		t.Fatalf("start --print-config %v: %v\n%s", args, err, out)
	}
	got := map[string][2]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, rest, ok := strings.Cut(line, ": ")
		value, source, ok2 := strings.Cut(rest, "  # ")
		if !ok || !ok2 {
			t.Fatalf("line %q is not NAME: VALUE  # SOURCE", line)
		}
		got[name] = [2]string{value, source}
	}
	return got
}

// TestConfigPrecedence: a start setting comes from its flag, else SHARDHOST_<FLAG>, else
// the --config file, else its default; lists come from YAML lists; secrets are redacted.
func TestConfigPrecedence(t *testing.T) {
	for _, v := range os.Environ() {
		if name, _, _ := strings.Cut(v, "="); strings.HasPrefix(name, envPrefix) {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	file := filepath.Join(t.TempDir(), "shardhost.yaml")
	os.WriteFile(file, []byte(`bind: 10.0.0.5:7946
join: [10.0.0.1:7946, 10.0.0.2:7946]
heartbeat-interval: 2s
sbr-stable-after: 9s
memory-limit: 128
log-level: debug
`), 0o644)
	t.Setenv("SHARDHOST_HEARTBEAT_INTERVAL", "3s")
	t.Setenv("SHARDHOST_SBR_STABLE_AFTER", "8s")
	t.Setenv("SHARDHOST_STATE_STORE", "postgres://app:s3cret@db.internal/shardhost")
	t.Setenv("SHARDHOST_GOSSIP_KEY", "not a flag's value")
	t.Setenv("SHARDHOST_API", "http://127.0.0.1:9999")
	got := printedConfig(t, "--config", file, "--sbr-stable-after", "7s")
	for name, want := range map[string][2]string{
		"sbr-stable-after":   {`"7s"`, "flag"},
		"heartbeat-interval": {`"3s"`, "env"},
		"bind":               {`"10.0.0.5:7946"`, "file"},
		"join":               {`["10.0.0.1:7946", "10.0.0.2:7946"]`, "file"},
		"memory-limit":       {`"128"`, "file"},
		"log-level":          {`"debug"`, "file"},
		"phi-threshold":      {`"8"`, "default"},
		"state-store":        {`"postgres://app:REDACTED@db.internal/shardhost"`, "env"},
		"gossip-key":         {`""`, "default"},
		"api":                {`"127.0.0.1:8080"`, "default"},
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	// What --print-config prints, --config reads back to the same settings.
	var again strings.Builder
	for name, v := range got {
		if v[1] != "default" {
			again.WriteString(name + ": " + v[0] + "\n")
		}
	}
	for _, name := range []string{"SHARDHOST_HEARTBEAT_INTERVAL", "SHARDHOST_SBR_STABLE_AFTER", "SHARDHOST_STATE_STORE"} {
		os.Unsetenv(name)
	}
	back := filepath.Join(t.TempDir(), "back.yaml")
	os.WriteFile(back, []byte(strings.ReplaceAll(again.String(), "REDACTED", "s3cret")), 0o644)
	got2 := printedConfig(t, "--config", back)
	for name, v := range got {
		if v[1] != "default" && got2[name][0] != v[0] {
			t.Errorf("read back, %s = %s, want %s", name, got2[name][0], v[0])
		}
	}
}

// TestConfigRefusesWhatNoFlagTakes: an unknown key in the file, and a value a flag
// refuses, are errors naming them.
func TestConfigRefusesWhatNoFlagTakes(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string]string{
		"bnid: 10.0.0.5:7946\n":   `"bnid" is not a setting of start`,
		"memory-limit: lots\n":    "memory-limit",
		"join: 10.0.0.1:7946\n[[": "--config",
	} {
		file := filepath.Join(dir, "c.yaml")
		os.WriteFile(file, []byte(body), 0o644)
		if out, err := runCLI(t, "start", "--print-config", "--config", file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: %v %s; want an error naming %q", body, err, out, want)
		}
	}
	t.Setenv("SHARDHOST_MEMORY_LIMIT", "lots")
	if _, err := runCLI(t, "start", "--print-config"); err == nil || !strings.Contains(err.Error(), "SHARDHOST_MEMORY_LIMIT") {
		t.Errorf("a bad SHARDHOST_MEMORY_LIMIT: %v", err)
	}
}
