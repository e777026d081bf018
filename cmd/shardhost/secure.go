package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/internal/pki"
)

// secureFlags are the security settings of shardhost start (docs/security.md). Secrets
// are never given on the command line, where ps shows them: only files and environment
// variables hold them.
type secureFlags struct {
	apiTokensFile  string
	apiAuthAll     bool
	apiInsecure    bool
	apiMaxRequests int
	apiTLSCert     string
	apiTLSKey      string
	apiClientCA    string
	tlsCert        string
	tlsKey         string
	tlsCA          string
}

func (f *secureFlags) add(cmd *cobra.Command) {
	d := host.DefaultAPIConfig()
	fl := cmd.Flags()
	fl.StringVar(&f.apiTokensFile, "api-tokens-file", "", "file of API bearer tokens, one \"ROLE TOKEN\" or \"ROLE sha256:HEX\" a line (roles admin, client, read); required for a non-loopback --api")
	fl.BoolVar(&f.apiAuthAll, "api-auth-all", false, "require a token for /alive, /ready, /metrics and /v1/openapi.json too")
	fl.BoolVar(&f.apiInsecure, "api-insecure", false, "serve a non-loopback --api without authentication: anyone who reaches it can deploy code")
	fl.StringVar(&f.apiTLSCert, "api-tls-cert", "", "certificate (PEM) the API serves HTTPS with, e.g. member.crt of shardhost certs")
	fl.StringVar(&f.apiTLSKey, "api-tls-key", "", "the key of --api-tls-cert (PEM)")
	fl.StringVar(&f.apiClientCA, "api-client-ca", "", "CA (PEM) whose client certificates authenticate API callers; the subject's OU is the role (admin, client, read)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "member certificate (PEM, shardhost certs create-member): gossip and node-to-node frames become mutual TLS")
	fl.StringVar(&f.tlsKey, "tls-key", "", "the key of --tls-cert (PEM)")
	fl.StringVar(&f.tlsCA, "tls-ca", "", "the cluster CA (PEM): only members with a certificate it signed can join or send a frame")
	fl.IntVar(&f.apiMaxRequests, "api-max-requests", d.MaxConcurrentRequests, "API requests handled at once; past it a request is answered 503 with Retry-After")
}

// apply sets cfg's security from the flags. A non-loopback API without authentication
// is refused unless --api-insecure is given.
func (f *secureFlags) apply(cfg *host.Config, log *slog.Logger) error {
	cfg.API.AuthAll = f.apiAuthAll
	cfg.API.MaxConcurrentRequests = f.apiMaxRequests
	if f.apiTokensFile != "" {
		toks, err := host.LoadAPITokens(f.apiTokensFile)
		if err != nil {
			return fmt.Errorf("--api-tokens-file: %w", err)
		}
		cfg.API.Tokens = toks
	}
	if err := f.apiTLS(cfg); err != nil {
		return err
	}
	if f.tlsCert != "" || f.tlsKey != "" || f.tlsCA != "" {
		if f.tlsCert == "" || f.tlsKey == "" || f.tlsCA == "" {
			return fmt.Errorf("--tls-cert, --tls-key and --tls-ca go together")
		}
		tc, err := pki.LoadMemberTLS(f.tlsCert, f.tlsKey, f.tlsCA)
		if err != nil {
			return fmt.Errorf("--tls-cert, --tls-key, --tls-ca: %v", err)
		}
		cfg.TLS = tc
	}
	if f.apiAuthAll && !cfg.API.AuthEnabled() {
		return fmt.Errorf("--api-auth-all needs --api-tokens-file (or --api-client-ca)")
	}
	if cfg.APIAddr != "" && !cfg.API.AuthEnabled() && !isLoopback(cfg.APIAddr) {
		if !f.apiInsecure {
			return fmt.Errorf("refusing to serve the management API on %s without authentication: whoever reaches it could deploy code "+
				"on every member. Give --api-tokens-file FILE (or --api-client-ca), bind --api to 127.0.0.1, or pass --api-insecure", cfg.APIAddr)
		}
		log.Warn("the management API is open to anyone who reaches it (--api-insecure)", "api", cfg.APIAddr)
	}
	return nil
}

// isLoopback reports whether a HOST:PORT listen address is on the loopback interface
// only. An empty host (all interfaces) is not.
func isLoopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// apiTLS sets the API's TLS from --api-tls-cert, --api-tls-key and --api-client-ca.
func (f *secureFlags) apiTLS(cfg *host.Config) error {
	if (f.apiTLSCert == "") != (f.apiTLSKey == "") {
		return fmt.Errorf("--api-tls-cert and --api-tls-key go together")
	}
	if f.apiTLSCert == "" {
		if f.apiClientCA != "" {
			return fmt.Errorf("--api-client-ca needs --api-tls-cert and --api-tls-key: client certificates need HTTPS")
		}
		return nil
	}
	cert, err := tls.LoadX509KeyPair(f.apiTLSCert, f.apiTLSKey)
	if err != nil {
		return fmt.Errorf("--api-tls-cert, --api-tls-key: %v", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.apiClientCA != "" {
		pool, err := pki.LoadPool(f.apiClientCA)
		if err != nil {
			return fmt.Errorf("--api-client-ca: %v", err)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	cfg.API.TLS = tc
	return nil
}
