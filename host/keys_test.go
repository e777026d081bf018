package host

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/shardhost/shardhost/cluster"
)

func TestKeptKeyringWinsOverTheGivenKey(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	k1, k2 := []byte("0123456789abcdef"), []byte("fedcba9876543210")
	if p, o, err := gossipKeys(dir, nil, log); p != nil || o != nil || err != nil {
		t.Fatalf("no key: %v %v %v", p, o, err)
	}
	if p, _, err := gossipKeys(dir, k1, log); err != nil || !bytes.Equal(p, k1) {
		t.Fatalf("first start: %q %v", p, err)
	}
	st, err := os.Stat(filepath.Join(dir, keyringFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kept keyring: %v %v", st, err)
	}
	if err := saveKeyring(dir, [][]byte{k2, k1}); err != nil {
		t.Fatal(err)
	}
	p, o, err := gossipKeys(dir, k1, log)
	if err != nil || !bytes.Equal(p, k2) || len(o) != 1 || !bytes.Equal(o[0], k1) {
		t.Fatalf("after a rotation: %q %q %v", p, o, err)
	}
	if p, _, _ := gossipKeys(dir, nil, log); !bytes.Equal(p, k2) {
		t.Fatalf("without a given key: %q", p)
	}
	os.WriteFile(filepath.Join(dir, keyringFile), []byte("not base64!\n"), 0o600)
	if _, _, err := gossipKeys(dir, k1, log); err == nil {
		t.Fatal("a broken keyring file was taken")
	}
}

// TestKeysAPI: the key routes rotate the keys of a member through its API and keep its
// keyring; a member without encryption answers 409.
func TestKeysAPI(t *testing.T) {
	k1, k2 := []byte("0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")
	n := startNode(t, nil, func(c *Config) { c.GossipKey = k1 })
	c := client(t, n)
	post := func(op string, body any) (int, cluster.KeyResponse) {
		b, _ := json.Marshal(body)
		r := c.do("POST", "/v1/keys/"+op, b)
		var resp cluster.KeyResponse
		if r.status == 200 {
			json.Unmarshal(r.body, &resp)
		}
		return r.status, resp
	}
	b64 := base64.StdEncoding.EncodeToString
	if s, r := post("install", map[string]string{"key": b64(k2)}); s != 200 || r.Keys[cluster.KeyID(k2)] != 1 {
		t.Fatalf("install: %d %+v", s, r)
	}
	if s, r := post("use", map[string]string{"id": cluster.KeyID(k2)}); s != 200 || r.PrimaryKeys[cluster.KeyID(k2)] != 1 {
		t.Fatalf("use: %d %+v", s, r)
	}
	if s, r := post("remove", map[string]string{"key": b64(k1)}); s != 200 || len(r.Keys) != 1 || len(r.Failures) != 0 {
		t.Fatalf("remove: %d %+v", s, r)
	}
	var list cluster.KeyResponse
	if r := c.do("GET", "/v1/keys", nil); r.status != 200 || json.Unmarshal(r.body, &list) != nil || list.PrimaryKeys[cluster.KeyID(k2)] != 1 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	kept, err := loadKeyring(n.cfg.DataDir)
	if err != nil || len(kept) != 1 || !bytes.Equal(kept[0], k2) {
		t.Fatalf("kept keyring: %d keys, %v", len(kept), err)
	}
	for _, tc := range []struct {
		op   string
		body any
	}{
		{"install", map[string]string{"id": "abc"}},
		{"install", map[string]string{"key": "!!"}},
		{"install", map[string]string{"key": b64([]byte("short"))}},
		{"use", map[string]string{}},
		{"use", "not an object"},
		{"rotate", map[string]string{"id": "abc"}},
		{"use", map[string]string{"key": b64(k1), "id": cluster.KeyID(k2)}},
	} {
		if s, _ := post(tc.op, tc.body); s != 400 && s != 404 {
			t.Errorf("%s %v: %d", tc.op, tc.body, s)
		}
	}
	plain := startNode(t, nil, nil)
	if r := client(t, plain).do("GET", "/v1/keys", nil); r.status != 409 {
		t.Errorf("keys of a member without encryption: %d %+v", r.status, r.err)
	}
}
