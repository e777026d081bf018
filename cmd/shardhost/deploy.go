package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/sharding"
)

func newDeployCommand(g *globals) *cobra.Command {
	var typ, role, allocation, checkpoint, strategy, delivery string
	var shards, maxActive, maxRetries, logLines int
	var history string
	var passivateAfter, retention, stateTTL time.Duration
	var remember, reset bool
	var canary, canaryIDs string
	var canaryRate float64
	var canaryWindow time.Duration
	var canaryMin int
	var egressQuery, routeQuery func(url.Values)
	cmd := &cobra.Command{
		Use:   "deploy [--type NAME] [--shards N] [--passivate-after D] [--max-active N] [--passivation-strategy S] [--checkpoint P] [--delivery D] [--history N|DURATION|all] [--idempotency-retention D] [--state-ttl D] [--max-retries N] [--remember-entities] [--role R] [--allocation A] [--egress PATTERN,...] [--egress-timeout D] [--egress-max-response BYTES] [--egress-rate R] [--http-route /PREFIX/{id}/... [--public /PREFIX/{id}/...]] [--http-max-body BYTES] [--http-rate R] [--reset-settings] [--canary P% | --canary-ids A,B [--canary-max-failure-rate R [--canary-window D]]] FILE.wasm...",
		Short: "Deploy an entity module as an entity type, on every member",
		Long: `deploy sends FILE.wasm to a member, which gives it to every member.

It returns once every member has validated the module (on wazero's interpreter), stored
it and started the type: entities answer from then on. Each member then compiles the
module in the background (seconds for a Go guest); until then its entities run on the
interpreter, then on the compiled code. 'shardhost modules' shows each member's engine.

--type names the entity type. Without it, each FILE.wasm is deployed as the type named
by its file name (counter.wasm: counter), with the same settings: a container without a
shell deploys several modules with one command.

A redeploy of a type keeps the settings not given on the command line (--reset-settings
starts from the defaults instead). The output lists every setting, the ones this
deployment changed marked with * and their previous value.

--canary 10% (or --canary-ids a,b,c) deploys a new version of a type as a canary: a
stable share of the entity IDs, by hash (or the IDs listed), activate on it; the others
stay on the type's current version until 'shardhost rollout promote' or 'rollout
rollback'. With --canary-max-failure-rate R, a member rolls the canary back by itself
when more than that share (0 to 1) of the canary's messages fail (trap, deadline, guest
error) over --canary-window (default 1m), once --canary-min-messages (default 10) ran
(docs/sharding.md, "Canary rollouts").`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if typ != "" && len(args) > 1 {
				return fmt.Errorf("--type names one entity type: give one FILE.wasm, or leave --type out to name each type by its file")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			// Only the flags given go in the query: a redeploy keeps the type's other
			// settings (--reset-settings: the defaults instead).
			q := url.Values{}
			f := cmd.Flags()
			if f.Changed("shards") {
				q.Set("shards", strconv.Itoa(shards))
			}
			if f.Changed("role") {
				q.Set("role", role)
			}
			if f.Changed("allocation") {
				q.Set("allocation", allocation)
			}
			if f.Changed("checkpoint") {
				q.Set("checkpoint", checkpoint)
			}
			if f.Changed("delivery") {
				q.Set("delivery", delivery)
			}
			if f.Changed("history") {
				q.Set("history", history)
			}
			if f.Changed("max-retries") {
				q.Set("max_retries", strconv.Itoa(maxRetries))
			}
			if f.Changed("idempotency-retention") {
				q.Set("idempotency_retention", retention.String())
			}
			if f.Changed("passivate-after") {
				q.Set("passivate_after", passivateAfter.String())
			}
			if f.Changed("max-active") {
				q.Set("max_active", strconv.Itoa(maxActive))
			}
			if f.Changed("passivation-strategy") {
				q.Set("passivation_strategy", strategy)
			}
			if f.Changed("state-ttl") {
				if stateTTL < 0 || stateTTL > 0 && stateTTL < sharding.MinStateTTL {
					return fmt.Errorf("--state-ttl %v: want 0 (keep state for good) or at least %v", stateTTL, sharding.MinStateTTL)
				}
				q.Set("state_ttl", stateTTL.String())
			}
			if f.Changed("log-lines") {
				q.Set("log_lines", strconv.Itoa(logLines))
			}
			if f.Changed("remember-entities") {
				q.Set("remember_entities", strconv.FormatBool(remember))
			}
			egressQuery(q)
			routeQuery(q)
			if reset {
				q.Set("reset_settings", "true")
			}
			canaryFlags := map[string]func(){
				"canary":                  func() { q.Set("canary", canary) },
				"canary-ids":              func() { q.Set("canary_ids", canaryIDs) },
				"canary-max-failure-rate": func() { q.Set("canary_max_failure_rate", strconv.FormatFloat(canaryRate, 'g', -1, 64)) },
				"canary-window":           func() { q.Set("canary_window", canaryWindow.String()) },
				"canary-min-messages":     func() { q.Set("canary_min_messages", strconv.Itoa(canaryMin)) },
			}
			for name, set := range canaryFlags {
				if f.Changed(name) {
					set()
				}
			}
			if (f.Changed("canary") || f.Changed("canary-ids")) && len(args) > 1 {
				return fmt.Errorf("a canary is of one entity type: give one FILE.wasm")
			}
			if f.Changed("canary") && f.Changed("canary-ids") {
				return fmt.Errorf("--canary and --canary-ids exclude each other")
			}
			if f.Changed("canary") {
				if _, err := host.ParseCanaryShare(canary); err != nil {
					return fmt.Errorf("--canary %q: want a percentage above 0 and at most 100, such as 10%%", canary)
				}
			}
			for _, file := range args {
				name := typ
				if name == "" {
					name = strings.TrimSuffix(filepath.Base(file), ".wasm")
				}
				if err := deployModule(cmd.OutOrStdout(), c, name, file, q); err != nil {
					if len(args) > 1 {
						return fmt.Errorf("%s: %w", file, err)
					}
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "name of the entity type (default: each FILE.wasm's name without .wasm)")
	cmd.Flags().IntVar(&shards, "shards", 0, "number of shards of a new type (default 100; fixed once deployed)")
	cmd.Flags().DurationVar(&passivateAfter, "passivate-after", 0, "passivate an entity idle this long (0: never)")
	cmd.Flags().IntVar(&maxActive, "max-active", 0, "active entities per member at most; the one --passivation-strategy chooses is passivated (0: no cap)")
	cmd.Flags().StringVar(&strategy, "passivation-strategy", "", "whom --max-active passivates: lru (default: the least recently used), lfu (the least frequently used) or w-tinylfu (a window LRU and a frequency-filtered segmented LRU; docs/sharding.md)")
	cmd.Flags().IntVar(&logLines, "log-lines", 0, "log lines (stdout, stderr, log calls) each entity keeps for shardhost logs, at most 100,000 (0: 1,000)")
	cmd.Flags().StringVar(&checkpoint, "checkpoint", "", "how entity state survives a crash: journal (default: every acknowledged message is durable), passivation, every-message or every:N (docs/sharding.md)")
	cmd.Flags().StringVar(&delivery, "delivery", "", "how the type's entities send to other entities: effectively-once (default: under the journal, tells leave from an outbox after their record, retried until acknowledged, and receivers drop repeats) or at-most-once (docs/delivery.md)")
	cmd.Flags().IntVar(&maxRetries, "max-retries", 0, "attempts of a tell that keeps failing (a trap, the deadline) before its entity pauses on it (default 3; 0: never pause, a dead letter at once)")
	cmd.Flags().DurationVar(&stateTTL, "state-ttl", 0, "delete the state (snapshot, journal; not reminders) of an entity that handled no message for this long, such as 720h; at least 1m (0: keep it for good; docs/state.md)")
	cmd.Flags().DurationVar(&retention, "idempotency-retention", 0, "how long an entity remembers a message's idempotency key and reply (default 24h)")
	cmd.Flags().StringVar(&history, "history", "", "journal history kept behind each base, for history, revert and fork: N records, a DURATION such as 24h, or all (every record from each entity's first; a transparent state upgrades by replaying them) (default 1000 records; 0 keeps none)")
	cmd.Flags().BoolVar(&remember, "remember-entities", false, "restart a shard's entities wherever the shard goes")
	cmd.Flags().StringVar(&role, "role", "", "only members with this role host the type (others route its messages)")
	cmd.Flags().StringVar(&allocation, "allocation", "", "shard allocation: least-shard (default) or priority")
	cmd.Flags().StringVar(&canary, "canary", "", "deploy as a canary for this share of the entity IDs, by hash (such as 10%)")
	cmd.Flags().StringVar(&canaryIDs, "canary-ids", "", "deploy as a canary for these entity IDs (comma-separated)")
	cmd.Flags().Float64Var(&canaryRate, "canary-max-failure-rate", 0, "roll the canary back by itself when more than this share (0 to 1) of its messages fail over --canary-window (0: never)")
	cmd.Flags().DurationVar(&canaryWindow, "canary-window", 0, "the window of --canary-max-failure-rate (default 1m)")
	cmd.Flags().IntVar(&canaryMin, "canary-min-messages", 0, "messages the canary must have run in the window before it can roll back by itself (default 10)")
	egressQuery = addEgressFlags(cmd)
	routeQuery = addHTTPRouteFlags(cmd)
	cmd.Flags().BoolVar(&reset, "reset-settings", false, "on a redeploy, start from the default settings instead of the type's current ones")
	return cmd
}

// deployModule deploys the module in file as the entity type name, with the settings of
// query q, and prints the result on out. It fails when a member is not ready.
func deployModule(out io.Writer, c *client, name, file string, q url.Values) error {
	wasm, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	path := "/v1/types/" + url.PathEscape(name) + "?" + q.Encode()
	r, err := c.do("POST", path, wasm)
	if err != nil {
		return err
	}
	var res host.DeployResult
	if err := json.Unmarshal(r.body, &res); err != nil {
		return fmt.Errorf("the API's reply is not what this client expects: %v", err)
	}
	if res.Unchanged {
		fmt.Fprintf(out, "unchanged: %s version %d already runs this module (sha256 %s) with these settings\n",
			res.Type.Name, res.Type.Version, res.Type.Digest[:16])
		printSettings(out, res)
		return nil
	}
	fmt.Fprintf(out, "deployed %s version %d (%d bytes, sha256 %s)\n",
		res.Type.Name, res.Type.Version, res.Type.Size, res.Type.Digest[:16])
	if r := res.Type.Rollout; r != nil {
		fmt.Fprintf(out, "canary: %s on version %d, the others stay on version %d (shardhost rollout status|promote|rollback --type %s)\n",
			canaryShare(*r), r.Canary, r.Stable, res.Type.Name)
		if m := res.CanaryMoved; m != nil {
			fmt.Fprintf(out, "  %d of %d active entities of the canary moved to it\n", m.Upgraded, m.Upgradable)
			for _, e := range append(m.Failed, m.Cannot...) {
				fmt.Fprintf(out, "  stays on version %d: %s: %s\n", e.Version, e.ID, oneLine(e.Reason))
			}
		}
	}
	printSettings(out, res)
	printOlder(out, res)
	if res.Activation != "" {
		fmt.Fprintf(out, "activation: %s\n", res.Activation)
	}
	if failed := printMembers(out, res.Members, "ready", "NOT READY"); failed > 0 {
		return fmt.Errorf("%d of %d members are not ready; they retry when they learn of the type by gossip", failed, len(res.Members))
	}
	return nil
}

// printMembers prints each member's outcome of a deploy or an undeploy (ok, or failed
// and why) and returns how many failed.
func printMembers(out io.Writer, members []host.MemberDeployment, ok, failed string) int {
	n := 0
	for _, m := range members {
		if m.Ready {
			fmt.Fprintf(out, "  %s %s\n", m.Node, ok)
		} else {
			n++
			fmt.Fprintf(out, "  %s %s: %s\n", m.Node, failed, oneLine(m.Error))
		}
	}
	return n
}

// printSettings lists a deployment's settings, marking what it changed.
func printSettings(out io.Writer, res host.DeployResult) {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	for _, s := range res.Settings {
		v := s.Value
		switch {
		case v == "" && s.Name == "role":
			v = "(every member)"
		case v == "0" && s.Name == "max-active":
			v = "0 (no cap)"
		case v == "0s" && s.Name == "passivate-after":
			v = "0s (never)"
		}
		if was, ok := res.Changed[s.Name]; ok {
			if was == "" {
				was = "none"
			}
			fmt.Fprintf(tw, "  * %s\t%s\t(was %s)\n", s.Name, v, was)
		} else {
			fmt.Fprintf(tw, "    %s\t%s\t\n", s.Name, v)
		}
	}
	tw.Flush()
}

// printOlder says how many entities stay on earlier versions after a deploy, and why.
func printOlder(out io.Writer, res host.DeployResult) {
	active, transparent, passivated := 0, 0, 0
	for _, v := range res.Older {
		active += v.Active
		transparent += v.ActiveTransparent
		passivated += v.Passivated
	}
	partial := ""
	if len(res.OlderErrors) > 0 {
		partial = " (partial count: " + oneLine(strings.Join(res.OlderErrors, "; ")) + ")"
	}
	if active+passivated == 0 {
		if len(res.OlderErrors) > 0 {
			fmt.Fprintf(out, "entities on older versions: none counted%s\n", partial)
		}
		return
	}
	fmt.Fprintf(out, "%d entities stay on older versions%s:\n", active+passivated, partial)
	for _, v := range res.Older {
		name := fmt.Sprintf("version %d", v.Version)
		if v.Version == 0 {
			name = "module " + v.Digest[:16] + " (no longer listed)"
		}
		fmt.Fprintf(out, "  %s: %d active (%d with transparent state), %d passivated with transparent state\n",
			name, v.Active, v.ActiveTransparent, v.Passivated)
	}
	if explicit := active - transparent; explicit > 0 {
		fmt.Fprintf(out, "  %d active with explicit state take version %d at their next activation (passivation, handoff)\n", explicit, res.Type.Version)
	}
	if t := transparent + passivated; t > 0 {
		fmt.Fprintf(out, "  %d whose state is a transparent snapshot keep the module their state was made by (docs/sharding.md, \"Module versions of entities\")\n", t)
	}
}
