package console

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aileron-dev/aileron-proxy/approval"
)

// heartbeat is how often an idle event stream sends a comment line.
const heartbeat = 15 * time.Second

// state is a fingerprint of what each page shows.
type state struct {
	approvals, sessions string // hex SHA-256
	audit               string // size and mtime of the audit log
}

// String is the form pages carry and ?state= sends back.
func (s state) String() string { return s.approvals + "." + s.sessions + "." + s.audit }

// parseState reads String's form; ok is false for anything else.
func parseState(v string) (s state, ok bool) {
	parts := strings.Split(v, ".")
	if len(parts) != 3 || len(parts[0]) != 2*sha256.Size || len(parts[1]) != 2*sha256.Size || len(parts[2]) > 64 {
		return state{}, false
	}
	return state{parts[0], parts[1], parts[2]}, true
}

func (c *Console) state() state {
	var s state
	ah := sha256.New()
	for _, p := range c.cfg.Approvals.List(approval.StateAll) {
		fmt.Fprintf(ah, "%s %s\n", p.ID, p.State)
	}
	s.approvals = hex.EncodeToString(ah.Sum(nil))
	sh := sha256.New()
	for _, ses := range c.cfg.Sessions.List() {
		fmt.Fprintln(sh, ses.ID)
	}
	s.sessions = hex.EncodeToString(sh.Sum(nil))
	if fi, err := os.Stat(c.cfg.AuditPath); err == nil {
		s.audit = fmt.Sprintf("%d-%d", fi.Size(), fi.ModTime().UnixNano())
	}
	return s
}

// events is GET /ui/events: a server-sent event stream that names the part
// that changed ("approvals", "sessions" or "audit"); the page then fetches
// its fresh main section. The server checks for changes; the page never
// polls.
func (c *Console) events(w http.ResponseWriter, r *http.Request, _ signin) {
	// The baseline is the state the page was rendered from (?state=), or
	// now; it is taken before the stream counts as a viewer, so a change
	// made once HasViewer reports true is always announced.
	last, ok := parseState(r.URL.Query().Get("state"))
	if !ok {
		last = c.state()
	}
	rc := http.NewResponseController(w)
	// The API server's write timeout is for requests, not for a stream.
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	c.viewers.Add(1)
	defer c.viewers.Add(-1)
	if _, err := fmt.Fprint(w, "retry: 1000\n: connected\n\n"); err != nil {
		return
	}
	_ = rc.Flush()
	tick := time.NewTicker(c.cfg.Tick)
	defer tick.Stop()
	idle := time.Now()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
		now := c.state()
		var names []string
		if now.approvals != last.approvals {
			names = append(names, "approvals")
		}
		if now.sessions != last.sessions {
			names = append(names, "sessions")
		}
		if now.audit != last.audit {
			names = append(names, "audit")
		}
		last = now
		if len(names) == 0 && time.Since(idle) < heartbeat {
			continue
		}
		idle = time.Now()
		if len(names) == 0 {
			names = []string{""}
		}
		for _, n := range names {
			var err error
			if n == "" {
				_, err = fmt.Fprint(w, ": idle\n\n")
			} else {
				_, err = fmt.Fprintf(w, "event: %s\ndata: changed\n\n", n)
			}
			if err != nil {
				return
			}
		}
		if rc.Flush() != nil {
			return
		}
	}
}
