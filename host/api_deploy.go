// The management API's deploy routes: a type's deploy and its settings read from the
// query, canary rollouts, undeploy and upgrade.

package host

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/sharding"
)

func (n *Node) apiDeploy(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st, err := deploySettings(r.PathValue("name"), q)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	reset, err := strconv.ParseBool(orDefault(q.Get("reset_settings"), "false"))
	if err != nil {
		writeError(w, r, fmt.Errorf("%w: reset_settings=%q is not true or false", ErrBadRequest, q.Get("reset_settings")), 0)
		return
	}
	canary, err := canaryOptions(q)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	if prev, ok := n.catalog.get(st.Name); ok && !reset {
		st = inheritSettings(st, q, prev)
	}
	name := st.Name
	wasm, err := readBody(r, n.cfg.MaxModuleSize, ErrModuleTooLarge)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	trace.SpanFromContext(r.Context()).SetAttributes(obs.EntityType.String(name))
	var res DeployResult
	if canary != nil {
		res, err = n.DeployCanary(r.Context(), wasm, st, *canary)
	} else {
		res, err = n.Deploy(r.Context(), wasm, st)
	}
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// canaryOptions reads a deploy's canary options: nil when it has none. Errors:
// ErrBadRequest.
func canaryOptions(q url.Values) (*CanaryOptions, error) {
	keys := []string{"canary", "canary_ids", "canary_max_failure_rate", "canary_window", "canary_min_messages"}
	if !slices.ContainsFunc(keys, q.Has) {
		return nil, nil
	}
	o := &CanaryOptions{Share: q.Get("canary")}
	if ids := q.Get("canary_ids"); ids != "" {
		o.IDs = strings.Split(ids, ",")
	}
	if v := q.Get("canary_max_failure_rate"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: canary_max_failure_rate=%q is not a number", ErrBadRequest, v)
		}
		o.MaxFailureRate = f
	}
	if v := q.Get("canary_window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("%w: canary_window=%q is not a duration", ErrBadRequest, v)
		}
		o.Window = d
	}
	if v := q.Get("canary_min_messages"); v != "" {
		m, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("%w: canary_min_messages=%q is not a number", ErrBadRequest, v)
		}
		o.MinMessages = m
	}
	return o, nil
}

// apiRolloutStatus is GET /v1/types/{name}/rollout: RolloutStatusOf.
func (n *Node) apiRolloutStatus(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := ValidateTypeName(name); err != nil {
		writeError(w, r, err, 0)
		return
	}
	res, err := n.RolloutStatusOf(r.Context(), name)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// apiRolloutPromote is POST /v1/types/{name}/rollout/promote: RolloutPromote.
func (n *Node) apiRolloutPromote(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := ValidateTypeName(name); err != nil {
		writeError(w, r, err, 0)
		return
	}
	res, err := n.RolloutPromote(r.Context(), name)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// apiRolloutRollback is POST /v1/types/{name}/rollout/rollback: RolloutRollback.
func (n *Node) apiRolloutRollback(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := ValidateTypeName(name); err != nil {
		writeError(w, r, err, 0)
		return
	}
	res, err := n.RolloutRollback(r.Context(), name, "rolled back by an operator (shardhost rollout rollback)")
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// apiUndeploy is DELETE /v1/types/{name}[?delete_state=true]: Undeploy.
func (n *Node) apiUndeploy(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := ValidateTypeName(name); err != nil {
		writeError(w, r, err, 0)
		return
	}
	trace.SpanFromContext(r.Context()).SetAttributes(obs.EntityType.String(name))
	deleteState, err := strconv.ParseBool(orDefault(r.URL.Query().Get("delete_state"), "false"))
	if err != nil {
		writeError(w, r, fmt.Errorf("%w: delete_state=%q is not true or false", ErrBadRequest, r.URL.Query().Get("delete_state")), 0)
		return
	}
	res, err := n.Undeploy(r.Context(), name, deleteState)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (n *Node) apiUpgrade(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := ValidateTypeName(name); err != nil {
		writeError(w, r, err, 0)
		return
	}
	var opts UpgradeOptions
	for key, v := range map[string]*bool{"dry_run": &opts.DryRun, "now": &opts.Now} {
		b, err := strconv.ParseBool(orDefault(r.URL.Query().Get(key), "false"))
		if err != nil {
			writeError(w, r, fmt.Errorf("%w: %s=%q is not true or false", ErrBadRequest, key, r.URL.Query().Get(key)), 0)
			return
		}
		*v = b
	}
	if opts.DryRun && opts.Now {
		writeError(w, r, fmt.Errorf("%w: dry_run and now exclude each other", ErrBadRequest), 0)
		return
	}
	res, err := n.Upgrade(r.Context(), name, opts)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// entityRequest reads and checks the entity type, ID and payload of a tell or ask.
func (n *Node) entityRequest(r *http.Request) (typ, id string, payload []byte, err error) {
	if typ, id, err = n.target(r); err != nil {
		return "", "", nil, err
	}
	if payload, err = readBody(r, n.cfg.Runtime.MaxMessageSize, ErrMessageTooLarge); err != nil {
		return "", "", nil, err
	}
	return typ, id, payload, nil
}

// deploySettings reads an entity type's settings from a deploy request's query:
// shards, role, allocation, passivate_after (a duration), max_active,
// passivation_strategy (lru, lfu or w-tinylfu), checkpoint, delivery (effectively-once
// or at-most-once),
// history (journal records kept behind a base; 0 keeps none), idempotency_retention (a
// duration), max_retries (attempts of a failing tell before its entity pauses; 0:
// never), log_lines (log lines kept per entity, at most MaxEntityLogLines; 0: the
// default), state_ttl (a duration of at least sharding.MinStateTTL: the state of an
// entity idle this long is deleted; 0: never), remember_entities (true or false) and the egress settings (egressQuery). On a redeploy, what the query leaves out keeps its
// value (inheritSettings) unless reset_settings=true.
func deploySettings(name string, q url.Values) (sharding.TypeSettings, error) {
	st := sharding.TypeSettings{Name: name, Role: q.Get("role"), Allocation: q.Get("allocation"), Checkpoint: q.Get("checkpoint"),
		PassivationStrategy: q.Get("passivation_strategy"), Delivery: q.Get("delivery")}
	switch st.Delivery {
	case "", sharding.DeliveryEffectivelyOnce, sharding.DeliveryAtMostOnce:
	default:
		return st, fmt.Errorf("%w: delivery=%q (want %s or %s)", ErrBadRequest, st.Delivery,
			sharding.DeliveryEffectivelyOnce, sharding.DeliveryAtMostOnce)
	}
	switch st.PassivationStrategy {
	case "", sharding.PassivationLRU, sharding.PassivationLFU, sharding.PassivationWTinyLFU:
	default:
		return st, fmt.Errorf("%w: passivation_strategy=%q (want %s, %s or %s)", ErrBadRequest, st.PassivationStrategy,
			sharding.PassivationLRU, sharding.PassivationLFU, sharding.PassivationWTinyLFU)
	}
	atoi := func(key string) (int, error) {
		s := q.Get(key)
		if s == "" {
			return 0, nil
		}
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("%w: %s=%q is not a non-negative number", ErrBadRequest, key, s)
		}
		return v, nil
	}
	var err error
	if st.NumberOfShards, err = atoi("shards"); err != nil {
		return st, err
	}
	if st.MaxActive, err = atoi("max_active"); err != nil {
		return st, err
	}
	if st.LogLines, err = atoi("log_lines"); err != nil {
		return st, err
	}
	if st.LogLines > MaxEntityLogLines {
		return st, fmt.Errorf("%w: log_lines=%d is over %d", ErrBadRequest, st.LogLines, MaxEntityLogLines)
	}
	if q.Has("max_retries") {
		if st.MaxRetries, err = atoi("max_retries"); err != nil {
			return st, err
		}
		if st.MaxRetries == 0 {
			st.MaxRetries = -1 // never pause (0 is the default in TypeSettings)
		}
	}
	if q.Has("history") {
		if st.History, st.HistoryAge, err = parseHistory(q.Get("history")); err != nil {
			return st, err
		}
	}
	if s := q.Get("passivate_after"); s != "" {
		if st.PassivateAfter, err = time.ParseDuration(s); err != nil || st.PassivateAfter < 0 {
			return st, fmt.Errorf("%w: passivate_after=%q is not a duration", ErrBadRequest, s)
		}
	}
	if s := q.Get("state_ttl"); s != "" {
		if st.StateTTL, err = time.ParseDuration(s); err != nil || st.StateTTL < 0 || st.StateTTL > 0 && st.StateTTL < sharding.MinStateTTL {
			return st, fmt.Errorf("%w: state_ttl=%q is not 0 (keep state for good) or a duration of at least %v", ErrBadRequest, s, sharding.MinStateTTL)
		}
	}
	if s := q.Get("idempotency_retention"); s != "" {
		if st.IdempotencyRetention, err = time.ParseDuration(s); err != nil || st.IdempotencyRetention <= 0 {
			return st, fmt.Errorf("%w: idempotency_retention=%q is not a positive duration", ErrBadRequest, s)
		}
	}
	if s := q.Get("remember_entities"); s != "" {
		if st.RememberEntities, err = strconv.ParseBool(s); err != nil {
			return st, fmt.Errorf("%w: remember_entities=%q is not true or false", ErrBadRequest, s)
		}
	}
	if err := egressQuery(&st, q); err != nil {
		return st, err
	}
	if err := httpRouteQuery(&st, q); err != nil {
		return st, err
	}
	return st, nil
}

// inheritSettings gives st, read from a redeploy's query q, the previous version's
// value of each setting the query leaves out (reset_settings=true skips this: the
// defaults apply). The number of shards is Deploy's: it never changes.
func inheritSettings(st sharding.TypeSettings, q url.Values, prev TypeInfo) sharding.TypeSettings {
	if !q.Has("role") {
		st.Role = prev.Role
	}
	if !q.Has("allocation") {
		st.Allocation = prev.Allocation
	}
	if !q.Has("checkpoint") {
		st.Checkpoint = prev.Checkpoint
	}
	if !q.Has("delivery") {
		st.Delivery = prev.Delivery
	}
	if !q.Has("history") {
		st.History, st.HistoryAge = prev.History, time.Duration(prev.HistoryAgeMs)*time.Millisecond
	}
	if !q.Has("max_retries") {
		st.MaxRetries = prev.MaxRetries
	}
	if !q.Has("idempotency_retention") {
		st.IdempotencyRetention = time.Duration(prev.IdempotencyRetentionMs) * time.Millisecond
	}
	if !q.Has("passivate_after") {
		st.PassivateAfter = time.Duration(prev.PassivateAfterMs) * time.Millisecond
	}
	if !q.Has("max_active") {
		st.MaxActive = prev.MaxActive
	}
	if !q.Has("passivation_strategy") {
		st.PassivationStrategy = prev.PassivationStrategy
	}
	if !q.Has("log_lines") {
		st.LogLines = prev.LogLines
	}
	if !q.Has("state_ttl") {
		st.StateTTL = time.Duration(prev.StateTTLMs) * time.Millisecond
	}
	if !q.Has("remember_entities") {
		st.RememberEntities = prev.RememberEntities
	}
	return inheritHTTPRoutes(inheritEgress(st, q, prev), q, prev)
}

// parseHistory reads a deploy's history setting: a number of records ("1000"; "0" or
// "none" keeps none; "all" keeps every one), or a duration ("24h"), as
// sharding.TypeSettings.History and HistoryAge take them. Errors: ErrBadRequest.
func parseHistory(v string) (records int, age time.Duration, err error) {
	switch v {
	case "none", "0":
		return -1, 0, nil // none kept (0 is the default in TypeSettings)
	case "all":
		return sharding.HistoryAll, 0, nil
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return n, 0, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return 0, d, nil
	}
	return 0, 0, fmt.Errorf("%w: history=%q is neither a number of records (1000; 0 or none keeps none; all keeps every one) nor a duration (24h)", ErrBadRequest, v)
}
