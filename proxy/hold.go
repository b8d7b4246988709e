package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/preview"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// This file holds the body of a request held for a person's approval: it is
// read whole before the person is asked, previewed, and then forwarded
// byte for byte, so what is approved is what is sent. It is the one place
// the proxy buffers a request body (invariant 5's other exception), and only
// for operations a person must approve.

// MaxHeldBody is the largest request body a held request may carry; a
// larger one is refused with 413 before anyone is asked.
const MaxHeldBody = 256 << 20

// heldBody is a held request's body: up to preview.MaxBody bytes in memory,
// a larger one in an unlinked temporary file (mode 0600) the proxy alone
// holds open.
type heldBody struct {
	data []byte
	file *os.File
	size int64
	// sum is the hex SHA-256 of the body.
	sum string
}

// errHeldTooLarge reports a body over MaxHeldBody.
var errHeldTooLarge = errors.New("held request body too large")

// errHeldTrailers reports a held request whose chunked body ended with
// trailer fields: the person would not see them, and a request forwarded
// with a Content-Length cannot carry them, so it is refused rather than
// sent without them.
var errHeldTrailers = errors.New("held request carries trailers")

// hasTrailerValues reports whether h holds a trailer field with a value
// (declared names the client never sent stay nil).
func hasTrailerValues(h http.Header) bool {
	for _, vv := range h {
		if len(vv) > 0 {
			return true
		}
	}
	return false
}

// readHeld reads r's whole body (at most MaxHeldBody bytes), then makes r
// send exactly those bytes with a Content-Length. The caller closes the
// result once the request is done.
func readHeld(r *http.Request) (*heldBody, error) {
	h := &heldBody{}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		sum := sha256.Sum256(nil)
		h.sum = hex.EncodeToString(sum[:])
		r.Body, r.ContentLength = http.NoBody, 0
		return h, nil
	}
	digest := sha256.New()
	var mem bytes.Buffer
	n, err := io.Copy(io.MultiWriter(&mem, digest), io.LimitReader(r.Body, preview.MaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading the held request body: %w", err)
	}
	if n > preview.MaxBody {
		f, err := os.CreateTemp("", "aileron-held-*")
		if err != nil {
			return nil, fmt.Errorf("spooling the held request body: %w", err)
		}
		_ = os.Remove(f.Name()) // unlinked: only this open file reaches it
		h.file = f
		if _, err := f.Write(mem.Bytes()); err != nil {
			h.close()
			return nil, fmt.Errorf("spooling the held request body: %w", err)
		}
		more, err := io.Copy(io.MultiWriter(f, digest), io.LimitReader(r.Body, MaxHeldBody-n+1))
		n += more
		if err != nil {
			h.close()
			return nil, fmt.Errorf("reading the held request body: %w", err)
		}
		if n > MaxHeldBody {
			h.close()
			return nil, errHeldTooLarge
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			h.close()
			return nil, fmt.Errorf("spooling the held request body: %w", err)
		}
	} else {
		h.data = mem.Bytes()
	}
	h.size = n
	h.sum = hex.EncodeToString(digest.Sum(nil))
	_ = r.Body.Close()
	if hasTrailerValues(r.Trailer) { // filled once the body is read whole
		h.close()
		return nil, errHeldTrailers
	}
	if h.file != nil {
		r.Body = io.NopCloser(h.file)
	} else {
		r.Body = io.NopCloser(bytes.NewReader(h.data))
	}
	r.ContentLength, r.TransferEncoding, r.Trailer = n, nil, nil
	return h, nil
}

// close releases the temporary file, if any.
func (h *heldBody) close() {
	if h != nil && h.file != nil {
		_ = h.file.Close()
		h.file = nil
	}
}

// holdBody reads the body of the held request x; on failure it answers the
// client and returns false.
func (s *Server) holdBody(w http.ResponseWriter, x *exchange) (*heldBody, bool) {
	h, err := readHeld(x.r)
	switch {
	case err == nil:
		x.ev.BytesIn = h.size
		return h, true
	case errors.Is(err, errHeldTooLarge):
		s.deny(w, x, http.StatusRequestEntityTooLarge, errorDetail{Code: contract.CodeBodyTooLarge,
			Message: fmt.Sprintf("%s %s of %s needs a person's approval, and a request held for one may carry at most %d MiB of body; send a smaller body",
				x.ev.Tool, x.ev.Operation, x.ev.ConnectorFQN, MaxHeldBody>>20)})
	case errors.Is(err, errHeldTrailers):
		s.deny(w, x, http.StatusBadRequest, errorDetail{Code: contract.CodeBadFraming,
			Message: fmt.Sprintf("%s %s of %s needs a person's approval, and a request held for one cannot end with trailer fields, which the person would not see; send the body without trailers",
				x.ev.Tool, x.ev.Operation, x.ev.ConnectorFQN)})
	default:
		s.clientClosed(w, x)
	}
	return nil, false
}

// requestPreview builds what the person is shown of the held request x
// (matched as m, with body h): its path templates, query and body fields,
// ordered by the operation's approval_preview fields (else its inputs) and
// labelled by an action's directive.
func requestPreview(x *exchange, m *policy.Match, h *heldBody, dir *preview.Directive) *preview.Preview {
	r := x.r
	hints := preview.Hints{}
	if plan := m.Compiled.Preview(); plan != nil && len(plan.Fields) > 0 {
		hints.Order = plan.Fields
	} else {
		hints.Order = m.Compiled.Inputs().Names()
	}
	if dir != nil {
		hints.Labels = dir.Labels
	}
	p := &preview.Preview{Method: x.ev.Method, Host: x.t.target, Path: x.path}
	if tmpl := m.Compiled.Template(); tmpl != nil {
		var params []preview.Field
		for _, name := range tmpl.Params() {
			if v, ok := m.PathParams[name]; ok {
				params = append(params, preview.NewField(name, v))
			}
		}
		p.PathParams = hints.Arrange(params)
	}
	p.Query = preview.QueryFields(r.URL.RawQuery, hints)
	data := h.data
	if h.file != nil {
		data = nil
	}
	p.Body = preview.NewBody(r.Header.Get("Content-Type"), data, h.size, h.sum, hints)
	return p
}

// RememberingApprover is an Approver that can tell, before Await, whether
// a decision remembered for the session ("approve for this session")
// answers a request at once; the proxy then skips the preview fetch, whose
// answer no one would see.
type RememberingApprover interface {
	Approver
	// Remembers reports whether a remembered decision answers r.
	Remembers(r ApprovalRequest) bool
}

// approvalPreview returns the preview of the held request x: the request
// itself and, when its operation or action names one, the preview fetch's
// answer. The fetch is skipped when a remembered decision answers the
// request.
func (s *Server) approvalPreview(x *exchange, m *policy.Match, h *heldBody, dir *preview.Directive) *preview.Preview {
	p := requestPreview(x, m, h, dir)
	if ra, ok := s.cfg.Approver.(RememberingApprover); ok && ra.Remembers(ApprovalRequest{
		SessionID: x.t.sess.ID, ConnectorFQN: m.ConnectorFQN, Tool: m.Tool, Operation: m.Compiled.Operation().Name,
	}) {
		return p
	}
	plan, err := previewPlan(m, dir)
	switch {
	case err != nil:
		p.Fetch = &preview.Fetch{Operation: dir.Operation, State: preview.FetchFailed, Error: err.Error(), Code: string(contract.CodeOperationNotAllowed)}
	case plan != nil:
		p.Fetch = s.fetchPreview(x, m, h, plan)
	}
	return p
}
