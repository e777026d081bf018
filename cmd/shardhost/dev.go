package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

// devNodes are the addresses of the local cluster shardhost dev starts.
var devNodes = []struct{ bind, api string }{
	{"127.0.0.1:7946", "127.0.0.1:8080"},
	{"127.0.0.1:7948", "127.0.0.1:8081"},
	{"127.0.0.1:7950", "127.0.0.1:8082"},
}

func newDevCommand(g *globals) *cobra.Command {
	var modulesDir, dataDir string
	var demo bool
	var nf nodeFlags
	cmd := &cobra.Command{
		Use:   "dev [--modules DIR]",
		Short: "Run a local three-node cluster (API on 127.0.0.1:8080-8082) with the example entities",
		Long: `dev starts three hosts in this process (gossip on 127.0.0.1:7946, 7948 and 7950,
node-to-node on the next port up, API on 127.0.0.1:8080, 8081 and 8082), deploys every
NAME.wasm in --modules as entity type NAME, runs a short demo and serves until
interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("log-level") {
				g.logLevel = "warn"
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			modules, err := filepath.Glob(filepath.Join(modulesDir, "*.wasm"))
			if err != nil || len(modules) == 0 {
				return fmt.Errorf("no modules (*.wasm) in %s: build them with make examples, or pass --modules DIR", modulesDir)
			}
			sort.Strings(modules)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()

			var nodes []*host.Node
			defer func() {
				for i := len(nodes) - 1; i >= 0; i-- {
					nodes[i].Close()
				}
			}()
			for i, addr := range devNodes {
				cfg, err := nf.config(log)
				if err != nil {
					return err
				}
				cfg.BindAddr, cfg.APIAddr = addr.bind, addr.api
				cfg.DataDir = filepath.Join(dataDir, fmt.Sprintf("node-%d", i+1))
				cfg.Logger = log.With("node", addr.bind)
				if i > 0 {
					cfg.Join = []string{devNodes[0].bind}
				}
				shutdownTelemetry, err := observe(ctx, &cfg, addr.bind)
				if err != nil {
					return err
				}
				defer shutdownTelemetry()
				n, err := host.Start(ctx, cfg)
				if err != nil {
					return fmt.Errorf("starting node %d: %w", i+1, err)
				}
				nodes = append(nodes, n)
				fmt.Fprintf(out, "node %d: member %s, API http://%s\n", i+1, n.Self().Address, n.APIAddr())
			}
			if err := waitForMembers(ctx, nodes); err != nil {
				return err
			}
			fmt.Fprintf(out, "cluster of %d members is up\n", len(nodes))

			c := &client{base: "http://" + devNodes[0].api, http: httpClient()}
			var types []string
			for _, path := range modules {
				name := strings.TrimSuffix(filepath.Base(path), ".wasm")
				if err := host.ValidateTypeName(name); err != nil {
					fmt.Fprintf(out, "skipping %s: %v\n", path, err)
					continue
				}
				wasm, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				if _, err := c.do("POST", "/v1/types/"+name, wasm); err != nil {
					return fmt.Errorf("deploying %s: %v", path, err)
				}
				types = append(types, name)
				fmt.Fprintf(out, "deployed %s from %s (%d KiB) on every member\n", name, path, len(wasm)>>10)
			}
			if demo && contains(types, "counter") {
				if err := runDemo(out); err != nil {
					return err
				}
			}
			fmt.Fprintf(out, `
serving until interrupted (Ctrl-C). Try, in another terminal:
  bin/shardhost ask counter/alice "inc 5"
  bin/shardhost ask --api 127.0.0.1:8082 counter/alice get
  bin/shardhost members
  bin/shardhost shards
`)
			<-ctx.Done()
			fmt.Fprintln(out, "stopping")
			return nil
		},
	}
	cmd.Flags().StringVar(&modulesDir, "modules", filepath.Join("bin", "wasm"), "directory of entity modules to deploy: NAME.wasm becomes type NAME")
	cmd.Flags().StringVar(&dataDir, "data-dir", filepath.Join(".shardhost", "dev"), "directory for the three nodes' data")
	cmd.Flags().BoolVar(&demo, "demo", true, "run the demo against the counter entity after start")
	nf.add(cmd, profileDev)
	return cmd
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func waitForMembers(ctx context.Context, nodes []*host.Node) error {
	for _, n := range nodes {
		for len(n.Members()) < len(nodes) {
			select {
			case <-ctx.Done():
				return errors.New("interrupted before the cluster formed")
			case <-timeAfter(20):
			}
		}
	}
	return nil
}

// runDemo sends messages to a few counters through different nodes and prints where
// each entity was created and what it replied.
func runDemo(out io.Writer) error {
	fmt.Fprintln(out, "\ndemo: each counter gets \"inc N\" through one node and \"get\" through the next")
	ids := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	for i, id := range ids {
		incVia, getVia := devNodes[i%3].api, devNodes[(i+1)%3].api
		inc := fmt.Sprintf("inc %d", i+1)
		ci := &client{base: "http://" + incVia, http: httpClient()}
		r1, err := ci.do("POST", "/v1/ask?"+entityQuery("counter", id), []byte(inc))
		if err != nil {
			return fmt.Errorf("demo: %s: %v", id, err)
		}
		cg := &client{base: "http://" + getVia, http: httpClient()}
		r2, err := cg.do("POST", "/v1/ask?"+entityQuery("counter", id), []byte("get"))
		if err != nil {
			return fmt.Errorf("demo: %s: %v", id, err)
		}
		fmt.Fprintf(out, "  counter/%-6s created on %s   %q via %s -> %s   \"get\" via %s -> %s\n",
			id, r1.header.Get(host.NodeHeader), inc, incVia, r1.body, getVia, r2.body)
	}
	return nil
}
