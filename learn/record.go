package learn

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Dir is the directory of learn records under $AILERON_HOME.
const Dir = "learn"

// RecordVersion is the first line's "learn_record" value.
const RecordVersion = "aileron.learn.v1"

// Header is the first line of a learn record.
type Header struct {
	// Version is RecordVersion.
	Version string `json:"learn_record"`
	// SessionID is the learn session.
	SessionID string `json:"session_id"`
	// Hosts are the session's learn patterns, normal form.
	Hosts []string `json:"hosts"`
	// CreatedAt is when the session started.
	CreatedAt time.Time `json:"created_at"`
	// Agent and Project label the session, as the creator gave them.
	Agent   string `json:"agent,omitempty"`
	Project string `json:"project,omitempty"`
}

// Request is one learned request: every line of a record after the header.
// It holds names and types, never a header, query or body value; Path is the
// one place path segment values are kept.
type Request struct {
	Time time.Time `json:"time"`
	// AuditID is the connector.proxy.learned event of the request.
	AuditID string `json:"audit_id,omitempty"`
	Method  string `json:"method"`
	// Host is the upstream host:port.
	Host string `json:"host"`
	// Path is the escaped request path, values included.
	Path string `json:"path"`
	// Query are the query parameter names, each with the type of its
	// values (string when they differ), in order of first appearance.
	Query []Field `json:"query,omitempty"`
	// Body are the top-level keys of a JSON body with their types.
	Body []Field `json:"body,omitempty"`
	// ContentType is the request's media type, without parameters.
	ContentType string `json:"content_type,omitempty"`
	// Auth is the kind of credential the client sent (and the proxy
	// stripped).
	Auth ClientAuth `json:"auth,omitzero"`
	// Status is the response status; ResponseContentType its media type.
	Status              int    `json:"status"`
	ResponseContentType string `json:"response_content_type,omitempty"`
}

// Record is a learn record as read back.
type Record struct {
	Header   Header
	Requests []Request
	// Path is the file it was read from.
	Path string
}

// Store is the set of learn records under a home directory. Records are
// files <session id>.jsonl with mode 0600 in a 0700 directory.
type Store struct {
	dir string

	mu    sync.Mutex
	files map[string]*os.File
}

// OpenStore returns the store under home ($AILERON_HOME); it creates
// nothing until a session starts.
func OpenStore(home string) (*Store, error) {
	if home == "" {
		return nil, errors.New("opening the learn records: home is empty; set AILERON_HOME or pass --home")
	}
	return &Store{dir: filepath.Join(home, Dir), files: map[string]*os.File{}}, nil
}

// Path returns the record file of session id.
func (s *Store) Path(id string) string { return filepath.Join(s.dir, id+".jsonl") }

// validID refuses IDs that could name a file outside the store.
func validID(id string) error {
	if id == "" || strings.ContainsAny(id, `/\.`) || len(id) > 64 {
		return fmt.Errorf("session ID %q is not valid; use an ID from `aileron-proxy session list`, or LAST", id)
	}
	return nil
}

// Start creates the record of a learn session and writes its header. A
// record already there is replaced.
func (s *Store) Start(h Header) error {
	if err := validID(h.SessionID); err != nil {
		return err
	}
	h.Version = RecordVersion
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("creating the learn record directory %s: %w", s.dir, err)
	}
	p := s.Path(h.SessionID)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("creating the learn record %s: %w", p, err)
	}
	line, _ := json.Marshal(h)
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("writing the learn record %s: %w", p, err)
	}
	s.hold(h.SessionID, f)
	return nil
}

// hold makes f the open record of session id, closing the one held before.
func (s *Store) hold(id string, f *os.File) {
	s.mu.Lock()
	if old := s.files[id]; old != nil {
		old.Close()
	}
	s.files[id] = f
	s.mu.Unlock()
}

// Resume opens the record of a learn session that outlived a restart of
// serve for appending, keeping what it holds; a session without a record
// here (its file was removed) gets a new one, as Start makes.
func (s *Store) Resume(h Header) error {
	if err := validID(h.SessionID); err != nil {
		return err
	}
	p := s.Path(h.SessionID)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		return s.Start(h)
	}
	if err != nil {
		return fmt.Errorf("opening the learn record %s: %w", p, err)
	}
	s.hold(h.SessionID, f)
	return nil
}

// Append adds one learned request to the record of session id, as one
// whole line.
func (s *Store) Append(id string, r Request) error {
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding a learned request: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[id]
	if f == nil {
		return fmt.Errorf("session %s has no open learn record", id)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("writing the learn record of session %s: %w", id, err)
	}
	return nil
}

// Close closes the record of session id (the session ended); the file stays
// for `connector draft`.
func (s *Store) Close(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.files[id]; f != nil {
		f.Close()
		delete(s.files, id)
	}
}

// Remove deletes the record of session id.
func (s *Store) Remove(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	s.Close(id)
	if err := os.Remove(s.Path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the learn record of session %s: %w", id, err)
	}
	return nil
}

// Last is the session reference that names the most recent learn record.
const Last = "LAST"

// Resolve returns the session ID ref names: ref itself, or for Last the
// session of the most recently started record.
func (s *Store) Resolve(ref string) (string, error) {
	if ref != Last {
		if err := validID(ref); err != nil {
			return "", err
		}
		return ref, nil
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("listing learn records in %s: %w", s.dir, err)
	}
	type cand struct {
		id string
		at time.Time
	}
	var cands []cand
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".jsonl")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		h, err := readHeader(s.Path(id))
		if err != nil {
			continue
		}
		cands = append(cands, cand{id, h.CreatedAt})
	}
	if len(cands) == 0 {
		return "", fmt.Errorf("there is no learn record in %s; run a learn session first: aileron-proxy launch --learn 'HOSTGLOB' -- AGENT", s.dir)
	}
	last := slices.MaxFunc(cands, func(a, b cand) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return last.id, nil
}

func readHeader(p string) (Header, error) {
	f, err := os.Open(p)
	if err != nil {
		return Header{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	if !sc.Scan() {
		return Header{}, fmt.Errorf("learn record %s is empty", p)
	}
	var h Header
	if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.Version != RecordVersion {
		return Header{}, fmt.Errorf("learn record %s line 1 is not an %s header", p, RecordVersion)
	}
	return h, nil
}

// maxLine bounds one line of a record.
const maxLine = 1 << 20

// Read reads the record of session id.
func (s *Store) Read(id string) (*Record, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	return ReadFile(s.Path(id))
}

// ReadFile reads a learn record file. A last line cut short (the daemon
// stopped mid-write) is ignored; any other bad line is an error naming it.
func ReadFile(p string) (*Record, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no learn record at %s: the session was not a learn session, or its record was removed by an earlier draft (use --keep to keep it)", p)
	}
	if err != nil {
		return nil, fmt.Errorf("opening learn record: %w", err)
	}
	defer f.Close()
	rec := &Record{Path: p}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	n := 0
	var pending error
	for sc.Scan() {
		n++
		if pending != nil {
			return nil, pending
		}
		if n == 1 {
			if err := json.Unmarshal(sc.Bytes(), &rec.Header); err != nil || rec.Header.Version != RecordVersion {
				return nil, fmt.Errorf("learn record %s line 1 is not an %s header", p, RecordVersion)
			}
			continue
		}
		var r Request
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			pending = fmt.Errorf("learn record %s line %d: %w", p, n, err)
			continue
		}
		rec.Requests = append(rec.Requests, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading learn record %s: %w", p, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("learn record %s is empty", p)
	}
	return rec, nil
}
