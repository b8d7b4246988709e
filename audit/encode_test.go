package audit

import (
	"encoding/json"
	"testing"
	"time"
)

// referenceLine is what Marshal produced before appendEvent: encoding/json.
func referenceLine(t testing.TB, e Event) string {
	b, err := json.Marshal(Normalize(e))
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func TestAppendEventMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 11, 23, 23, 59, 58, 123456789, time.FixedZone("x", 3600))
	exit := 3
	events := []Event{
		{},
		{Time: at, Event: EventProxied, AuditID: "aud_x", SessionID: "s1", ConnectorFQN: "acme/github", Tool: "api",
			Operation: "issues.list", Method: "GET", Host: "api.github.com:443", Path: "/repos/a/b", Status: 200,
			Decision: "allowed", Reason: "allowed", CredentialKind: "bearer", BytesIn: 5, BytesOut: 1 << 40,
			DurationMS: 12, Source: "proxy", Fields: map[string]string{"z": "1", "a": "<&>", "m": "é\u2028\u2029"}, Replica: "serve-0"},
		{Time: at, Event: EventSessionEnded, AuditID: "aud_r", Replica: "r<1>"},
		{Time: at, Event: EventActionRun, AuditID: "aud_ar", ExitCode: &exit, Replica: "r2"},
		{Time: at, Event: EventDenied, AuditID: "aud_d", Path: "/a?b#c", Host: "user@h:1", Status: -3, BytesIn: -1},
		{Time: at.Truncate(time.Second), Event: "quote\"back\\slash\b\f\n\r\t\x00\x1f\x7f", AuditID: "aud_q", Action: "\xff\xfe invalid", Fields: map[string]string{}},
		{Time: at, Event: EventActionRun, AuditID: "aud_a", ExitCode: &exit},
		{Time: at, Event: EventWebSocketClosed, AuditID: "aud_w", WebSocket: &WebSocketStats{FramesIn: 1, CloseCode: 1000, ClosedBy: "client"}},
	}
	for i, e := range events {
		got, err := Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if e.Time.IsZero() {
			// Normalize stamps the time and the ID: compare the shape.
			var back Event
			if err := json.Unmarshal(got, &back); err != nil || back.AuditID == "" {
				t.Errorf("event %d: %q does not decode (%v)", i, got, err)
			}
			continue
		}
		if want := referenceLine(t, e); string(got) != want {
			t.Errorf("event %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func FuzzAppendEvent(f *testing.F) {
	f.Add("connector.proxy.proxied", "/repos/a", "api.github.com:443", "k", "<v>&\u2028", 200, int64(7))
	f.Add("\xff", "\x00\"", "", "", "", 0, int64(-1))
	f.Fuzz(func(t *testing.T, event, path, host, key, value string, status int, n int64) {
		e := Event{Time: time.Unix(1700000000, n%1e9), Event: event, AuditID: "aud_f", Path: path, Host: host,
			Status: status, BytesIn: n, Reason: value, Fields: map[string]string{key: value, value: key}, Replica: key}
		got, err := Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if want := referenceLine(t, e); string(got) != want {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

func BenchmarkRecordLine(b *testing.B) {
	e := Event{Time: time.Now(), Event: EventProxied, AuditID: "aud_x", SessionID: "s1", ConnectorFQN: "acme/github",
		Tool: "api", Operation: "issues.list", Method: "GET", Host: "api.github.com:443", Path: "/repos/a/b",
		Status: 200, Decision: "allowed", Reason: "allowed", CredentialKind: "bearer", Source: "proxy"}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = appendLine(buf[:0], e)
	}
}
