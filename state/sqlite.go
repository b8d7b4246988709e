package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// SQLite through modernc.org/sqlite, a translation of SQLite's C to Go: no
// cgo, so static (CGO_ENABLED=0) builds keep working.
//
// Durability: the database is in WAL mode with synchronous=FULL, so every
// commit fsyncs the write-ahead log before the method returns: a write that
// returned survives a crash of the process or of the machine. Writes go
// through one connection (SQLite has one writer at a time anyway, and Go's
// mutex queues writers more fairly than SQLite's busy handler); reads use a
// pool of read-only connections that never block the writer.

// busyTimeoutMS bounds how long a statement waits for a lock SQLite holds
// (a checkpoint, the other pool) before it fails.
const busyTimeoutMS = 10000

// sqliteDSN is the driver's name for the database at path.
func sqliteDSN(path string, readOnly bool) string {
	q := url.Values{}
	pragmas := []string{fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS), "foreign_keys(1)"}
	if readOnly {
		q.Set("mode", "ro")
	} else {
		pragmas = append(pragmas, "journal_mode(WAL)", "synchronous(FULL)")
		q.Set("_txlock", "immediate")
	}
	q["_pragma"] = pragmas
	u := url.URL{Scheme: "file", Path: path, RawQuery: q.Encode()}
	return u.String()
}

// sqliteStore is the embedded Store: one process owns the file (a lock
// file says so), so Watch is an in-process fan-out.
type sqliteStore struct {
	path   string
	w      *sql.DB // one connection: every write
	r      *sql.DB // read-only connections
	key    *Key
	lock   *os.File
	hub    *hub
	log    *zap.Logger
	closed atomic.Bool
	once   sync.Once
}

var _ Store = (*sqliteStore)(nil)

// openSQLite opens (creating when missing) the database at path.
func openSQLite(ctx context.Context, cfg Config, path string) (_ Store, err error) {
	log := cfg.Logger.Named("state")
	keyPath := cfg.KeyFile
	if keyPath == "" {
		if cfg.Home == "" {
			return nil, errors.New("opening the state store: no home directory to hold state.key; set AILERON_HOME or pass --state-key-file")
		}
		keyPath = filepath.Join(cfg.Home, "state.key")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("opening the state store: %w", err)
	}
	lock, err := lockSQLite(path)
	if err != nil {
		return nil, err
	}
	s := &sqliteStore{path: path, lock: lock, hub: newHub(), log: log}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()

	pc, err := checkSQLiteFile(ctx, path)
	if err != nil {
		return nil, err
	}
	// The key: created only for a store that has sealed nothing yet, and
	// only at its default place.
	_, statErr := os.Stat(keyPath)
	keyMissing := errors.Is(statErr, fs.ErrNotExist)
	if keyMissing && pc.keyCheck != nil {
		return nil, fmt.Errorf("opening the state store: the state key %s is missing, but %s holds sessions sealed under a key; the sessions cannot be recovered without the key that sealed them: restore %s, or move %s away to start with an empty state", keyPath, path, keyPath, path)
	}
	key, created, err := loadOrCreateKey(keyPath, cfg.KeyFile == "")
	if err != nil {
		return nil, fmt.Errorf("opening the state store: %w", err)
	}
	if created {
		log.Info("created the state key", zap.String("path", keyPath))
	} else if cfg.KeyFile == "" {
		warnLooseKey(log, keyPath) // Open warned about a given KeyFile
	}
	if pc.keyCheck != nil {
		if err := key.verifyCheck(pc.keyCheck); err != nil {
			return nil, fmt.Errorf("opening the state store: %s was not made with the state key %s: %w", path, keyPath, err)
		}
	}
	s.key = key

	if err := createPrivate(path); err != nil {
		return nil, err
	}
	if s.w, err = sql.Open("sqlite", sqliteDSN(path, false)); err != nil {
		return nil, fmt.Errorf("opening the state database %s: %w", path, err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetConnMaxIdleTime(0)
	ran, err := migrateSQLite(ctx, s.w)
	if err != nil {
		return nil, fmt.Errorf("opening the state database %s: %w", path, err)
	}
	if ran > 0 {
		log.Info("migrated the state database", zap.String("path", path), zap.Int("schema_version", sqliteVersion()), zap.Int("steps", ran))
	}
	if pc.keyCheck == nil {
		check, err := key.checkValue()
		if err != nil {
			return nil, err
		}
		if _, err := s.w.ExecContext(ctx, `INSERT INTO meta (name, value) VALUES ('key_check', ?) ON CONFLICT (name) DO NOTHING`, check); err != nil {
			return nil, fmt.Errorf("opening the state database %s: writing the key check: %w", path, err)
		}
	}
	if s.r, err = sql.Open("sqlite", sqliteDSN(path, true)); err != nil {
		return nil, fmt.Errorf("opening the state database %s: %w", path, err)
	}
	s.r.SetMaxOpenConns(4)
	return s, nil
}

// lockSQLite takes an exclusive lock (flock) on path's lock file, held
// until Close: one process owns an embedded database.
func lockSQLite(path string) (*os.File, error) {
	lp := path + ".lock"
	f, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the state store's lock %s: %w", lp, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("opening the state store: another aileron-proxy serve is using this AILERON_HOME (%s is locked); stop it first, or, for state shared by several serve processes, use --state postgres://", path)
		}
		return nil, fmt.Errorf("locking the state store %s: %w", lp, err)
	}
	return f, nil
}

// createPrivate creates an empty database file readable by its owner only
// (SQLite gives its -wal and -shm files the same mode); an existing file
// that others may read is narrowed to 0600.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating the state database %s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("opening the state database: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return fmt.Errorf("making the state database %s private (mode 0600): %w", path, err)
		}
	}
	return nil
}

// Close closes the databases, ends every Watch and releases the lock.
func (s *sqliteStore) Close() error {
	var err error
	s.once.Do(func() {
		s.closed.Store(true)
		s.hub.close()
		if s.r != nil {
			err = errors.Join(err, s.r.Close())
		}
		if s.w != nil {
			err = errors.Join(err, s.w.Close())
		}
		if s.lock != nil {
			err = errors.Join(err, s.lock.Close())
		}
	})
	return err
}

func (s *sqliteStore) check() error {
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

// Watch delivers the changes made through this Store (the one process that
// owns the file) until ctx ends or the Store closes.
func (s *sqliteStore) Watch(ctx context.Context) (<-chan Change, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.hub.subscribe(ctx)
}

// Times are kept as Unix microseconds (the precision Postgres keeps too).
func toMicro(t time.Time) int64 { return t.UnixMicro() }

func fromMicro(n int64) time.Time { return time.UnixMicro(n).UTC() }

func toMicroPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

func fromMicroPtr(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromMicro(n.Int64)
	return &t
}

func encodeList(l []string) string {
	if len(l) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(l) // []string always marshals
	return string(b)
}

func decodeList(what, s string) ([]string, error) {
	var l []string
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	if len(l) == 0 {
		return nil, nil
	}
	return l, nil
}

// sqliteCode returns the extended result code of an SQLite error, or 0.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

func isUniqueViolation(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

func isForeignKeyViolation(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}
