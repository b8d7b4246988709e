package approval

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/preview"
)

// BodySummary returns a held request's body in a few words for a one-line
// listing: "-" for none, else its size and the start of its digest.
func (p Pending) BodySummary() string {
	if p.Preview != nil && p.Preview.GitPush != nil {
		return p.Preview.GitPush.Summary()
	}
	if p.BodySHA256 == "" {
		return "-"
	}
	return fmt.Sprintf("%dB sha256:%.12s", p.BodySize, p.BodySHA256)
}

// HeldLine says in one line what a person is asked to approve, for the
// agent whose call is held (the MCP server's progress notifications): the
// approval, the request, the names of the fields it sends (never their
// values, nor the state a preview fetch brought back) and the body's
// digest.
func (p Pending) HeldLine() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s %s%s (%s %s)", p.ID, p.Method, p.Host, p.Path, p.Tool, p.Operation)
	if pv := p.Preview; pv != nil && pv.Body != nil && len(pv.Body.Fields) > 0 {
		names := make([]string, len(pv.Body.Fields))
		for i, f := range pv.Body.Fields {
			names[i] = f.Name
		}
		fmt.Fprintf(&b, ", fields %s", strings.Join(names, ", "))
	}
	if body := p.BodySummary(); body != "-" {
		fmt.Fprintf(&b, ", body %s", body)
	}
	return b.String()
}

// WriteText writes everything known about p for a terminal: the request,
// its fields (multi-line values indented as blocks), the body's digest, and
// the preview fetch's state. Values were made safe to print when the
// preview was built.
func WriteText(w io.Writer, p Pending) error {
	var b strings.Builder
	st := p.State
	if p.Decision != "" {
		st = p.Decision
	}
	fmt.Fprintf(&b, "Approval:   %s (%s)\n", p.ID, st)
	fmt.Fprintf(&b, "Session:    %s\n", p.SessionID)
	fmt.Fprintf(&b, "Operation:  %s %s of %s\n", p.Tool, p.Operation, p.ConnectorFQN)
	fmt.Fprintf(&b, "Request:    %s %s%s\n", p.Method, p.Host, p.Path)
	fmt.Fprintf(&b, "Requested:  %s\n", p.RequestedAt.UTC().Format(time.RFC3339))
	if len(p.Fields) > 0 {
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range p.Fields {
				if !yield(k) {
					return
				}
			}
		})
		b.WriteString("Audit fields:\n")
		for _, k := range keys {
			fmt.Fprintf(&b, "  %s: %s\n", k, p.Fields[k])
		}
	}
	pv := p.Preview
	if pv != nil {
		writeFields(&b, "Path", pv.PathParams)
		writeFields(&b, "Query", pv.Query)
		if body := pv.Body; body != nil && body.Kind != preview.KindNone {
			fmt.Fprintf(&b, "Body:       %s, %d bytes, sha256 %s\n", orDash(body.ContentType), body.Size, body.SHA256)
			switch body.Kind {
			case preview.KindTooLarge:
				fmt.Fprintf(&b, "  (larger than %d KiB: shown by size and digest only)\n", preview.MaxBody>>10)
			case preview.KindJSON, preview.KindForm:
				writeFields(&b, "Body fields", body.Fields)
			default:
				fmt.Fprintf(&b, "  %s excerpt:\n", body.Kind)
				writeBlock(&b, body.Excerpt)
			}
		}
		if g := pv.GitPush; g != nil {
			fmt.Fprintf(&b, "Git push:   %s, %d ref update(s)\n", g.Repository, g.Count)
			for _, u := range g.Updates {
				fmt.Fprintf(&b, "  %s %s: %s -> %s\n", u.Action, u.Ref, u.Old, u.New)
			}
			if more := g.More(); more > 0 {
				fmt.Fprintf(&b, "  (and %d more)\n", more)
			}
			if g.Truncated {
				b.WriteString("  (more commands than the preview reads)\n")
			}
			if g.PushCert {
				b.WriteString("  (signed push; its certificate is not shown)\n")
			}
		}
		if f := pv.Fetch; f != nil {
			if f.State == preview.FetchOK {
				fmt.Fprintf(&b, "Fetched:    %s (status %d)\n", f.Operation, f.Status)
				writeFields(&b, "", f.Fields)
			} else {
				fmt.Fprintf(&b, "Fetched:    %s FAILED: %s", f.Operation, f.Error)
				if f.Code != "" {
					fmt.Fprintf(&b, " (%s)", f.Code)
				}
				b.WriteString("\n")
			}
		}
	} else if p.BodySHA256 != "" {
		fmt.Fprintf(&b, "Body:       %d bytes, sha256 %s\n", p.BodySize, p.BodySHA256)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeFields(b *strings.Builder, title string, fs []preview.Field) {
	if len(fs) == 0 {
		return
	}
	if title != "" {
		b.WriteString(title + ":\n")
	}
	folded := false
	for _, f := range fs {
		if !f.Primary && !folded && fs[0].Primary {
			b.WriteString("  (other fields)\n")
			folded = true
		}
		if f.Multiline {
			fmt.Fprintf(b, "  %s:\n", f.Display())
			writeBlock(b, f.Value)
			continue
		}
		fmt.Fprintf(b, "  %s: %s", f.Display(), f.Value)
		if f.Truncated {
			b.WriteString(" (truncated)")
		}
		b.WriteString("\n")
	}
}

func writeBlock(b *strings.Builder, s string) {
	for _, line := range strings.Split(s, "\n") {
		b.WriteString("    | " + line + "\n")
	}
}
