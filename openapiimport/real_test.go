package openapiimport_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/go-yaml"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/openapiimport"
	"github.com/aileron-dev/aileron-proxy/policy"
)

const realDir = "testdata/openapi"

// realSource returns the description name under testdata/openapi, written
// decompressed to a temporary directory when it is gzip-compressed.
func realSource(t testing.TB, name string) openapiimport.Source {
	t.Helper()
	path := filepath.Join(realDir, name)
	if strings.HasSuffix(name, ".gz") {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(t.TempDir(), strings.TrimSuffix(name, ".gz"))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src, err := openapiimport.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// countOperations counts the operations of a description from its raw
// text, independently of the importer: every get, put, post, delete,
// options, head, patch or trace key under a paths entry.
func countOperations(t testing.TB, data []byte) int {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("decoding the description: %v", err)
	}
	paths, _ := doc["paths"].(map[string]any)
	n := 0
	for _, item := range paths {
		m, _ := item.(map[string]any)
		for k := range m {
			switch k {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				n++
			}
		}
	}
	return n
}

type realCase struct {
	name  string
	file  string
	opts  openapiimport.Options // for the full import (FQN and Tool filled in)
	gold  openapiimport.Options // the filtered import pinned by a golden file
	creds []string              // substrings of the credential set commands
}

var realCases = []realCase{
	{name: "github", file: "github-2020-07-30.json.gz",
		gold:  openapiimport.Options{Include: []string{"GET /repos/{owner}/{repo}/issues", "POST /repos/{owner}/{repo}/issues", "GET /user"}, Credential: policy.CredentialBearer},
		creds: []string{"--kind bearer --from-env GITHUB_TOKEN"}},
	{name: "stripe", file: "stripe.json.gz",
		gold:  openapiimport.Options{Include: []string{"* /v1/customers", "GET /v1/customers/{customer}"}},
		creds: []string{"--kind basic --username USER --from-env STRIPE_PASSWORD"}},
	{name: "slack", file: "slack.json.gz",
		gold:  openapiimport.Options{OperationIDs: []string{"chat_post*", "conversations_list"}},
		creds: []string{"--kind oauth2 --from-env SLACK_ACCESS_TOKEN", "--token-url https://slack.com/api/oauth.access"}},
	{name: "openai", file: "openai.yaml.gz",
		gold:  openapiimport.Options{Include: []string{"GET /models", "POST /chat/completions", "POST /responses"}},
		creds: []string{"--kind bearer --from-env OPENAI_TOKEN"}},
	{name: "kubernetes", file: "kubernetes.json.gz",
		opts:  openapiimport.Options{Hosts: []string{"k8s.example.test:6443"}},
		gold:  openapiimport.Options{Hosts: []string{"k8s.example.test:6443"}, Include: []string{"GET /api/v1/namespaces/{namespace}/pods", "GET /api/v1/namespaces/{namespace}/pods/{name}/log"}},
		creds: []string{"--kind api_key --format 'Bearer {secret}' --from-env"}},
	{name: "petstore-v2", file: "petstore-v2.json",
		opts: openapiimport.Options{Hosts: []string{"petstore.example.test"}},
		gold: openapiimport.Options{Hosts: []string{"petstore.example.test"}, ApprovalFor: []string{"POST"}}},
	{name: "petstore-v3.0", file: "petstore-v3.0.yaml",
		opts: openapiimport.Options{Hosts: []string{"petstore.example.test"}},
		gold: openapiimport.Options{Hosts: []string{"petstore.example.test"}, Exclude: []string{"POST /**"}}},
	{name: "tictactoe-v3.1", file: "tictactoe-v3.1.yaml",
		opts:  openapiimport.Options{Hosts: []string{"games.example.test"}},
		gold:  openapiimport.Options{Hosts: []string{"games.example.test"}, Include: []string{"* /board/**"}},
		creds: []string{"--kind bearer --from-env TICTACTOE_V3_1_TOKEN", "--header api-key"}},
	{name: "petstore-separate", file: "petstore-separate/spec/swagger.json",
		opts: openapiimport.Options{Hosts: []string{"petstore.example.test"}},
		gold: openapiimport.Options{Hosts: []string{"petstore.example.test"}, Include: []string{"GET /pets/{id}"}}},
}

func withNames(o openapiimport.Options, name string) openapiimport.Options {
	o.FQN = "local://example/aileron-connector-" + strings.ReplaceAll(name, ".", "-")
	o.Tool = strings.ReplaceAll(name, ".", "-")
	return o
}

// TestRealDescriptions imports each real description whole and filtered: the
// import succeeds, the spec validates, the operation count is the
// document's minus what the summary reports as skipped, and the filtered
// import matches its golden file.
func TestRealDescriptions(t *testing.T) {
	for _, tc := range realCases {
		t.Run(tc.name, func(t *testing.T) {
			src := realSource(t, tc.file)
			start := time.Now()
			res, err := openapiimport.Import(src, withNames(tc.opts, tc.name))
			if err != nil {
				t.Fatalf("Import(%s) = %v", tc.file, err)
			}
			t.Logf("%s: %d operations imported in %v", tc.name, len(res.Spec.Tools[0].Operations), time.Since(start))
			if _, _, err := policy.ParseSpec(res.JSON); err != nil {
				t.Fatalf("the imported spec does not validate: %v", err)
			}
			want := countOperations(t, src.Data)
			if res.DocumentOperations != want {
				t.Errorf("DocumentOperations = %d, the document has %d", res.DocumentOperations, want)
			}
			if got := len(res.Spec.Tools[0].Operations); got != want-len(res.Skipped) || res.Filtered != 0 {
				t.Errorf("imported %d operations (%d filtered), want %d - %d skipped", got, res.Filtered, want, len(res.Skipped))
			}
			again, err := openapiimport.Import(src, withNames(tc.opts, tc.name))
			if err != nil || !bytes.Equal(again.JSON, res.JSON) {
				t.Errorf("a second import gave different bytes (err %v)", err)
			}

			gold, err := openapiimport.Import(src, withNames(tc.gold, tc.name))
			if err != nil {
				t.Fatalf("filtered Import = %v", err)
			}
			var cmds []string
			for _, h := range append(res.Credentials, gold.Credentials...) {
				cmds = append(cmds, h.Command+" # "+h.Note)
			}
			for _, c := range tc.creds {
				if !strings.Contains(strings.Join(cmds, "\n"), c) {
					t.Errorf("credential set commands %q lack %q", cmds, c)
				}
			}
			testkit.Golden(t, filepath.Join("testdata", "golden", tc.name+".golden"), goldenText(gold))
		})
	}
}

// goldenText is the spec followed by the summary.
func goldenText(r *openapiimport.Result) []byte {
	var b bytes.Buffer
	b.Write(r.JSON)
	fmt.Fprintf(&b, "--- %d of %d operations, %d filtered, %d skipped\n", len(r.Spec.Tools[0].Operations), r.DocumentOperations, r.Filtered, len(r.Skipped))
	for _, n := range r.Skipped {
		fmt.Fprintf(&b, "skipped: %s\n", n)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	for _, h := range r.Credentials {
		fmt.Fprintf(&b, "credential %s: %s", h.Scheme, h.Command)
		if h.Note != "" {
			fmt.Fprintf(&b, " # %s", h.Note)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// TestDiffRevisions compares two revisions of Stripe's description: the
// later one adds and removes operations.
func TestDiffRevisions(t *testing.T) {
	opts := withNames(openapiimport.Options{}, "stripe")
	older, err := openapiimport.Import(realSource(t, "stripe.json.gz"), opts)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := openapiimport.Import(realSource(t, "stripe-2019-11-06.json.gz"), opts)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	kinds := map[string]int{}
	for _, c := range openapiimport.Diff(older.Spec, newer.Spec) {
		lines = append(lines, c.String())
		kinds[c.Kind]++
	}
	if kinds["+"] == 0 || kinds["-"] == 0 {
		t.Errorf("Diff found %v, want added and removed operations", kinds)
	}
	testkit.Golden(t, "testdata/golden/stripe-diff.golden", []byte(strings.Join(lines, "\n")+"\n"))
	if d := openapiimport.Diff(newer.Spec, newer.Spec); len(d) != 0 {
		t.Errorf("Diff(x, x) = %v, want nothing", d)
	}
}

// BenchmarkImportGitHub imports GitHub's whole description.
func BenchmarkImportGitHub(b *testing.B) {
	src := realSource(b, "github-2020-07-30.json.gz")
	opts := withNames(openapiimport.Options{}, "github")
	for b.Loop() {
		if _, err := openapiimport.Import(src, opts); err != nil {
			b.Fatal(err)
		}
	}
}

var _ = json.Marshal
