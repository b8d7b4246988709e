package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// rowScanner is *sql.Row or *sql.Rows.
type rowScanner interface{ Scan(dest ...any) error }

const sessionColumns = `id, proxy_digest, api_digest, ca_cert, ca_key_sealed, connectors, hosts, learn,
	agent, project, approval_surface, created_at, expires_at, ended_at, end_reason, exit_code`

// scanSession reads one sessions row and opens its CA key.
func (s *sqliteStore) scanSession(r rowScanner) (Session, error) {
	var (
		out                  Session
		proxyD, apiD, sealed []byte
		conns, hosts, learn  string
		created, expires     int64
		ended, exit          sql.NullInt64
	)
	if err := r.Scan(&out.ID, &proxyD, &apiD, &out.CACert, &sealed, &conns, &hosts, &learn,
		&out.Agent, &out.Project, &out.ApprovalSurface, &created, &expires, &ended, &out.EndReason, &exit); err != nil {
		return Session{}, err
	}
	if len(proxyD) != 32 || len(apiD) != 32 {
		return Session{}, fmt.Errorf("reading session %q: a digest is not 32 bytes", out.ID)
	}
	copy(out.ProxyDigest[:], proxyD)
	copy(out.APIDigest[:], apiD)
	var err error
	if out.Connectors, err = decodeList("session "+out.ID+" connectors", conns); err != nil {
		return Session{}, err
	}
	if out.Hosts, err = decodeList("session "+out.ID+" hosts", hosts); err != nil {
		return Session{}, err
	}
	if out.Learn, err = decodeList("session "+out.ID+" learn", learn); err != nil {
		return Session{}, err
	}
	if len(out.CACert) == 0 {
		out.CACert = nil
	}
	if len(sealed) > 0 {
		if out.CAKey, err = s.key.Open(out.ID, sealed); err != nil {
			return Session{}, fmt.Errorf("reading session %q's CA key: %w", out.ID, err)
		}
	}
	out.CreatedAt, out.ExpiresAt = fromMicro(created), fromMicro(expires)
	out.EndedAt = fromMicroPtr(ended)
	if exit.Valid {
		c := int(exit.Int64)
		out.ExitCode = &c
	}
	return out, nil
}

// PutSession inserts a new session, its CA key sealed under the state key.
func (s *sqliteStore) PutSession(ctx context.Context, sess Session) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := validSession(sess); err != nil {
		return fmt.Errorf("storing a session: %w", err)
	}
	var sealed []byte
	if len(sess.CAKey) > 0 {
		var err error
		if sealed, err = s.key.Seal(sess.ID, sess.CAKey); err != nil {
			return fmt.Errorf("storing session %q: sealing its CA key: %w", sess.ID, err)
		}
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO sessions (`+sessionColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, '', NULL)`,
		sess.ID, sess.ProxyDigest[:], sess.APIDigest[:], nilIfEmpty(sess.CACert), sealed,
		encodeList(sess.Connectors), encodeList(sess.Hosts), encodeList(sess.Learn),
		sess.Agent, sess.Project, sess.ApprovalSurface, toMicro(sess.CreatedAt), toMicro(sess.ExpiresAt))
	if isUniqueViolation(err) {
		var n int
		if s.w.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE id = ?`, sess.ID).Scan(&n) == nil && n > 0 {
			return fmt.Errorf("storing session %q: a session with this ID already exists: %w", sess.ID, ErrConflict)
		}
		return fmt.Errorf("storing session %q: another session has the same API token digest: %w", sess.ID, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("storing session %q: %w", sess.ID, err)
	}
	s.hub.publish(Change{Kind: ChangeSessionCreated, ID: sess.ID})
	return nil
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// EndSession marks a live session ended.
func (s *sqliteStore) EndSession(ctx context.Context, id string, at time.Time, reason string, exitCode *int) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := validEnd(id, at, reason); err != nil {
		return fmt.Errorf("ending a session: %w", err)
	}
	var exit any
	if exitCode != nil {
		exit = int64(*exitCode)
	}
	res, err := s.w.ExecContext(ctx, `UPDATE sessions SET ended_at = ?, end_reason = ?, exit_code = ?
		WHERE id = ? AND ended_at IS NULL`, toMicro(at), reason, exit, id)
	if err != nil {
		return fmt.Errorf("ending session %q: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		if err := s.exists(ctx, "sessions", id); err != nil {
			return fmt.Errorf("ending session %q: %w", id, err)
		}
		return fmt.Errorf("ending session %q: it has already ended: %w", id, ErrConflict)
	}
	s.hub.publish(Change{Kind: ChangeSessionEnded, ID: id})
	return nil
}

// exists returns nil when table has a row with id, ErrNotFound when not.
func (s *sqliteStore) exists(ctx context.Context, table, id string) error {
	var n int
	// table is one of ours, never input.
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM `+table+` WHERE id = ?`, id).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// Session returns one session by ID.
func (s *sqliteStore) Session(ctx context.Context, id string) (Session, error) {
	if err := s.check(); err != nil {
		return Session{}, err
	}
	sess, err := s.scanSession(s.r.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("reading session %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("reading session %q: %w", id, err)
	}
	return sess, nil
}

// SessionByAPIDigest returns the session whose API token has digest d.
func (s *sqliteStore) SessionByAPIDigest(ctx context.Context, d [32]byte) (Session, error) {
	if err := s.check(); err != nil {
		return Session{}, err
	}
	sess, err := s.scanSession(s.r.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE api_digest = ?`, d[:]))
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("reading a session by API token digest: %w", ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("reading a session by API token digest: %w", err)
	}
	return sess, nil
}

// Sessions returns the live sessions and those that ended or expired after
// since, oldest first.
func (s *sqliteStore) Sessions(ctx context.Context, now, since time.Time) ([]Session, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	lo := now
	if since.Before(now) {
		lo = since
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+sessionColumns+` FROM sessions
		WHERE (ended_at IS NULL AND expires_at > ?) OR ended_at > ?
		ORDER BY created_at, id`, toMicro(lo), toMicro(since))
	if err != nil {
		return nil, fmt.Errorf("listing sessions: %w", err)
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		sess, err := s.scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("listing sessions: %w", err)
		}
		out = append(out, sess)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing sessions: %w", err)
	}
	return out, nil
}

// PruneSessions deletes the sessions that ended or expired before t; their
// approvals, grants and sandboxes go with them (ON DELETE CASCADE).
func (s *sqliteStore) PruneSessions(ctx context.Context, before time.Time) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	t := toMicro(before)
	res, err := s.w.ExecContext(ctx, `DELETE FROM sessions WHERE ended_at < ? OR expires_at < ?`, t, t)
	if err != nil {
		return 0, fmt.Errorf("pruning sessions: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("pruning sessions: %w", err)
	}
	return int(n), nil
}

const approvalColumns = `id, session_id, replica, view, created_at, decided_at, decision, outcome, reason, remember`

func scanApproval(r rowScanner) (Approval, error) {
	var (
		a       Approval
		created int64
		decided sql.NullInt64
	)
	if err := r.Scan(&a.ID, &a.SessionID, &a.Replica, &a.View, &created, &decided, &a.Decision, &a.Outcome, &a.Reason, &a.Remember); err != nil {
		return Approval{}, err
	}
	if len(a.View) == 0 {
		a.View = nil
	}
	a.CreatedAt = fromMicro(created)
	a.DecidedAt = fromMicroPtr(decided)
	return a, nil
}

func scanApprovals(rows *sql.Rows) ([]Approval, error) {
	defer rows.Close()
	var out []Approval
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// PutApproval inserts a pending approval.
func (s *sqliteStore) PutApproval(ctx context.Context, a Approval) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := validApproval(a); err != nil {
		return fmt.Errorf("storing an approval: %w", err)
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO approvals (`+approvalColumns+`)
		VALUES (?, ?, ?, ?, ?, NULL, '', '', '', '')`,
		a.ID, a.SessionID, a.Replica, nilIfEmpty(a.View), toMicro(a.CreatedAt))
	switch {
	case isUniqueViolation(err):
		return fmt.Errorf("storing approval %q: an approval with this ID already exists: %w", a.ID, ErrConflict)
	case isForeignKeyViolation(err):
		return fmt.Errorf("storing approval %q: session %q: %w", a.ID, a.SessionID, ErrNotFound)
	case err != nil:
		return fmt.Errorf("storing approval %q: %w", a.ID, err)
	}
	s.hub.publish(Change{Kind: ChangeApprovalCreated, ID: a.ID})
	return nil
}

// DecideApproval settles a pending approval.
func (s *sqliteStore) DecideApproval(ctx context.Context, id string, at time.Time, decision, outcome, reason, remember string) (Approval, error) {
	if err := s.check(); err != nil {
		return Approval{}, err
	}
	if err := validDecision(id, at, decision, outcome, remember); err != nil {
		return Approval{}, fmt.Errorf("deciding an approval: %w", err)
	}
	a, err := scanApproval(s.w.QueryRowContext(ctx, `UPDATE approvals
		SET decided_at = ?, decision = ?, outcome = ?, reason = ?, remember = ?
		WHERE id = ? AND decided_at IS NULL
		RETURNING `+approvalColumns, toMicro(at), decision, outcome, reason, remember, id))
	if errors.Is(err, sql.ErrNoRows) {
		if err := s.exists(ctx, "approvals", id); err != nil {
			return Approval{}, fmt.Errorf("deciding approval %q: %w", id, err)
		}
		return Approval{}, fmt.Errorf("deciding approval %q: it was already decided: %w", id, ErrConflict)
	}
	if err != nil {
		return Approval{}, fmt.Errorf("deciding approval %q: %w", id, err)
	}
	s.hub.publish(Change{Kind: ChangeApprovalDecided, ID: id})
	return a, nil
}

// Approval returns one approval.
func (s *sqliteStore) Approval(ctx context.Context, id string) (Approval, error) {
	if err := s.check(); err != nil {
		return Approval{}, err
	}
	a, err := scanApproval(s.r.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Approval{}, fmt.Errorf("reading approval %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Approval{}, fmt.Errorf("reading approval %q: %w", id, err)
	}
	return a, nil
}

// Approvals returns every pending approval and the decidedLimit most
// recently decided ones, oldest first.
func (s *sqliteStore) Approvals(ctx context.Context, decidedLimit int) ([]Approval, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if decidedLimit < 0 {
		decidedLimit = 0
	}
	rows, err := s.r.QueryContext(ctx, `SELECT * FROM (
			SELECT `+approvalColumns+` FROM approvals WHERE decided_at IS NULL
			UNION ALL
			SELECT * FROM (SELECT `+approvalColumns+` FROM approvals WHERE decided_at IS NOT NULL
				ORDER BY decided_at DESC, id DESC LIMIT ?)
		) ORDER BY created_at, id`, decidedLimit)
	if err != nil {
		return nil, fmt.Errorf("listing approvals: %w", err)
	}
	out, err := scanApprovals(rows)
	if err != nil {
		return nil, fmt.Errorf("listing approvals: %w", err)
	}
	return out, nil
}

// AbandonApprovals settles every approval pending on replica as abandoned.
func (s *sqliteStore) AbandonApprovals(ctx context.Context, replica string, at time.Time) ([]Approval, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := checkTime("the abandon time", at); err != nil {
		return nil, fmt.Errorf("abandoning approvals: %w", err)
	}
	out, err := s.settleAbandoned(ctx, `UPDATE approvals SET decided_at = ?, outcome = 'abandoned'
		WHERE replica = ? AND decided_at IS NULL`, toMicro(at), replica)
	if err != nil {
		return nil, fmt.Errorf("abandoning the approvals of replica %q: %w", replica, err)
	}
	return out, nil
}

// AbandonStaleApprovals settles every approval pending since before
// another replica than except as abandoned. The single writer makes the
// conditional update atomic: of callers racing, one gets each approval.
func (s *sqliteStore) AbandonStaleApprovals(ctx context.Context, before, at time.Time, except string) ([]Approval, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := validStale(before, at); err != nil {
		return nil, fmt.Errorf("abandoning stale approvals: %w", err)
	}
	out, err := s.settleAbandoned(ctx, `UPDATE approvals SET decided_at = ?, outcome = 'abandoned'
		WHERE decided_at IS NULL AND created_at < ? AND replica <> ?`, toMicro(at), toMicro(before), except)
	if err != nil {
		return nil, fmt.Errorf("abandoning approvals pending since before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return out, nil
}

// settleAbandoned runs update, an UPDATE of approvals to abandoned, and
// publishes a change for each one it settled; it returns them oldest
// first.
func (s *sqliteStore) settleAbandoned(ctx context.Context, update string, args ...any) ([]Approval, error) {
	rows, err := s.w.QueryContext(ctx, update+` RETURNING `+approvalColumns, args...)
	if err != nil {
		return nil, err
	}
	out, err := scanApprovals(rows)
	if err != nil {
		return nil, err
	}
	sortApprovals(out)
	changes := make([]Change, len(out))
	for i, a := range out {
		changes[i] = Change{Kind: ChangeApprovalDecided, ID: a.ID}
	}
	s.hub.publish(changes...)
	return out, nil
}
