package host

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/shardhost/shardhost/cluster"
)

// topicEntityLogs is the host's member-to-member request for a member's entity log
// lines: body logsRequest, reply logsReply (JSON).
const topicEntityLogs = "host/entity-logs"

// logsPollWait is how long a follower's poll of a member waits for a line before the
// member answers with none; followers see new members within about this time.
const logsPollWait = 2 * time.Second

type logsRequest struct {
	Type   string     `json:"type"`
	ID     string     `json:"id,omitempty"`
	Level  slog.Level `json:"level"`
	After  uint64     `json:"after,omitempty"`
	Epoch  int64      `json:"epoch,omitempty"`
	Limit  int        `json:"limit,omitempty"`
	WaitMs int64      `json:"wait_ms,omitempty"`
}

type logsReply struct {
	Lines []EntityLogLine `json:"lines"`
	Last  uint64          `json:"last"`
	Epoch int64           `json:"epoch"`
}

// localLogs answers a logsRequest from this member's rings. A request whose Epoch is
// not this member's (it restarted) reads from the start.
func (n *Node) localLogs(ctx context.Context, req logsRequest) logsReply {
	after := req.After
	if req.Epoch != n.rt.logs.epoch {
		after = 0
	}
	lines, last := n.rt.logs.waitSince(ctx, req.Type, req.ID, req.Level, after, req.Limit, time.Duration(req.WaitMs)*time.Millisecond)
	return logsReply{Lines: lines, Last: last, Epoch: n.rt.logs.epoch}
}

func (n *Node) handleEntityLogs(req *cluster.Request) {
	var lr logsRequest
	if err := json.Unmarshal(req.Body, &lr); err != nil {
		req.Reply(nil, fmt.Errorf("%w: malformed logs request", ErrBadRequest))
		return
	}
	lr.WaitMs = min(lr.WaitMs, logsPollWait.Milliseconds())
	if !n.owner.Go(func() {
		b, err := json.Marshal(n.localLogs(n.owner.Context(), lr))
		req.Reply(b, err)
	}) {
		req.Reply(nil, fmt.Errorf("%w: the member is stopping", ErrRuntimeClosed))
	}
}

// pollLogs asks the member m for lines (this member without a request).
func (n *Node) pollLogs(ctx context.Context, m cluster.Member, req logsRequest) (logsReply, error) {
	if m.Address == n.membership.Self().Address {
		return n.localLogs(ctx, req), nil
	}
	body, err := json.Marshal(req)
	if err != nil {
		return logsReply{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, time.Duration(req.WaitMs)*time.Millisecond+10*time.Second)
	defer cancel()
	b, err := n.messenger.Request(rctx, m.TransportAddr, topicEntityLogs, body)
	if err != nil {
		return logsReply{}, fmt.Errorf("logs of %s: %w", m.Address, err)
	}
	var rep logsReply
	if err := json.Unmarshal(b, &rep); err != nil {
		return logsReply{}, fmt.Errorf("logs of %s: %w", m.Address, err)
	}
	return rep, nil
}

// isMember reports whether the member at address is in this member's view.
func (n *Node) isMember(address string) bool {
	for _, m := range n.membership.Members() {
		if m.Address == address {
			return true
		}
	}
	return false
}

// LogQuery selects entity log lines.
type LogQuery struct {
	// Type is the entity type (required); ID one entity of it, or empty for them all.
	Type, ID string
	// Level is the lowest level returned (log/slog's; ParseLogLevel).
	Level slog.Level
	// Limit is the most lines returned, the newest; 0: every line kept.
	Limit int
}

// EntityLogs returns the kept log lines of the entity q.Type/q.ID (of every entity of
// q.Type when q.ID is empty) from every member, oldest first, and the errors of the
// members that did not answer ("ADDRESS: why"). Errors: ErrBadRequest and
// ErrUnknownType-like errors for the query.
func (n *Node) EntityLogs(ctx context.Context, q LogQuery) ([]EntityLogLine, []string, error) {
	if err := n.checkLogQuery(q); err != nil {
		return nil, nil, err
	}
	members := n.membership.Members()
	replies, errs := askEveryMember(members, func(m cluster.Member) (logsReply, error) {
		return n.pollLogs(ctx, m, logsRequest{Type: q.Type, ID: q.ID, Level: q.Level, Limit: q.Limit})
	})
	var lines []EntityLogLine
	var failed []string
	for i, r := range replies {
		if errs[i] != nil {
			failed = append(failed, errs[i].Error())
			continue
		}
		lines = append(lines, r.Lines...)
	}
	sortLines(lines)
	if q.Limit > 0 && len(lines) > q.Limit {
		lines = lines[len(lines)-q.Limit:]
	}
	return lines, failed, nil
}

func sortLines(lines []EntityLogLine) {
	slices.SortStableFunc(lines, func(a, b EntityLogLine) int { return a.Time.Compare(b.Time) })
}

func (n *Node) checkLogQuery(q LogQuery) error {
	if err := ValidateTypeName(q.Type); err != nil {
		return err
	}
	if q.ID != "" {
		if err := checkEntityID(q.ID); err != nil {
			return err
		}
	}
	if _, known := n.catalog.get(q.Type); !known {
		return n.unknownType(q.Type)
	}
	if q.Limit < 0 {
		return fmt.Errorf("%w: limit %d is negative", ErrBadRequest, q.Limit)
	}
	return nil
}

// FollowEntityLogs calls emit with the lines EntityLogs would return (at most q.Limit
// of them, the newest; 0: all kept), then with every new line of the entity (or the
// type) as members log it, until ctx is done or emit returns an error (returned). It
// polls every member, so it follows an entity that moves between members (a
// handoff, a passivation and an activation elsewhere) and, for a type, every member
// that joins. Lines of one member come in order; lines of different members in the
// order they arrive. A member that does not answer is retried; fail, when not nil, is
// told its error.
func (n *Node) FollowEntityLogs(ctx context.Context, q LogQuery, emit func(EntityLogLine) error, fail func(error)) error {
	if err := n.checkLogQuery(q); err != nil {
		return err
	}
	type batch struct {
		lines []EntityLogLine
		err   error
		gone  string // a member that left the cluster: its poller ended
	}
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel, which the pollers wait for
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make(chan batch)
	polling := map[string]bool{}
	start := func(m cluster.Member, after uint64, epoch int64) {
		polling[m.Address] = true
		wg.Add(1)
		go func() { // no owner: it lives one request, which the call cancels and waits for
			defer wg.Done()
			req := logsRequest{Type: q.Type, ID: q.ID, Level: q.Level, After: after, Epoch: epoch, Limit: followPage, WaitMs: logsPollWait.Milliseconds()}
			for ctx.Err() == nil {
				rep, err := n.pollLogs(ctx, m, req)
				if err == nil {
					// (a member that restarted answered from its start: localLogs)
					req.After, req.Epoch = rep.Last, rep.Epoch
				}
				if err != nil || len(rep.Lines) > 0 {
					select {
					case out <- batch{lines: rep.Lines, err: err}:
					case <-ctx.Done():
						return
					}
				}
				if err != nil && !n.isMember(m.Address) {
					select {
					case out <- batch{gone: m.Address}:
					case <-ctx.Done():
					}
					return
				}
				if err != nil {
					t := time.NewTimer(logsPollWait)
					select {
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
						return
					}
				}
			}
		}()
	}
	// The backlog: each member's kept lines, merged; each member's poller then starts
	// from the cursor its backlog reply gave, so no line falls between.
	members := n.membership.Members()
	first, ferrs := askEveryMember(members, func(m cluster.Member) (logsReply, error) {
		return n.pollLogs(ctx, m, logsRequest{Type: q.Type, ID: q.ID, Level: q.Level, Limit: q.Limit})
	})
	var backlog []EntityLogLine
	for i := range members {
		if ferrs[i] != nil && fail != nil {
			fail(ferrs[i])
		}
		backlog = append(backlog, first[i].Lines...)
	}
	sortLines(backlog)
	if q.Limit > 0 && len(backlog) > q.Limit {
		backlog = backlog[len(backlog)-q.Limit:]
	}
	for _, l := range backlog {
		if err := emit(l); err != nil {
			return err
		}
	}
	for i, m := range members {
		start(m, first[i].Last, first[i].Epoch) // a member that failed starts from 0
	}
	tick := time.NewTicker(logsPollWait)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case b := <-out:
			if b.gone != "" {
				delete(polling, b.gone) // started again should it come back
				continue
			}
			if b.err != nil {
				if fail != nil {
					fail(b.err)
				}
				continue
			}
			for _, l := range b.lines {
				if err := emit(l); err != nil {
					return err
				}
			}
		case <-tick.C:
			for _, m := range n.membership.Members() {
				if !polling[m.Address] {
					start(m, 0, 0) // a member that joined since: all its lines are new
				}
			}
		}
	}
}

// apiEntityLogs serves GET /v1/entities/{type}/{id}/logs and GET /v1/logs?type=T:
// the kept lines as JSON ({"lines": [...], "errors": [...]}), or with follow=1 a
// text/event-stream of them and of every new line, one "data:" event per line (JSON
// EntityLogLine). Parameters: level (debug, info, warn, error), limit (the newest
// lines; default all kept), follow.
func (n *Node) apiEntityLogs(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	q := LogQuery{Type: r.PathValue("type"), ID: r.PathValue("id")}
	if q.Type == "" {
		q.Type = qv.Get("type")
		if q.Type == "" {
			writeError(w, r, fmt.Errorf("%w: GET /v1/logs needs type=T", ErrBadRequest), 0)
			return
		}
	}
	var err error
	if q.Level, err = ParseLogLevel(qv.Get("level")); err != nil {
		writeError(w, r, err, 0)
		return
	}
	if s := qv.Get("limit"); s != "" {
		if q.Limit, err = strconv.Atoi(s); err != nil || q.Limit < 1 {
			writeError(w, r, fmt.Errorf("%w: limit=%q is not a positive number", ErrBadRequest, s), 0)
			return
		}
	}
	follow := false
	if s := qv.Get("follow"); s != "" {
		if follow, err = strconv.ParseBool(s); err != nil {
			writeError(w, r, fmt.Errorf("%w: follow=%q is not true or false", ErrBadRequest, s), 0)
			return
		}
	}
	if !follow {
		lines, failed, err := n.EntityLogs(r.Context(), q)
		if err != nil {
			writeError(w, r, err, 0)
			return
		}
		if lines == nil {
			lines = []EntityLogLine{}
		}
		writeJSON(w, http.StatusOK, struct {
			Lines  []EntityLogLine `json:"lines"`
			Errors []string        `json:"errors,omitempty"`
		}{lines, failed})
		return
	}
	if err := n.checkLogQuery(q); err != nil {
		writeError(w, r, err, 0)
		return
	}
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Time{}) // a follow lasts as long as the client wants
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	var mu sync.Mutex // emit and fail are called from the follow's goroutine only; mu documents it
	write := func(event string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if event != "" {
			if _, err := fmt.Fprintf(w, "event: %s\n", event); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		return rc.Flush()
	}
	n.FollowEntityLogs(r.Context(), q, func(l EntityLogLine) error { return write("", l) },
		func(err error) { write("error", map[string]string{"error": err.Error()}) })
}
