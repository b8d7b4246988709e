package approval

import (
	"bytes"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/preview"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

func TestWriteTextGolden(t *testing.T) {
	p := Pending{ID: "apr_000000000000000000000001", SessionID: "ses_1", ConnectorFQN: "github://acme/mail", Tool: "mail",
		Operation: "send", Method: "POST", Host: "api.example.com:443", Path: "/v1/send", State: StatePending,
		RequestedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Fields: map[string]string{"to": "bob@example.com"},
		BodySHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", BodySize: 88,
		Preview: &preview.Preview{Method: "POST", Host: "api.example.com:443", Path: "/v1/send",
			Query: []preview.Field{{Name: "draft", Value: "no"}},
			Body: &preview.Body{ContentType: "application/json", Kind: preview.KindJSON, Size: 88,
				SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
				Fields: []preview.Field{{Name: "to", Label: "To", Value: "bob@example.com", Primary: true},
					{Name: "body", Label: "Message", Value: "Hi Bob,\nsee you at 10.", Multiline: true, Primary: true},
					{Name: "priority", Value: "low"}}},
			Fetch: &preview.Fetch{Operation: "mail contacts.get", State: preview.FetchOK, Status: 200,
				Fields: []preview.Field{{Name: "name", Label: "Name", Value: "Bob Example", Primary: true}}}}}
	var buf bytes.Buffer
	if err := WriteText(&buf, p); err != nil {
		t.Fatal(err)
	}
	testkit.Golden(t, "testdata/show.golden", buf.Bytes())

	p.Preview.Fetch = &preview.Fetch{Operation: "mail contacts.get", State: preview.FetchFailed, Error: "api.example.com answered 404 Not Found", Code: "upstream_status", Status: 404}
	buf.Reset()
	_ = WriteText(&buf, p)
	testkit.Golden(t, "testdata/show-fetch-failed.golden", buf.Bytes())
}
