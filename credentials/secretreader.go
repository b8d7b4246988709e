package credentials

import (
	"context"
	"os"
	"time"
)

// SecretReader reads one secret that belongs to no connector binding (the
// corporate upstream proxy's password) from an env, file or exec source,
// each time it is needed, with an exec source's output reused as in a
// binding.
type SecretReader struct {
	r *sourceReader
}

// NewSecretReader checks src and returns its reader; what names the
// secret in errors ("upstream proxy password"). A stored source is
// refused: this secret has no place in credentials.json. getenv reads
// env sources; nil means os.Getenv.
func NewSecretReader(src Source, what string, getenv func(string) string) (*SecretReader, error) {
	if src.Type == SourceStored {
		return nil, reasonf("%s: use an env, file or exec source", what)
	}
	if err := src.validate(what); err != nil {
		return nil, err
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	d := &deps{getenv: getenv, execTimeout: DefaultExecTimeout, execCacheTTL: DefaultExecCacheTTL, now: time.Now}
	return &SecretReader{r: &sourceReader{src: src, what: what, deps: d}}, nil
}

// Read returns the secret; its error never holds secret bytes.
func (s *SecretReader) Read(ctx context.Context) (Value, error) {
	return s.r.read(ctx)
}
