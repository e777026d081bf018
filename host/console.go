package host

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/ddata"
	"github.com/shardhost/shardhost/sharding"
)

// The web console at /ui: pages rendered here from what the API's routes show (members,
// types and modules, shards, distributed data, message rates from the node's metrics,
// recent events), and forms for the admin actions (deploy, leave, down). Plain HTML
// and CSS embedded in the binary: no JavaScript framework, no CDN. It takes the API's
// tokens: a browser logs in with one, kept in an HttpOnly, SameSite=Strict cookie that
// the API reads for /ui routes only (auth.go).

//go:embed console/*.html console/style.css
var consoleFiles embed.FS

// consoleCookie names the cookie that carries a console user's bearer token.
const consoleCookie = "shardhost_token"

var consoleTemplates = template.Must(template.New("console").Funcs(template.FuncMap{
	"json": func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	},
	"list":       func(v ...string) []string { return v },
	"entityPath": entityPagePath,
}).ParseFS(consoleFiles, "console/*.html"))

// console holds what the activity page compares with: the message counts of the last
// view, to show rates.
type console struct {
	mu       sync.Mutex
	lastAt   time.Time
	lastSeen map[string]uint64
}

// consolePage is what every page's template gets.
type consolePage struct {
	Title, Page, Node, Now string
	Flash                  string
	FlashErr               bool
	// Auth says the API authenticates; LoggedIn that this browser sent a token it
	// logged in with that the API knows (it may log out).
	Auth, LoggedIn bool
	Next           string
	View           cluster.View
	Types          []TypeInfo
	Modules        []ModuleInfo
	Regions        []RegionReport
	Errors         []string
	Data           []DDataEntry
	Rates          []messageRate
	Events         []event
	// The entities page: its filters, a page of the listing, the next page's query.
	Filter   entityFilter
	Entities sharding.EntityPage
	NextPage string
	// The entity page (console_entity.go); nil for a bad entity.
	Entity *entityView
	// The charts page (charts.go); Live reloads it.
	Charts []chart
	Live   bool
}

// entityFilter is the entities page's form: a listing's type, status and ID prefix.
type entityFilter struct {
	Type, Status, Prefix string
}

// messageRate is one row of the activity page: messages of one type and outcome.
type messageRate struct {
	Type, Outcome string
	Count         uint64
	Rate          float64
	Mean, P99     string
}

func (n *Node) consoleRoutes(mux *http.ServeMux) {
	toMembers := func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/members", http.StatusSeeOther)
	}
	mux.HandleFunc("GET /ui", toMembers)
	mux.HandleFunc("GET /ui/{$}", toMembers) // the trailing slash a person types
	mux.HandleFunc("GET /ui/static/style.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		b, _ := consoleFiles.ReadFile("console/style.css")
		w.Write(b)
	})
	mux.HandleFunc("GET /ui/login", func(w http.ResponseWriter, r *http.Request) {
		n.renderConsole(w, r, "login", "Log in", func(p *consolePage) { p.Next = r.URL.Query().Get("next") })
	})
	mux.HandleFunc("POST /ui/login", n.consoleLogin)
	mux.HandleFunc("POST /ui/logout", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: "", Path: "/ui", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /ui/members", func(w http.ResponseWriter, r *http.Request) {
		n.renderConsole(w, r, "members", "Members", func(p *consolePage) { p.View = n.membership.View() })
	})
	mux.HandleFunc("GET /ui/types", func(w http.ResponseWriter, r *http.Request) {
		n.renderConsole(w, r, "types", "Entity types", func(p *consolePage) { p.Types, p.Modules = n.Types(), n.Modules() })
	})
	mux.HandleFunc("GET /ui/shards", func(w http.ResponseWriter, r *http.Request) {
		n.renderConsole(w, r, "shards", "Shards", func(p *consolePage) {
			rep := n.shardsReport(r.Context())
			p.Regions, p.Errors = rep.Regions, rep.Errors
		})
	})
	mux.HandleFunc("GET /ui/data", func(w http.ResponseWriter, r *http.Request) {
		n.renderConsole(w, r, "data", "Distributed data", func(p *consolePage) { p.Data = n.ddataEntries(r.Context(), true) })
	})
	mux.HandleFunc("GET /ui/activity", func(w http.ResponseWriter, r *http.Request) {
		n.renderConsole(w, r, "activity", "Activity", func(p *consolePage) {
			p.Rates = n.messageRates()
			p.Events = n.events.recent()
		})
	})
	mux.HandleFunc("GET /ui/entities", n.consoleEntities)
	mux.HandleFunc("GET /ui/charts", n.consoleCharts)
	mux.HandleFunc("POST /ui/entities/{type}/{id}/{action}", n.consoleEntityAction)
	mux.HandleFunc("GET /ui/entities/{type}/{id}", n.consoleEntity)
	mux.HandleFunc("POST /ui/entities/{type}/{id}/query", n.consoleEntityQuery)
	mux.HandleFunc("GET /ui/entities/{type}/{id}/logs", n.apiEntityLogs)
	mux.HandleFunc("POST /ui/deploy", n.consoleDeploy)
	mux.HandleFunc("POST /ui/members/{address}/{action}", n.consoleMemberAction)
}

// renderConsole writes page, filled by fill, with the flash message of the query.
func (n *Node) renderConsole(w http.ResponseWriter, r *http.Request, page, title string, fill func(*consolePage)) {
	p := &consolePage{Title: title, Page: page, Node: n.membership.Self().Address, Now: time.Now().Format("15:04:05"),
		Flash: r.URL.Query().Get("flash"), FlashErr: r.URL.Query().Get("err") != "", Auth: n.auth.enabled(),
		LoggedIn: n.consoleLoggedIn(r)}
	fill(p)
	var buf bytes.Buffer
	if err := consoleTemplates.ExecuteTemplate(&buf, page, p); err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'self'; frame-ancestors 'none'")
	w.Write(buf.Bytes())
}

// consoleLoggedIn reports whether r carries the console's cookie with a token the API
// knows: a browser that logged in, which may log out.
func (n *Node) consoleLoggedIn(r *http.Request) bool {
	c, err := r.Cookie(consoleCookie)
	if err != nil || c.Value == "" || n.auth.tokens == nil {
		return false
	}
	_, ok := n.auth.tokens.Role(c.Value)
	return ok
}

// consoleRedirect sends the browser to path with a flash message (an error if failed).
func consoleRedirect(w http.ResponseWriter, r *http.Request, path, flash string, failed bool) {
	q := url.Values{"flash": {flash}}
	if failed {
		q.Set("err", "1")
	}
	http.Redirect(w, r, path+"?"+q.Encode(), http.StatusSeeOther)
}

func (n *Node) consoleLogin(w http.ResponseWriter, r *http.Request) {
	token := strings.TrimSpace(r.FormValue("token"))
	next := r.FormValue("next")
	if !strings.HasPrefix(next, "/ui/") {
		next = "/ui/members"
	}
	if n.auth.tokens == nil {
		consoleRedirect(w, r, "/ui/login", "this API takes no tokens", true)
		return
	}
	if _, ok := n.auth.tokens.Role(token); !ok {
		consoleRedirect(w, r, "/ui/login", "unknown token", true)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: token, Path: "/ui", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (n *Node) consoleDeploy(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, int64(n.cfg.MaxModuleSize)+1<<20)
	name := r.FormValue("type")
	f, _, err := r.FormFile("module")
	if err != nil {
		consoleRedirect(w, r, "/ui/types", "deploy: no module file: "+err.Error(), true)
		return
	}
	defer f.Close()
	wasm, err := io.ReadAll(io.LimitReader(f, int64(n.cfg.MaxModuleSize)+1))
	if err != nil {
		consoleRedirect(w, r, "/ui/types", "deploy: "+err.Error(), true)
		return
	}
	q := url.Values{}
	if c := r.FormValue("checkpoint"); c != "" {
		q.Set("checkpoint", c)
	}
	st, err := deploySettings(name, q)
	if err == nil {
		if prev, ok := n.catalog.get(st.Name); ok {
			st = inheritSettings(st, q, prev)
		}
		var res DeployResult
		if res, err = n.Deploy(r.Context(), wasm, st); err == nil {
			consoleRedirect(w, r, "/ui/types", fmt.Sprintf("deployed %s version %d (%d bytes)", res.Type.Name, res.Type.Version, res.Type.Size), false)
			return
		}
	}
	consoleRedirect(w, r, "/ui/types", "deploy "+name+": "+err.Error(), true)
}

func (n *Node) consoleMemberAction(w http.ResponseWriter, r *http.Request) {
	address, action := r.PathValue("address"), r.PathValue("action")
	var err error
	switch action {
	case "leave":
		err = n.membership.LeaveMember(address)
	case "down":
		err = n.membership.DownMember(address)
	default:
		err = fmt.Errorf("%w: no action %q (leave or down)", ErrBadRequest, action)
	}
	if err != nil {
		consoleRedirect(w, r, "/ui/members", action+" "+address+": "+err.Error(), true)
		return
	}
	consoleRedirect(w, r, "/ui/members", action+" "+address+": done", false)
}

// shardsReport is what GET /v1/shards answers: every region's shards, from every member.
func (n *Node) shardsReport(ctx context.Context) ShardsReport {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	states, err := n.sharding.ClusterShardingState(ctx)
	rep := ShardsReport{Regions: []RegionReport{}}
	for _, st := range states {
		rr := RegionReport{Node: st.Node, Shards: []ShardReport{}, Passivations: st.Passivations,
			BufferedDuringHandoff: st.BufferedDuringHandoff, DeadLetters: st.DeadLetters}
		for _, sh := range st.Shards {
			rr.Shards = append(rr.Shards, ShardReport{Type: sh.Type, ID: sh.ID, Entities: len(sh.Entities)})
		}
		rep.Regions = append(rep.Regions, rr)
	}
	if err != nil {
		rep.Errors = append(rep.Errors, err.Error())
	}
	return rep
}

// ddataEntries lists the keys this member holds, with their values if withValues (a
// local read).
func (n *Node) ddataEntries(ctx context.Context, withValues bool) []DDataEntry {
	out := []DDataEntry{}
	for _, key := range n.replicator.Keys() {
		e := DDataEntry{Key: key}
		d, err := n.replicator.Get(ctx, key, ddata.ReadLocal())
		switch {
		case errors.Is(err, ddata.ErrDataDeleted):
			e.Deleted = true
		case err == nil:
			e.Type = string(d.Type())
			if withValues {
				e.Value = d.Value()
			}
		default:
			continue // expired meanwhile
		}
		out = append(out, e)
	}
	return out
}

// messageRates reads the node's own metrics (its /metrics handler) for the messages
// its entities handled, by type and outcome: counts, the rate since the last call, the
// mean and an upper bound of the 99th percentile from the histogram's buckets.
func (n *Node) messageRates() []messageRate {
	if n.cfg.MetricsHandler == nil {
		return nil
	}
	rec := httptest.NewRecorder()
	n.cfg.MetricsHandler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		return nil
	}
	fam := families["shardhost_entity_message_duration_seconds"]
	if fam == nil {
		return nil
	}
	type key struct{ typ, outcome string }
	type agg struct {
		count   uint64
		sum     float64
		buckets map[float64]uint64
	}
	sums := map[key]*agg{}
	for _, m := range fam.GetMetric() {
		k := key{label(m, "shardhost_entity_type"), label(m, "shardhost_outcome")}
		a := sums[k]
		if a == nil {
			a = &agg{buckets: map[float64]uint64{}}
			sums[k] = a
		}
		h := m.GetHistogram()
		a.count += h.GetSampleCount()
		a.sum += h.GetSampleSum()
		for _, b := range h.GetBucket() {
			a.buckets[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	c := &n.console
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	elapsed := now.Sub(c.lastAt).Seconds()
	seen := map[string]uint64{}
	var out []messageRate
	for k, a := range sums {
		r := messageRate{Type: k.typ, Outcome: k.outcome, Count: a.count}
		id := k.typ + "\x00" + k.outcome
		seen[id] = a.count
		if prev, ok := c.lastSeen[id]; ok && elapsed > 0 && a.count >= prev {
			r.Rate = float64(a.count-prev) / elapsed
		}
		if a.count > 0 {
			r.Mean = time.Duration(a.sum / float64(a.count) * float64(time.Second)).Round(time.Microsecond).String()
			bounds := make([]float64, 0, len(a.buckets))
			for b := range a.buckets {
				bounds = append(bounds, b)
			}
			sort.Float64s(bounds)
			r.P99 = "+Inf"
			for _, b := range bounds {
				if float64(a.buckets[b]) >= 0.99*float64(a.count) && !math.IsInf(b, 1) {
					r.P99 = time.Duration(b * float64(time.Second)).String()
					break
				}
			}
		}
		out = append(out, r)
	}
	c.lastAt, c.lastSeen = now, seen
	sort.Slice(out, func(i, j int) bool {
		if out[i].Type != out[j].Type {
			return out[i].Type < out[j].Type
		}
		return out[i].Outcome < out[j].Outcome
	})
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// consoleEntities is the entities page: a page of the listing (GET /v1/entities) by
// type, status and ID prefix, paused entities with the actions that resume them.
func (n *Node) consoleEntities(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	f := entityFilter{Type: v.Get("type"), Status: v.Get("status"), Prefix: v.Get("prefix")}
	q := sharding.ListQuery{Type: f.Type, Status: f.Status, Prefix: f.Prefix, Cursor: v.Get("cursor"), Limit: consoleEntityRows}
	n.renderConsole(w, r, "entities", "Entities", func(p *consolePage) {
		p.Filter, p.Types = f, n.Types()
		if q.Type != "" {
			if _, known := n.catalog.get(q.Type); !known {
				p.Flash, p.FlashErr = n.unknownType(q.Type).Error(), true
				return
			}
		}
		page, err := n.sharding.ListEntities(r.Context(), q)
		if err != nil {
			p.Flash, p.FlashErr = err.Error(), true
			return
		}
		p.Entities = page
		if page.Next != "" {
			next := url.Values{"type": {f.Type}, "status": {f.Status}, "prefix": {f.Prefix}, "cursor": {page.Next}}
			p.NextPage = "/ui/entities?" + next.Encode()
		}
	})
}

// consoleEntityRows is the most rows the entities page shows at once.
const consoleEntityRows = 200

// consoleEntityAction is an action on one entity from the entities page or its own
// (form field from=entity: back to the entity page): pause, resume or skip (a paused entity),
// passivate, revert (form field to=SEQ, a journal record) or fork (new=ID, at=SEQ).
func (n *Node) consoleEntityAction(w http.ResponseWriter, r *http.Request) {
	typ, id, action := r.PathValue("type"), r.PathValue("id"), r.PathValue("action")
	back := "/ui/entities?" + url.Values{"type": {typ}}.Encode()
	if r.FormValue("from") == "entity" {
		back = entityPagePath(typ, id)
	}
	what := action + " " + typ + "/" + id
	done := true
	var err error
	var flash string
	seq := func(name string) uint64 {
		v, perr := strconv.ParseUint(r.FormValue(name), 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("%w: %s=%q is not a journal record number", ErrBadRequest, name, r.FormValue(name))
		}
		return v
	}
	switch action {
	case "pause":
		done, err = n.sharding.Pause(r.Context(), typ, id)
	case "resume":
		done, err = n.sharding.Resume(r.Context(), typ, id)
	case "skip":
		done, err = n.sharding.Skip(r.Context(), typ, id)
	case "passivate":
		done, err = n.sharding.Passivate(r.Context(), typ, id)
	case "revert":
		to := seq("to")
		what += " to record " + r.FormValue("to")
		if err == nil {
			var rec uint64
			if rec, err = n.sharding.Revert(r.Context(), typ, id, to); err == nil {
				flash = fmt.Sprintf("%s: done (record %d)", what, rec)
			}
		}
	case "fork":
		at, newID := uint64(0), r.FormValue("new")
		if r.FormValue("at") != "" {
			at = seq("at")
		}
		if err == nil {
			err = checkEntityID(newID)
		}
		what += " as " + typ + "/" + newID
		if err == nil {
			if err = n.sharding.Fork(r.Context(), typ, id, newID, at); err == nil {
				consoleRedirect(w, r, entityPagePath(typ, newID), what+": done", false)
				return
			}
		}
	default:
		err = fmt.Errorf("%w: no action %q (pause, resume, skip, passivate, revert or fork)", ErrBadRequest, action)
	}
	switch {
	case err != nil:
		consoleRedirect(w, r, back, what+": "+err.Error(), true)
	case flash != "":
		consoleRedirect(w, r, back, flash, false)
	case !done && action == "passivate":
		consoleRedirect(w, r, back, what+": not active, nothing done", false)
	case !done && action == "pause":
		consoleRedirect(w, r, back, what+": already paused, nothing done", false)
	case !done:
		consoleRedirect(w, r, back, what+": not paused, nothing done", false)
	default:
		consoleRedirect(w, r, back, what+": done", false)
	}
}
