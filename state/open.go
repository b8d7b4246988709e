package state

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
)

// errClosed is returned by a Store used after Close.
var errClosed = errors.New("the state store is closed")

// Config says which store to open.
type Config struct {
	// Home is $AILERON_HOME: the embedded database is Home/state.db and its
	// key Home/state.key. Required for SQLite.
	Home string
	// URL selects the store: "" or "sqlite" for Home/state.db,
	// "sqlite:///abs/path.db" for another file, "postgres://..." or
	// "postgresql://..." for a database shared by replicas.
	URL string
	// KeyFile is the state key (KeySize raw bytes or their base64).
	// Empty means Home/state.key, created on first start, which only
	// SQLite allows: every Postgres replica must be given the same file.
	KeyFile string
	// Replica names this process among the replicas sharing a store
	// (Postgres); empty for SQLite.
	Replica string
	// Logger receives lifecycle lines (migrations, a new key); nil means
	// none. It never receives a key or a secret.
	Logger *zap.Logger
}

// Open opens the store cfg names, runs its migrations and checks that the
// state key opens what the store sealed before. The caller closes it.
func Open(ctx context.Context, cfg Config) (Store, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.KeyFile != "" {
		warnLooseKey(cfg.Logger.Named("state"), cfg.KeyFile)
	}
	scheme, rest, hasScheme := strings.Cut(cfg.URL, "://")
	switch {
	case cfg.URL == "" || cfg.URL == "sqlite":
		if cfg.Home == "" {
			return nil, errors.New("opening the state store: no home directory to hold state.db; set AILERON_HOME")
		}
		return openSQLite(ctx, cfg, filepath.Join(cfg.Home, "state.db"))
	case hasScheme && scheme == "sqlite":
		if strings.ContainsAny(rest, "?#") {
			return nil, errors.New("opening the state store: a sqlite:// URL takes a file path only, no query or fragment; use sqlite:///absolute/path/state.db")
		}
		if !filepath.IsAbs(rest) {
			return nil, fmt.Errorf("opening the state store: sqlite URL path %q is not absolute; use sqlite:///absolute/path/state.db", rest)
		}
		return openSQLite(ctx, cfg, filepath.Clean(rest))
	case hasScheme && (scheme == "postgres" || scheme == "postgresql"):
		if cfg.KeyFile == "" {
			return nil, errors.New("opening the state store: a Postgres store needs the state key: pass --state-key-file with the same file on every replica")
		}
		key, err := ReadKeyFile(cfg.KeyFile)
		if err != nil {
			return nil, err
		}
		return openPostgres(ctx, cfg, key)
	case hasScheme && isScheme(scheme):
		// Never quote the URL itself: it may carry a password.
		return nil, fmt.Errorf("opening the state store: unknown scheme %q; use sqlite (the default) or postgres://", scheme)
	default:
		return nil, errors.New("opening the state store: the state URL is neither \"sqlite\" nor a URL with a scheme; use sqlite (the default), sqlite:///absolute/path/state.db or postgres://")
	}
}

// isScheme reports whether s is spelled as a URL scheme (RFC 3986), so it
// can be quoted in an error without quoting a password by mistake.
func isScheme(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}
