package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/sharding"
)

// devNode is where one member of the dev cluster listens: gossip, node-to-node frames
// ("": the gossip port + 1) and the API.
type devNode struct{ bind, transport, api string }

// devNodes are the addresses of the local cluster shardhost dev starts.
var devNodes = []devNode{
	{bind: "127.0.0.1:7946", api: "127.0.0.1:8080"},
	{bind: "127.0.0.1:7948", api: "127.0.0.1:8081"},
	{bind: "127.0.0.1:7950", api: "127.0.0.1:8082"},
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
interrupted. Its timing profile (--gossip-profile dev) lets the members ride out the
pauses of a busy machine, and the demo sends an ask again when it fails on such a pause.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("log-level") {
				g.logLevel = "warn"
			}
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			modules, err := filepath.Glob(filepath.Join(modulesDir, "*.wasm"))
			if err != nil || len(modules) == 0 {
				return fmt.Errorf("no modules (*.wasm) in %s: build them with make examples, or pass --modules DIR", modulesDir)
			}
			sort.Strings(modules)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			d := devRun{nodes: devNodes, modules: modules, dataDir: dataDir, demo: demo, retry: demoRetry,
				flags: &nf, log: log, out: cmd.OutOrStdout()}
			return d.run(ctx)
		},
	}
	cmd.Flags().StringVar(&modulesDir, "modules", filepath.Join("bin", "wasm"), "directory of entity modules to deploy: NAME.wasm becomes type NAME")
	cmd.Flags().StringVar(&dataDir, "data-dir", filepath.Join(".shardhost", "dev"), "directory for the three nodes' data")
	cmd.Flags().BoolVar(&demo, "demo", true, "run the demo against the counter entity after start")
	nf.add(cmd, profileDev)
	return cmd
}

// devRun is one run of shardhost dev.
type devRun struct {
	nodes   []devNode
	modules []string // the .wasm files to deploy, each as the type its name names
	dataDir string   // node-N below it is member N's
	demo    bool
	retry   retryPolicy // of the demo's asks
	flags   *nodeFlags
	log     *slog.Logger
	out     io.Writer
}

// run starts the members, deploys the modules, runs the demo and serves until ctx ends;
// it returns nil then. Errors: a member that does not start, a module that does not
// deploy, a demo ask that fails other than transiently or past its retries.
func (d devRun) run(ctx context.Context) error {
	out := d.out
	var nodes []*host.Node
	defer func() {
		for i := len(nodes) - 1; i >= 0; i-- {
			nodes[i].Close()
		}
	}()
	for i, addr := range d.nodes {
		cfg, err := d.flags.config(d.log)
		if err != nil {
			return err
		}
		cfg.BindAddr, cfg.TransportAddr, cfg.APIAddr = addr.bind, addr.transport, addr.api
		cfg.DataDir = filepath.Join(d.dataDir, fmt.Sprintf("node-%d", i+1))
		cfg.Logger = d.log.With("node", addr.bind)
		if i > 0 {
			cfg.Join = []string{nodes[0].Self().Address}
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
	apis := make([]string, len(nodes))
	for i, n := range nodes {
		apis[i] = n.APIAddr()
	}

	c := &client{base: "http://" + apis[0], http: httpClient()}
	var types []string
	for _, path := range d.modules {
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
	if d.demo && contains(types, "counter") {
		if err := runDemo(ctx, out, apis, d.retry); err != nil {
			return err
		}
	}
	api := ""
	if apis[0] != devNodes[0].api {
		api = " --api " + apis[0]
	}
	fmt.Fprintf(out, `
serving until interrupted (Ctrl-C). Try, in another terminal:
  bin/shardhost ask%s counter/alice "inc 5"
  bin/shardhost ask --api %s counter/alice get
  bin/shardhost members%s
  bin/shardhost shards%s
`, api, apis[len(apis)-1], api, api)
	<-ctx.Done()
	fmt.Fprintln(out, "stopping")
	return nil
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

// runDemo sends messages to a few counters through the APIs of different members (apis)
// and prints where each entity was created and what it replied. An ask that fails on a
// transient condition is sent again (askRetrying).
func runDemo(ctx context.Context, out io.Writer, apis []string, retry retryPolicy) error {
	fmt.Fprintln(out, "\ndemo: each counter gets \"inc N\" through one node and \"get\" through the next")
	ids := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	for i, id := range ids {
		incVia, getVia := apis[i%len(apis)], apis[(i+1)%len(apis)]
		inc := fmt.Sprintf("inc %d", i+1)
		r1, err := askRetrying(ctx, out, retry, incVia, "counter", id, inc)
		if err != nil {
			return fmt.Errorf("demo: %s: %v", id, err)
		}
		r2, err := askRetrying(ctx, out, retry, getVia, "counter", id, "get")
		if err != nil {
			return fmt.Errorf("demo: %s: %v", id, err)
		}
		fmt.Fprintf(out, "  counter/%-6s created on %s   %q via %s -> %s   \"get\" via %s -> %s\n",
			id, r1.header.Get(host.NodeHeader), inc, incVia, r1.body, getVia, r2.body)
	}
	return nil
}

// retryPolicy bounds how often, and after what waits, an ask that failed on a transient
// condition is sent again.
type retryPolicy struct {
	attempts int           // tries in all, the first one included
	backoff  time.Duration // the wait before the second try; it doubles before each next one
	maxWait  time.Duration // the longest wait between two tries
}

// demoRetry: eight tries, with about 30 s of waits between them (0.5, 1, 2, 4, 8, 8 and
// 8 s), besides each ask's own time: enough for a lapsed hosting lease to come back (a
// heartbeat round trip with a majority and a converged view, once the machine lets the
// members run) or a shard's home to be resolved (sharding's ResolveTimeout, 10 s).
var demoRetry = retryPolicy{attempts: 8, backoff: 500 * time.Millisecond, maxWait: 8 * time.Second}

// askRetrying asks TYPE/ID (typ, id) with payload through the API at api. When the ask
// fails on a transient condition it says so on one line of out and sends the ask again
// after a wait, at most p.attempts times in all. Errors: a failure that is not transient,
// the last failure once the tries are spent, or ctx's error when it ends during a wait.
// An ask that timed out may have been handled all the same, so a retried "inc" may count
// twice: the line names the failure.
func askRetrying(ctx context.Context, out io.Writer, p retryPolicy, api, typ, id, payload string) (response, error) {
	c := &client{base: "http://" + api, http: httpClient()}
	wait := p.backoff
	for try := 1; ; try++ {
		r, err := c.do("POST", "/v1/ask?"+entityQuery(typ, id), []byte(payload))
		if err == nil || !transient(err) || try >= p.attempts {
			return r, err
		}
		fmt.Fprintf(out, "  %s/%s: %q via %s failed (%s); sending it again in %v (try %d of %d)\n",
			typ, id, payload, api, oneLine(err.Error()), wait, try+1, p.attempts)
		select {
		case <-ctx.Done():
			return response{}, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, p.maxWait)
	}
}

// transient reports whether an ask's failure may pass when it is sent again. These are
// the API's codes not-delivered (the shard's home is being resolved, is handed off or
// has none; its member is leaving or gone), outcome-unknown (the member's hosting lease
// lapsed: no recent contact with a majority; the ask timed out), unavailable (a member
// stopping), overloaded (a buffer or mailbox was full), state-not-saved and
// state-not-loaded (the entity state store did not answer in time), and a request to
// the API that timed out. An entity's own error, an unknown entity type or a bad
// request is not transient.
func transient(err error) bool {
	var ae *apiError
	if errors.As(err, &ae) {
		switch ae.code {
		case sharding.CodeNotDelivered, sharding.CodeOutcomeUnknown, sharding.CodeUnavailable, sharding.CodeOverloaded,
			sharding.CodeStateNotSaved, sharding.CodeStateNotLoaded:
			return true
		}
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
