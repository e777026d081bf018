package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/internal/telemetry"
)

// nodeFlags are the settings of a host that start and dev share.
type nodeFlags struct {
	gossipProfile   string
	memoryLimitMiB  int
	messageDeadline time.Duration
	maxMessageSize  int
	maxModuleSize   int
	askTimeout      time.Duration
}

func (f *nodeFlags) add(cmd *cobra.Command, profile string) {
	d := host.DefaultConfig()
	cmd.Flags().StringVar(&f.gossipProfile, "gossip-profile", profile, "memberlist timing: lan, or local (faster failure detection on one machine)")
	cmd.Flags().IntVar(&f.memoryLimitMiB, "memory-limit", int(d.Runtime.MemoryLimit>>20), "linear memory cap of each entity instance, in MiB")
	cmd.Flags().DurationVar(&f.messageDeadline, "message-deadline", d.Runtime.MessageDeadline, "how long one message may run inside an entity")
	cmd.Flags().IntVar(&f.maxMessageSize, "max-message-size", d.Runtime.MaxMessageSize, "cap of a message and of a reply, in bytes")
	cmd.Flags().IntVar(&f.maxModuleSize, "max-module-size", d.MaxModuleSize, "cap of a deployed module, in bytes")
	cmd.Flags().DurationVar(&f.askTimeout, "ask-timeout", d.Sharding.AskTimeout, "default time an ask waits for its reply")
}

func (f *nodeFlags) config() host.Config {
	cfg := host.DefaultConfig()
	cfg.GossipProfile = f.gossipProfile
	cfg.Runtime.MemoryLimit = uint64(f.memoryLimitMiB) << 20
	cfg.Runtime.MessageDeadline = f.messageDeadline
	cfg.Runtime.MaxMessageSize = f.maxMessageSize
	cfg.MaxModuleSize = f.maxModuleSize
	cfg.Sharding.AskTimeout = f.askTimeout
	return cfg
}

func newStartCommand(g *globals) *cobra.Command {
	var bind, api, transport, dataDir string
	var join []string
	var nf nodeFlags
	cmd := &cobra.Command{
		Use:   "start --bind HOST:PORT --api HOST:PORT [--transport HOST:PORT] [--join HOST:PORT,...] [--data-dir DIR]",
		Short: "Run a host: join the cluster and serve entities until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg := nf.config()
			cfg.BindAddr, cfg.APIAddr, cfg.TransportAddr, cfg.Join = bind, api, transport, join
			cfg.DataDir = dataDir
			if cfg.DataDir == "" {
				cfg.DataDir = filepath.Join(".shardhost", "node-"+strings.NewReplacer(":", "-", "[", "", "]", "").Replace(bind))
			}
			cfg.Logger = log
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			tp, shutdownTracing, err := telemetry.TracerProvider(ctx, bind)
			if err != nil {
				return err
			}
			defer shutdownTracing(context.Background())
			cfg.TracerProvider = tp
			n, err := host.Start(ctx, cfg)
			if err != nil {
				return err
			}
			<-ctx.Done()
			log.Info("leaving the cluster")
			if err := n.Close(); err != nil {
				return fmt.Errorf("stopping: %v", err)
			}
			log.Info("stopped")
			return nil
		},
	}
	cmd.Flags().StringVar(&bind, "bind", "127.0.0.1:7946", "gossip address, HOST:PORT: the member's address")
	cmd.Flags().StringVar(&api, "api", "127.0.0.1:8080", "management API listen address, HOST:PORT")
	cmd.Flags().StringVar(&transport, "transport", "", "node-to-node address, HOST:PORT (default: the bind port + 1)")
	cmd.Flags().StringSliceVar(&join, "join", nil, "gossip addresses of members to join, HOST:PORT,... (none: start a new cluster)")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "directory for modules and the compilation cache (default .shardhost/node-HOST-PORT)")
	nf.add(cmd, "lan")
	return cmd
}
