package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/internal/telemetry"
)

// globals are the flags every command has.
type globals struct {
	api       string
	tokenFile string
	caFile    string // the CA that signed the API's certificate
	certFile  string // a client certificate for the API, and its key
	keyFile   string
	logLevel  string
	logFormat string
}

func newRootCommand() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "shardhost",
		Short: "Sharded wasm entities on a cluster of hosts",
		Long: `shardhost runs virtual actors ("entities") as sandboxed WebAssembly instances,
sharded over a cluster of hosts: an entity is created on the first message to its ID,
lives on exactly one host, and processes its messages one at a time.

Start a local three-node cluster with the example entities:  shardhost dev
Talk to it:                                                  shardhost ask counter/alice inc`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format: text (logfmt) or json; records made in a traced context carry trace_id and span_id")
	root.AddCommand(
		newStartCommand(g),
		newDevCommand(g),
		newInitCommand(),
		g.clientFlags(newDeployCommand(g)),
		g.clientFlags(newUndeployCommand(g)),
		g.clientFlags(newUpgradeCommand(g)),
		newRolloutCommand(g),
		g.clientFlags(newPassivateCommand(g)),
		g.clientFlags(newTellCommand(g)),
		g.clientFlags(newAskCommand(g)),
		g.clientFlags(newQueryCommand(g)),
		g.clientFlags(newMembersCommand(g)),
		g.clientFlags(newShardsCommand(g)),
		g.clientFlags(newTypesCommand(g)),
		g.clientFlags(newModulesCommand(g)),
		g.clientFlags(newEntitiesCommand(g)),
		g.clientFlags(newEntityCommand(g)),
		g.clientFlags(newHistoryCommand(g)),
		g.clientFlags(newLogsCommand(g)),
		g.clientFlags(newRevertCommand(g)),
		g.clientFlags(newForkCommand(g)),
		g.clientFlags(newPauseCommand(g)),
		g.clientFlags(newResumeCommand(g, false)),
		g.clientFlags(newRemindersCommand(g)),
		newScheduledCommand(g),
		g.clientFlags(newResumeCommand(g, true)),
		g.clientFlags(newReplayCommand(g)),
		g.clientFlags(newDownCommand(g)),
		g.clientFlags(newLeaveCommand(g)),
		newDDataCommand(g),
		newStateCommand(g),
		newTokensCommand(),
		newCertsCommand(),
		newKeysCommand(g),
		newVersionCommand(),
		g.clientFlags(newHealthCommand(g)),
	)
	return root
}

// clientFlags adds --api and the credentials to a command that talks to a node's API.
// The token comes from --token-file, else from SHARDHOST_TOKEN: never from the command
// line, where ps shows it.
func (g *globals) clientFlags(cmd *cobra.Command) *cobra.Command {
	def := os.Getenv("SHARDHOST_API")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	cmd.Flags().StringVar(&g.api, "api", def, "`URL` of any node's management API, or HOST:PORT (env SHARDHOST_API)")
	cmd.Flags().StringVar(&g.tokenFile, "token-file", os.Getenv("SHARDHOST_TOKEN_FILE"), "`FILE` holding the API bearer token (env SHARDHOST_TOKEN_FILE; or the token itself in SHARDHOST_TOKEN)")
	cmd.Flags().StringVar(&g.caFile, "ca-file", os.Getenv("SHARDHOST_CA_FILE"), "CA (PEM) that signed the API's certificate, for https (env SHARDHOST_CA_FILE)")
	cmd.Flags().StringVar(&g.certFile, "cert-file", os.Getenv("SHARDHOST_CERT_FILE"), "client certificate (PEM) for an API that takes them (env SHARDHOST_CERT_FILE)")
	cmd.Flags().StringVar(&g.keyFile, "key-file", os.Getenv("SHARDHOST_KEY_FILE"), "the key of --cert-file (env SHARDHOST_KEY_FILE)")
	return cmd
}

// logger returns the logger of a command that runs members: --log-level and above, in
// --log-format, to w (the command's standard error).
func (g *globals) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	h, err := telemetry.LogHandler(w, g.logFormat, level)
	if err != nil {
		return nil, fmt.Errorf("--log-format: %v", err)
	}
	return slog.New(h), nil
}

// oneLine keeps the first line of an error text.
func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
