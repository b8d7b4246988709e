package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/aileron-dev/aileron-proxy/audit"
)

// mark is how an audit event shows on a timeline.
type mark int

const (
	markNone mark = iota
	markAllowed
	markHeld
	markDenied
)

// kindOf classifies a request event; other events are markNone.
func kindOf(e audit.Event) mark {
	switch e.Event {
	case audit.EventProxied, audit.EventPassthrough:
		return markAllowed
	case audit.EventDenied:
		return markDenied
	case audit.EventApprovalRequested:
		return markHeld
	}
	return markNone
}

// Timeline geometry, in SVG user units.
const (
	tlWidth  = 640
	tlHeight = 66
	tlLeft   = 64
	tlRight  = 8
)

// lanes are the timeline rows, top to bottom.
var lanes = []struct {
	m     mark
	label string
}{{markAllowed, "allowed"}, {markHeld, "held"}, {markDenied, "denied"}}

// timeline draws evs between start and end as an SVG: one lane each for
// allowed, held and denied requests, one dot per request. It is built from
// numbers and escaped names only.
func timeline(evs []audit.Event, start, end time.Time) template.HTML {
	if !end.After(start) {
		end = start.Add(time.Second)
	}
	span := float64(end.Sub(start))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="timeline" role="img" aria-label="requests over time" viewBox="0 0 %d %d" width="%d" height="%d">`,
		tlWidth, tlHeight, tlWidth, tlHeight)
	for i, l := range lanes {
		y := 12 + i*20
		fmt.Fprintf(&b, `<text class="lane" x="0" y="%d">%s</text><line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"></line>`,
			y+4, l.label, tlLeft, y, tlWidth-tlRight, y)
	}
	for _, e := range evs {
		m := kindOf(e)
		if m == markNone {
			continue
		}
		frac := float64(e.Time.Sub(start)) / span
		frac = min(max(frac, 0), 1)
		x := tlLeft + frac*float64(tlWidth-tlLeft-tlRight)
		y := 12 + (int(m)-1)*20
		title := template.HTMLEscapeString(fmt.Sprintf("%s %s %s %s", e.Time.UTC().Format("15:04:05"), e.Tool, e.Operation, e.Decision))
		fmt.Fprintf(&b, `<circle class="dot %s" cx="%.1f" cy="%d" r="5"><title>%s</title></circle>`, lanes[m-1].label, x, y, title)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // numbers, fixed names and escaped text only
}
