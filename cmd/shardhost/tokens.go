package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newTokensCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Make API bearer tokens for --api-tokens-file",
	}
	var role, file string
	create := &cobra.Command{
		Use:   "create --role admin|client|read [--tokens-file FILE]",
		Short: "Print a new random token; with --tokens-file, add its digest to that file",
		Long: `create prints a new random token (256 bits, base64url) on standard output. With
--tokens-file it also appends "ROLE sha256:DIGEST" to FILE (created with mode 0600), so
that the members' tokens file never holds the token itself. Give the token to the
client in SHARDHOST_TOKEN or a --token-file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := host.ParseRole(role); err != nil {
				return fmt.Errorf("--role: %v", err)
			}
			var b [32]byte
			if _, err := rand.Read(b[:]); err != nil {
				return err
			}
			token := base64.RawURLEncoding.EncodeToString(b[:])
			if file != "" {
				f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(f, "%s %s\n", role, host.TokenDigest(token))
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return err
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), token)
			return nil
		},
	}
	create.Flags().StringVar(&role, "role", "", "the token's role: admin, client or read")
	create.Flags().StringVar(&file, "tokens-file", "", "tokens file to add the token's digest to")
	cmd.AddCommand(create)
	return cmd
}
