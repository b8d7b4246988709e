package state

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// PutGrant remembers a decision, replacing an older one for the same key.
func (s *sqliteStore) PutGrant(ctx context.Context, g Grant) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := validGrant(g); err != nil {
		return fmt.Errorf("storing a grant: %w", err)
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO grants (session_id, connector, tool, operation, decision, created_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (session_id, connector, tool, operation)
		DO UPDATE SET decision = excluded.decision, created_at = excluded.created_at`,
		g.SessionID, g.Connector, g.Tool, g.Operation, g.Decision, toMicro(g.CreatedAt))
	if isForeignKeyViolation(err) {
		return fmt.Errorf("storing a grant of session %q: %w", g.SessionID, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("storing a grant of session %q: %w", g.SessionID, err)
	}
	s.hub.publish(Change{Kind: ChangeGrantCreated, ID: g.SessionID})
	return nil
}

// Grants returns the remembered decisions of sessions that have neither
// ended nor expired.
func (s *sqliteStore) Grants(ctx context.Context) ([]Grant, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT g.session_id, g.connector, g.tool, g.operation, g.decision, g.created_at
		FROM grants g JOIN sessions s ON s.id = g.session_id
		WHERE s.ended_at IS NULL AND s.expires_at > ?
		ORDER BY g.created_at, g.session_id, g.connector, g.tool, g.operation`, toMicro(time.Now()))
	if err != nil {
		return nil, fmt.Errorf("listing grants: %w", err)
	}
	defer rows.Close()
	var out []Grant
	for rows.Next() {
		var g Grant
		var created int64
		if err := rows.Scan(&g.SessionID, &g.Connector, &g.Tool, &g.Operation, &g.Decision, &created); err != nil {
			return nil, fmt.Errorf("listing grants: %w", err)
		}
		g.CreatedAt = fromMicro(created)
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing grants: %w", err)
	}
	return out, nil
}

// PutSandbox inserts or replaces a sandbox record.
func (s *sqliteStore) PutSandbox(ctx context.Context, sb Sandbox) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := validSandbox(sb); err != nil {
		return fmt.Errorf("storing a sandbox: %w", err)
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO sandboxes (id, session_id, token_digest, replica, spec, created_at, expires_at, gone_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET session_id = excluded.session_id, token_digest = excluded.token_digest,
			replica = excluded.replica, spec = excluded.spec, created_at = excluded.created_at,
			expires_at = excluded.expires_at, gone_at = excluded.gone_at`,
		sb.ID, sb.SessionID, sb.TokenDigest[:], sb.Replica, nilIfEmpty(sb.Spec), toMicro(sb.CreatedAt), toMicro(sb.ExpiresAt), toMicroPtr(sb.GoneAt))
	if isForeignKeyViolation(err) {
		return fmt.Errorf("storing sandbox %q: session %q: %w", sb.ID, sb.SessionID, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("storing sandbox %q: %w", sb.ID, err)
	}
	s.hub.publish(Change{Kind: ChangeSandboxChanged, ID: sb.ID})
	return nil
}

// MarkSandboxGone sets a sandbox's GoneAt.
func (s *sqliteStore) MarkSandboxGone(ctx context.Context, id string, at time.Time) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := validGone(id, at); err != nil {
		return fmt.Errorf("marking a sandbox gone: %w", err)
	}
	return s.sandboxWrite(ctx, "marking sandbox %q gone", id, `UPDATE sandboxes SET gone_at = ? WHERE id = ?`, toMicro(at), id)
}

// DeleteSandbox forgets a removed sandbox.
func (s *sqliteStore) DeleteSandbox(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.sandboxWrite(ctx, "deleting sandbox %q", id, `DELETE FROM sandboxes WHERE id = ?`, id)
}

// sandboxWrite runs sql, a write of sandbox id's row, and publishes the
// change; what (formatted with id) names the write in its errors.
func (s *sqliteStore) sandboxWrite(ctx context.Context, what, id, sql string, args ...any) error {
	what = fmt.Sprintf(what, id)
	res, err := s.w.ExecContext(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	s.hub.publish(Change{Kind: ChangeSandboxChanged, ID: id})
	return nil
}

// Sandboxes returns every sandbox record, oldest first.
func (s *sqliteStore) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, session_id, token_digest, replica, spec, created_at, expires_at, gone_at
		FROM sandboxes ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	defer rows.Close()
	var out []Sandbox
	for rows.Next() {
		var (
			sb               Sandbox
			digest           []byte
			created, expires int64
			gone             sql.NullInt64
		)
		if err := rows.Scan(&sb.ID, &sb.SessionID, &digest, &sb.Replica, &sb.Spec, &created, &expires, &gone); err != nil {
			return nil, fmt.Errorf("listing sandboxes: %w", err)
		}
		if len(digest) != 32 {
			return nil, fmt.Errorf("listing sandboxes: sandbox %q's token digest is not 32 bytes", sb.ID)
		}
		copy(sb.TokenDigest[:], digest)
		if len(sb.Spec) == 0 {
			sb.Spec = nil
		}
		sb.CreatedAt, sb.ExpiresAt, sb.GoneAt = fromMicro(created), fromMicro(expires), fromMicroPtr(gone)
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	return out, nil
}
