package host

import (
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"

	"github.com/shardhost/shardhost/sharding"
)

// The console's entity page, /ui/entities/{type}/{id}: what GET /v1/entities/{type}/{id}
// describes, a form for read-only queries (POST /v1/query's), the entity's log lines
// followed live (GET /v1/entities/{type}/{id}/logs?follow=1's event stream, read by a few
// lines of inline script), its journal's newest records with revert and fork, and the
// admin actions. Sections show what the caller's role may see: logs and history need
// client (as their API routes do), the actions admin.

// consoleHistoryRows is the most journal records the entity page shows at once.
const consoleHistoryRows = 50

// consoleReplyMax is the most bytes of a query's reply the entity page shows.
const consoleReplyMax = 4096

// entityView is the entity page's content.
type entityView struct {
	Type, ID string
	// Path is the page's own path, /ui/entities/TYPE/ID (escaped).
	Path string
	Desc sharding.EntityDescription
	// DescErr is why the entity could not be described ("" when it was).
	DescErr string
	// SeeData: the caller may read logs and history (client); Admin: may act (admin).
	SeeData, Admin bool
	// The query form: the payload sent, the reply (text, or \xNN for other bytes) or
	// the error, and whether a query ran.
	Queried             bool
	Payload, Reply, Err string
	// History is a page of the journal's records, newest last; HistoryErr why there
	// is none; Earlier and Later link to the neighbouring pages ("" for none).
	History         []HistoryRecord
	HistoryErr      string
	Earlier, Later  string
	LogsURL         string
	HasJournal      bool
	FirstSeq, Since uint64
}

// consoleRole is the role of the caller of r as the API sees it (admin when the API
// authenticates no one).
func (n *Node) consoleRole(r *http.Request) Role {
	if !n.auth.enabled() {
		return RoleAdmin
	}
	c, err := n.auth.authenticate(r)
	if err != nil {
		return RoleNone
	}
	return c.role
}

// entityPagePath is the console path of entity typ/id's page.
func entityPagePath(typ, id string) string {
	return "/ui/entities/" + url.PathEscape(typ) + "/" + url.PathEscape(id)
}

// consoleEntity is GET /ui/entities/{type}/{id}[?since=SEQ].
func (n *Node) consoleEntity(w http.ResponseWriter, r *http.Request) {
	n.renderEntityPage(w, r, nil)
}

// consoleEntityQuery is POST /ui/entities/{type}/{id}/query (form field payload): the
// entity page with the query's reply. A query changes nothing, so the read role may
// run it, as POST /v1/query.
func (n *Node) consoleEntityQuery(w http.ResponseWriter, r *http.Request) {
	payload := r.FormValue("payload")
	n.renderEntityPage(w, r, func(v *entityView) {
		v.Queried, v.Payload = true, payload
		reply, err := n.Query(r.Context(), v.Type, v.ID, []byte(payload))
		if err != nil {
			v.Err = withCode(err).Error()
			return
		}
		v.Reply = replyText(reply)
	})
}

// replyText shows a reply: UTF-8 text as it is, other bytes as preview does, cut at
// consoleReplyMax bytes.
func replyText(b []byte) string {
	cut := len(b) > consoleReplyMax
	if cut {
		b = b[:consoleReplyMax]
	}
	s := string(b)
	if !utf8.ValidString(s) {
		s = preview(b)
	}
	if cut {
		s += "…"
	}
	return s
}

// renderEntityPage renders the entity page of the request's {type} and {id}; query,
// when not nil, runs the query form's query first.
func (n *Node) renderEntityPage(w http.ResponseWriter, r *http.Request, query func(*entityView)) {
	typ, id := r.PathValue("type"), r.PathValue("id")
	role := n.consoleRole(r)
	n.renderConsole(w, r, "entity", typ+"/"+id, func(p *consolePage) {
		v := &entityView{Type: typ, ID: id, Path: entityPagePath(typ, id), SeeData: role >= RoleClient, Admin: role >= RoleAdmin}
		p.Entity = v
		err := ValidateTypeName(typ)
		if err == nil {
			err = checkEntityID(id)
		}
		if err == nil {
			if _, known := n.catalog.get(typ); !known {
				err = n.unknownType(typ)
			}
		}
		if err != nil {
			p.Flash, p.FlashErr, p.Entity = err.Error(), true, nil
			return
		}
		if query != nil {
			query(v)
		}
		if v.Desc, err = n.sharding.DescribeEntity(r.Context(), typ, id); err != nil {
			v.DescErr = err.Error()
		}
		if !v.SeeData {
			return
		}
		v.LogsURL = v.Path + "/logs?" + url.Values{"follow": {"1"}, "limit": {"200"}}.Encode()
		n.entityHistory(r, v)
	})
}

// entityHistory fills v's history: the consoleHistoryRows records from ?since=SEQ, or
// the newest ones.
func (n *Node) entityHistory(r *http.Request, v *entityView) {
	first, err := n.History(r.Context(), v.Type, v.ID, 1, 1)
	if err != nil {
		v.HistoryErr = err.Error()
		return
	}
	if len(first.Records) == 0 {
		return
	}
	v.HasJournal, v.FirstSeq = true, first.Records[0].Seq
	since := v.FirstSeq
	if s := r.URL.Query().Get("since"); s != "" {
		if since, err = strconv.ParseUint(s, 10, 64); err != nil || since < v.FirstSeq {
			since = v.FirstSeq
		}
	} else if kept := uint64(v.Desc.JournalRecords); kept > consoleHistoryRows {
		// The store's count of kept records, which follow the first one.
		since = v.FirstSeq + kept - consoleHistoryRows
	}
	page, err := n.History(r.Context(), v.Type, v.ID, since, consoleHistoryRows)
	if err != nil {
		v.HistoryErr = err.Error()
		return
	}
	v.History, v.Since = page.Records, since
	if since > v.FirstSeq {
		v.Earlier = v.Path + "?since=" + strconv.FormatUint(max(v.FirstSeq, since-min(since, consoleHistoryRows)), 10)
	}
	if page.Next != 0 {
		v.Later = v.Path + "?since=" + strconv.FormatUint(page.Next, 10)
	}
}
