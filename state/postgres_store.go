package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

const pgSessionColumns = `id, proxy_digest, api_digest, ca_cert, ca_key_sealed, connectors, hosts, learn,
	agent, project, approval_surface, created_at, expires_at, ended_at, end_reason, exit_code`

// PutSession inserts a new session with its CA key sealed.
func (s *pgStore) PutSession(ctx context.Context, sess Session) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := validSession(sess); err != nil {
		return fmt.Errorf("storing a session: %w", err)
	}
	// The session's ID is the sealed key's additional data: a sealed key
	// copied to another session's row does not open.
	sealed, err := s.key.Seal(sess.ID, sess.CAKey)
	if err != nil {
		return fmt.Errorf("sealing session %q's CA key: %w", sess.ID, err)
	}
	err = s.write(ctx, func(tx *pgTx) error {
		_, err := tx.Exec(ctx, `INSERT INTO sessions (`+pgSessionColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
			sess.ID, sess.ProxyDigest[:], sess.APIDigest[:], nonNilBytes(sess.CACert), sealed,
			nonNilStrings(sess.Connectors), nonNilStrings(sess.Hosts), nonNilStrings(sess.Learn),
			sess.Agent, sess.Project, sess.ApprovalSurface, sess.CreatedAt, sess.ExpiresAt,
			sess.EndedAt, sess.EndReason, sess.ExitCode)
		if err != nil {
			return err
		}
		return tx.note(ctx, ChangeSessionCreated, sess.ID)
	})
	if pgCode(err) == pgUniqueViolation {
		return fmt.Errorf("storing session %q in %s: a session with that ID or API token exists: %w", sess.ID, s.where, ErrConflict)
	}
	if err != nil {
		return s.errorf("storing session %q in %s: %w", sess.ID, s.where, err)
	}
	return nil
}

// EndSession marks a live session ended.
func (s *pgStore) EndSession(ctx context.Context, id string, at time.Time, reason string, exitCode *int) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := validEnd(id, at, reason); err != nil {
		return fmt.Errorf("ending a session: %w", err)
	}
	err := s.write(ctx, func(tx *pgTx) error {
		tag, err := tx.Exec(ctx, `UPDATE sessions SET ended_at = $2, end_reason = $3, exit_code = $4
WHERE id = $1 AND ended_at IS NULL`, id, at, reason, exitCode)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return s.missing(ctx, tx, "sessions", id)
		}
		return tx.note(ctx, ChangeSessionEnded, id)
	})
	if errors.Is(err, ErrConflict) {
		return fmt.Errorf("ending session %q: it already ended: %w", id, ErrConflict)
	}
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("ending session %q: no such session in %s: %w", id, s.where, ErrNotFound)
	}
	if err != nil {
		return s.errorf("ending session %q in %s: %w", id, s.where, err)
	}
	return nil
}

// missing tells why a conditional update matched no row: ErrConflict when
// the row exists (its condition no longer held), ErrNotFound otherwise.
func (s *pgStore) missing(ctx context.Context, tx pgx.Tx, table, id string) error {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+table+" WHERE id = $1)", id).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return ErrConflict
	}
	return ErrNotFound
}

// Session returns one session by ID.
func (s *pgStore) Session(ctx context.Context, id string) (Session, error) {
	return s.oneSession(ctx, fmt.Sprintf("session %q", id), "id = $1", id)
}

// SessionByAPIDigest returns the session whose API token has digest d.
func (s *pgStore) SessionByAPIDigest(ctx context.Context, d [32]byte) (Session, error) {
	return s.oneSession(ctx, "the session of an API token", "api_digest = $1", d[:])
}

func (s *pgStore) oneSession(ctx context.Context, what, where string, arg any) (Session, error) {
	if err := s.check(); err != nil {
		return Session{}, err
	}
	rows, err := s.pool.Query(ctx, "SELECT "+pgSessionColumns+" FROM sessions WHERE "+where, arg)
	if err != nil {
		return Session{}, s.errorf("reading %s from %s: %w", what, s.where, err)
	}
	got, err := s.collectSessions(rows)
	if err != nil {
		return Session{}, s.errorf("reading %s from %s: %w", what, s.where, err)
	}
	if len(got) == 0 {
		return Session{}, fmt.Errorf("reading %s: not in %s: %w", what, s.where, ErrNotFound)
	}
	return got[0], nil
}

// Sessions returns live sessions and those that ended or expired after since.
func (s *pgStore) Sessions(ctx context.Context, now, since time.Time) ([]Session, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT "+pgSessionColumns+` FROM sessions
WHERE (ended_at IS NULL AND expires_at > $1) OR least(coalesce(ended_at, expires_at), expires_at) > $2
ORDER BY created_at, id`, now, since)
	if err != nil {
		return nil, s.errorf("listing sessions in %s: %w", s.where, err)
	}
	got, err := s.collectSessions(rows)
	if err != nil {
		return nil, s.errorf("listing sessions in %s: %w", s.where, err)
	}
	return got, nil
}

// collectSessions scans session rows and opens their CA keys.
func (s *pgStore) collectSessions(rows pgx.Rows) ([]Session, error) {
	var out []Session
	for rows.Next() {
		var (
			sess                  Session
			proxyD, apiD, sealed  []byte
			ended                 *time.Time
			exit                  *int32
			connectors, hosts, lr []string
		)
		if err := rows.Scan(&sess.ID, &proxyD, &apiD, &sess.CACert, &sealed, &connectors, &hosts, &lr,
			&sess.Agent, &sess.Project, &sess.ApprovalSurface, &sess.CreatedAt, &sess.ExpiresAt,
			&ended, &sess.EndReason, &exit); err != nil {
			rows.Close()
			return nil, err
		}
		sess.CACert = nilIfEmpty(sess.CACert)
		copy(sess.ProxyDigest[:], proxyD)
		copy(sess.APIDigest[:], apiD)
		sess.Connectors, sess.Hosts, sess.Learn = emptyNil(connectors), emptyNil(hosts), emptyNil(lr)
		sess.CreatedAt, sess.ExpiresAt = sess.CreatedAt.UTC(), sess.ExpiresAt.UTC()
		sess.EndedAt = utcPtr(ended)
		if exit != nil {
			e := int(*exit)
			sess.ExitCode = &e
		}
		key, err := s.key.Open(sess.ID, sealed)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("opening session %q's CA key (is --state-key-file the key the replicas were started with?): %w", sess.ID, err)
		}
		sess.CAKey = key
		out = append(out, sess)
	}
	return out, rows.Err()
}

// PruneSessions deletes sessions done before t; their approvals, grants
// and sandboxes go with them (ON DELETE CASCADE). Changes older than an
// hour, which no poller still needs, go too.
func (s *pgStore) PruneSessions(ctx context.Context, before time.Time) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var n int64
	err := s.write(ctx, func(tx *pgTx) error {
		tag, err := tx.Exec(ctx, "DELETE FROM sessions WHERE least(coalesce(ended_at, expires_at), expires_at) < $1", before)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, "DELETE FROM changes WHERE at < now() - interval '1 hour'")
		return err
	})
	if err != nil {
		return 0, s.errorf("pruning sessions in %s: %w", s.where, err)
	}
	return int(n), nil
}

const pgApprovalColumns = `id, session_id, replica, view, created_at, decided_at, decision, outcome, reason, remember`

// PutApproval inserts a pending approval.
func (s *pgStore) PutApproval(ctx context.Context, a Approval) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := validApproval(a); err != nil {
		return fmt.Errorf("storing an approval: %w", err)
	}
	err := s.write(ctx, func(tx *pgTx) error {
		_, err := tx.Exec(ctx, `INSERT INTO approvals (`+pgApprovalColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			a.ID, a.SessionID, a.Replica, nonNilBytes(a.View), a.CreatedAt, a.DecidedAt,
			a.Decision, a.Outcome, a.Reason, a.Remember)
		if err != nil {
			return err
		}
		return tx.note(ctx, ChangeApprovalCreated, a.ID)
	})
	switch pgCode(err) {
	case "":
	case pgUniqueViolation:
		return fmt.Errorf("storing approval %q: an approval with that ID exists in %s: %w", a.ID, s.where, ErrConflict)
	case pgForeignKeyViolation:
		return fmt.Errorf("storing approval %q: its session %q is not in %s: %w", a.ID, a.SessionID, s.where, ErrNotFound)
	}
	if err != nil {
		return s.errorf("storing approval %q in %s: %w", a.ID, s.where, err)
	}
	return nil
}

// DecideApproval settles a pending approval, once.
func (s *pgStore) DecideApproval(ctx context.Context, id string, at time.Time, decision, outcome, reason, remember string) (Approval, error) {
	if err := s.check(); err != nil {
		return Approval{}, err
	}
	if err := validDecision(id, at, decision, outcome, remember); err != nil {
		return Approval{}, fmt.Errorf("deciding an approval: %w", err)
	}
	var got []Approval
	err := s.write(ctx, func(tx *pgTx) error {
		rows, err := tx.Query(ctx, `UPDATE approvals SET decided_at = $2, decision = $3, outcome = $4, reason = $5, remember = $6
WHERE id = $1 AND decided_at IS NULL RETURNING `+pgApprovalColumns, id, at, decision, outcome, reason, remember)
		if err != nil {
			return err
		}
		if got, err = collectApprovals(rows); err != nil {
			return err
		}
		if len(got) == 0 {
			return s.missing(ctx, tx, "approvals", id)
		}
		return tx.note(ctx, ChangeApprovalDecided, id)
	})
	if errors.Is(err, ErrConflict) {
		return Approval{}, fmt.Errorf("deciding approval %q: it was already decided: %w", id, ErrConflict)
	}
	if errors.Is(err, ErrNotFound) {
		return Approval{}, fmt.Errorf("deciding approval %q: no such approval in %s: %w", id, s.where, ErrNotFound)
	}
	if err != nil {
		return Approval{}, s.errorf("deciding approval %q in %s: %w", id, s.where, err)
	}
	return got[0], nil
}

// Approval returns one approval.
func (s *pgStore) Approval(ctx context.Context, id string) (Approval, error) {
	if err := s.check(); err != nil {
		return Approval{}, err
	}
	rows, err := s.pool.Query(ctx, "SELECT "+pgApprovalColumns+" FROM approvals WHERE id = $1", id)
	if err != nil {
		return Approval{}, s.errorf("reading approval %q from %s: %w", id, s.where, err)
	}
	got, err := collectApprovals(rows)
	if err != nil {
		return Approval{}, s.errorf("reading approval %q from %s: %w", id, s.where, err)
	}
	if len(got) == 0 {
		return Approval{}, fmt.Errorf("reading approval %q: not in %s: %w", id, s.where, ErrNotFound)
	}
	return got[0], nil
}

// Approvals returns every pending approval and the decidedLimit most
// recently decided ones, oldest first.
func (s *pgStore) Approvals(ctx context.Context, decidedLimit int) ([]Approval, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `(SELECT `+pgApprovalColumns+` FROM approvals WHERE decided_at IS NULL)
UNION ALL
(SELECT `+pgApprovalColumns+` FROM approvals WHERE decided_at IS NOT NULL ORDER BY decided_at DESC, id DESC LIMIT $1)`, max(decidedLimit, 0))
	if err != nil {
		return nil, s.errorf("listing approvals in %s: %w", s.where, err)
	}
	got, err := collectApprovals(rows)
	if err != nil {
		return nil, s.errorf("listing approvals in %s: %w", s.where, err)
	}
	sortApprovals(got)
	return got, nil
}

// AbandonApprovals settles replica's pending approvals as abandoned.
func (s *pgStore) AbandonApprovals(ctx context.Context, replica string, at time.Time) ([]Approval, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := checkTime("the abandon time", at); err != nil {
		return nil, fmt.Errorf("abandoning approvals: %w", err)
	}
	got, err := s.settleAbandoned(ctx, `UPDATE approvals SET decided_at = $2, outcome = 'abandoned'
WHERE replica = $1 AND decided_at IS NULL`, replica, at)
	if err != nil {
		return nil, s.errorf("abandoning replica %q's pending approvals in %s: %w", replica, s.where, err)
	}
	return got, nil
}

// AbandonStaleApprovals settles every approval pending since before on
// another replica than except as abandoned. Rows another transaction has
// locked (a replica sweeping at the same time, a decision being written)
// are skipped: that transaction settles them, or the next sweep does, and
// no two sweeps wait on each other's locks.
func (s *pgStore) AbandonStaleApprovals(ctx context.Context, before, at time.Time, except string) ([]Approval, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := validStale(before, at); err != nil {
		return nil, fmt.Errorf("abandoning stale approvals: %w", err)
	}
	got, err := s.settleAbandoned(ctx, `UPDATE approvals SET decided_at = $3, outcome = 'abandoned'
WHERE id IN (SELECT id FROM approvals WHERE decided_at IS NULL AND created_at < $1 AND replica <> $2
	ORDER BY id FOR UPDATE SKIP LOCKED)
AND decided_at IS NULL`, before, except, at)
	if err != nil {
		return nil, s.errorf("abandoning approvals pending since before %s in %s: %w", before.UTC().Format(time.RFC3339), s.where, err)
	}
	return got, nil
}

// settleAbandoned runs update, an UPDATE of approvals to abandoned, and
// notes each one it settled; it returns them oldest first.
func (s *pgStore) settleAbandoned(ctx context.Context, update string, args ...any) ([]Approval, error) {
	var got []Approval
	err := s.write(ctx, func(tx *pgTx) error {
		rows, err := tx.Query(ctx, update+` RETURNING `+pgApprovalColumns, args...)
		if err != nil {
			return err
		}
		if got, err = collectApprovals(rows); err != nil {
			return err
		}
		for _, a := range got {
			if err := tx.note(ctx, ChangeApprovalDecided, a.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortApprovals(got)
	return got, nil
}

func collectApprovals(rows pgx.Rows) ([]Approval, error) {
	var out []Approval
	for rows.Next() {
		var (
			a       Approval
			decided *time.Time
		)
		if err := rows.Scan(&a.ID, &a.SessionID, &a.Replica, &a.View, &a.CreatedAt, &decided,
			&a.Decision, &a.Outcome, &a.Reason, &a.Remember); err != nil {
			rows.Close()
			return nil, err
		}
		a.View = nilIfEmpty(a.View)
		a.CreatedAt = a.CreatedAt.UTC()
		a.DecidedAt = utcPtr(decided)
		out = append(out, a)
	}
	return out, rows.Err()
}

// PutGrant remembers a decision, replacing one for the same key.
func (s *pgStore) PutGrant(ctx context.Context, g Grant) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := validGrant(g); err != nil {
		return fmt.Errorf("storing a grant: %w", err)
	}
	err := s.write(ctx, func(tx *pgTx) error {
		_, err := tx.Exec(ctx, `INSERT INTO grants (session_id, connector, tool, operation, decision, created_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (session_id, connector, tool, operation) DO UPDATE SET decision = EXCLUDED.decision, created_at = EXCLUDED.created_at`,
			g.SessionID, g.Connector, g.Tool, g.Operation, g.Decision, g.CreatedAt)
		if err != nil {
			return err
		}
		return tx.note(ctx, ChangeGrantCreated, g.SessionID)
	})
	if pgCode(err) == pgForeignKeyViolation {
		return fmt.Errorf("remembering a decision of session %q: the session is not in %s: %w", g.SessionID, s.where, ErrNotFound)
	}
	if err != nil {
		return s.errorf("remembering a decision of session %q in %s: %w", g.SessionID, s.where, err)
	}
	return nil
}

// Grants returns the remembered decisions of live sessions.
func (s *pgStore) Grants(ctx context.Context) ([]Grant, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT g.session_id, g.connector, g.tool, g.operation, g.decision, g.created_at
FROM grants g JOIN sessions s ON s.id = g.session_id
WHERE s.ended_at IS NULL AND s.expires_at > $1
ORDER BY g.created_at, g.session_id, g.connector, g.tool, g.operation`, time.Now())
	if err != nil {
		return nil, s.errorf("listing remembered decisions in %s: %w", s.where, err)
	}
	var out []Grant
	for rows.Next() {
		var g Grant
		if err := rows.Scan(&g.SessionID, &g.Connector, &g.Tool, &g.Operation, &g.Decision, &g.CreatedAt); err != nil {
			rows.Close()
			return nil, s.errorf("listing remembered decisions in %s: %w", s.where, err)
		}
		g.CreatedAt = g.CreatedAt.UTC()
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, s.errorf("listing remembered decisions in %s: %w", s.where, err)
	}
	return out, nil
}

const pgSandboxColumns = `id, session_id, token_digest, replica, spec, created_at, expires_at, gone_at`

// PutSandbox inserts or replaces a sandbox record.
func (s *pgStore) PutSandbox(ctx context.Context, sb Sandbox) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := validSandbox(sb); err != nil {
		return fmt.Errorf("storing a sandbox: %w", err)
	}
	err := s.write(ctx, func(tx *pgTx) error {
		_, err := tx.Exec(ctx, `INSERT INTO sandboxes (`+pgSandboxColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (id) DO UPDATE SET session_id = EXCLUDED.session_id, token_digest = EXCLUDED.token_digest,
	replica = EXCLUDED.replica, spec = EXCLUDED.spec, created_at = EXCLUDED.created_at,
	expires_at = EXCLUDED.expires_at, gone_at = EXCLUDED.gone_at`,
			sb.ID, sb.SessionID, sb.TokenDigest[:], sb.Replica, nonNilBytes(sb.Spec), sb.CreatedAt, sb.ExpiresAt, sb.GoneAt)
		if err != nil {
			return err
		}
		return tx.note(ctx, ChangeSandboxChanged, sb.ID)
	})
	if pgCode(err) == pgForeignKeyViolation {
		return fmt.Errorf("storing sandbox %q: its session %q is not in %s: %w", sb.ID, sb.SessionID, s.where, ErrNotFound)
	}
	if err != nil {
		return s.errorf("storing sandbox %q in %s: %w", sb.ID, s.where, err)
	}
	return nil
}

// MarkSandboxGone records that a sandbox's container is gone.
func (s *pgStore) MarkSandboxGone(ctx context.Context, id string, at time.Time) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := validGone(id, at); err != nil {
		return fmt.Errorf("marking a sandbox gone: %w", err)
	}
	return s.sandboxWrite(ctx, "marking sandbox %q gone", id, "UPDATE sandboxes SET gone_at = $2 WHERE id = $1", id, at)
}

// DeleteSandbox forgets a removed sandbox.
func (s *pgStore) DeleteSandbox(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.sandboxWrite(ctx, "forgetting sandbox %q", id, "DELETE FROM sandboxes WHERE id = $1", id)
}

// sandboxWrite runs one statement on a sandbox's row; ErrNotFound when it
// matched none.
func (s *pgStore) sandboxWrite(ctx context.Context, what, id, sql string, args ...any) error {
	err := s.write(ctx, func(tx *pgTx) error {
		tag, err := tx.Exec(ctx, sql, args...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return tx.note(ctx, ChangeSandboxChanged, id)
	})
	what = fmt.Sprintf(what, id)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%s: no such sandbox in %s: %w", what, s.where, ErrNotFound)
	}
	if err != nil {
		return s.errorf("%s in %s: %w", what, s.where, err)
	}
	return nil
}

// Sandboxes returns every sandbox record.
func (s *pgStore) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT "+pgSandboxColumns+" FROM sandboxes ORDER BY created_at, id")
	if err != nil {
		return nil, s.errorf("listing sandboxes in %s: %w", s.where, err)
	}
	var out []Sandbox
	for rows.Next() {
		var (
			sb   Sandbox
			d    []byte
			gone *time.Time
		)
		if err := rows.Scan(&sb.ID, &sb.SessionID, &d, &sb.Replica, &sb.Spec, &sb.CreatedAt, &sb.ExpiresAt, &gone); err != nil {
			rows.Close()
			return nil, s.errorf("listing sandboxes in %s: %w", s.where, err)
		}
		sb.Spec = nilIfEmpty(sb.Spec)
		copy(sb.TokenDigest[:], d)
		sb.CreatedAt, sb.ExpiresAt, sb.GoneAt = sb.CreatedAt.UTC(), sb.ExpiresAt.UTC(), utcPtr(gone)
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, s.errorf("listing sandboxes in %s: %w", s.where, err)
	}
	return out, nil
}

func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func emptyNil(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
