package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/pki"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestCertsCommands: create-ca, create-member and create-client write the files the
// README names into --dir; the member certificate passes the members' check, the client
// certificate carries its role, and nothing is overwritten without --overwrite.
func TestCertsCommands(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"certs", "create-ca", "--dir", dir},
		{"certs", "create-member", "--dir", dir, "--host", "127.0.0.1,localhost"},
		{"certs", "create-client", "--dir", dir, "--role", "admin"},
		{"certs", "create-client", "--dir", dir, "--role", "read"},
	} {
		if out, err := runCLI(t, args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	for _, f := range []string{"ca.crt", "ca.key", "member.crt", "member.key", "client-admin.crt", "client-admin.key", "client-read.crt", "client-read.key"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".key") && st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", f, st.Mode())
		}
	}
	if _, err := pki.LoadMemberTLS(filepath.Join(dir, "member.crt"), filepath.Join(dir, "member.key"), filepath.Join(dir, "ca.crt")); err != nil {
		t.Errorf("member certificate: %v", err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "client-admin.crt"), filepath.Join(dir, "client-admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	if strings.Join(leaf.Subject.OrganizationalUnit, ",") != "admin" || leaf.Subject.CommonName != "client-admin" {
		t.Errorf("client certificate subject %v", leaf.Subject)
	}
	if _, err := runCLI(t, "certs", "create-client", "--dir", dir, "--role", "admin"); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("overwrote a client certificate: %v", err)
	}
	if _, err := runCLI(t, "certs", "create-client", "--dir", dir, "--role", "admin", "--overwrite"); err != nil {
		t.Errorf("--overwrite: %v", err)
	}
	for _, bad := range [][]string{
		{"certs", "create-member", "--dir", dir},
		{"certs", "create-client", "--dir", dir, "--role", "root"},
		{"certs", "create-member", "--dir", t.TempDir(), "--host", "h"},
	} {
		if _, err := runCLI(t, bad...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
