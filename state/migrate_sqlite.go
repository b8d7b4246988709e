package state

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// sqliteMigrations is the SQLite schema's history: migration i takes the
// database from version i to i+1, in one transaction. Append only: a
// released step is never edited, a change is a new step.
var sqliteMigrations = [][]string{
	// 1: the first schema.
	{
		`CREATE TABLE meta (
			name  TEXT PRIMARY KEY,
			value BLOB NOT NULL
		) STRICT`,
		`CREATE TABLE sessions (
			id               TEXT PRIMARY KEY,
			proxy_digest     BLOB NOT NULL,
			api_digest       BLOB NOT NULL UNIQUE,
			ca_cert          BLOB,
			ca_key_sealed    BLOB,
			connectors       TEXT NOT NULL,
			hosts            TEXT NOT NULL,
			learn            TEXT NOT NULL,
			agent            TEXT NOT NULL,
			project          TEXT NOT NULL,
			approval_surface TEXT NOT NULL,
			created_at       INTEGER NOT NULL,
			expires_at       INTEGER NOT NULL,
			ended_at         INTEGER,
			end_reason       TEXT NOT NULL,
			exit_code        INTEGER
		) STRICT`,
		`CREATE INDEX sessions_expires_at ON sessions (expires_at)`,
		`CREATE INDEX sessions_ended_at ON sessions (ended_at) WHERE ended_at IS NOT NULL`,
		`CREATE TABLE approvals (
			id         TEXT PRIMARY KEY,
			session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
			replica    TEXT NOT NULL,
			view       BLOB,
			created_at INTEGER NOT NULL,
			decided_at INTEGER,
			decision   TEXT NOT NULL,
			outcome    TEXT NOT NULL,
			reason     TEXT NOT NULL,
			remember   TEXT NOT NULL
		) STRICT`,
		`CREATE INDEX approvals_session ON approvals (session_id)`,
		`CREATE INDEX approvals_pending ON approvals (replica) WHERE decided_at IS NULL`,
		`CREATE INDEX approvals_decided ON approvals (decided_at) WHERE decided_at IS NOT NULL`,
		`CREATE TABLE grants (
			session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
			connector  TEXT NOT NULL,
			tool       TEXT NOT NULL,
			operation  TEXT NOT NULL,
			decision   TEXT NOT NULL,
			created_at INTEGER NOT NULL,
			PRIMARY KEY (session_id, connector, tool, operation)
		) STRICT`,
		`CREATE TABLE sandboxes (
			id           TEXT PRIMARY KEY,
			session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
			token_digest BLOB NOT NULL,
			replica      TEXT NOT NULL,
			spec         BLOB,
			created_at   INTEGER NOT NULL,
			expires_at   INTEGER NOT NULL,
			gone_at      INTEGER
		) STRICT`,
		`CREATE INDEX sandboxes_session ON sandboxes (session_id)`,
	},
}

// sqliteHeader is the first 16 bytes of every SQLite 3 database file.
var sqliteHeader = []byte("SQLite format 3\x00")

// sqliteVersion is the schema version this binary writes.
func sqliteVersion() int { return len(sqliteMigrations) }

// precheck is what a read-only look at an existing database found.
type precheck struct {
	version  int
	keyCheck []byte // nil when the store has sealed nothing yet
}

// checkSQLiteFile looks at an existing database file without writing to
// it: it must be SQLite, pass quick_check and have a schema version this
// binary knows. A missing or empty file passes with version 0.
func checkSQLiteFile(ctx context.Context, path string) (precheck, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return precheck{}, nil
	}
	if err != nil {
		return precheck{}, fmt.Errorf("opening the state database: %w", err)
	}
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	f.Close()
	if n == 0 && (err == io.EOF || err == nil) {
		return precheck{}, nil
	}
	if !bytes.Equal(head[:n], sqliteHeader) {
		return precheck{}, fmt.Errorf("opening the state database: %s is not an SQLite database; it was left untouched: restore it from a backup, or move it away to start with an empty state (its sessions are then lost)", path)
	}
	db, err := sql.Open("sqlite", sqliteDSN(path, true))
	if err != nil {
		return precheck{}, fmt.Errorf("opening the state database %s: %w", path, err)
	}
	defer removeNewSidecars(path)()
	defer db.Close()
	db.SetMaxOpenConns(1)
	damaged := func(detail string) error {
		return fmt.Errorf("opening the state database: %s is damaged (%s); it was left untouched: restore it from a backup, or move it away to start with an empty state (its sessions are then lost)", path, detail)
	}
	rows, err := db.QueryContext(ctx, `PRAGMA quick_check(5)`)
	if err != nil {
		return precheck{}, damaged(err.Error())
	}
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			rows.Close()
			return precheck{}, damaged(err.Error())
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return precheck{}, damaged(err.Error())
	}
	rows.Close()
	if len(problems) > 0 {
		return precheck{}, damaged("quick_check: " + problems[0])
	}
	pc, err := readMeta(ctx, db)
	if err != nil {
		return precheck{}, fmt.Errorf("opening the state database %s: %w", path, err)
	}
	if pc.version > sqliteVersion() {
		return precheck{}, fmt.Errorf("opening the state database: %s has schema version %d, but this aileron-proxy knows versions up to %d; upgrade aileron-proxy (the database was left untouched)", path, pc.version, sqliteVersion())
	}
	return pc, nil
}

// readMeta reads the schema version and the key check; a database without
// the meta table is at version 0.
func readMeta(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (precheck, error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'`).Scan(&n); err != nil {
		return precheck{}, fmt.Errorf("reading the schema version: %w", err)
	}
	if n == 0 {
		return precheck{}, nil
	}
	var pc precheck
	var v []byte
	err := q.QueryRowContext(ctx, `SELECT value FROM meta WHERE name = 'schema_version'`).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return precheck{}, fmt.Errorf("reading the schema version: %w", err)
	}
	if err == nil {
		pc.version, err = strconv.Atoi(string(v))
		if err != nil || pc.version < 0 {
			return precheck{}, fmt.Errorf("reading the schema version: %q is not a version", v)
		}
	}
	err = q.QueryRowContext(ctx, `SELECT value FROM meta WHERE name = 'key_check'`).Scan(&pc.keyCheck)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return precheck{}, fmt.Errorf("reading the key check: %w", err)
	}
	return pc, nil
}

// migrateSQLite brings db from version from to sqliteVersion(), one
// transaction per step, and returns how many steps it ran.
func migrateSQLite(ctx context.Context, db *sql.DB) (int, error) {
	ran := 0
	for {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return ran, fmt.Errorf("migrating the state database: %w", err)
		}
		// Read the version inside the write transaction: it cannot change
		// under us.
		pc, err := readMeta(ctx, tx)
		if err != nil {
			tx.Rollback()
			return ran, fmt.Errorf("migrating the state database: %w", err)
		}
		if pc.version > sqliteVersion() {
			tx.Rollback()
			return ran, fmt.Errorf("migrating the state database: it has schema version %d, but this aileron-proxy knows versions up to %d; upgrade aileron-proxy", pc.version, sqliteVersion())
		}
		if pc.version == sqliteVersion() {
			tx.Rollback()
			return ran, nil
		}
		for i, stmt := range sqliteMigrations[pc.version] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				tx.Rollback()
				return ran, fmt.Errorf("migrating the state database to version %d (step %d): %w", pc.version+1, i+1, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO meta (name, value) VALUES ('schema_version', ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, []byte(strconv.Itoa(pc.version+1))); err != nil {
			tx.Rollback()
			return ran, fmt.Errorf("migrating the state database to version %d: %w", pc.version+1, err)
		}
		if err := tx.Commit(); err != nil {
			return ran, fmt.Errorf("migrating the state database to version %d: %w", pc.version+1, err)
		}
		ran++
	}
}

// removeNewSidecars notes whether path's -wal and -shm files exist and
// returns a func that removes those that a read-only look created (an empty
// WAL and its index hold nothing), so a refused database is left as found.
func removeNewSidecars(path string) func() {
	wal, shm := path+"-wal", path+"-shm"
	_, werr := os.Lstat(wal)
	_, serr := os.Lstat(shm)
	walNew, shmNew := errors.Is(werr, os.ErrNotExist), errors.Is(serr, os.ErrNotExist)
	return func() {
		if walNew {
			if fi, err := os.Lstat(wal); err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
				_ = os.Remove(wal)
			}
		}
		if _, err := os.Lstat(wal); shmNew && errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(shm)
		}
	}
}
