package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/cluster"
)

// newKeysCommand is shardhost keys: the gossip keys of the whole cluster, rotated
// without downtime through memberlist's keyring (docs/security.md).
func newKeysCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "List and rotate the gossip encryption keys of every member",
		Long: `keys manages the gossip keys of every member through any member's API (admin).
A rotation without downtime:

  shardhost keys generate > new.key
  shardhost keys install --file new.key  # every member can now decrypt with it
  shardhost keys use --file new.key      # every member encrypts with it
  shardhost keys remove OLD-KEY-ID            # the old key is gone everywhere

Keys are read from a file (or - for standard input), never from the command line;
lists show key IDs (the first 8 bytes of the key's SHA-256), never keys. Each member
keeps its keyring in its data directory, so it restarts with the rotated keys.`,
	}
	op := func(name, short string, needKey bool) *cobra.Command {
		var keyFile string
		keyArg := func(c *cobra.Command) *cobra.Command {
			c.Flags().StringVar(&keyFile, "file", "", "file holding the base64 gossip key (- for standard input)")
			return c
		}
		use := name + " --file FILE"
		args := cobra.NoArgs
		if !needKey {
			use = name + " KEY-ID | --file FILE"
			args = cobra.MaximumNArgs(1)
		}
		return g.clientFlags(keyArg(&cobra.Command{
			Use:   use,
			Short: short,
			Args:  args,
			RunE: func(cmd *cobra.Command, args []string) error {
				var body struct {
					Key string `json:"key,omitempty"`
					ID  string `json:"id,omitempty"`
				}
				switch {
				case keyFile != "" && len(args) > 0:
					return fmt.Errorf("give a KEY-ID or --file, not both")
				case keyFile != "":
					key, err := readKeyFile(keyFile, cmd.InOrStdin())
					if err != nil {
						return err
					}
					body.Key = base64.StdEncoding.EncodeToString(key)
				case len(args) == 1:
					body.ID = args[0]
				case needKey:
					return fmt.Errorf("--file is required: the key to %s", name)
				default:
					return fmt.Errorf("give the KEY-ID (shardhost keys list) or --file")
				}
				b, _ := json.Marshal(body)
				return keysCall(g, cmd.OutOrStdout(), "POST", "/v1/keys/"+name, b)
			},
		}))
	}
	var listJSON bool
	list := g.clientFlags(outputFlags(&cobra.Command{
		Use:   "list",
		Short: "List the key IDs the members hold, and the one each encrypts with",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if listJSON {
				c, err := g.client()
				if err != nil {
					return err
				}
				var resp cluster.KeyResponse
				if err := c.getJSON("/v1/keys", &resp); err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), resp)
			}
			return keysCall(g, cmd.OutOrStdout(), "GET", "/v1/keys", nil)
		},
	}, &listJSON))
	generate := &cobra.Command{
		Use:   "generate",
		Short: "Print a new random 32-byte gossip key, base64 (for --gossip-key-file)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var b [32]byte
			if _, err := rand.Read(b[:]); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), base64.StdEncoding.EncodeToString(b[:]))
			return nil
		},
	}
	cmd.AddCommand(list, generate,
		op("install", "Add a key to every member's keyring", true),
		op("use", "Make a key the one every member encrypts with (install it first)", false),
		op("remove", "Remove a key from every member (not the one in use)", false))
	return cmd
}

// readKeyFile reads a base64 gossip key from file, or from stdin for "-".
func readKeyFile(file string, stdin io.Reader) ([]byte, error) {
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, 4<<10))
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("--file: %v", err)
	}
	return parseGossipKey(string(b), "--file "+file)
}

// keysCall runs a key operation and prints the outcome; it fails if any member did.
func keysCall(g *globals, out io.Writer, method, path string, body []byte) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	var resp cluster.KeyResponse
	r, err := c.do(method, path, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(r.body, &resp); err != nil {
		return fmt.Errorf("the API's reply is not what this client expects: %v", err)
	}
	fmt.Fprintf(out, "%d of %d members answered\n", resp.Responses, resp.Members)
	ids := make([]string, 0, len(resp.Keys))
	for id := range resp.Keys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY ID\tMEMBERS\tPRIMARY ON")
	for _, id := range ids {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", id, resp.Keys[id], resp.PrimaryKeys[id])
	}
	tw.Flush()
	if len(resp.Failures) > 0 {
		var lines []string
		for member, why := range resp.Failures {
			lines = append(lines, fmt.Sprintf("  %s: %s", member, why))
		}
		sort.Strings(lines)
		fmt.Fprintf(out, "failed on %d members:\n%s\n", len(resp.Failures), strings.Join(lines, "\n"))
		return fmt.Errorf("the key operation failed on %d of %d members", len(resp.Failures), resp.Members)
	}
	return nil
}
