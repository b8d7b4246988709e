package preview

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxRefUpdates is how many ref updates of one git push a preview lists;
// Count still says how many the push carries.
const MaxRefUpdates = 64

// MaxGitCommands bounds the pkt-line commands read from the start of a git
// push before its pack: a push whose commands run longer is held with the
// commands seen so far and Truncated set.
const MaxGitCommands = 256 << 10

// Ref update actions.
const (
	RefCreate = "create"
	RefUpdate = "update"
	RefDelete = "delete"
)

// GitPush is what a person is shown of a git push (a POST to
// .../git-receive-pack): the repository and the ref updates its leading
// pkt-line commands ask for. The pack that follows is never read for the
// preview.
type GitPush struct {
	// Repository is the host and path of the repository pushed to.
	Repository string `json:"repository"`
	// Updates are the first MaxRefUpdates ref updates, in the order sent.
	Updates []RefChange `json:"updates"`
	// Count is how many ref updates the commands carry.
	Count int `json:"count"`
	// Truncated reports that the commands ran past MaxGitCommands and
	// only the ones before were read.
	Truncated bool `json:"truncated,omitempty"`
	// PushCert reports a signed push, whose certificate is not shown.
	PushCert bool `json:"push_cert,omitempty"`
}

// RefChange is one ref update of a git push.
type RefChange struct {
	Ref string `json:"ref"`
	// Old and New are object ids; all zeros means absent.
	Old string `json:"old"`
	New string `json:"new"`
	// Action is create, update or delete.
	Action string `json:"action"`
}

// String renders the update for one line of text, ids shortened.
func (c RefChange) String() string {
	switch c.Action {
	case RefCreate:
		return fmt.Sprintf("%s %s (create)", c.Ref, short(c.New))
	case RefDelete:
		return fmt.Sprintf("%s %s (delete)", c.Ref, short(c.Old))
	}
	return fmt.Sprintf("%s %s..%s", c.Ref, short(c.Old), short(c.New))
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// More is how many ref updates the push carries beyond those listed.
func (g *GitPush) More() int { return g.Count - len(g.Updates) }

// Summary is the push on one line: its updates, at most three.
func (g *GitPush) Summary() string {
	if g == nil {
		return ""
	}
	parts := make([]string, 0, 3)
	for i, u := range g.Updates {
		if i == 3 {
			break
		}
		parts = append(parts, u.String())
	}
	s := "push " + strings.Join(parts, ", ")
	if more := g.Count - len(parts); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	if g.Truncated {
		s += " (more not read)"
	}
	return s
}

// Errors of ParseGitPush.
var (
	errPktLength = errors.New("bad pkt-line length")
	errCommand   = errors.New("bad ref update command")
)

// IsObjectID reports whether s is a lowercase hex SHA-1 or SHA-256 object id.
func IsObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func isZeroID(s string) bool { return strings.Trim(s, "0") == "" }

// ParseGitPush parses the pkt-line commands at the start of a
// receive-pack request body, data, up to and including their flush-pkt
// ("0000"): "<old> <new> <ref>" lines, the first followed by NUL and the
// capabilities, optionally after "shallow <id>" lines or as a push
// certificate. data never holds the pack. A data without the flush-pkt is
// parsed as far as it goes and Truncated is set; a malformed line is an
// error. It returns the client's capabilities too.
func ParseGitPush(repository string, data []byte) (*GitPush, []string, error) {
	g := &GitPush{Repository: repository}
	var caps []string
	first := true
	for len(data) > 0 {
		if len(data) < 4 {
			g.Truncated = true
			break
		}
		n, err := strconv.ParseUint(string(data[:4]), 16, 16)
		if err != nil {
			return nil, nil, fmt.Errorf("%w %q", errPktLength, data[:4])
		}
		if n == 0 {
			return g, caps, nil // flush-pkt: the commands end here
		}
		if n < 4 {
			return nil, nil, fmt.Errorf("%w %q", errPktLength, data[:4])
		}
		if int(n) > len(data) {
			g.Truncated = true
			break
		}
		line := data[4:n]
		data = data[n:]
		line = bytes.TrimSuffix(line, []byte("\n"))
		if first {
			if i := bytes.IndexByte(line, 0); i >= 0 {
				caps = strings.Fields(string(line[i+1:]))
				line = line[:i]
			}
		}
		if rest, ok := bytes.CutPrefix(line, []byte("shallow ")); ok && first {
			if !IsObjectID(string(rest)) {
				return nil, nil, fmt.Errorf("%w: shallow %q", errCommand, safeText(rest))
			}
			continue
		}
		if first && string(line) == "push-cert" {
			// A signed push: the commands are lines of its certificate,
			// among header and signature lines that are skipped.
			g.PushCert = true
			first = false
			continue
		}
		first = false
		f := strings.Split(string(line), " ")
		isCommand := len(f) == 3 && IsObjectID(f[0]) && IsObjectID(f[1]) && len(f[0]) == len(f[1]) && f[2] != ""
		if g.PushCert && !isCommand {
			continue
		}
		if !isCommand {
			return nil, nil, fmt.Errorf("%w %q", errCommand, safeText(line))
		}
		u := RefChange{Ref: safeText([]byte(f[2])), Old: f[0], New: f[1], Action: RefUpdate}
		switch {
		case isZeroID(u.Old):
			u.Action = RefCreate
		case isZeroID(u.New):
			u.Action = RefDelete
		}
		g.Count++
		if len(g.Updates) < MaxRefUpdates {
			g.Updates = append(g.Updates, u)
		}
	}
	g.Truncated = true
	return g, caps, nil
}
