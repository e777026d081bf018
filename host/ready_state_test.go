package host

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
)

// readinessOf reads GET /ready?state=state ("" for plain /ready).
func readinessOf(t *testing.T, n *Node, state string) (int, Readiness) {
	t.Helper()
	u := "http://" + n.APIAddr() + "/ready"
	if state != "" {
		u += "?state=" + state
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rd Readiness
	if resp.StatusCode != http.StatusBadRequest {
		if err := json.NewDecoder(resp.Body).Decode(&rd); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, rd
}

// TestReadyStateAlone: the first member of a new cluster admits itself with its data
// directory: /ready, /ready?state=admitted and /ready?state=settled all answer 200; an
// unknown state condition is a bad request.
func TestReadyStateAlone(t *testing.T) {
	n := startNodes(t, 1, nil)[0]
	testutil.Eventually(t, 15*time.Second, "/ready to answer 200", func() bool { s, _ := readinessOf(t, n, ""); return s == 200 })
	for _, state := range []string{readyAdmitted, readySettled} {
		if s, rd := readinessOf(t, n, state); s != 200 || rd.Status != "ready" {
			t.Fatalf("/ready?state=%s alone: %d %+v", state, s, rd)
		}
	}
	if s, _ := readinessOf(t, n, "joined"); s != http.StatusBadRequest {
		t.Fatalf("/ready?state=joined: %d, want 400", s)
	}
}

// TestReadyStateFollowsTheRing: the state conditions of /ready follow the state store's
// ring, and plain /ready ignores it. Five members form a cluster and two are killed:
// the three others down them and retain both in their rings, more than a handover
// round lets go of (one of three replicas), so the rings stay so until an operator
// forgets them. The three are ready and admitted, not settled (the reason names the
// retained members). A sixth member that joins is ready, but not admitted (no round
// can admit it), so neither admitted nor settled. Once the two are forgotten, a round
// admits the live set: all four are admitted and settled.
func TestReadyStateFollowsTheRing(t *testing.T) {
	nodes := startNodes(t, 5, nil)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Self().Address)
	}
	slices.Sort(addrs)
	testutil.EventuallyNil(t, 60*time.Second, "every ring settled over the five", func() error {
		for _, n := range nodes {
			if s, rd := readinessOf(t, n, readySettled); s != 200 {
				return fmt.Errorf("%s: /ready?state=settled: %d %s", n.Self().Address, s, rd.Reason)
			}
			if r, _ := n.StateRing(); !slices.Equal(r.Admitted, addrs) {
				return fmt.Errorf("%s: ring %+v", n.Self().Address, r)
			}
		}
		return nil
	})
	gone := []string{nodes[3].Self().Address, nodes[4].Self().Address}
	slices.Sort(gone)
	nodes[3].Kill()
	nodes[4].Kill()
	kept := nodes[:3]
	waitMembers(t, kept)
	testutil.EventuallyNil(t, 30*time.Second, "the kept members to retain the two killed", func() error {
		for _, n := range kept {
			if r, _ := n.StateRing(); !slices.Equal(r.Retained, gone) {
				return fmt.Errorf("%s: ring %+v", n.Self().Address, r)
			}
			if s, rd := readinessOf(t, n, ""); s != 200 {
				return fmt.Errorf("%s: /ready: %d %s", n.Self().Address, s, rd.Reason)
			}
		}
		return nil
	})
	// Two retained of three replicas: no round runs, the rings stay as they are.
	for _, n := range kept {
		if s, rd := readinessOf(t, n, readyAdmitted); s != 200 {
			t.Fatalf("%s: /ready?state=admitted with two members retained: %d %+v", n.Self().Address, s, rd)
		}
		s, rd := readinessOf(t, n, readySettled)
		if s != http.StatusServiceUnavailable || !strings.Contains(rd.Reason, "retained: "+strings.Join(gone, ",")) {
			t.Fatalf("%s: /ready?state=settled with two members retained: %d %+v", n.Self().Address, s, rd)
		}
	}

	joiner := startNode(t, []string{kept[0].Self().Address}, nil)
	all := append(slices.Clone(kept), joiner)
	waitMembers(t, all)
	testutil.Eventually(t, 15*time.Second, "the joiner's /ready to answer 200", func() bool { s, _ := readinessOf(t, joiner, ""); return s == 200 })
	for _, state := range []string{readyAdmitted, readySettled} {
		s, rd := readinessOf(t, joiner, state)
		if s != http.StatusServiceUnavailable || !strings.Contains(rd.Reason, "not admitted this member") {
			t.Fatalf("the joiner's /ready?state=%s while no round can admit it: %d %+v (ring %+v)", state, s, rd, must(joiner.StateRing()))
		}
	}
	for _, n := range kept {
		s, rd := readinessOf(t, n, readySettled)
		if s != http.StatusServiceUnavailable || !strings.Contains(rd.Reason, "joining: "+joiner.Self().Address) {
			t.Fatalf("%s: /ready?state=settled with a member joining: %d %+v", n.Self().Address, s, rd)
		}
	}

	for _, a := range gone {
		if _, err := kept[0].ForgetStateMember(context.Background(), a); err != nil {
			t.Fatalf("forgetting %s: %v", a, err)
		}
	}
	testutil.EventuallyNil(t, 60*time.Second, "every member admitted and settled", func() error {
		for _, n := range all {
			for _, state := range []string{readyAdmitted, readySettled} {
				if s, rd := readinessOf(t, n, state); s != 200 {
					return fmt.Errorf("%s: /ready?state=%s: %d %s", n.Self().Address, state, s, rd.Reason)
				}
			}
		}
		return nil
	})
}

// must returns v, ignoring ok.
func must[T any](v T, _ bool) T { return v }
