package sharding

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
)

// An ask's failure says whether the message may have been handled: not delivered (it
// never reached its entity; sending it again is safe) or of an unknown outcome (it
// may have been handled; only an idempotency key makes a retry safe).

// hostedElsewhere returns an ID of typ whose entity the member other hosts, asking
// through asker (the asks activate the entities they try).
func hostedElsewhere(t *testing.T, asker, other *testNode, typ string) string {
	t.Helper()
	for i := range 200 {
		id := "o" + strconv.Itoa(i)
		r, err := ask(t, asker, typ, id, "get")
		if err != nil {
			t.Fatal(err)
		}
		if r.Node == other.addr() {
			return id
		}
	}
	t.Fatalf("no entity of 200 is hosted on %s", other.name)
	return ""
}

// checkOutcome fails the test unless err is of the outcome want (CodeNotDelivered or
// CodeOutcomeUnknown) and of that alone, as errors.Is and ErrorCode see it, and
// matches every error of also.
func checkOutcome(t *testing.T, what string, err error, want string, also ...error) {
	t.Helper()
	notDelivered, unknown := errors.Is(err, ErrNotDelivered), errors.Is(err, ErrOutcomeUnknown)
	ok := err != nil && ErrorCode(err) == want && notDelivered == (want == CodeNotDelivered) && unknown == (want == CodeOutcomeUnknown)
	for _, a := range also {
		ok = ok && errors.Is(err, a)
	}
	if !ok {
		t.Fatalf("%s: %v (code %q, not delivered %v, unknown %v), want %s matching %v", what, err, ErrorCode(err),
			notDelivered, unknown, want, also)
	}
}

// TestAnAskToAMemberGoneIsNotDelivered: the member hosting an entity crashes; until
// membership drops it, the asker's region still routes the entity's messages there,
// and the request cannot be sent (no transport at its address, as a TCP dial refused):
// the ask fails at once as not delivered, not at its deadline as a timeout.
func TestAnAskToAMemberGoneIsNotDelivered(t *testing.T) {
	tc := newTestCluster(t, 3)
	asker, host := tc.nodes[0], tc.nodes[1]
	id := hostedElsewhere(t, asker, host, "counter")
	tc.stop(host, false)

	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := asker.sharding.Ask(ctx, "counter", id, []byte("inc"))
		cancel()
		checkOutcome(t, "an ask to the member gone", err, CodeNotDelivered, ErrShardUnavailable)
		if errors.Is(err, ErrAskTimeout) {
			t.Fatalf("an ask to the member gone: %v, want no timeout", err)
		}
		var re *RemoteError
		if !errors.As(err, &re) || re.Node != host.addr() {
			t.Fatalf("an ask to the member gone: %v, want a RemoteError naming %s", err, host.addr())
		}
	}
}

// TestAnAskAMemberNeverAnswersHasAnUnknownOutcome: the member hosting an entity gets
// the message, and no reply comes back before the ask's deadline: because the entity
// is still on it, or because the link broke after the message went, when the entity
// did handle it (its count shows it once the link is back). Either way the asker
// cannot tell, and says so.
func TestAnAskAMemberNeverAnswersHasAnUnknownOutcome(t *testing.T) {
	tc := newTestCluster(t, 2)
	asker, host := tc.nodes[0], tc.nodes[1]
	id := hostedElsewhere(t, asker, host, "counter")
	entered, release := make(chan string, 2), make(chan struct{})
	host.factory.onReceive = func(key, msg string) {
		if key == "counter/"+id && (msg == "block" || msg == "inc") {
			entered <- msg
			<-release
		}
	}

	// The entity holds the message past the ask's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := asker.sharding.Ask(ctx, "counter", id, []byte("block"))
	cancel()
	checkOutcome(t, "an ask the entity holds", err, CodeOutcomeUnknown, ErrAskTimeout)
	<-entered
	release <- struct{}{}

	// The entity handles it, but the link breaks before its reply leaves.
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := asker.sharding.Ask(ctx, "counter", id, []byte("inc"))
		done <- err
	}()
	<-entered
	tc.cluster.Network.Frames.Disconnect(asker.messenger.LocalAddr(), host.messenger.LocalAddr())
	close(release)
	checkOutcome(t, "an ask whose reply was lost", <-done, CodeOutcomeUnknown, ErrAskTimeout)
	tc.cluster.Network.Frames.Reconnect(asker.messenger.LocalAddr(), host.messenger.LocalAddr())
	if got := mustAsk(t, asker, "counter", id, "get"); got != "1" {
		t.Fatalf("count after the ask whose reply was lost: %s, want 1 (it was handled)", got)
	}
}

// TestAnAskThatNeverLeftItsBufferIsNotDelivered: an ask whose deadline passes while its
// message waits on the asker's member (here for its entity type, which the resolver
// holds back) is not delivered: the message is dropped when it leaves the buffer, and
// never reaches the entity. One that waited in the entity's mailbox has an unknown
// outcome.
func TestAnAskThatNeverLeftItsBufferIsNotDelivered(t *testing.T) {
	tc := newTestCluster(t, 1)
	n := tc.nodes[0]
	n.types.block, n.types.entered = make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := n.sharding.Ask(ctx, "counter", "b", []byte("inc"))
	cancel()
	checkOutcome(t, "an ask that waited for its type", err, CodeNotDelivered, ErrAskTimeout)
	close(n.types.block)
	if got := mustAsk(t, n, "counter", "b", "get"); got != "0" {
		t.Fatalf("count after the ask not delivered: %s, want 0", got)
	}

	entered, release := make(chan struct{}), make(chan struct{})
	n.factory.onReceive = func(key, msg string) {
		if key == "counter/b" && msg == "block" {
			close(entered)
			<-release
		}
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := n.sharding.Ask(context.Background(), "counter", "b", []byte("block"))
		blocked <- err
	}()
	<-entered
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = n.sharding.Ask(ctx, "counter", "b", []byte("inc"))
	cancel()
	checkOutcome(t, "an ask that waited in its entity's mailbox", err, CodeOutcomeUnknown, ErrAskTimeout)
	close(release)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
}

// TestAMessagePassedOnAndNotDeliveredHasAnUnknownOutcome: an entity handles a message
// and passes it on (ForwardTo) to an entity on a member gone: the message did not reach
// the second entity, but the first one handled it, so that a retry would run it again.
func TestAMessagePassedOnAndNotDeliveredHasAnUnknownOutcome(t *testing.T) {
	tc := newTestCluster(t, 3)
	asker, gone := tc.nodes[0], tc.nodes[1]
	target := hostedElsewhere(t, asker, gone, "counter")
	var first string
	for i := 0; first == ""; i++ {
		if r, err := ask(t, asker, "other", "f"+strconv.Itoa(i), "get"); err != nil {
			t.Fatal(err)
		} else if r.Node != gone.addr() {
			first = "f" + strconv.Itoa(i)
		}
	}
	tc.stop(gone, false)
	_, err := ask(t, asker, "other", first, "forward counter/"+target)
	checkOutcome(t, "a message passed on to a member gone", err, CodeOutcomeUnknown)
	if errors.Is(err, ErrShardUnavailable) {
		t.Fatalf("%v: matches ErrShardUnavailable, which says not delivered", err)
	}
	if got := mustAsk(t, asker, "other", first, "get"); got != "1" {
		t.Fatalf("the first entity's count: %s, want 1 (it handled the message)", got)
	}
}

// TestOutcomeCodes: the code, and errors.Is, of each kind of failure, here and across
// members (a RemoteError carrying the code).
func TestOutcomeCodes(t *testing.T) {
	notSent := fmt.Errorf("cluster: request to b: not sent: %w", cluster.ErrNotSent)
	timeout := fmt.Errorf("cluster: request to b: %w", cluster.ErrRequestTimeout)
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"no shard home", fmt.Errorf("%w: counter/3", ErrShardUnavailable), CodeNotDelivered},
		{"stopped", ErrStopped, CodeNotDelivered},
		{"routing loop", fmt.Errorf("%w: 3 hops", ErrRoutingLoop), CodeNotDelivered},
		{"expired", errExpired, CodeNotDelivered},
		{"not sent", forwardFailure("b", notSent), CodeNotDelivered},
		{"no reply", forwardFailure("b", timeout), CodeOutcomeUnknown},
		{"ask timeout", fmt.Errorf("%w: counter/a", ErrAskTimeout), CodeOutcomeUnknown},
		{"lease lapsed before the message", wrapCause(ErrShardUnavailable, "counter/a", ErrNoMajority), CodeNotDelivered},
		{"lease lapsed while it was handled", wrapCause(ErrOutcomeUnknown, "counter/a", ErrNoMajority), CodeOutcomeUnknown},
		{"passed on, not delivered", passedOnFailure(fmt.Errorf("%w: x", ErrShardUnavailable), 1), CodeOutcomeUnknown},
		{"passed on, overloaded", passedOnFailure(ErrBufferFull, 2), CodeOutcomeUnknown},
		{"passed on, the entity's error", passedOnFailure(&codedErr{CodeEntityError, "no"}, 1), CodeEntityError},
		{"buffer full", ErrBufferFull, CodeOverloaded},
		{"state not saved", wrapCause(ErrStateNotSaved, "", ErrNoMajority), CodeStateNotSaved},
	} {
		for _, err := range []error{classified(c.err), classified(&RemoteError{Code: ErrorCode(c.err), Message: c.err.Error()})} {
			if got := ErrorCode(err); got != c.want {
				t.Errorf("%s: %v has code %q, want %q", c.name, err, got, c.want)
			}
			if errors.Is(err, ErrNotDelivered) != (c.want == CodeNotDelivered) || errors.Is(err, ErrOutcomeUnknown) != (c.want == CodeOutcomeUnknown) {
				t.Errorf("%s: %v: errors.Is not delivered %v, unknown %v, want code %s", c.name, err,
					errors.Is(err, ErrNotDelivered), errors.Is(err, ErrOutcomeUnknown), c.want)
			}
		}
	}
	// An unknown outcome of a timeout is still ErrAskTimeout, here and across members;
	// one not delivered is not.
	unknown := &RemoteError{Code: CodeOutcomeUnknown, Message: "x"}
	if !errors.Is(unknown, ErrAskTimeout) || errors.Is(&RemoteError{Code: CodeNotDelivered}, ErrAskTimeout) {
		t.Error("a remote unknown outcome is not ErrAskTimeout, or a remote failure to deliver is")
	}
	if !errors.Is(classified(fmt.Errorf("%w: counter/a", ErrAskTimeout)), ErrAskTimeout) {
		t.Error("a classified ask timeout is not ErrAskTimeout")
	}
}

// TestAPassedOnFailureReachesTheAskerAsUnknown: the failure of a message an entity passed
// on reaches the ask's waiter as an unknown outcome.
func TestAPassedOnFailureReachesTheAskerAsUnknown(t *testing.T) {
	w := askWaiters.Get().(*askWaiter)
	gen := w.gen.Load()
	d := delivery{env: envelope{Forwards: 1}, ask: true, waiter: w, gen: gen}
	d.fail(fmt.Errorf("%w: counter/b", ErrShardUnavailable))
	res := <-w.ch
	if err := classified(res.err); !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrNotDelivered) {
		t.Fatalf("the asker got %v, want an unknown outcome", err)
	}
}
