package netaddr

import "testing"

func TestResolve(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7946": "127.0.0.1:7946",
		"[::1]:7946":     "[::1]:7946",
		":7946":          ":7946",
		"localhost:7946": "127.0.0.1:7946",
	} {
		if got, err := Resolve(in); err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"no-port", "nonexistent.invalid:7946"} {
		if got, err := Resolve(bad); err == nil {
			t.Errorf("Resolve(%q) = %q, want an error", bad, got)
		}
	}
}
