package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// The transfer workload (Options.Transfers): clients move units between accounts, each
// transfer a "send ID" ask to the source account, whose outbox tells "credit" to the
// destination once the source's record is durable (effectively-once delivery between
// entities, docs/delivery.md). After the heal every account is read until the units
// sent equal the units received (the outboxes drained), and the totals are checked:
// received = sent (no transfer lost, none doubled), sent at least the acknowledged
// transfers and at most the acknowledged and ambiguous ones.

// accountIDs are the transfer workload's accounts.
var accountIDs = []string{"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"}

// transferSettle bounds the final wait for the outboxes to drain.
const transferSettle = 60 * time.Second

// transfers counts the transfer workload's operations.
type transfers struct {
	mu                         sync.Mutex
	ops, acked, ambiguous, bad int
}

// runTransfers asks transfers against random members until ctx ends.
func (c *Cluster) runTransfers(ctx context.Context, r *rand.Rand, tr *transfers) {
	for ctx.Err() == nil {
		targets := c.targets()
		if len(targets) > 0 {
			m := targets[r.IntN(len(targets))]
			from := accountIDs[r.IntN(len(accountIDs))]
			to := accountIDs[r.IntN(len(accountIDs))]
			octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
			_, err := c.askOn(octx, m, typeAccount, from, "send "+to)
			cancel()
			tr.mu.Lock()
			tr.ops++
			switch {
			case err == nil:
				tr.acked++
			case errors.Is(err, sharding.ErrNotDelivered):
			default:
				tr.ambiguous++
			}
			tr.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(5+r.IntN(20)) * time.Millisecond):
		}
	}
}

// askOn asks typ/id msg on member m.
func (c *Cluster) askOn(ctx context.Context, m *member, typ, id, msg string) (string, error) {
	c.mu.Lock()
	if m.state != stateRunning {
		c.mu.Unlock()
		return "", errors.New("member not running")
	}
	sh := m.sh
	c.mu.Unlock()
	r, err := sh.Ask(ctx, typ, id, []byte(msg))
	return string(r.Payload), err
}

// checkTransfers reads every account until the units sent equal those received or
// transferSettle passes, and returns the violations of conservation it finds; trouble
// says why it could not read them all (no member runs, an account unavailable): not a
// violation, a harness error, as the other final reads skip a cluster without members.
func (c *Cluster) checkTransfers(ctx context.Context, tr *transfers) (violations []string, trouble string) {
	deadline := time.Now().Add(transferSettle)
	var sent, received int
	var last error
	for {
		sent, received, last = 0, 0, nil
		targets := c.targets()
		for i, id := range accountIDs {
			if len(targets) == 0 {
				last = errors.New("no member runs")
				break
			}
			actx, cancel := context.WithTimeout(ctx, opTimeout)
			out, err := c.askOn(actx, targets[i%len(targets)], typeAccount, id, "get")
			cancel()
			var s, rc int
			if err == nil {
				_, err = fmt.Sscanf(out, "%d %d", &s, &rc)
			}
			if err != nil {
				last = fmt.Errorf("account %s: %w", id, err)
				break
			}
			sent, received = sent+s, received+rc
		}
		if (last == nil && sent == received) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	if last != nil {
		return nil, "transfers: the accounts could not be read: " + last.Error()
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []string
	switch {
	case received < sent:
		out = append(out, fmt.Sprintf("transfers lost: %d units sent, %d received (after %v)", sent, received, transferSettle))
	case received > sent:
		out = append(out, fmt.Sprintf("transfers doubled: %d units sent, %d received", sent, received))
	}
	if sent < tr.acked {
		out = append(out, fmt.Sprintf("acknowledged transfers lost: %d acknowledged, %d sent", tr.acked, sent))
	}
	if sent > tr.acked+tr.ambiguous {
		out = append(out, fmt.Sprintf("transfers that never were: %d sent, %d acknowledged and %d ambiguous", sent, tr.acked, tr.ambiguous))
	}
	return out, ""
}

// transferSummary is the workload's line for a result.
func (tr *transfers) summary() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strconv.Itoa(tr.ops) + " transfers, " + strconv.Itoa(tr.acked) + " acknowledged, " + strconv.Itoa(tr.ambiguous) + " ambiguous"
}
