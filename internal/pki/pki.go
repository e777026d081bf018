// Package pki makes and loads the certificates of a shardhost cluster: a certificate
// authority (CA), member certificates (for member-to-member mutual TLS and the API's
// HTTPS) and client certificates (for the API, carrying a role), all ECDSA P-256 with
// crypto/x509, as `shardhost certs` writes them (docs/security.md).
//
// A member certificate has both the serverAuth and clientAuth extended key usages: the
// members' TLS accepts only such certificates, so that a client certificate signed by
// the same CA does not make its holder a member. A client certificate has clientAuth
// only and its role (admin, client or read) as its subject's organizational unit.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"strings"
	"time"
)

// Errors of the package.
var (
	// ErrNoCertificate: a PEM file holds no certificate, or no private key.
	ErrNoCertificate = errors.New("pki: no certificate")
	// ErrNotMember: a peer's certificate is not a member certificate of the cluster CA.
	ErrNotMember = errors.New("pki: not a member certificate of the cluster CA")
)

// Lifetimes of what NewCA, Member and Client make unless told otherwise.
const (
	DefaultCALifetime   = 10 * 365 * 24 * time.Hour
	DefaultCertLifetime = 365 * 24 * time.Hour
)

// MemberOU is the organizational unit of the subject of member certificates.
const MemberOU = "member"

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Issued is a certificate and its key, PEM-encoded.
type Issued struct {
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed CA valid for lifetime from now (an hour earlier, for clocks
// a little behind).
func NewCA(name string, lifetime time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl, err := template(pkix.Name{CommonName: name, Organization: []string{"shardhost"}}, lifetime)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.MaxPathLenZero = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

func template(subject pkix.Name, lifetime time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(lifetime),
	}, nil
}

// CertPEM returns the CA's certificate, PEM-encoded.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM returns the CA's private key, PEM-encoded (PKCS #8).
func (ca *CA) KeyPEM() ([]byte, error) { return keyPEM(ca.Key) }

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Member issues a member certificate for hosts (IP addresses or DNS names: the
// addresses members and API clients reach the member at), valid for lifetime.
func (ca *CA) Member(hosts []string, lifetime time.Duration) (Issued, error) {
	if len(hosts) == 0 {
		return Issued{}, errors.New("pki: a member certificate needs at least one host")
	}
	tmpl, err := template(pkix.Name{CommonName: "shardhost member " + hosts[0], Organization: []string{"shardhost"},
		OrganizationalUnit: []string{MemberOU}}, lifetime)
	if err != nil {
		return Issued{}, err
	}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if ip := net.ParseIP(strings.Trim(h, "[]")); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	return ca.issue(tmpl)
}

// Client issues a client certificate for the API with role (admin, client or read) as
// its subject's organizational unit and name as its common name, valid for lifetime.
func (ca *CA) Client(name, role string, lifetime time.Duration) (Issued, error) {
	tmpl, err := template(pkix.Name{CommonName: name, Organization: []string{"shardhost"},
		OrganizationalUnit: []string{role}}, lifetime)
	if err != nil {
		return Issued{}, err
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(tmpl)
}

func (ca *CA) issue(tmpl *x509.Certificate) (Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Issued{}, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Issued{}, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return Issued{}, err
	}
	return Issued{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: kp}, nil
}

// TLSCertificate returns the issued certificate as a tls.Certificate.
func (i Issued) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair(i.CertPEM, i.KeyPEM)
}

// LoadCA reads a CA's certificate and key from PEM files.
func LoadCA(certFile, keyFile string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("pki: loading the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !cert.IsCA {
		return nil, fmt.Errorf("pki: %s is not an ECDSA certificate authority", certFile)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadPool reads the PEM certificates of file into a pool, e.g. a CA to trust.
func LoadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w in %s", ErrNoCertificate, file)
	}
	return pool, nil
}

// PoolOf returns a pool holding the CA's certificate.
func (ca *CA) PoolOf() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// VerifyMember checks that a peer's certificate chain (leaf first, as TLS gives it)
// leads to a CA in roots and that the leaf is a member certificate: allowed both
// serverAuth and clientAuth. The error wraps ErrNotMember.
func VerifyMember(chain []*x509.Certificate, roots *x509.CertPool) error {
	if len(chain) == 0 {
		return fmt.Errorf("%w: no certificate", ErrNotMember)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return fmt.Errorf("%w: %q: %v", ErrNotMember, chain[0].Subject.String(), err)
		}
	}
	return nil
}

// MemberTLSConfig returns the TLS configuration of member-to-member connections, for
// both sides: it presents cert and accepts a peer only if VerifyMember passes with
// roots; both sides must present a certificate (mutual TLS). Host names are not checked:
// any member certificate of the cluster CA is a member, wherever it connects from. TLS
// 1.3 only.
func MemberTLSConfig(cert tls.Certificate, roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS13,
		// Resumed sessions skip the signatures of a full handshake (gossip opens a
		// connection per stream); VerifyConnection still checks the peer's chain.
		ClientSessionCache: tls.NewLRUClientSessionCache(256),
		// The server asks for a certificate and VerifyConnection checks it; the client
		// skips the default check (which wants a host name) for the same one.
		ClientAuth:         tls.RequireAnyClientCert,
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return VerifyMember(cs.PeerCertificates, roots)
		},
	}
}

// LoadMemberTLS reads a member certificate, its key and the cluster CA from PEM files
// and returns MemberTLSConfig of them.
func LoadMemberTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	roots, err := LoadPool(caFile)
	if err != nil {
		return nil, err
	}
	var chain []*x509.Certificate
	for _, der := range cert.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		chain = append(chain, c)
	}
	if err := VerifyMember(chain, roots); err != nil {
		return nil, fmt.Errorf("%s: %w (make one with shardhost certs create-member)", certFile, err)
	}
	return MemberTLSConfig(cert, roots), nil
}

// WriteFile writes b to path with mode perm, refusing to replace an existing file
// unless overwrite.
func WriteFile(path string, b []byte, perm os.FileMode, overwrite bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if !overwrite {
		flags |= os.O_EXCL
	}
	f, err := os.OpenFile(path, flags, perm)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s: %w", path, err) // the caller says how to overwrite it
		}
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
