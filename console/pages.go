package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/policy"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// historyShown is how many decided approvals the Approvals page lists.
const historyShown = 50

// auditShown is how many audit events the Audit page lists.
const auditShown = 200

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"ago":   func(t time.Time, now time.Time) string { return now.Sub(t).Round(time.Second).String() },
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"unix":  func(t time.Time) int64 { return t.UnixMilli() },
	"join":  strings.Join,
	// multiline reports whether a value spans lines: the approval card
	// shows it as a block, whole, never folded onto one line.
	"multiline": func(v string) bool { return strings.ContainsAny(v, "\r\n") },
	"fields": func(m map[string]string) string {
		var kv []string
		for k, v := range m {
			kv = append(kv, k+"="+v)
		}
		slices.Sort(kv)
		return strings.Join(kv, " ")
	},
}).ParseFS(templateFS, "templates/*.html"))

// routes is the console's one route table.
func (c *Console) routes() *http.ServeMux {
	m := http.NewServeMux()
	assets, _ := fs.Sub(assetFS, "assets")
	files := http.StripPrefix("/ui/assets/", http.FileServerFS(assets))
	m.HandleFunc("GET /ui/login", c.login)
	m.HandleFunc("GET /ui/assets/", c.guard(func(w http.ResponseWriter, r *http.Request, _ signin) { files.ServeHTTP(w, r) }))
	m.HandleFunc("GET /ui/{$}", c.guard(func(w http.ResponseWriter, r *http.Request, _ signin) {
		http.Redirect(w, r, "/ui/approvals", http.StatusSeeOther)
	}))
	m.HandleFunc("GET /ui/approvals", c.guard(c.page("approvals", c.approvalsData)))
	m.HandleFunc("GET /ui/sessions", c.guard(c.page("sessions", c.sessionsData)))
	m.HandleFunc("GET /ui/audit", c.guard(c.page("audit", c.auditData)))
	m.HandleFunc("GET /ui/events", c.guard(c.events))
	m.HandleFunc("POST /ui/approvals/{id}", c.guard(c.decide))
	m.HandleFunc("POST /ui/sessions/{id}/end", c.guard(c.endSession))
	m.HandleFunc("POST /ui/sandboxes/{id}/remove", c.guard(c.removeSandbox))
	m.HandleFunc("POST /ui/logout", c.guard(c.logout))
	m.HandleFunc("/ui/", c.guard(func(w http.ResponseWriter, r *http.Request, _ signin) { http.NotFound(w, r) }))
	return m
}

// view is what every page template gets.
type view struct {
	Page string
	CSRF string
	// State is the fingerprint the page was rendered from (see events).
	State string
	Now   time.Time
	Data  any
}

// page renders template name with data from load. With ?fragment=1 only
// the page's main section is rendered, for the event stream's refresh.
func (c *Console) page(name string, load func(*http.Request) any) func(http.ResponseWriter, *http.Request, signin) {
	return func(w http.ResponseWriter, r *http.Request, s signin) {
		st := c.state() // before loading: a later change is announced
		v := view{Page: name, CSRF: s.csrf, State: st.String(), Now: c.cfg.Now(), Data: load(r)}
		tmpl := name
		if r.URL.Query().Get("fragment") == "1" {
			tmpl = name + "-main"
		}
		var buf bytes.Buffer
		if err := pages.ExecuteTemplate(&buf, tmpl, v); err != nil {
			c.log.Error("rendering a console page", zap.String("page", name), zap.Error(err))
			c.refuse(w, http.StatusInternalServerError, "rendering the page failed; see the daemon log")
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(buf.Bytes())
	}
}

// approvalRow is one approval as the page shows it.
type approvalRow struct {
	approval.Pending
	Summary      string
	PathTemplate string
	Deadline     time.Time
	// Surface is the session's approval_surface; with "cli" the console
	// shows the request without buttons.
	Surface approval.Surface
}

// surfaceOf returns the approval_surface of a live session (both when it
// is gone).
func (c *Console) surfaceOf(sessionID string) approval.Surface {
	if s, ok := c.cfg.Sessions.Get(sessionID); ok {
		return approval.Surface(s.ApprovalSurface)
	}
	return approval.SurfaceBoth
}

type approvalsData struct {
	Pending, History []approvalRow
}

func (c *Console) approvalsData(*http.Request) any {
	snap := c.snapshot()
	row := func(p approval.Pending) approvalRow {
		r := approvalRow{Pending: p, PathTemplate: p.Path, Deadline: p.RequestedAt.Add(c.cfg.Approvals.Timeout()), Surface: c.surfaceOf(p.SessionID)}
		if op := lookupOperation(snap, p.ConnectorFQN, p.Tool, p.Operation); op != nil {
			r.Summary = op.Summary
			if r.Summary == "" {
				r.Summary = op.Description
			}
			r.PathTemplate = op.Path
		}
		return r
	}
	var d approvalsData
	for _, p := range c.cfg.Approvals.List(approval.StatePending) {
		d.Pending = append(d.Pending, row(p))
	}
	hist := c.cfg.Approvals.List(approval.StateDecided)
	slices.Reverse(hist)
	for i, p := range hist {
		if i == historyShown {
			break
		}
		d.History = append(d.History, row(p))
	}
	return d
}

func (c *Console) snapshot() *policy.Snapshot {
	if c.cfg.Policy == nil {
		return nil
	}
	return c.cfg.Policy()
}

// lookupOperation finds an operation in snap (policy's Lookup, scoped to
// its one connector); nil when it is not there.
func lookupOperation(snap *policy.Snapshot, fqn, tool, op string) *policy.Operation {
	m, err := snap.Lookup(policy.NewScope([]string{fqn}), fqn, tool, op)
	if err != nil {
		return nil
	}
	return m.Compiled.Operation()
}

// decide is POST /ui/approvals/{id} with decision=approve|deny and
// remember=once|session.
func (c *Console) decide(w http.ResponseWriter, r *http.Request, _ signin) {
	id := r.PathValue("id")
	d, err := approval.ParseDecision(r.PostFormValue("decision"))
	if err != nil {
		c.refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	rem, err := approval.ParseRemember(r.PostFormValue("remember"))
	if err != nil {
		c.refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	for _, p := range c.cfg.Approvals.List(approval.StatePending) {
		if p.ID == id && !c.surfaceOf(p.SessionID).IsConsole() {
			c.refuse(w, http.StatusForbidden, "session "+p.SessionID+"'s approval_surface is \"cli\": decide with `aileron-proxy approvals approve "+id+"` (or deny)")
			return
		}
	}
	switch err := c.cfg.Approvals.Decide(id, d, rem); {
	case errors.Is(err, approval.ErrUnknownApproval):
		c.refuse(w, http.StatusNotFound, "no approval "+strconv.Quote(id)+"; it may have been decided elsewhere")
		return
	case errors.Is(err, approval.ErrAlreadyDecided):
		c.refuse(w, http.StatusConflict, "approval "+strconv.Quote(id)+" was already decided or timed out")
		return
	case err != nil:
		c.log.Error("deciding an approval", zap.String("approval_id", id), zap.Error(err))
		c.refuse(w, http.StatusInternalServerError, "deciding the approval failed; see the daemon log")
		return
	}
	c.log.Info("approval decided", zap.String("approval_id", id), zap.String("decision", d.String()),
		zap.String("remember", rem.String()), zap.String("surface", "console"))
	http.Redirect(w, r, "/ui/approvals", http.StatusSeeOther)
}

// sessionRow is one live session as the Sessions page shows it.
type sessionRow struct {
	ID                    string
	Agent, Project        string
	Connectors            []string
	Started, Expires      time.Time
	Allowed, Denied, Held int
	Timeline              template.HTML
	// Sandboxes are the session's long-lived sandboxes (sandbox up).
	Sandboxes []Sandbox
	// Learn are a learn session's patterns; Learned its learned requests,
	// newest first (names and masked paths only, as audited).
	Learn   []string
	Learned []learnedRow
}

// learnedRow is one connector.proxy.learned event on the Sessions page.
type learnedRow struct {
	Time                       time.Time
	Method, Host, Path, Detail string
	Status                     int
}

// maxLearnedRows caps the learned requests shown per session.
const maxLearnedRows = 50

func learnedRowOf(e audit.Event) learnedRow {
	r := learnedRow{Time: e.Time, Method: e.Method, Host: e.Host, Path: e.Path, Status: e.Status}
	if l := e.Learned; l != nil {
		var parts []string
		if len(l.QueryNames) > 0 {
			parts = append(parts, "query "+strings.Join(l.QueryNames, ", "))
		}
		if len(l.BodyKeys) > 0 {
			keys := make([]string, len(l.BodyKeys))
			for i, k := range l.BodyKeys {
				keys[i] = k.Name + ":" + k.Type
			}
			parts = append(parts, "body "+strings.Join(keys, ", "))
		}
		if l.ResponseContentType != "" {
			parts = append(parts, "→ "+l.ResponseContentType)
		}
		r.Detail = strings.Join(parts, " · ")
	}
	return r
}

func (c *Console) sessionsData(*http.Request) any {
	events, _ := c.readAudit(audit.TailOptions{})
	bySession := map[string][]audit.Event{}
	for _, e := range events {
		if e.SessionID != "" {
			bySession[e.SessionID] = append(bySession[e.SessionID], e)
		}
	}
	boxes := map[string][]Sandbox{}
	if c.cfg.Sandboxes != nil {
		for _, b := range c.cfg.Sandboxes.List() {
			boxes[b.SessionID] = append(boxes[b.SessionID], b)
		}
	}
	var rows []sessionRow
	for _, s := range c.cfg.Sessions.List() {
		row := sessionRow{ID: s.ID, Agent: s.Agent, Project: s.Project, Connectors: s.Connectors, Started: s.CreatedAt, Expires: s.ExpiresAt, Sandboxes: boxes[s.ID],
			Learn: s.Learn}
		evs := bySession[s.ID]
		for i := len(evs) - 1; i >= 0 && len(row.Learned) < maxLearnedRows; i-- {
			if evs[i].Event == audit.EventLearned {
				row.Learned = append(row.Learned, learnedRowOf(evs[i]))
			}
		}
		for _, e := range evs {
			switch kindOf(e) {
			case markAllowed:
				row.Allowed++
			case markDenied:
				row.Denied++
			case markHeld:
				row.Held++
			}
		}
		row.Timeline = timeline(evs, s.CreatedAt, c.cfg.Now())
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b sessionRow) int { return b.Started.Compare(a.Started) })
	return rows
}

// endSession is POST /ui/sessions/{id}/end.
func (c *Console) endSession(w http.ResponseWriter, r *http.Request, _ signin) {
	id := r.PathValue("id")
	if _, ok := c.cfg.Sessions.Get(id); !ok {
		c.refuse(w, http.StatusNotFound, "no live session "+strconv.Quote(id))
		return
	}
	if err := c.cfg.Sessions.End(id); err != nil {
		c.refuse(w, http.StatusConflict, "session "+strconv.Quote(id)+" could not be ended: it has already ended or expired")
		return
	}
	c.log.Info("session ended from the console", zap.String("session_id", id))
	http.Redirect(w, r, "/ui/sessions", http.StatusSeeOther)
}

// auditFilter is the Audit page's query.
type auditFilter struct {
	Session, Decision, Connector, Status string
}

func (f auditFilter) matches(e audit.Event) bool {
	return (f.Session == "" || e.SessionID == f.Session) &&
		(f.Decision == "" || e.Decision == f.Decision) &&
		(f.Connector == "" || e.ConnectorFQN == f.Connector) &&
		(f.Status == "" || strconv.Itoa(e.Status) == f.Status)
}

type auditData struct {
	Filter                          auditFilter
	Events                          []audit.Event
	Sessions, Decisions, Connectors []string
	Timeline                        template.HTML
	// Skipped describes lines of the log that are not whole events (at
	// most maxSkippedShown); SkippedMore counts the rest.
	Skipped     []string
	SkippedMore int
}

// maxSkippedShown bounds the skipped lines the Audit page lists.
const maxSkippedShown = 5

func (c *Console) auditData(r *http.Request) any {
	q := r.URL.Query()
	f := auditFilter{Session: q.Get("session"), Decision: q.Get("decision"), Connector: q.Get("connector"), Status: q.Get("status")}
	all, skipped := c.readAudit(audit.TailOptions{})
	d := auditData{Filter: f}
	for i, s := range skipped {
		if i == maxSkippedShown {
			d.SkippedMore = len(skipped) - i
			break
		}
		d.Skipped = append(d.Skipped, s.String())
	}
	seen := map[string]bool{}
	add := func(list *[]string, prefix, v string) {
		if v != "" && !seen[prefix+v] {
			seen[prefix+v] = true
			*list = append(*list, v)
		}
	}
	var sessionEvents []audit.Event
	for _, e := range all {
		add(&d.Sessions, "s:", e.SessionID)
		add(&d.Decisions, "d:", e.Decision)
		add(&d.Connectors, "c:", e.ConnectorFQN)
		if f.matches(e) {
			d.Events = append(d.Events, e)
		}
		if f.Session != "" && e.SessionID == f.Session {
			sessionEvents = append(sessionEvents, e)
		}
	}
	for _, l := range [][]string{d.Sessions, d.Decisions, d.Connectors} {
		slices.Sort(l)
	}
	if len(sessionEvents) > 0 {
		d.Timeline = timeline(sessionEvents, sessionEvents[0].Time, c.cfg.Now())
	}
	if over := len(d.Events) - auditShown; over > 0 {
		d.Events = d.Events[over:]
	}
	slices.Reverse(d.Events)
	return d
}

// readAudit returns the audit log's events (none when it cannot be read)
// and the lines it skipped (torn by a write cut short, or not events).
func (c *Console) readAudit(opts audit.TailOptions) ([]audit.Event, []audit.Skipped) {
	var out []audit.Event
	var skipped []audit.Skipped
	opts.OnSkip = func(s audit.Skipped) { skipped = append(skipped, s) }
	err := audit.Tail(context.Background(), c.cfg.AuditPath, opts, func(e audit.Event) error {
		out = append(out, e)
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn("reading the audit log for the console", zap.Error(err))
	}
	return out, skipped
}

// removeSandbox is POST /ui/sandboxes/{id}/remove: what `aileron-proxy
// sandbox down ID` does, from the Sessions page.
func (c *Console) removeSandbox(w http.ResponseWriter, r *http.Request, _ signin) {
	id := r.PathValue("id")
	err := ErrSandboxNotFound
	if c.cfg.Sandboxes != nil {
		err = c.cfg.Sandboxes.Remove(r.Context(), id)
	}
	switch {
	case errors.Is(err, ErrSandboxNotFound):
		c.refuse(w, http.StatusNotFound, "no running sandbox "+strconv.Quote(id))
		return
	case err != nil:
		c.log.Warn("removing a sandbox from the console", zap.String("sandbox_id", id), zap.Error(err))
		c.refuse(w, http.StatusConflict, "sandbox "+strconv.Quote(id)+" could not be removed; see the daemon log")
		return
	}
	c.log.Info("sandbox removed from the console", zap.String("sandbox_id", id))
	http.Redirect(w, r, "/ui/sessions", http.StatusSeeOther)
}
