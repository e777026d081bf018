package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/internal/pki"
)

// newCertsCommand is shardhost certs: a CA and the certificates of a cluster, for those
// who have none (as cockroach cert does).
func newCertsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make a certificate authority and member and client certificates (ECDSA P-256)",
		Long: `certs writes the certificates of a secure cluster into --dir (default certs):

  shardhost certs create-ca                          ca.crt, ca.key
  shardhost certs create-member --host 10.0.0.1,...  member.crt, member.key
  shardhost certs create-client --role admin         client-admin.crt, client-admin.key

A member certificate serves both member-to-member mutual TLS (--tls-cert, --tls-key,
--tls-ca ca.crt) and the API's HTTPS (--api-tls-cert, --api-tls-key); --host lists the
addresses and names members and API clients use. A client certificate authenticates a
caller of the API whose --api-client-ca is ca.crt, with its role. Keys are written with
mode 0600; keep ca.key away from the members.`,
	}
	cmd.AddCommand(newCreateCACommand(), newCreateMemberCommand(), newCreateClientCommand())
	return cmd
}

// certOpts are the flags every certs command has.
type certOpts struct {
	dir, caKey string
	overwrite  bool
	lifetime   time.Duration
}

func (o *certOpts) add(c *cobra.Command, defLifetime time.Duration, signs bool) *cobra.Command {
	c.Flags().StringVar(&o.dir, "dir", "certs", "directory to write the files in (and to read ca.crt from)")
	c.Flags().BoolVar(&o.overwrite, "overwrite", false, "replace files that exist")
	c.Flags().DurationVar(&o.lifetime, "lifetime", defLifetime, "how long the certificate is valid")
	if signs {
		c.Flags().StringVar(&o.caKey, "ca-key", "", "the CA's key (default DIR/ca.key)")
	}
	c.Args = cobra.NoArgs
	return c
}

func (o *certOpts) loadCA() (*pki.CA, error) {
	key := o.caKey
	if key == "" {
		key = filepath.Join(o.dir, "ca.key")
	}
	ca, err := pki.LoadCA(filepath.Join(o.dir, "ca.crt"), key)
	if err != nil {
		return nil, fmt.Errorf("%v (make the CA first with shardhost certs create-ca --dir %s)", err, o.dir)
	}
	return ca, nil
}

// write writes DIR/NAME.crt and DIR/NAME.key (mode 0600).
func (o *certOpts) write(c *cobra.Command, name string, is pki.Issued) error {
	crt, key := filepath.Join(o.dir, name+".crt"), filepath.Join(o.dir, name+".key")
	if !o.overwrite {
		for _, f := range []string{crt, key} {
			if _, err := os.Stat(f); err == nil {
				return fmt.Errorf("%s exists (remove it, or pass --overwrite)", f)
			}
		}
	}
	if err := pki.WriteFile(crt, is.CertPEM, 0o644, o.overwrite); err != nil {
		return err
	}
	if err := pki.WriteFile(key, is.KeyPEM, 0o600, o.overwrite); err != nil {
		return err
	}
	fmt.Fprintf(c.OutOrStdout(), "wrote %s and %s\n", crt, key)
	return nil
}

func newCreateCACommand() *cobra.Command {
	var o certOpts
	var caName string
	cmd := o.add(&cobra.Command{
		Use:   "create-ca [--dir DIR]",
		Short: "Write a new certificate authority: ca.crt and ca.key",
		RunE: func(c *cobra.Command, args []string) error {
			if err := os.MkdirAll(o.dir, 0o700); err != nil {
				return err
			}
			ca, err := pki.NewCA(caName, o.lifetime)
			if err != nil {
				return err
			}
			key, err := ca.KeyPEM()
			if err != nil {
				return err
			}
			return o.write(c, "ca", pki.Issued{CertPEM: ca.CertPEM(), KeyPEM: key})
		},
	}, pki.DefaultCALifetime, false)
	cmd.Flags().StringVar(&caName, "name", "shardhost CA", "the CA's common name")
	return cmd
}

func newCreateMemberCommand() *cobra.Command {
	var o certOpts
	var hosts []string
	cmd := o.add(&cobra.Command{
		Use:   "create-member --host HOST,... [--dir DIR]",
		Short: "Write a member certificate signed by the CA: member.crt and member.key",
		RunE: func(c *cobra.Command, args []string) error {
			if len(hosts) == 0 {
				return fmt.Errorf("--host is required: the IP addresses and DNS names the member is reached at (e.g. --host 10.0.0.1,node1.example,localhost)")
			}
			ca, err := o.loadCA()
			if err != nil {
				return err
			}
			is, err := ca.Member(hosts, o.lifetime)
			if err != nil {
				return err
			}
			return o.write(c, "member", is)
		},
	}, pki.DefaultCertLifetime, true)
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "IP addresses and DNS names of the member, HOST,...")
	return cmd
}

func newCreateClientCommand() *cobra.Command {
	var o certOpts
	var role, name string
	cmd := o.add(&cobra.Command{
		Use:   "create-client --role admin|client|read [--dir DIR]",
		Short: "Write an API client certificate with a role: client-ROLE.crt and client-ROLE.key",
		RunE: func(c *cobra.Command, args []string) error {
			if _, err := host.ParseRole(role); err != nil {
				return fmt.Errorf("--role: %v", err)
			}
			ca, err := o.loadCA()
			if err != nil {
				return err
			}
			if name == "" {
				name = "client-" + role
			}
			if strings.TrimSpace(name) == "" {
				return fmt.Errorf("--name is empty")
			}
			is, err := ca.Client(name, role, o.lifetime)
			if err != nil {
				return err
			}
			return o.write(c, "client-"+role, is)
		},
	}, pki.DefaultCertLifetime, true)
	cmd.Flags().StringVar(&role, "role", "", "the API role the certificate gives: admin, client or read")
	cmd.Flags().StringVar(&name, "name", "", "the certificate's common name, for logs (default client-ROLE)")
	return cmd
}
