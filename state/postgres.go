package state

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// pgSchemaVersion is the newest schema version this build knows; a
// database at a higher version is refused.
const pgSchemaVersion = 1

// pgMigrationLock is the key of the transaction-level advisory lock every
// replica takes before reading or changing the schema, so that replicas
// starting together apply each migration once ("aileron" in ASCII).
const pgMigrationLock int64 = 0x6169_6c65_726f_6e

// pgChannel is the LISTEN/NOTIFY channel of changes. A notification's
// payload is "<seq>:<kind>:<id>", seq the change's row in the changes table.
const pgChannel = "aileron_state"

// pgMigrations are the schema's versions in order: pgMigrations[i] takes
// a database from version i to i+1. Released entries never change.
var pgMigrations = []string{
	// 1: sessions, approvals, grants, sandboxes, the changes other replicas
	// poll, and the state key's check value.
	`
CREATE TABLE meta (
	name  text PRIMARY KEY,
	value bytea NOT NULL
);
CREATE TABLE sessions (
	id               text PRIMARY KEY,
	proxy_digest     bytea NOT NULL,
	api_digest       bytea NOT NULL UNIQUE,
	ca_cert          bytea NOT NULL,
	ca_key_sealed    bytea NOT NULL,
	connectors       text[] NOT NULL,
	hosts            text[] NOT NULL,
	learn            text[] NOT NULL,
	agent            text NOT NULL,
	project          text NOT NULL,
	approval_surface text NOT NULL,
	created_at       timestamptz NOT NULL,
	expires_at       timestamptz NOT NULL,
	ended_at         timestamptz,
	end_reason       text NOT NULL DEFAULT '',
	exit_code        integer
);
CREATE TABLE approvals (
	id         text PRIMARY KEY,
	session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	replica    text NOT NULL,
	view       bytea NOT NULL,
	created_at timestamptz NOT NULL,
	decided_at timestamptz,
	decision   text NOT NULL DEFAULT '',
	outcome    text NOT NULL DEFAULT '',
	reason     text NOT NULL DEFAULT '',
	remember   text NOT NULL DEFAULT ''
);
CREATE INDEX approvals_session ON approvals (session_id);
CREATE INDEX approvals_pending ON approvals (replica) WHERE decided_at IS NULL;
CREATE INDEX approvals_decided ON approvals (decided_at) WHERE decided_at IS NOT NULL;
CREATE TABLE grants (
	session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	connector  text NOT NULL,
	tool       text NOT NULL,
	operation  text NOT NULL,
	decision   text NOT NULL,
	created_at timestamptz NOT NULL,
	PRIMARY KEY (session_id, connector, tool, operation)
);
CREATE TABLE sandboxes (
	id           text PRIMARY KEY,
	session_id   text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	token_digest bytea NOT NULL,
	replica      text NOT NULL,
	spec         bytea NOT NULL,
	created_at   timestamptz NOT NULL,
	expires_at   timestamptz NOT NULL,
	gone_at      timestamptz
);
CREATE INDEX sandboxes_session ON sandboxes (session_id);
CREATE TABLE changes (
	seq  bigserial PRIMARY KEY,
	kind text NOT NULL,
	id   text NOT NULL,
	at   timestamptz NOT NULL DEFAULT now()
);
`,
}

// pgStore is the Store of replicas sharing one Postgres database.
type pgStore struct {
	pool   *pgxpool.Pool
	key    *Key
	where  string // "postgres state at host:port/db": no user, no password
	secret string // the DSN's password, scrubbed from every error
	log    *zap.Logger
	// listenPing is how long Watch's listener waits for a notification
	// before it pings its connection (pgListenPing; shorter in tests).
	listenPing time.Duration

	hub *hub // this process's Watch subscribers

	feedMu sync.Mutex
	feed   *pgFeed // the listener and the poller, started by the first Watch
	closed atomic.Bool
}

var _ Store = (*pgStore)(nil)

// openPostgres opens the database at cfg.URL for Open: it connects,
// migrates the schema and checks key against the one the database was
// written with.
func openPostgres(ctx context.Context, cfg Config, key *Key) (Store, error) {
	return newPostgres(ctx, cfg.URL, key, cfg.Logger, cfg.Replica)
}

// newPostgres is openPostgres with its parts.
func newPostgres(ctx context.Context, dsn string, key *Key, log *zap.Logger, replica string) (*pgStore, error) {
	if key == nil {
		return nil, errors.New("opening the postgres state: a state key is required (--state-key-file); the database alone never holds a usable CA key")
	}
	if log == nil {
		log = zap.NewNop()
	}
	where, secret := describeDSN(dsn)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgconn's error keeps the unredacted string: never wrap it.
		var pe *pgconn.ParseConfigError
		msg := "malformed"
		if errors.As(err, &pe) && pe.Unwrap() != nil {
			msg = pe.Unwrap().Error()
		}
		return nil, fmt.Errorf("parsing the postgres state URL %s: %s; use postgres://USER:PASSWORD@HOST:PORT/DATABASE", where, scrub(msg, secret))
	}
	// Replicas tell themselves apart in pg_stat_activity, unless the URL
	// names the application itself.
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set {
		cfg.ConnConfig.RuntimeParams["application_name"] = strings.TrimSpace("aileron-proxy " + replica)
	}
	s := &pgStore{key: key, where: where, secret: secret, log: log.Named("state"), listenPing: pgListenPing, hub: newHub()}
	s.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, s.errorf("connecting to %s: %w", where, err)
	}
	if err := s.pool.Ping(ctx); err != nil {
		s.pool.Close()
		return nil, s.errorf("connecting to %s: %w", where, err)
	}
	if err := s.migrate(ctx); err != nil {
		s.pool.Close()
		return nil, err
	}
	if err := s.checkKey(ctx); err != nil {
		s.pool.Close()
		return nil, err
	}
	return s, nil
}

// describeDSN returns how errors name the database (host, port and
// database, never the user or password) and the password to scrub.
func describeDSN(dsn string) (where, secret string) {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		// A keyword/value string: find its password to scrub it.
		for _, f := range strings.Fields(dsn) {
			if v, ok := strings.CutPrefix(f, "password="); ok {
				secret = strings.Trim(v, "'")
			}
		}
		return "the postgres state", secret
	}
	secret, _ = u.User.Password()
	if p := u.Query().Get("password"); p != "" {
		secret = p
	}
	return fmt.Sprintf("the postgres state at %s%s", u.Host, u.Path), secret
}

// scrub replaces the password, wherever it appears, with "xxxxx".
func scrub(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "xxxxx")
}

// errorf is fmt.Errorf whose result never leads to the DSN's password:
// its text is scrubbed, and a pgx connection or parse error (whose Config
// or ConnString fields hold the password) is cut from the chain, keeping
// only whether the context ended.
func (s *pgStore) errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	var (
		ce *pgconn.ConnectError
		pe *pgconn.ParseConfigError
	)
	if !errors.As(err, &ce) && !errors.As(err, &pe) && (s.secret == "" || !strings.Contains(err.Error(), s.secret)) {
		return err
	}
	flat := flatError{text: scrub(err.Error(), s.secret)}
	for _, c := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, c) {
			flat.cause = c
		}
	}
	return flat
}

// flatError is an error's text without its chain.
type flatError struct {
	text  string
	cause error // context.Canceled, context.DeadlineExceeded or nil
}

func (e flatError) Error() string { return e.text }
func (e flatError) Unwrap() error { return e.cause }

// migrate brings the schema to pgSchemaVersion in one transaction under
// the advisory lock, or refuses a newer database without writing.
func (s *pgStore) migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.errorf("migrating %s: %w", s.where, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", pgMigrationLock); err != nil {
		return s.errorf("migrating %s: taking the migration lock: %w", s.where, err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass('schema_version') IS NOT NULL").Scan(&exists); err != nil {
		return s.errorf("migrating %s: %w", s.where, err)
	}
	version := 0
	if exists {
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_version").Scan(&version); err != nil {
			return s.errorf("migrating %s: reading the schema version: %w", s.where, err)
		}
	} else {
		var n int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()").Scan(&n); err != nil {
			return s.errorf("migrating %s: %w", s.where, err)
		}
		if n > 0 {
			return fmt.Errorf("%s holds %d tables but no aileron-proxy schema; point --state at an empty database of its own", s.where, n)
		}
		if _, err := tx.Exec(ctx, "CREATE TABLE schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"); err != nil {
			return s.errorf("migrating %s: %w", s.where, err)
		}
	}
	if version > pgSchemaVersion {
		return fmt.Errorf("%s has schema version %d, newer than this aileron-proxy's %d (a newer release wrote it); upgrade aileron-proxy on every replica, nothing was changed", s.where, version, pgSchemaVersion)
	}
	for v := version; v < pgSchemaVersion; v++ {
		if _, err := tx.Exec(ctx, pgMigrations[v]); err != nil {
			return s.errorf("migrating %s to schema version %d: %w", s.where, v+1, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_version (version) VALUES ($1)", v+1); err != nil {
			return s.errorf("migrating %s to schema version %d: %w", s.where, v+1, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return s.errorf("migrating %s: %w", s.where, err)
	}
	if version < pgSchemaVersion {
		s.log.Info("state schema migrated", zap.Int("from", version), zap.Int("to", pgSchemaVersion))
	}
	return nil
}

// checkKey compares the state key with the database's check value,
// storing one on first use, so a wrong key is refused at start rather than
// per session.
func (s *pgStore) checkKey(ctx context.Context) error {
	check, err := s.key.checkValue()
	if err != nil {
		return fmt.Errorf("sealing the state key check: %w", err)
	}
	if _, err := s.pool.Exec(ctx, "INSERT INTO meta (name, value) VALUES ('key_check', $1) ON CONFLICT (name) DO NOTHING", check); err != nil {
		return s.errorf("writing the state key check to %s: %w", s.where, err)
	}
	var stored []byte
	if err := s.pool.QueryRow(ctx, "SELECT value FROM meta WHERE name = 'key_check'").Scan(&stored); err != nil {
		return s.errorf("reading the state key check from %s: %w", s.where, err)
	}
	if err := s.key.verifyCheck(stored); err != nil {
		return fmt.Errorf("opening %s: it was written with another state key; give every replica the key file it was created with (--state-key-file): %w", s.where, err)
	}
	return nil
}

// Close stops Watch (closing every subscriber's channel) and the pool.
func (s *pgStore) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.feedMu.Lock()
	f := s.feed
	s.feed = nil
	s.feedMu.Unlock()
	if f != nil {
		f.stop()
	}
	s.hub.close()
	s.pool.Close()
	return nil
}

func (s *pgStore) check() error {
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

// pgTx is a write's transaction and the changes it records.
type pgTx struct {
	pgx.Tx
	changes []pgChange
}

type pgChange struct {
	seq int64
	c   Change
}

// write runs fn in a transaction, commits it, and then delivers the changes
// fn noted to this process's watchers (other replicas get them by NOTIFY
// or by polling; each is delivered once).
func (s *pgStore) write(ctx context.Context, fn func(*pgTx) error) error {
	var w *pgTx
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		w = &pgTx{Tx: tx}
		return fn(w)
	})
	if err != nil {
		return err
	}
	s.feedMu.Lock()
	f := s.feed
	s.feedMu.Unlock()
	if f != nil {
		for _, c := range w.changes {
			f.deliver(c.seq, c.c)
		}
	}
	return nil
}

// note records a change in the transaction: a row in changes (which
// pollers read) and a notification (which listeners get at commit).
func (w *pgTx) note(ctx context.Context, kind ChangeKind, id string) error {
	var seq int64
	err := w.QueryRow(ctx, `WITH c AS (INSERT INTO changes (kind, id) VALUES ($1, $2) RETURNING seq)
SELECT c.seq FROM c CROSS JOIN LATERAL pg_notify('`+pgChannel+`', c.seq || ':' || $1 || ':' || $2) AS n`, string(kind), id).Scan(&seq)
	if err != nil {
		return err
	}
	w.changes = append(w.changes, pgChange{seq, Change{Kind: kind, ID: id}})
	return nil
}

// pgCode returns the SQLSTATE of err, if Postgres sent one.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

const (
	pgUniqueViolation     = "23505"
	pgForeignKeyViolation = "23503"
)
