package credentials

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/aileron-dev/aileron-proxy/internal/atomicfile"
)

// FileVersion is the credentials.json schema version this package writes and
// reads.
const FileVersion = 1

// maxFileSize bounds what LoadFile reads.
const maxFileSize = 4 << 20

// File is the credentials.json model: bindings keyed by (FQN, Kind). The zero
// value is an empty file. A File is not safe for concurrent mutation; the
// Resolver takes a snapshot.
type File struct {
	bindings []Binding // sorted by FQN, then Kind; (FQN, Kind) unique
}

// BindingInfo describes a binding without any secret, for listings.
type BindingInfo struct {
	FQN  string `json:"connector"`
	Kind Kind   `json:"kind"`
	// Source is env, file, exec, stored, oauth2 or aws_profile (Ref is the
	// profile); for aws_sigv4 keys it is the secret access key's source.
	Source string `json:"source"`
	// Ref is the environment variable, file path or command; empty for
	// stored and oauth2.
	Ref string `json:"ref,omitempty"`
	// Placement renders where the secret goes, e.g.
	// "Authorization: Bearer {secret}".
	Placement string      `json:"placement"`
	Username  string      `json:"username,omitempty"`
	OAuth2    *OAuth2Info `json:"oauth2,omitempty"`
}

// OAuth2Info describes an OAuth2 refresh configuration without secrets.
type OAuth2Info struct {
	TokenURL string `json:"token_url"`
	ClientID string `json:"client_id"`
	// ClientSecret and RefreshToken render their source, e.g. "env X".
	ClientSecret string   `json:"client_secret,omitempty"`
	RefreshToken string   `json:"refresh_token"`
	Scopes       []string `json:"scopes,omitempty"`
}

// Set adds b, replacing the binding with the same (FQN, Kind). Call
// b.Validate first; Save and NewResolver refuse invalid bindings.
func (f *File) Set(b Binding) {
	if b.OAuth2 != nil {
		o := *b.OAuth2
		o.Scopes = append([]string(nil), o.Scopes...)
		b.OAuth2 = &o
	}
	for i := range f.bindings {
		if f.bindings[i].FQN == b.FQN && f.bindings[i].Kind == b.Kind {
			f.bindings[i] = b
			return
		}
	}
	f.bindings = append(f.bindings, b)
	sortBindings(f.bindings)
}

// Remove deletes the binding for (fqn, kind) and reports whether one existed.
func (f *File) Remove(fqn string, kind Kind) bool {
	for i := range f.bindings {
		if f.bindings[i].FQN == fqn && f.bindings[i].Kind == kind {
			f.bindings = append(f.bindings[:i], f.bindings[i+1:]...)
			return true
		}
	}
	return false
}

// Get returns the binding for (fqn, kind).
func (f *File) Get(fqn string, kind Kind) (Binding, bool) {
	for _, b := range f.bindings {
		if b.FQN == fqn && b.Kind == kind {
			return b, true
		}
	}
	return Binding{}, false
}

// Len returns the number of bindings.
func (f *File) Len() int { return len(f.bindings) }

// List describes every binding, sorted by FQN then kind, without secrets.
func (f *File) List() []BindingInfo {
	out := make([]BindingInfo, 0, len(f.bindings))
	for _, b := range f.bindings {
		info := BindingInfo{
			FQN:       b.FQN,
			Kind:      b.Kind,
			Source:    string(b.Source.Type),
			Ref:       b.Source.Ref,
			Placement: b.DescribePlacement(),
			Username:  b.Username,
		}
		if a := b.AWS; a != nil && a.Profile != "" {
			info.Source, info.Ref = "aws_profile", a.Profile
		}
		if o := b.OAuth2; o != nil {
			info.Source, info.Ref = "oauth2", ""
			info.OAuth2 = &OAuth2Info{
				TokenURL:     o.TokenURL,
				ClientID:     o.ClientID,
				RefreshToken: o.RefreshToken.Describe(),
				Scopes:       append([]string(nil), o.Scopes...),
			}
			if !o.ClientSecret.IsZero() {
				info.OAuth2.ClientSecret = o.ClientSecret.Describe()
			}
		}
		out = append(out, info)
	}
	return out
}

// clone returns a deep copy, so a Resolver's snapshot is unaffected by later
// edits of f.
func (f *File) clone() *File {
	c := &File{}
	for _, b := range f.bindings {
		c.Set(b)
	}
	return c
}

func sortBindings(bs []Binding) {
	sort.Slice(bs, func(i, j int) bool {
		if bs[i].FQN != bs[j].FQN {
			return bs[i].FQN < bs[j].FQN
		}
		return bs[i].Kind < bs[j].Kind
	})
}

// On-disk schema. Only LoadFile and Save use these types.
type fileJSON struct {
	Version  int           `json:"version"`
	Bindings []bindingJSON `json:"bindings"`
}

type bindingJSON struct {
	Connector string      `json:"connector"`
	Kind      string      `json:"kind"`
	Source    *sourceJSON `json:"source,omitempty"`
	OAuth2    *oauth2JSON `json:"oauth2,omitempty"`
	Username  string      `json:"username,omitempty"`
	Header    string      `json:"header,omitempty"`
	Format    string      `json:"format,omitempty"`
	Query     string      `json:"query,omitempty"`
	AWS       *awsJSON    `json:"aws,omitempty"`
}

type awsJSON struct {
	AccessKeyID  *sourceJSON `json:"access_key_id,omitempty"`
	SessionToken *sourceJSON `json:"session_token,omitempty"`
	Profile      string      `json:"profile,omitempty"`
	Region       string      `json:"region,omitempty"`
	Service      string      `json:"service,omitempty"`
}

type sourceJSON struct {
	Type  string `json:"type"`
	Ref   string `json:"ref,omitempty"`
	Value string `json:"value,omitempty"`
}

type oauth2JSON struct {
	TokenURL     string      `json:"token_url"`
	ClientID     string      `json:"client_id"`
	ClientSecret *sourceJSON `json:"client_secret,omitempty"`
	RefreshToken *sourceJSON `json:"refresh_token"`
	Scopes       []string    `json:"scopes,omitempty"`
}

func sourceToJSON(s Source) *sourceJSON {
	if s.IsZero() {
		return nil
	}
	return &sourceJSON{Type: string(s.Type), Ref: s.Ref, Value: s.Value.Reveal()}
}

func sourceFromJSON(s *sourceJSON) Source {
	if s == nil {
		return Source{}
	}
	src := Source{Type: SourceType(s.Type), Ref: s.Ref}
	if s.Value != "" {
		src.Value = NewValue(s.Value)
	}
	return src
}

// LoadFile reads credentials.json. A missing file is an empty File. A file
// readable by group or others is refused, as is any invalid binding.
func LoadFile(path string) (*File, error) {
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &File{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening credentials file: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading credentials file: %w", err)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("loading credentials file %q: it is accessible by other users (mode %04o); run: chmod 600 %q", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading credentials file %q: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("loading credentials file %q: larger than %d bytes", path, maxFileSize)
	}
	f, err := parseFile(data)
	if err != nil {
		return nil, fmt.Errorf("loading credentials file %q: %w", path, err)
	}
	return f, nil
}

// parseFile decodes credentials.json. Errors name the offending binding by
// index and never include secret values (json syntax errors report offsets
// only).
func parseFile(data []byte) (*File, error) {
	var fj fileJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fj); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("invalid JSON at byte %d; fix the file or remove it and set the credentials again", se.Offset)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("field %q has the wrong JSON type at byte %d", te.Field, te.Offset)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, errors.New("invalid JSON: the file ends early; fix the file or remove it and set the credentials again")
		}
		// Unknown-field errors name the field, never a value.
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if fj.Version != FileVersion {
		return nil, fmt.Errorf("version %d is not supported; this build reads version %d", fj.Version, FileVersion)
	}
	f := &File{}
	for i, bj := range fj.Bindings {
		b := Binding{
			FQN:       bj.Connector,
			Kind:      Kind(bj.Kind),
			Source:    sourceFromJSON(bj.Source),
			Username:  bj.Username,
			Placement: Placement{Header: bj.Header, Format: bj.Format, Query: bj.Query},
		}
		if o := bj.OAuth2; o != nil {
			b.OAuth2 = &OAuth2{
				TokenURL:     o.TokenURL,
				ClientID:     o.ClientID,
				ClientSecret: sourceFromJSON(o.ClientSecret),
				RefreshToken: sourceFromJSON(o.RefreshToken),
				Scopes:       o.Scopes,
			}
		}
		if a := bj.AWS; a != nil {
			b.AWS = &AWSSigV4{AccessKeyID: sourceFromJSON(a.AccessKeyID), SessionToken: sourceFromJSON(a.SessionToken),
				Profile: a.Profile, Region: a.Region, Service: a.Service}
		}
		if err := b.Validate(); err != nil {
			return nil, fmt.Errorf("bindings[%d] (%s %s): %w", i, bj.Connector, bj.Kind, err)
		}
		if _, dup := f.Get(b.FQN, b.Kind); dup {
			return nil, fmt.Errorf("bindings[%d]: %s has two %s credentials; remove one", i, b.FQN, b.Kind)
		}
		f.Set(b)
	}
	return f, nil
}

// marshal encodes f as credentials.json, stored secrets included.
func (f *File) marshal() ([]byte, error) {
	fj := fileJSON{Version: FileVersion, Bindings: make([]bindingJSON, 0, len(f.bindings))}
	for _, b := range f.bindings {
		if err := b.Validate(); err != nil {
			return nil, fmt.Errorf("credential for %s (%s): %w", b.FQN, b.Kind, err)
		}
		bj := bindingJSON{
			Connector: b.FQN,
			Kind:      string(b.Kind),
			Source:    sourceToJSON(b.Source),
			Username:  b.Username,
			Header:    b.Placement.Header,
			Format:    b.Placement.Format,
			Query:     b.Placement.Query,
		}
		if a := b.AWS; a != nil {
			bj.AWS = &awsJSON{AccessKeyID: sourceToJSON(a.AccessKeyID), SessionToken: sourceToJSON(a.SessionToken),
				Profile: a.Profile, Region: a.Region, Service: a.Service}
		}
		if o := b.OAuth2; o != nil {
			bj.OAuth2 = &oauth2JSON{
				TokenURL:     o.TokenURL,
				ClientID:     o.ClientID,
				ClientSecret: sourceToJSON(o.ClientSecret),
				RefreshToken: sourceToJSON(o.RefreshToken),
				Scopes:       o.Scopes,
			}
		}
		fj.Bindings = append(fj.Bindings, bj)
	}
	data, err := json.MarshalIndent(fj, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding: %w", err)
	}
	return append(data, '\n'), nil
}

// Save writes f to path atomically (see atomicfile.WriteFile) with mode
// 0600, creating the directory with mode 0700.
func (f *File) Save(path string) error {
	data, err := f.marshal()
	if err != nil {
		return fmt.Errorf("saving credentials file %q: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating directory for credentials file: %w", err)
	}
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("saving credentials file %q: %w", path, err)
	}
	return nil
}
