package state

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/pgtest"
)

// BenchmarkPostgresPutSession measures one session's write (sealing its CA
// key, the row, its change and notification) on the local test server.
func BenchmarkPostgresPutSession(b *testing.B) {
	s := openPG(b, pgtest.DB(b), newTestKey(b), nil)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		i++
		if err := s.PutSession(ctx, testSession(fmt.Sprint(i))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPostgresDecideApproval measures a conditional decision.
func BenchmarkPostgresDecideApproval(b *testing.B) {
	s := openPG(b, pgtest.DB(b), newTestKey(b), nil)
	ctx := context.Background()
	if err := s.PutSession(ctx, testSession("s")); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprint(i)
		if err := s.PutApproval(ctx, Approval{ID: id, SessionID: "s", Replica: "r", CreatedAt: time.Now()}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.DecideApproval(ctx, id, time.Now(), "approve", "approved", "", "once"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPostgresPutApproval(b *testing.B) {
	s := openPG(b, pgtest.DB(b), newTestKey(b), nil)
	ctx := context.Background()
	if err := s.PutSession(ctx, testSession("s")); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		if err := s.PutApproval(ctx, Approval{ID: fmt.Sprint(i), SessionID: "s", Replica: "r", CreatedAt: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
}
