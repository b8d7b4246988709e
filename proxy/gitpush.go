package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/preview"
)

// This file holds a git push (a POST to .../git-receive-pack) for a
// person's approval without reading its pack: only the pkt-line commands at
// the start of the body (old id, new id, ref name) are read, shown as the
// preview's ref updates, and put back in front of the rest, which stays in
// the client's connection until the push is approved. A refusal is written
// as git's own report-status, so git prints the reason.

// gitReceivePackRequest is the media type of a push's request body.
const gitReceivePackRequest = "application/x-git-receive-pack-request"

// isGitPush reports whether r is a git push over smart HTTP whose commands
// can be read as sent (an encoded body is held whole like any other).
func isGitPush(r *http.Request) bool {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
		return false
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != gitReceivePackRequest {
		return false
	}
	ce := r.Header.Get("Content-Encoding")
	return ce == "" || strings.EqualFold(ce, "identity")
}

// readPktCommands reads pkt-lines from r up to and including the
// flush-pkt that ends a push's commands, at most limit bytes; what it read
// is returned even on error.
func readPktCommands(r io.Reader, limit int) ([]byte, error) {
	var buf []byte
	for len(buf)+4 <= limit {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return buf, err
		}
		buf = append(buf, hdr[:]...)
		n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
		if err != nil || (n != 0 && n < 4) {
			return buf, nil // ParseGitPush names the bad length
		}
		if n == 0 {
			return buf, nil
		}
		if len(buf)+int(n)-4 > limit {
			return buf, nil
		}
		start := len(buf)
		buf = append(buf, make([]byte, n-4)...)
		if _, err := io.ReadFull(r, buf[start:]); err != nil {
			return buf[:start], err
		}
	}
	return buf, nil
}

// peekedBody is a request body whose first bytes were read and are given
// back in front of the rest.
type peekedBody struct {
	io.Reader
	io.Closer
}

// gitPushPreview reads the commands of the held git push x and returns its
// preview; a push's pack stays unread. It returns nil, true for a request
// that is not a git push, and false after answering the client.
func (s *Server) gitPushPreview(w http.ResponseWriter, x *exchange) (*preview.Preview, bool) {
	r := x.r
	if !isGitPush(r) || r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	data, err := readPktCommands(r.Body, preview.MaxGitCommands)
	r.Body = peekedBody{io.MultiReader(bytes.NewReader(data), r.Body), r.Body}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		s.clientClosed(w, x)
		return nil, false
	}
	repo := strings.TrimSuffix(x.t.target, ":443") + strings.TrimSuffix(x.path, "/git-receive-pack")
	gp, caps, err := preview.ParseGitPush(repo, data)
	if err != nil {
		s.deny(w, x, http.StatusBadRequest, errorDetail{Code: contract.CodeInvalidBody,
			Message: fmt.Sprintf("git push to %s needs a person's approval, and its ref update commands cannot be read (%s); push with a standard git client", repo, err)})
		return nil, false
	}
	x.gitCaps = caps
	return &preview.Preview{Method: r.Method, Host: x.t.target, Path: x.path, GitPush: gp}, true
}

// denyHeld refuses the held request x: a git push (pv.GitPush set) in
// git's report-status, so git shows the reason per ref, any other with the
// usual JSON error.
func (s *Server) denyHeld(w http.ResponseWriter, x *exchange, pv *preview.Preview, status int, d errorDetail) {
	if pv == nil || pv.GitPush == nil || !slices.Contains(x.gitCaps, "report-status") && !slices.Contains(x.gitCaps, "report-status-v2") {
		s.deny(w, x, status, d)
		return
	}
	// The pack is read and dropped now, so closing after the answer does
	// not reset it before git reads the refusal.
	_, _ = io.CopyN(io.Discard, x.r.Body, MaxHeldBody)
	rec := discardWriter{header: http.Header{}}
	s.deny(rec, x, status, d) // audits and logs the denial as any other
	w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(contract.HeaderDecision, contract.DecisionDenied)
	if id := rec.Header().Get(contract.HeaderAuditID); id != "" {
		w.Header().Set(contract.HeaderAuditID, id)
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(gitRefusal(pv.GitPush, x.gitCaps, d.Message))
}

// gitRefusal is a receive-pack result that refuses every ref update of gp
// with reason, in a side band when the client asked for one.
func gitRefusal(gp *preview.GitPush, caps []string, reason string) []byte {
	reason = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, reason)
	var status bytes.Buffer
	writePkt(&status, "unpack ok\n")
	for _, u := range gp.Updates {
		writePkt(&status, "ng "+u.Ref+" "+reason+"\n")
	}
	status.WriteString("0000")
	if !slices.Contains(caps, "side-band-64k") && !slices.Contains(caps, "side-band") {
		return status.Bytes()
	}
	var out bytes.Buffer
	writePkt(&out, "\x02aileron-proxy: "+reason+"\n")
	for b := status.Bytes(); len(b) > 0; {
		n := min(len(b), 990)
		writePkt(&out, "\x01"+string(b[:n]))
		b = b[n:]
	}
	out.WriteString("0000")
	return out.Bytes()
}

func writePkt(b *bytes.Buffer, s string) {
	fmt.Fprintf(b, "%04x%s", len(s)+4, s)
}

// discardWriter takes a response nobody reads.
type discardWriter struct{ header http.Header }

func (d discardWriter) Header() http.Header         { return d.header }
func (d discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d discardWriter) WriteHeader(int)             {}
