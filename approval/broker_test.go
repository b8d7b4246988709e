package approval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/preview"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

func req(session, op string) Request {
	return Request{
		SessionID:    session,
		ConnectorFQN: "github://acme/conn",
		Tool:         "gh",
		Operation:    op,
		Method:       "POST",
		Host:         "api.example.com:443",
		Path:         "/repos/acme/x/issues",
		Fields:       map[string]string{"repository": "x"},
	}
}

// awaitAsync runs Await in a goroutine and returns its result channel and
// the approval ID once it is pending (taken from the approval.requested
// event).
func awaitAsync(t *testing.T, ctx context.Context, b *Broker, rec *testkit.Recorder, r Request) (<-chan Outcome, string) {
	t.Helper()
	out := make(chan Outcome, 1)
	go func() { out <- b.Await(ctx, r) }()
	e := rec.Next(t)
	if e.Event != audit.EventApprovalRequested {
		t.Fatalf("first event = %q, want %q", e.Event, audit.EventApprovalRequested)
	}
	return out, e.Fields[FieldApprovalID]
}

func result(t *testing.T, ch <-chan Outcome) Outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(5 * time.Second):
		t.Fatal("Await did not return within 5s")
		return ""
	}
}

func TestOutcomeZeroValueDenies(t *testing.T) {
	var o Outcome
	if o.IsApproved() || o.String() != "denied" {
		t.Errorf("zero Outcome: IsApproved=%v String=%q, want false, denied", o.IsApproved(), o.String())
	}
	var r Remember
	if r.String() != "once" {
		t.Errorf("zero Remember = %q, want once", r.String())
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Decision
		wantErr bool
	}{
		{"approve", DecisionApprove, false},
		{"deny", DecisionDeny, false},
		{"", "", true},
		{"APPROVE", "", true},
		{"yes", "", true},
	}
	for _, tc := range tests {
		got, err := ParseDecision(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ParseDecision(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
	for in, want := range map[string]Remember{"": RememberOnce, "once": RememberOnce, "session": RememberSession} {
		if got, err := ParseRemember(in); err != nil || got != want {
			t.Errorf("ParseRemember(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseRemember("forever"); err == nil {
		t.Error(`ParseRemember("forever") succeeded`)
	}
}

func TestApproveAndDeny(t *testing.T) {
	tests := []struct {
		name         string
		decision     Decision
		want         Outcome
		wantDecision string
		wantReason   string
	}{
		{"approve", DecisionApprove, OutcomeApproved, "approved", ReasonApproved},
		{"deny", DecisionDeny, OutcomeDenied, "denied", ReasonDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := testkit.NewRecorder()
			b := NewBroker(BrokerConfig{Timeout: time.Minute, Audit: rec})
			ch, id := awaitAsync(t, context.Background(), b, rec, req("ses_1", "issues.create"))
			if !strings.HasPrefix(id, IDPrefix) {
				t.Fatalf("approval ID %q lacks %q", id, IDPrefix)
			}
			pending := b.List(StatePending)
			if len(pending) != 1 || pending[0].ID != id || pending[0].State != StatePending ||
				pending[0].Operation != "issues.create" || pending[0].Fields["repository"] != "x" {
				t.Fatalf("List(pending) = %+v", pending)
			}
			if err := b.Decide(id, tc.decision, RememberOnce); err != nil {
				t.Fatalf("Decide: %v", err)
			}
			if got := result(t, ch); got != tc.want {
				t.Errorf("Await = %q, want %q", got, tc.want)
			}
			e := rec.Next(t)
			if e.Event != audit.EventApprovalDecided || e.Decision != tc.wantDecision || e.Reason != tc.wantReason ||
				e.SessionID != "ses_1" || e.Operation != "issues.create" || e.Fields[FieldApprovalID] != id {
				t.Errorf("decided event = %+v", e)
			}
			if got := b.List(StatePending); len(got) != 0 {
				t.Errorf("still pending after Decide: %+v", got)
			}
			decided := b.List(StateDecided)
			if len(decided) != 1 || decided[0].ID != id || decided[0].Decision != tc.want.String() || decided[0].DecidedAt == nil {
				t.Errorf("List(decided) = %+v", decided)
			}
			if err := b.Decide(id, DecisionApprove, RememberOnce); !errors.Is(err, ErrAlreadyDecided) {
				t.Errorf("second Decide: %v, want ErrAlreadyDecided", err)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	rec := testkit.NewRecorder()
	b := NewBroker(BrokerConfig{Timeout: 50 * time.Millisecond, Audit: rec})
	ch, id := awaitAsync(t, context.Background(), b, rec, req("ses_1", "issues.create"))
	if got := result(t, ch); got != OutcomeTimeout {
		t.Fatalf("Await = %q, want timeout", got)
	}
	e := rec.Next(t)
	if e.Event != audit.EventApprovalDecided || e.Decision != "denied" || e.Reason != ReasonTimeout {
		t.Errorf("decided event = %+v, want decision denied, reason timeout", e)
	}
	if err := b.Decide(id, DecisionApprove, RememberOnce); !errors.Is(err, ErrAlreadyDecided) {
		t.Errorf("Decide after timeout: %v, want ErrAlreadyDecided", err)
	}
	if got := b.List(StateAll); len(got) != 1 || got[0].Decision != "timeout" {
		t.Errorf("List(all) = %+v", got)
	}
}

func TestContextCanceled(t *testing.T) {
	rec := testkit.NewRecorder()
	b := NewBroker(BrokerConfig{Timeout: time.Minute, Audit: rec})
	ctx, cancel := context.WithCancel(context.Background())
	ch, _ := awaitAsync(t, ctx, b, rec, req("ses_1", "issues.create"))
	cancel()
	if got := result(t, ch); got != OutcomeCanceled || got.IsApproved() {
		t.Fatalf("Await = %q, want canceled", got)
	}
	if e := rec.Next(t); e.Reason != ReasonCanceled || e.Decision != "denied" {
		t.Errorf("decided event = %+v", e)
	}
}

func TestRememberSession(t *testing.T) {
	rec := testkit.NewRecorder()
	b := NewBroker(BrokerConfig{Timeout: time.Minute, Audit: rec})
	ctx := context.Background()

	// Two requests of the same operation are pending; approving one with
	// remember=session answers both.
	ch1, id1 := awaitAsync(t, ctx, b, rec, req("ses_1", "issues.create"))
	ch2, _ := awaitAsync(t, ctx, b, rec, req("ses_1", "issues.create"))
	// A different operation and a different session stay pending.
	chOtherOp, idOtherOp := awaitAsync(t, ctx, b, rec, req("ses_1", "issues.close"))
	chOtherSess, idOtherSess := awaitAsync(t, ctx, b, rec, req("ses_2", "issues.create"))

	if b.Remembers(req("ses_1", "issues.create")) {
		t.Errorf("Remembers before any decision = true")
	}
	if err := b.Decide(id1, DecisionApprove, RememberSession); err != nil {
		t.Fatal(err)
	}
	if !b.Remembers(req("ses_1", "issues.create")) || b.Remembers(req("ses_1", "issues.close")) || b.Remembers(req("ses_2", "issues.create")) {
		t.Errorf("Remembers after approving issues.create of ses_1 for the session: want it for that pair only")
	}
	for i, ch := range []<-chan Outcome{ch1, ch2} {
		if got := result(t, ch); got != OutcomeApproved {
			t.Errorf("request %d: Await = %q, want approved", i+1, got)
		}
	}
	for range 2 {
		if e := rec.Next(t); e.Event != audit.EventApprovalDecided || e.Decision != "approved" || e.Reason != ReasonApproved || e.Operation != "issues.create" {
			t.Errorf("decided event = %+v, want issues.create approved", e)
		}
	}

	// Later requests of the same (session, operation) pass at once.
	if got := b.Await(ctx, req("ses_1", "issues.create")); got != OutcomeApproved {
		t.Errorf("remembered Await = %q, want approved", got)
	}
	if e := rec.Next(t); e.Event != audit.EventApprovalDecided || e.Reason != ReasonRemembered || e.Decision != "approved" {
		t.Errorf("remembered event = %+v", e)
	}

	pending := b.List(StatePending)
	var ids []string
	for _, p := range pending {
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	want := []string{idOtherOp, idOtherSess}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("pending = %v, want the other operation and session %v", ids, want)
	}
	if err := b.Decide(idOtherOp, DecisionDeny, RememberOnce); err != nil {
		t.Fatal(err)
	}
	if err := b.Decide(idOtherSess, DecisionDeny, RememberOnce); err != nil {
		t.Fatal(err)
	}
	if result(t, chOtherOp) != OutcomeDenied || result(t, chOtherSess) != OutcomeDenied {
		t.Error("the other requests were not denied")
	}
	rec.Next(t)
	rec.Next(t)

	// Forgetting the session drops the grant: the next request waits again.
	b.ForgetSession("ses_1")
	ch, id := awaitAsync(t, ctx, b, rec, req("ses_1", "issues.create"))
	if err := b.Decide(id, DecisionDeny, RememberOnce); err != nil {
		t.Fatal(err)
	}
	if got := result(t, ch); got != OutcomeDenied {
		t.Errorf("after ForgetSession: Await = %q, want denied", got)
	}
}

func TestRememberDenyForSession(t *testing.T) {
	rec := testkit.NewRecorder()
	b := NewBroker(BrokerConfig{Timeout: time.Minute, Audit: rec})
	ch, id := awaitAsync(t, context.Background(), b, rec, req("ses_1", "op"))
	if err := b.Decide(id, DecisionDeny, RememberSession); err != nil {
		t.Fatal(err)
	}
	if got := result(t, ch); got != OutcomeDenied {
		t.Fatalf("Await = %q", got)
	}
	if got := b.Await(context.Background(), req("ses_1", "op")); got != OutcomeDenied {
		t.Errorf("remembered deny: Await = %q, want denied", got)
	}
}

func TestDecideErrors(t *testing.T) {
	b := NewBroker(BrokerConfig{})
	if err := b.Decide("apr_nope", DecisionApprove, RememberOnce); !errors.Is(err, ErrUnknownApproval) {
		t.Errorf("Decide(unknown) = %v, want ErrUnknownApproval", err)
	}
	for _, tc := range []struct {
		d Decision
		r Remember
	}{{"", RememberOnce}, {"maybe", RememberOnce}, {DecisionApprove, "forever"}} {
		if err := b.Decide("apr_x", tc.d, tc.r); err == nil || errors.Is(err, ErrUnknownApproval) {
			t.Errorf("Decide(%q, %q) = %v, want a validation error", tc.d, tc.r, err)
		}
	}
	if got := b.List("bogus"); got != nil {
		t.Errorf("List(bogus) = %v, want nil", got)
	}
	if b.Timeout() != DefaultTimeout {
		t.Errorf("Timeout() = %v, want %v", b.Timeout(), DefaultTimeout)
	}
}

func TestOnRequestedAndHistoryBound(t *testing.T) {
	announced := make(chan Pending, 8)
	b := NewBroker(BrokerConfig{Timeout: time.Minute, History: 2, OnRequested: func(p Pending) { announced <- p }})
	for i := range 3 {
		out := make(chan Outcome, 1)
		go func() { out <- b.Await(context.Background(), req("ses_1", fmt.Sprint("op", i))) }()
		var p Pending
		select {
		case p = <-announced:
		case <-time.After(5 * time.Second):
			t.Fatal("OnRequested not called")
		}
		if p.Operation != fmt.Sprint("op", i) || p.State != StatePending {
			t.Errorf("announced %+v", p)
		}
		if err := b.Decide(p.ID, DecisionApprove, RememberOnce); err != nil {
			t.Fatal(err)
		}
		if got := result(t, out); got != OutcomeApproved {
			t.Fatalf("Await = %q", got)
		}
	}
	decided := b.List(StateDecided)
	if len(decided) != 2 || decided[0].Operation != "op1" || decided[1].Operation != "op2" {
		t.Errorf("List(decided) with History 2 = %+v, want op1, op2", decided)
	}
}

func TestListReturnsCopies(t *testing.T) {
	rec := testkit.NewRecorder()
	b := NewBroker(BrokerConfig{Timeout: time.Minute, Audit: rec})
	ch, id := awaitAsync(t, context.Background(), b, rec, req("ses_1", "op"))
	got := b.List(StatePending)
	got[0].Fields["repository"] = "mutated"
	if again := b.List(StatePending); again[0].Fields["repository"] != "x" {
		t.Error("List exposed the broker's own Fields map")
	}
	_ = b.Decide(id, DecisionApprove, RememberOnce)
	result(t, ch)
}

func TestConcurrentDecideAndTimeout(t *testing.T) {
	// Decide racing the timeout: exactly one wins, Await returns once, and
	// exactly one decided event is recorded per request.
	rec := testkit.NewRecorder()
	b := NewBroker(BrokerConfig{Timeout: 5 * time.Millisecond, Audit: rec})
	const n = 20
	var wg sync.WaitGroup
	outcomes := make(chan Outcome, n)
	for i := range n {
		wg.Go(func() { outcomes <- b.Await(context.Background(), req("ses_1", fmt.Sprint("op", i))) })
	}
	deciders := sync.WaitGroup{}
	deciders.Go(func() {
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			for _, p := range b.List(StatePending) {
				_ = b.Decide(p.ID, DecisionApprove, RememberOnce)
			}
			if len(b.List(StateDecided)) == n {
				return
			}
		}
	})
	wg.Wait()
	deciders.Wait()
	close(outcomes)
	count := 0
	for o := range outcomes {
		if o != OutcomeApproved && o != OutcomeTimeout {
			t.Errorf("outcome %q", o)
		}
		count++
	}
	if count != n {
		t.Errorf("%d outcomes, want %d", count, n)
	}
	decided := 0
	for _, e := range rec.All() {
		if e.Event == audit.EventApprovalDecided {
			decided++
		}
	}
	if decided != n {
		t.Errorf("%d approval.decided events, want %d", decided, n)
	}
}

// TestHeldLine: the line an agent is shown names the approval, the request,
// the body's field names and digest, never a field's value or the state a
// preview fetch brought back.
func TestHeldLine(t *testing.T) {
	p := Pending{ID: "apr_1", Tool: "mail", Operation: "send", Method: "POST", Host: "api.example.test:443", Path: "/v1/send",
		BodySHA256: strings.Repeat("ab", 32), BodySize: 42,
		Preview: &preview.Preview{
			Body:  &preview.Body{Kind: preview.KindJSON, Fields: []preview.Field{{Name: "to", Value: "carol@example.test"}, {Name: "body", Value: "secret plan"}}},
			Fetch: &preview.Fetch{Fields: []preview.Field{{Name: "Name", Value: "fetched-name"}}},
		}}
	got := p.HeldLine()
	want := "apr_1: POST api.example.test:443/v1/send (mail send), fields to, body, body 42B sha256:abababababab"
	if got != want {
		t.Errorf("HeldLine() =\n %q, want\n %q", got, want)
	}
	for _, v := range []string{"carol@example.test", "secret plan", "fetched-name"} {
		if strings.Contains(got, v) {
			t.Errorf("HeldLine() shows the value %q", v)
		}
	}
}
