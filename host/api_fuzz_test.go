package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/sharding"
)

// FuzzAPIHandler sends arbitrary requests (method, path and query, body, Authorization
// header) through the whole API handler of a member that has tokens and a gossip key:
// authentication, the limits, the routes and their query, body and JSON parsing. No
// request may panic; every error is JSON with a code; nothing but the open routes
// answers 2xx without a valid token; bad input is never an "internal" 500.
func FuzzAPIHandler(f *testing.F) {
	const admin = "admin-token-0123456789"
	for _, seed := range []struct{ method, target, body, auth string }{
		{"POST", "/v1/ask?type=counter&id=alice&timeout=1s", "inc 1", admin},
		{"POST", "/v1/tell?type=c%20x&id=%FF", "x", admin},
		{"POST", "/v1/types/counter?shards=-1&passivate_after=zz&remember_entities=maybe", "\x00asm", admin},
		{"POST", "/v1/types/counter?shards=10&max_active=5&checkpoint=every:3&allocation=priority", "\x00asm\x01\x00\x00\x00", admin},
		{"GET", "/v1/ddata/keys/k?consistency=majority+2", "", admin},
		{"POST", "/v1/ddata/keys/k?type=orset&consistency=all", "add x", admin},
		{"POST", "/v1/ddata/keys/k?type=ormap", "update a gcounter incr 1", admin},
		{"DELETE", "/v1/ddata/keys/k?consistency=3", "", admin},
		{"POST", "/v1/keys/install", `{"key":"MDEyMzQ1Njc4OWFiY2RlZg=="}`, admin},
		{"POST", "/v1/keys/use", `{"id":"0011223344556677","key":""}`, admin},
		{"POST", "/v1/keys/remove", `[1,2,3]`, admin},
		{"POST", "/v1/members/127.0.0.1:1/down", "", "Bearer client-token-0123456789"},
		{"GET", "/v1/shards", "", "Bearer read-token-0123456789"},
		{"GET", "/metrics", "", ""},
		{"GET", "/v1/types", "", "Basic eDp5"},
		{"PUT", "/v1/../v1/types", "", admin},
	} {
		auth := seed.auth
		if auth == admin {
			auth = "Bearer " + admin
		}
		f.Add(seed.method, seed.target, []byte(seed.body), auth)
	}
	n := startNode(f, nil, func(c *Config) {
		c.API.Tokens = mustTokens(f)
		c.GossipKey = []byte("0123456789abcdef")
		c.Sharding.AskTimeout = 2e9
	})
	h := n.Handler()
	f.Fuzz(func(t *testing.T, method, target string, body []byte, auth string) {
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		req, err := http.NewRequest(method, "http://member"+target, bytes.NewReader(body))
		if err != nil {
			return // not a request a client could send
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		res := rec.Result()
		if res.StatusCode < 200 || res.StatusCode > 599 {
			t.Fatalf("%s %q: status %d", method, target, res.StatusCode)
		}
		valid := false
		if scheme, tok, ok := strings.Cut(auth, " "); ok && strings.EqualFold(scheme, "Bearer") {
			_, valid = n.cfg.API.Tokens.Role(tok)
		}
		if res.StatusCode < 300 && !valid {
			switch req.URL.Path {
			case "/alive", "/ready", "/metrics", "/v1/health":
			default:
				t.Fatalf("%s %q answered %d without a valid token", method, target, res.StatusCode)
			}
		}
		if res.StatusCode >= 400 && res.StatusCode != http.StatusMethodNotAllowed {
			var e apiError
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" || e.Code == "" {
				t.Fatalf("%s %q: %d with a body that is no API error: %q", method, target, res.StatusCode, rec.Body.String())
			}
			if res.StatusCode == 500 && e.Code == "internal" {
				t.Fatalf("%s %q: an internal error for a request: %s", method, target, e.Error)
			}
		}
	})
}

func mustTokens(tb testing.TB) *APITokens {
	toks, err := parseAPITokens(strings.NewReader("admin admin-token-0123456789\nclient client-token-0123456789\nread read-token-0123456789\n"))
	if err != nil {
		tb.Fatal(err)
	}
	return toks
}

// FuzzDeploySettings: any deploy query gives settings that make sense or an error that
// wraps ErrBadRequest.
func FuzzDeploySettings(f *testing.F) {
	for _, q := range []string{"shards=10&passivate_after=1m&max_active=3&remember_entities=true", "shards=-1", "passivate_after=-5s",
		"remember_entities=yes", "shards=99999999999999999999", "checkpoint=every:0&role=%00",
		"max_active=5&passivation_strategy=w-tinylfu", "passivation_strategy=LRU"} {
		f.Add("counter", q)
	}
	f.Fuzz(func(t *testing.T, name, query string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		st, err := deploySettings(name, q)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("%q: error %v is not a bad request", query, err)
			}
			return
		}
		switch st.PassivationStrategy {
		case "", sharding.PassivationLRU, sharding.PassivationLFU, sharding.PassivationWTinyLFU:
		default:
			t.Fatalf("%q: passivation strategy %q accepted", query, st.PassivationStrategy)
		}
		if st.NumberOfShards < 0 || st.MaxActive < 0 || st.PassivateAfter < 0 || st.Name != name {
			t.Fatalf("%q: settings %+v", query, st)
		}
	})
}

// FuzzParseAPITokens: any tokens file parses or fails with ErrBadTokens; what parses
// holds at least one token, each found by Role.
func FuzzParseAPITokens(f *testing.F) {
	f.Add("admin 0123456789abcdef0123\n# comment\nread sha256:" + strings.Repeat("ab", 32) + "\n")
	f.Add("client\t0123456789abcdef0123\r\n")
	f.Add("admin x\n")
	f.Fuzz(func(t *testing.T, text string) {
		toks, err := parseAPITokens(strings.NewReader(text))
		if err != nil {
			return
		}
		if len(toks.tokens) == 0 {
			t.Fatal("parsed a file without tokens")
		}
		for _, line := range strings.Split(text, "\n") {
			fields := strings.Fields(line)
			if len(fields) == 2 && !strings.HasPrefix(fields[1], "sha256:") && !strings.HasPrefix(fields[0], "#") {
				if _, ok := toks.Role(fields[1]); !ok {
					t.Fatalf("token %q of the file not found", fields[1])
				}
			}
		}
	})
}
