package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func mustCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestIssuedCertificates(t *testing.T) {
	ca := mustCA(t)
	if ca.Key.Curve != elliptic.P256() || !ca.Cert.IsCA {
		t.Fatalf("CA: curve %v, IsCA %v", ca.Key.Curve.Params().Name, ca.Cert.IsCA)
	}
	m, err := ca.Member([]string{"127.0.0.1", "localhost", "node1.example"}, DefaultCertLifetime)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := m.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	if leaf.PublicKeyAlgorithm != x509.ECDSA || pair.PrivateKey.(*ecdsa.PrivateKey).Curve != elliptic.P256() {
		t.Errorf("member key: %v", leaf.PublicKeyAlgorithm)
	}
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) || strings.Join(leaf.DNSNames, ",") != "localhost,node1.example" {
		t.Errorf("member SANs: %v %v", leaf.IPAddresses, leaf.DNSNames)
	}
	if !leaf.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("a certificate outlives its CA: %v > %v", leaf.NotAfter, ca.Cert.NotAfter)
	}
	if err := VerifyMember([]*x509.Certificate{leaf}, ca.PoolOf()); err != nil {
		t.Errorf("member certificate: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.PoolOf(), DNSName: "node1.example"}); err != nil {
		t.Errorf("member certificate as a server's: %v", err)
	}

	c, err := ca.Client("client-admin", "admin", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cp, _ := c.TLSCertificate()
	cleaf, _ := x509.ParseCertificate(cp.Certificate[0])
	if strings.Join(cleaf.Subject.OrganizationalUnit, ",") != "admin" {
		t.Errorf("client OU: %v", cleaf.Subject.OrganizationalUnit)
	}
	if _, err := cleaf.Verify(x509.VerifyOptions{Roots: ca.PoolOf(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if err := VerifyMember([]*x509.Certificate{cleaf}, ca.PoolOf()); !errors.Is(err, ErrNotMember) {
		t.Errorf("a client certificate passed as a member's: %v", err)
	}
	other := mustCA(t)
	om, _ := other.Member([]string{"127.0.0.1"}, time.Hour)
	op, _ := om.TLSCertificate()
	oleaf, _ := x509.ParseCertificate(op.Certificate[0])
	if err := VerifyMember([]*x509.Certificate{oleaf}, ca.PoolOf()); !errors.Is(err, ErrNotMember) {
		t.Errorf("another CA's member passed: %v", err)
	}
	if err := VerifyMember(nil, ca.PoolOf()); !errors.Is(err, ErrNotMember) {
		t.Errorf("no certificate passed: %v", err)
	}
}

// TestMemberTLSHandshakes: two members of one CA complete a mutual TLS handshake; a
// member of another CA, a client certificate of the same CA and a peer without a
// certificate do not, whichever side they are on.
func TestMemberTLSHandshakes(t *testing.T) {
	ca, other := mustCA(t), mustCA(t)
	cfg := func(ca *CA, client bool) *tls.Config {
		var is Issued
		var err error
		if client {
			is, err = ca.Client("c", "admin", time.Hour)
		} else {
			is, err = ca.Member([]string{"127.0.0.1"}, time.Hour)
		}
		if err != nil {
			t.Fatal(err)
		}
		pair, err := is.TLSCertificate()
		if err != nil {
			t.Fatal(err)
		}
		return MemberTLSConfig(pair, ca.PoolOf())
	}
	member := cfg(ca, false)
	noCert := member.Clone()
	noCert.Certificates = nil
	for name, tc := range map[string]struct {
		server, client *tls.Config
		ok             bool
	}{
		"members":                {member, cfg(ca, false), true},
		"other CA dials":         {member, cfg(other, false), false},
		"other CA serves":        {cfg(other, false), member, false},
		"client certificate":     {member, cfg(ca, true), false},
		"client cert serves":     {cfg(ca, true), member, false},
		"no certificate at all":  {member, noCert, false},
		"other CA with own root": {cfg(other, false), cfg(ca, false), false},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		a, err := ln.Accept()
		ln.Close()
		if err != nil {
			t.Fatal(err)
		}
		a.SetDeadline(time.Now().Add(30 * time.Second))
		b.SetDeadline(time.Now().Add(30 * time.Second))
		srv := tls.Server(a, tc.server)
		cli := tls.Client(b, tc.client)
		errs := make(chan error, 2)
		go func() {
			err := srv.Handshake()
			if err == nil {
				_, err = io.ReadFull(srv, make([]byte, 1)) // TLS 1.3: the client's certificate is checked after its Finished
			}
			errs <- err
			srv.Close()
		}()
		go func() {
			err := cli.Handshake()
			if err == nil {
				_, err = cli.Write([]byte{1})
			}
			errs <- err
			cli.Close()
		}()
		e1, e2 := <-errs, <-errs
		if ok := e1 == nil && e2 == nil; ok != tc.ok {
			t.Errorf("%s: handshake errors %v / %v, want success %v", name, e1, e2, tc.ok)
		}
	}
}

func TestLoadFilesAndWriteFile(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t)
	kp, _ := ca.KeyPEM()
	caCrt, caKey := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := WriteFile(caCrt, ca.CertPEM(), 0o644, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(caKey, kp, 0o600, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(caKey, kp, 0o600, false); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("overwrote without leave: %v", err)
	}
	if st, _ := os.Stat(caKey); st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v", st.Mode())
	}
	loaded, err := LoadCA(caCrt, caKey)
	if err != nil || !loaded.Cert.Equal(ca.Cert) {
		t.Fatalf("LoadCA: %v", err)
	}
	m, _ := loaded.Member([]string{"127.0.0.1"}, time.Hour)
	os.WriteFile(filepath.Join(dir, "member.crt"), m.CertPEM, 0o644)
	os.WriteFile(filepath.Join(dir, "member.key"), m.KeyPEM, 0o600)
	if _, err := LoadMemberTLS(filepath.Join(dir, "member.crt"), filepath.Join(dir, "member.key"), caCrt); err != nil {
		t.Errorf("LoadMemberTLS: %v", err)
	}
	c, _ := loaded.Client("c", "read", time.Hour)
	os.WriteFile(filepath.Join(dir, "client.crt"), c.CertPEM, 0o644)
	os.WriteFile(filepath.Join(dir, "client.key"), c.KeyPEM, 0o600)
	if _, err := LoadMemberTLS(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"), caCrt); !errors.Is(err, ErrNotMember) {
		t.Errorf("LoadMemberTLS took a client certificate: %v", err)
	}
	if _, err := LoadPool(caKey); !errors.Is(err, ErrNoCertificate) {
		t.Errorf("LoadPool of a key: %v", err)
	}
	if _, err := LoadCA(filepath.Join(dir, "member.crt"), filepath.Join(dir, "member.key")); err == nil {
		t.Error("LoadCA took a member certificate")
	}
}

// TestMemberTLSResumesAndStillVerifies: a second connection between two members resumes
// the first one's session, and the peer's chain is checked on it too.
func TestMemberTLSResumesAndStillVerifies(t *testing.T) {
	ca := mustCA(t)
	cfg := func() *tls.Config {
		is, err := ca.Member([]string{"127.0.0.1"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		pair, _ := is.TLSCertificate()
		return MemberTLSConfig(pair, ca.PoolOf())
	}
	server, client := cfg(), cfg()
	verified := 0
	verify := client.VerifyConnection
	client.VerifyConnection = func(cs tls.ConnectionState) error { verified++; return verify(cs) }
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 1)
				if _, err := c.Read(b); err == nil {
					c.Write(b)
				}
			}()
		}
	}()
	var resumed []bool
	for i := 0; i < 2; i++ {
		c, err := tls.Dial("tcp", ln.Addr().String(), client)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		resumed = append(resumed, c.ConnectionState().DidResume)
		c.Close()
	}
	if resumed[0] || !resumed[1] {
		t.Errorf("resumed: %v, want the second connection only", resumed)
	}
	if verified != 2 {
		t.Errorf("the peer was verified %d times in 2 connections", verified)
	}
}
