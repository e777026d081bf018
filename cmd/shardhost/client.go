package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	shclient "github.com/shardhost/shardhost/client"
	"github.com/shardhost/shardhost/internal/pki"
	"github.com/shardhost/shardhost/sharding"
)

// client talks to a node's management API through the client library (package
// client at the module's root), one member, no retries: the CLI's commands say what a
// failure means and let the user decide. It keeps the CLI's own explanations of
// failures (explain) and the hints it adds to error replies.
type client struct {
	base  string
	http  *http.Client
	token string // the bearer token, "" for none
	cert  bool   // a client certificate is given
	lc    *shclient.Client
}

// client returns a client of the API at --api: a bare HOST:PORT is http, or https when a
// CA or a client certificate is given.
func (g *globals) client() (*client, error) {
	token, err := g.token()
	if err != nil {
		return nil, err
	}
	tc, err := g.tlsConfig()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: tr}
	opts := []shclient.Option{shclient.WithHTTPClient(hc), shclient.WithToken(token), shclient.WithRetry(1, 0, 0)}
	if tc != nil {
		opts = append(opts, shclient.WithTLSConfig(tc)) // a bare HOST:PORT is https
	}
	lc, err := shclient.New([]string{g.api}, opts...)
	if err != nil {
		return nil, fmt.Errorf("--api %q is not an http(s) URL or HOST:PORT", g.api)
	}
	return &client{base: lc.Endpoints()[0], http: hc, token: token, cert: tc != nil && len(tc.Certificates) > 0, lc: lc}, nil
}

// lib returns the library's client of c: the one g.client made, or one made now for a
// client built by hand (base, http and token set).
func (c *client) lib() (*shclient.Client, error) {
	if c.lc != nil {
		return c.lc, nil
	}
	hc := c.http
	if hc == nil {
		hc = httpClient()
	}
	return shclient.New([]string{c.base}, shclient.WithHTTPClient(hc), shclient.WithToken(c.token), shclient.WithRetry(1, 0, 0))
}

// tlsConfig returns the client's TLS settings from --ca-file, --cert-file and
// --key-file (nil: the system's roots, no client certificate).
func (g *globals) tlsConfig() (*tls.Config, error) {
	if g.caFile == "" && g.certFile == "" && g.keyFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if g.caFile != "" {
		pool, err := pki.LoadPool(g.caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %v", err)
		}
		tc.RootCAs = pool
	}
	if (g.certFile == "") != (g.keyFile == "") {
		return nil, fmt.Errorf("--cert-file and --key-file go together")
	}
	if g.certFile != "" {
		cert, err := tls.LoadX509KeyPair(g.certFile, g.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--cert-file, --key-file: %v", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// explain turns the failure of a request into what to do about it: plain HTTP to an
// HTTPS API and the reverse, a certificate the client does not trust.
func (c *client) explain(err error) error {
	https := strings.HasPrefix(c.base, "https://")
	hostport := strings.TrimPrefix(strings.TrimPrefix(c.base, "https://"), "http://")
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unknown) || (errors.As(err, &verify) && strings.Contains(err.Error(), "unknown authority")):
		return fmt.Errorf("the API at %s has a certificate signed by a CA this client does not trust: give the cluster's CA with --ca-file (or SHARDHOST_CA_FILE)", c.base)
	case errors.As(err, &host):
		return fmt.Errorf("the API's certificate is not valid for %s (%v): reach it by a name the certificate lists, or make one with shardhost certs create-member --host", hostport, host.Error())
	case https && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("the API at %s serves plain HTTP, not HTTPS: use --api http://%s", c.base, hostport)
	}
	return fmt.Errorf("cannot reach the API at %s: %w (is a member serving its API there? name another with --api HOST:PORT or SHARDHOST_API)", c.base, err)
}

// token returns the API token: the contents of --token-file (surrounding white space
// removed), or SHARDHOST_TOKEN, or "".
func (g *globals) token() (string, error) {
	if g.tokenFile == "" {
		return strings.TrimSpace(os.Getenv("SHARDHOST_TOKEN")), nil
	}
	b, err := os.ReadFile(g.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %v", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("--token-file %s: want one token, alone in the file", g.tokenFile)
	}
	return token, nil
}

// response is an API reply that succeeded.
type response struct {
	body   []byte
	header http.Header
}

// apiError is an error reply of the API: its HTTP status, its code (sharding.Code*;
// "" when the reply had none) and its text, with the CLI's hints. It unwraps to the
// library's *client.APIError, so that errors.Is(err, client.ErrUnknownType) holds.
type apiError struct {
	status int
	code   string
	msg    string
	lib    *shclient.APIError
}

func (e *apiError) Error() string { return e.msg }

func (e *apiError) Unwrap() error {
	if e.lib == nil {
		return nil
	}
	return e.lib
}

// requestError is a request to the API that failed before its whole answer came:
// sent says some of it was written to the API's connection, so that the API may have
// acted on it (a connection refused, a name not found or a TLS handshake refused sent
// nothing).
type requestError struct {
	err  error
	sent bool
}

func (e *requestError) Error() string { return e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

// do sends a request and turns an API error reply into an *apiError with its text, and
// a request that got no answer into a *requestError.
func (c *client) do(method, path string, body []byte) (response, error) {
	return c.doWith(method, path, body, nil)
}

// doWith is do with these request headers too.
func (c *client) doWith(method, path string, body []byte, header http.Header) (response, error) {
	lc, err := c.lib()
	if err != nil {
		return response{}, err
	}
	var opts []shclient.CallOption
	for k, vs := range header {
		for _, v := range vs {
			opts = append(opts, shclient.WithHeader(k, v))
		}
	}
	r, err := lc.Do(context.Background(), method, path, body, opts...)
	if err != nil {
		var ae *shclient.APIError
		if errors.As(err, &ae) {
			return response{header: ae.Header}, c.libError(err)
		}
		return response{}, c.libError(err)
	}
	return response{body: r.Body, header: r.Header}, nil
}

// libError gives a failure of the library the CLI's explanations: a request no member
// answered is a *requestError saying what to do, an error reply an *apiError with the
// CLI's hints; any other error is returned as it is.
func (c *client) libError(err error) error {
	var re *shclient.RequestError
	var ae *shclient.APIError
	switch {
	case errors.As(err, &re):
		return &requestError{err: c.explain(re.Err), sent: re.Sent}
	case errors.As(err, &ae):
		return c.apiError(ae)
	}
	return err
}

// apiError gives an error reply the CLI's hints: plain HTTP sent to an HTTPS API, the
// token to give, how to deploy an unknown type.
func (c *client) apiError(ae *shclient.APIError) error {
	if ae.Status == http.StatusBadRequest && strings.HasPrefix(c.base, "http://") && strings.Contains(ae.Message, "HTTP request to an HTTPS server") {
		return fmt.Errorf("the API at %s serves HTTPS, not plain HTTP: use --api https://%s and give the cluster's CA with --ca-file (or SHARDHOST_CA_FILE)",
			c.base, strings.TrimPrefix(c.base, "http://"))
	}
	if ae.Code == "" {
		return &apiError{status: ae.Status, lib: ae,
			msg: fmt.Sprintf("API replied %d %s: %s", ae.Status, http.StatusText(ae.Status), ae.Message)}
	}
	msg := ae.Message
	if ae.Status == http.StatusUnauthorized && c.token == "" && !c.cert {
		msg += " (give the API token in SHARDHOST_TOKEN or --token-file)"
	}
	if ae.Code == sharding.CodeUnknownType {
		msg += deployAdvice(msg)
	}
	return &apiError{status: ae.Status, code: ae.Code, msg: msg, lib: ae}
}

// traceID returns the trace ID of the request's server span, from the traceparent
// response header (W3C Trace Context: 00-TRACEID-SPANID-FLAGS), or "", and whether the
// trace was sampled (flag 01): a member with tracing off answers with an unsampled one.
func (r response) traceID() (string, bool) {
	parts := strings.Split(r.header.Get("traceparent"), "-")
	if len(parts) != 4 || len(parts[1]) != 32 || len(parts[3]) != 2 {
		return "", false
	}
	flags, err := strconv.ParseUint(parts[3], 16, 8)
	return parts[1], err == nil && flags&1 == 1
}

// printTrace prints, for -v, the trace ID of a request on w.
func printTrace(w io.Writer, r response) {
	switch id, sampled := r.traceID(); {
	case id == "":
		fmt.Fprintln(w, "no trace (the member sent no traceparent)")
	case sampled:
		fmt.Fprintf(w, "trace %s\n", id)
	default:
		fmt.Fprintf(w, "trace %s (not recorded: tracing is off on the member, or not sampled; set OTEL_TRACES_EXPORTER)\n", id)
	}
}

func (c *client) getJSON(path string, v any) error {
	r, err := c.do("GET", path, nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		return fmt.Errorf("the API's reply is not what this client expects: %v", err)
	}
	return nil
}

// parseTarget splits TYPE/ID: the ID is everything after the first '/', any UTF-8.
func parseTarget(s string) (typ, id string, err error) {
	typ, id, ok := strings.Cut(s, "/")
	switch {
	case !ok:
		return "", "", fmt.Errorf("%q is not TYPE/ID (for example counter/alice)", s)
	case typ == "":
		return "", "", fmt.Errorf("%q has no entity type before the '/'", s)
	case id == "":
		return "", "", fmt.Errorf("%q has an empty entity ID", s)
	}
	return typ, id, nil
}

func entityQuery(typ, id string) string {
	return "type=" + url.QueryEscape(typ) + "&id=" + url.QueryEscape(id)
}

// payloadArgs checks the TYPE/ID PAYLOAD arguments of tell and ask, naming what is
// missing.
func payloadArgs(verb string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch len(args) {
		case 0:
			return fmt.Errorf("%s needs TYPE/ID and PAYLOAD (for example: shardhost %s counter/alice inc)", verb, verb)
		case 1:
			return fmt.Errorf("%s %s: missing PAYLOAD, the message to send (or - to read it from standard input; \"\" for an empty one)", verb, args[0])
		case 2:
			return nil
		}
		return fmt.Errorf("%s takes TYPE/ID and one PAYLOAD, got %d arguments (quote a payload with spaces)", verb, len(args))
	}
}

// payloadArg returns a message payload: the argument, or standard input for "-".
func payloadArg(arg string, stdin io.Reader) ([]byte, error) {
	if arg == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading the payload from standard input: %v", err)
		}
		return b, nil
	}
	return []byte(arg), nil
}

func httpClient() *http.Client { return &http.Client{Timeout: 30 * time.Second} }

func timeAfter(ms int) <-chan time.Time { return time.After(time.Duration(ms) * time.Millisecond) }

// entityCall reads the TYPE/ID and PAYLOAD arguments of tell and ask and returns the
// API path and the payload.
func (g *globals) entityCall(verb string, args []string, stdin io.Reader) (*client, string, []byte, error) {
	typ, id, err := parseTarget(args[0])
	if err != nil {
		return nil, "", nil, err
	}
	payload, err := payloadArg(args[1], stdin)
	if err != nil {
		return nil, "", nil, err
	}
	c, err := g.client()
	if err != nil {
		return nil, "", nil, err
	}
	return c, "/v1/" + verb + "?" + entityQuery(typ, id), payload, nil
}

// printJSON writes v as indented JSON.
func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// unknownTypeName finds the type's name in the API's unknown-entity-type message
// (`sharding: unknown entity type: "NAME"...`).
var unknownTypeName = regexp.MustCompile(`unknown entity type: "([^"]+)"`)

// deployAdvice is what the CLI adds to an unknown-entity-type error: how to deploy it.
func deployAdvice(msg string) string {
	name := "NAME"
	if m := unknownTypeName.FindStringSubmatch(msg); m != nil {
		name = m[1]
	}
	return fmt.Sprintf(" (deploy it with shardhost deploy --type %s FILE.wasm)", name)
}
