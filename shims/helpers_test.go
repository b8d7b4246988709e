package shims

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// loadConnector parses a spec file the way the store does and gives it a
// hash derived from its bytes.
func loadConnector(t *testing.T, path string) policy.Connector {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	spec, _, err := policy.ParseSpec(data)
	if err != nil {
		// The fixtures are written in normalized form, so a spec the
		// validator refuses still renders the same; the shims must not
		// depend on validation rules that are still moving.
		t.Logf("ParseSpec(%s): %v; decoding it as is", path, err)
		spec = &policy.Spec{}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(spec); err != nil {
			t.Fatalf("decoding %s: %v", path, err)
		}
	}
	sum := sha256.Sum256(data)
	return policy.Connector{Spec: spec, Hash: "sha256:" + hex.EncodeToString(sum[:])}
}

// fakeConnector builds a connector in Go, for specs ParseSpec would refuse.
func fakeConnector(fqn string, tools ...policy.Tool) policy.Connector {
	sum := sha256.Sum256([]byte(fqn))
	return policy.Connector{
		Spec: &policy.Spec{
			SchemaVersion: policy.SchemaVersion,
			Connector:     policy.ConnectorMeta{FQN: fqn, Version: "1.0.0"},
			Tools:         tools,
		},
		Hash: "sha256:" + hex.EncodeToString(sum[:]),
	}
}

// tool builds a tool whose operations are GET /<op name> on api.example.com.
func tool(name string, ops ...string) policy.Tool {
	t := policy.Tool{Name: name, Description: "tool " + name}
	for _, op := range ops {
		t.Operations = append(t.Operations, policy.Operation{
			Name: op, Method: "GET", Path: "/" + op, Hosts: []string{"api.example.com"},
			Idempotency: policy.Idempotent,
		})
	}
	return t
}

// runResult is what one shim run produced.
type runResult struct {
	stdout, stderr string
	code           int
}

// run executes argv with exactly env (nothing inherited, so no proxy or CA
// variables leak in) in dir, bounded by a timeout.
func run(t *testing.T, dir string, env []string, argv ...string) runResult {
	t.Helper()
	res, err := runE(dir, env, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// runE is run for goroutines other than the test's.
func runE(dir string, env []string, argv ...string) (runResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := runResult{stdout: stdout.String(), stderr: stderr.String()}
	if ctx.Err() != nil {
		return res, fmt.Errorf("running %s: timed out\nstderr: %s", strings.Join(argv, " "), res.stderr)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		return res, fmt.Errorf("running %s: %w", strings.Join(argv, " "), err)
	}
	return res, nil
}

// writeScript writes a shim to a fresh directory and returns its path.
func writeScript(t *testing.T, s Shim) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), s.Command)
	if err := os.WriteFile(p, s.Script, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
