package host

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/shardhost/shardhost/cluster"
)

// Gossip keys through the management API (admin only), cluster-wide (cluster.KeyManager):
//
//	GET  /v1/keys              → cluster.KeyResponse: the key IDs the members hold
//	POST /v1/keys/install      body {"key":"BASE64"} → add a key on every member
//	POST /v1/keys/use          body {"id":"KEYID"} or {"key":"BASE64"} → encrypt with it everywhere
//	POST /v1/keys/remove       body {"id":"KEYID"} or {"key":"BASE64"} → remove it everywhere
//
// The reply is a cluster.KeyResponse, with status 200 even when some members failed:
// its "failures" lists them. Keys are never in a reply; key IDs are cluster.KeyID.
//
// Each member keeps its keyring in DataDir/gossip-keyring (one base64 key a line, the
// primary first, mode 0600): a member restarted after a rotation starts with the
// rotated keys, whatever key its command line gives.

// keyringFile is the name of the kept keyring in the data directory.
const keyringFile = "gossip-keyring"

// loadKeyring returns the keys kept in dir (primary first), or nil if there is no file.
func loadKeyring(dir string) ([][]byte, error) {
	b, err := os.ReadFile(filepath.Join(dir, keyringFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("host: reading the gossip keyring: %w", err)
	}
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		key, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("host: the gossip keyring %s: a line is not base64", filepath.Join(dir, keyringFile))
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("host: the gossip keyring %s is empty", filepath.Join(dir, keyringFile))
	}
	return keys, nil
}

// saveKeyring writes keys (primary first) to dir's keyring file, atomically, mode 0600
// (writeFileAtomic's temporary file's).
func saveKeyring(dir string, keys [][]byte) error {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k))
		b.WriteByte('\n')
	}
	return writeFileAtomic(filepath.Join(dir, keyringFile), []byte(b.String()))
}

// gossipKeys decides the keyring a member starts with: the one kept in its data
// directory if there is one (a rotation may have changed it since the key given was
// written down), else the key given, which is then kept. It returns the primary key and
// the others.
func gossipKeys(dir string, given []byte, log *slog.Logger) (primary []byte, others [][]byte, err error) {
	kept, err := loadKeyring(dir)
	if err != nil {
		return nil, nil, err
	}
	if kept == nil {
		if given == nil {
			return nil, nil, nil
		}
		return given, nil, saveKeyring(dir, [][]byte{given})
	}
	if given != nil {
		found := false
		for _, k := range kept {
			found = found || bytes.Equal(k, given)
		}
		if !found {
			log.Warn("the gossip key given is not in the keyring this member kept from a key rotation; using the kept keyring",
				"keyring", filepath.Join(dir, keyringFile), "given_key", cluster.KeyID(given), "primary_key", cluster.KeyID(kept[0]))
		}
	}
	return kept[0], kept[1:], nil
}

// keyRequestBody is the body of POST /v1/keys/{op}.
type keyRequestBody struct {
	Key string `json:"key,omitempty"` // base64
	ID  string `json:"id,omitempty"`
}

func (n *Node) keyRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/keys", func(w http.ResponseWriter, r *http.Request) {
		n.keyReply(w, r)(n.keys.List(r.Context()))
	})
	mux.HandleFunc("POST /v1/keys/{op}", n.apiKeyOp)
}

func (n *Node) apiKeyOp(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r, 4<<10, ErrBadRequest)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	var req keyRequestBody
	if err := json.Unmarshal(b, &req); err != nil {
		writeError(w, r, fmt.Errorf("%w: the body is not {\"key\":BASE64} or {\"id\":KEYID}: %v", ErrBadRequest, err), 0)
		return
	}
	var key []byte
	if req.Key != "" {
		if key, err = base64.StdEncoding.DecodeString(req.Key); err != nil {
			writeError(w, r, fmt.Errorf("%w: key is not base64", ErrBadRequest), 0)
			return
		}
	}
	id := req.ID
	if key != nil {
		if id != "" && id != cluster.KeyID(key) {
			writeError(w, r, fmt.Errorf("%w: the key and the id disagree", ErrBadRequest), 0)
			return
		}
		id = cluster.KeyID(key)
	}
	reply := n.keyReply(w, r)
	switch op := r.PathValue("op"); {
	case op == "install" && key != nil:
		reply(n.keys.Install(r.Context(), key))
	case op == "install":
		writeError(w, r, fmt.Errorf("%w: install needs the key", ErrBadRequest), 0)
	case (op == "use" || op == "remove") && id == "":
		writeError(w, r, fmt.Errorf("%w: %s needs the key or its id", ErrBadRequest, op), 0)
	case op == "use":
		reply(n.keys.Use(r.Context(), id))
	case op == "remove":
		reply(n.keys.Remove(r.Context(), id))
	default:
		writeError(w, r, fmt.Errorf("%w: no key operation %q (install, use, remove)", ErrBadRequest, op), http.StatusNotFound)
	}
}

// keyReply answers with a key operation's outcome.
func (n *Node) keyReply(w http.ResponseWriter, r *http.Request) func(cluster.KeyResponse, error) {
	return func(resp cluster.KeyResponse, err error) {
		switch {
		case errors.Is(err, cluster.ErrNoKeyring):
			writeError(w, r, err, http.StatusConflict)
		case errors.Is(err, cluster.ErrBadGossipKey):
			writeError(w, r, fmt.Errorf("%w: %v", ErrBadRequest, err), 0)
		case err != nil:
			writeError(w, r, err, 0)
		default:
			writeJSON(w, http.StatusOK, resp)
		}
	}
}
