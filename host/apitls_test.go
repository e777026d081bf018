package host

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/pki"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// TestAPIOverTLSWithClientCertificates: an API served over HTTPS with a client CA takes
// client certificates as credentials, the role being the subject's OU; tokens still
// work without a certificate; a certificate with no role, or from another CA, does not
// authenticate; plain HTTP gets no API.
func TestAPIOverTLSWithClientCertificates(t *testing.T) {
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := pki.NewCA("other CA", time.Hour)
	pair := func(ca *pki.CA, role string) tls.Certificate {
		var is pki.Issued
		var err error
		if role == "" {
			is, err = ca.Member([]string{"127.0.0.1"}, time.Hour)
		} else {
			is, err = ca.Client("c-"+role, role, time.Hour)
		}
		if err != nil {
			t.Fatal(err)
		}
		p, err := is.TLSCertificate()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	serverCert := pair(ca, "")
	n := startNode(t, nil, func(c *Config) {
		c.API.Tokens = testTokens(t)
		c.API.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: ca.PoolOf(), ClientAuth: tls.VerifyClientCertIfGiven}
	})
	do := func(cert *tls.Certificate, token, method, path string, body string) int {
		t.Helper()
		tc := &tls.Config{RootCAs: ca.PoolOf()}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		req, _ := http.NewRequest(method, "https://"+n.APIAddr()+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	admin, client, read, member, foreign := pair(ca, "admin"), pair(ca, "client"), pair(ca, "read"), pair(ca, ""), pair(other, "admin")
	wasm := string(testwasm.Bytes(t, "abitest"))
	for _, tc := range []struct {
		name   string
		cert   *tls.Certificate
		token  string
		method string
		path   string
		body   string
		want   int
	}{
		{"no credentials", nil, "", "GET", "/v1/types", "", 401},
		{"read cert lists", &read, "", "GET", "/v1/types", "", 200},
		{"read cert deploys", &read, "", "POST", "/v1/types/abitest", wasm, 403},
		{"client cert deploys", &client, "", "POST", "/v1/types/abitest", wasm, 403},
		{"admin cert deploys", &admin, "", "POST", "/v1/types/abitest", wasm, 200},
		{"client cert asks", &client, "", "POST", askPath("abitest", "x"), "count", 200},
		{"member cert has no role", &member, "", "GET", "/v1/types", "", 401},
		{"token without cert", nil, "read-token-0123456789", "GET", "/v1/types", "", 200},
		{"wrong token beats a cert", &admin, "wrong-token-0123456789", "GET", "/v1/types", "", 401},
		{"probe", nil, "", "GET", "/alive", "", 200},
	} {
		if got := do(tc.cert, tc.token, tc.method, tc.path, tc.body); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	// A certificate from another CA fails the handshake (or is ignored and gets 401).
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.PoolOf(), Certificates: []tls.Certificate{foreign}}}}
	if resp, err := cl.Get("https://" + n.APIAddr() + "/v1/types"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("another CA's certificate: %d", resp.StatusCode)
		}
	}
	resp, err := http.Get("http://" + n.APIAddr() + "/alive")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("plain HTTP to the HTTPS API: %d", resp.StatusCode)
		}
	}
}

// TestMembersOverMutualTLS: three members whose gossip and frames are mutual TLS form a
// cluster and serve asks that cross members.
func TestMembersOverMutualTLS(t *testing.T) {
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	is, err := ca.Member([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := is.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, 3, func(c *Config) { c.TLS = pki.MemberTLSConfig(pair, ca.PoolOf()) })
	deployOn(t, nodes[0], "abitest")
	hosts := map[string]bool{}
	c := client(t, nodes[2])
	for i := 0; len(hosts) < 3 && i < 200; i++ {
		r := c.ask("abitest", fmt.Sprintf("e%d", i), "count")
		if r.status != 200 {
			t.Fatalf("ask %d: %d %+v", i, r.status, r.err)
		}
		hosts[r.node] = true
	}
	if len(hosts) != 3 {
		t.Fatalf("entities answered from %v, want all three members", hosts)
	}
}
