package approval

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/preview"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// The preview lives with the pending approval only; the audit log gets the
// body's digest and the previewed field names, never a value.
func TestPreviewStaysOutOfTheAuditLogAndLeavesWhenDecided(t *testing.T) {
	const secretish = "quarterly-numbers-PRIVATE"
	rec := testkit.NewRecorder()
	b := NewBroker(BrokerConfig{Audit: rec})
	r := req("s1", "send")
	r.Preview = &preview.Preview{Method: "POST", Host: "api.example.com:443", Path: "/send",
		Body: &preview.Body{Kind: preview.KindJSON, Size: 42, SHA256: strings.Repeat("ab", 32),
			Fields: []preview.Field{{Name: "subject", Value: secretish}}},
		Fetch: &preview.Fetch{Operation: "api files.get", State: preview.FetchOK, Fields: []preview.Field{{Name: "name", Label: "Name", Value: secretish + "-file"}}}}
	out, id := awaitAsync(t, context.Background(), b, rec, r)

	pending := b.List(StatePending)
	if len(pending) != 1 || pending[0].Preview == nil || pending[0].Preview.Body.Fields[0].Value != secretish {
		t.Fatalf("pending = %+v, want the preview", pending)
	}
	if pending[0].BodySHA256 != strings.Repeat("ab", 32) || pending[0].BodySize != 42 {
		t.Errorf("pending digest = %s %d", pending[0].BodySHA256, pending[0].BodySize)
	}
	if err := b.Decide(id, DecisionApprove, RememberOnce); err != nil {
		t.Fatal(err)
	}
	result(t, out)
	decided := b.List(StateDecided)
	if len(decided) != 1 || decided[0].Preview != nil || decided[0].BodySHA256 == "" {
		t.Errorf("decided = %+v, want the digest without the preview", decided)
	}
	for _, e := range rec.All() {
		js, _ := json.Marshal(e)
		if strings.Contains(string(js), secretish) {
			t.Errorf("audit event %s holds a previewed value: %s", e.Event, js)
		}
		if e.Event == audit.EventApprovalRequested || e.Event == audit.EventApprovalDecided {
			if e.Fields[FieldBodySHA256] != strings.Repeat("ab", 32) || e.Fields[FieldBodySize] != "42" ||
				e.Fields[FieldPreviewFields] != "body.subject,fetch.name" {
				t.Errorf("%s fields = %v, want the digest, size and field names", e.Event, e.Fields)
			}
		}
	}
}
