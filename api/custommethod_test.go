package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit/specs"
)

const fqnGemini = "github://acme/conn-gemini"

// specGemini has an AIP-136 custom-method segment, {model}:streamGenerateContent.
const specGemini = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/conn-gemini"},
  "tools": [{"name": "gemini", "operations": [
    {"name": "models.stream", "method": "POST", "path": "/v1beta/models/{model}:streamGenerateContent", "hosts": ["other.test.example"],
     "inputs": [{"name": "model", "required": true}, {"name": "contents", "type": "array"}]}
  ]}]
}`

// TestRunCustomMethodPath fills a "{model}:method" segment through the run
// endpoint and the real proxy, and refuses a value the segment cannot hold.
func TestRunCustomMethodPath(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	h.snap.Store(specs.Compile(t, specGH, specOther, specGemini))
	cs := h.createSession(fqnGemini)

	r := h.run(cs.APIToken, `{"connector_fqn":"`+fqnGemini+`","tool":"gemini","operation":"models.stream","args":{"model":"gemini 2.5","contents":["hi"]}}`)
	if r.status != http.StatusOK {
		t.Fatalf("run = %d %s, want 200", r.status, r.body)
	}
	up := h.up.last(t)
	if want := "/v1beta/models/gemini%202.5:streamGenerateContent"; up.RawPath != want || up.Method != http.MethodPost {
		t.Fatalf("upstream got %s %s, want POST %s", up.Method, up.RawPath, want)
	}
	if up.Body != `{"contents":["hi"]}` {
		t.Fatalf("upstream body = %s, want only the non-path args", up.Body)
	}

	before := h.up.count.Load()
	for _, model := range []string{"a:b", ""} {
		r = h.run(cs.APIToken, `{"connector_fqn":"`+fqnGemini+`","tool":"gemini","operation":"models.stream","args":{"model":"`+model+`"}}`)
		if r.status != http.StatusBadRequest || r.errCode(t) != CodeInvalidArgs {
			t.Fatalf("run with model %q = %d %s, want 400 %s", model, r.status, r.body, CodeInvalidArgs)
		}
		want := `must not contain ":": the path puts the custom method ":streamGenerateContent" after it`
		if model == "" {
			want = "must not be empty"
		}
		if msg, _ := r.json(t)["error"].(map[string]any)["message"].(string); !strings.Contains(msg, want) {
			t.Fatalf("run with model %q = %s, want it to say %q", model, r.body, want)
		}
	}
	if n := h.up.count.Load(); n != before {
		t.Fatalf("the upstream received %d more requests for refused args, want 0", n-before)
	}
}
