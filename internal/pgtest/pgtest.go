// Package pgtest starts throwaway PostgreSQL servers for tests: initdb in a temporary
// directory, the server on a free loopback port, stopped (pg_ctl) and removed when the
// test ends, pass or fail. It uses the binaries of Debian's postgresql package
// (/usr/lib/postgresql/<version>/bin, or $SHARDHOST_PG_BIN). When they are missing a
// test skips with one line, unless SHARDHOST_REQUIRE_POSTGRES=1 (set by .ci/run), where
// it fails.
//
// initdb, pg_ctl and postgres refuse to run as root. Under root (as in CI) they run as
// the "postgres" user the package creates (or "nobody"), through the Credential of
// os/exec; the data directory is made theirs.
//
// The server runs as a child of the test process with a parent-death signal: a test
// binary killed by its -timeout takes its servers with it instead of leaving them
// behind. Stop and Kill go through pg_ctl (fast and immediate shutdown).
package pgtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Superuser is the role initdb creates; Password is its password (TCP connections
// authenticate with scram-sha-256).
const (
	Superuser = "shardhost"
	Password  = "shardhost-test"
)

// BinDir returns the directory of the PostgreSQL binaries: $SHARDHOST_PG_BIN, or else
// the newest /usr/lib/postgresql/*/bin, if it has initdb, pg_ctl and postgres; "" if
// not.
func BinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if d := os.Getenv("SHARDHOST_PG_BIN"); d != "" {
		dirs = []string{d}
	}
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		ok := true
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				ok = false
			}
		}
		if ok {
			return d
		}
	}
	return ""
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Required reports whether tests must have PostgreSQL (SHARDHOST_REQUIRE_POSTGRES=1).
func Required() bool { return os.Getenv("SHARDHOST_REQUIRE_POSTGRES") == "1" }

// Options configure a server.
type Options struct {
	// TLS turns ssl on with a fresh self-signed certificate for 127.0.0.1 and localhost
	// (CAFile names it, for sslrootcert), and accepts TCP connections only over TLS.
	TLS bool
}

// Server is one PostgreSQL server started for a test.
type Server struct {
	Port int
	// CAFile is the server certificate (its own CA) with Options.TLS; "" otherwise.
	CAFile string

	tb    testing.TB
	bin   string
	dir   string // removed at the end
	data  string
	cred  *syscall.Credential
	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
	dbSeq atomic.Int64
}

// Start initialises a cluster in a temporary directory and starts its server on a
// free loopback port. The server is stopped and the directory removed in tb.Cleanup.
// Skips tb (one line) when the binaries are missing, or fails it if Required().
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	bin := BinDir()
	if bin == "" {
		if Required() {
			tb.Fatal("PostgreSQL binaries not found (/usr/lib/postgresql/*/bin) and SHARDHOST_REQUIRE_POSTGRES=1: apt-get install postgresql")
		}
		tb.Skip("PostgreSQL binaries not found (apt-get install postgresql): skipped")
	}
	s := &Server{tb: tb, bin: bin}
	cred, err := runAs()
	if err != nil {
		tb.Fatal(err)
	}
	s.cred = cred
	if s.dir, err = os.MkdirTemp("", "shardhost-pg-"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(s.dir) })
	if cred != nil {
		if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			tb.Fatal(err)
		}
	}
	s.data = filepath.Join(s.dir, "data")
	pw := filepath.Join(s.dir, "pwfile")
	if err := os.WriteFile(pw, []byte(Password+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	if cred != nil {
		os.Chown(pw, int(cred.Uid), int(cred.Gid))
	}
	if out, err := s.run("initdb", "-D", s.data, "-U", Superuser, "--pwfile", pw, "--auth-local", "trust",
		"--auth-host", "scram-sha-256", "-E", "UTF8", "--locale", "C", "--no-sync"); err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	conf := []string{
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = '" + s.dir + "'",
		"fsync = on",
		"max_connections = 200",
		"shared_buffers = 32MB",
		"log_min_messages = warning",
	}
	if opts.TLS {
		s.CAFile = s.makeCert()
		conf = append(conf, "ssl = on", "ssl_cert_file = '"+s.CAFile+"'", "ssl_key_file = '"+filepath.Join(s.dir, "server.key")+"'")
		hba := "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\nhostnossl all all 0.0.0.0/0 reject\n"
		if err := os.WriteFile(filepath.Join(s.data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = f.WriteString("\n" + strings.Join(conf, "\n") + "\n")
	f.Close()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Stop() })
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s.Port = freePort(tb)
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	tb.Fatalf("starting PostgreSQL: %v", lastErr)
	return nil
}

// runAs returns the credential to run PostgreSQL's binaries with: nil unless root,
// then the "postgres" user (or "nobody").
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("pgtest: running as root, and neither a postgres nor a nobody user exists to run PostgreSQL as")
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (s *Server) run(name string, args ...string) ([]byte, error) {
	return s.command(name, args...).CombinedOutput()
}

// start runs the server on s.Port and waits until it accepts connections.
func (s *Server) start() error {
	log := filepath.Join(s.dir, "server.log")
	lf, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	cmd := s.command("postgres", "-D", s.data, "-p", strconv.Itoa(s.Port))
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	// One goroutine per server process, which waits for it to exit and then closes
	// done: it ends with the process, and stop waits for done.
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		lf.Close()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-done:
			out, _ := os.ReadFile(log)
			return fmt.Errorf("postgres exited at start:\n%s", out)
		default:
		}
		if c, err := net.DialTimeout("tcp", s.addr(), 200*time.Millisecond); err == nil {
			c.Close()
			if out, err := s.run("pg_ctl", "status", "-D", s.data); err == nil && strings.Contains(string(out), "server is running") {
				if s.ready() {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(log)
			s.stop("immediate")
			return fmt.Errorf("postgres did not accept connections within 60 s:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ready reports whether the server has finished starting (pg_isready, which needs no
// password).
func (s *Server) ready() bool {
	out, err := s.run("pg_isready", "-h", s.dir, "-p", strconv.Itoa(s.Port), "-U", Superuser, "-d", "postgres")
	return err == nil && strings.Contains(string(out), "accepting")
}

func (s *Server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL returns a connection URL for database db as the superuser, with sslmode
// verify-full (Options.TLS) or disable.
func (s *Server) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(Superuser, Password), Host: s.addr(), Path: "/" + db}
	q := url.Values{}
	if s.CAFile != "" {
		q.Set("sslmode", "verify-full")
		q.Set("sslrootcert", s.CAFile)
	} else {
		q.Set("sslmode", "disable")
	}
	q.Set("connect_timeout", "5")
	u.RawQuery = q.Encode()
	return u.String()
}

// NewDatabase creates an empty database and returns its URL (as URL).
func (s *Server) NewDatabase(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("test_%d", s.dbSeq.Add(1))
	if err := s.SQL("postgres", "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("creating database %s: %v", name, err)
	}
	return s.URL(name)
}

// SQL runs statements in database db through the server's Unix socket with psql, as
// the superuser (psql ships with the server package).
func (s *Server) SQL(db, sql string) error {
	psql := filepath.Join(s.bin, "psql")
	if _, err := os.Stat(psql); err != nil {
		psql = "psql"
	}
	cmd := exec.Command(psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", s.dir, "-p", strconv.Itoa(s.Port), "-U", Superuser, "-d", db, "-c", sql)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("psql: %v: %s", err, out)
	}
	return nil
}

// Kill stops the server at once (pg_ctl immediate mode: every backend quits without a
// checkpoint, as in a crash; Restart then recovers from the WAL).
func (s *Server) Kill() { s.stop("immediate") }

// Stop shuts the server down cleanly (pg_ctl fast mode). Idempotent.
func (s *Server) Stop() { s.stop("fast") }

func (s *Server) stop(mode string) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	if out, err := s.run("pg_ctl", "stop", "-D", s.data, "-m", mode, "-w", "-t", "60"); err != nil {
		s.tb.Logf("pg_ctl stop -m %s: %v: %s", mode, err, out)
		cmd.Process.Kill()
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// Restart starts a stopped (or killed) server again on the same port.
func (s *Server) Restart() {
	s.tb.Helper()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // the port may still be held by the old server's sockets
	}
	s.tb.Fatalf("restarting PostgreSQL: %v", err)
}

// Running reports whether the server process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

func freePort(tb testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// makeCert writes a self-signed server certificate and key for 127.0.0.1 and
// localhost, readable by the server, and returns the certificate's path.
func (s *Server) makeCert() string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		s.tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "shardhost pgtest"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		s.tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		s.tb.Fatal(err)
	}
	certFile, keyFile := filepath.Join(s.dir, "server.crt"), filepath.Join(s.dir, "server.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		s.tb.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		s.tb.Fatal(err)
	}
	if s.cred != nil {
		os.Chown(certFile, int(s.cred.Uid), int(s.cred.Gid))
		os.Chown(keyFile, int(s.cred.Uid), int(s.cred.Gid))
	}
	return certFile
}

// WithTimeout is a context for a test's calls to the server.
func WithTimeout(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}
