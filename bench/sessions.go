package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aileron-dev/aileron-proxy/ca"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// scenarioSessions is (6a): POST /v1/sessions for the 100-host connector,
// timed end to end through the control API (CA, 100 pre-issued leaves, CA
// files, audit), median of cfg.sessionRuns after one warm-up.
func scenarioSessions(ctx context.Context, cfg config, t *target) measure {
	var m measure
	if t.aileron == nil {
		m.addNote("n/a")
		return m
	}
	timeSessions(ctx, cfg, t.aileron, hosts100FQN, 100, "session_ms", &m)
	return m
}

// timeSessions creates cfg.sessionRuns + 1 sessions for the connector fqn
// through the control API, checks each has wantHosts hosts, and sets key to
// the median time in ms of all but the first (a warm-up). The sessions are
// ended before it returns.
func timeSessions(ctx context.Context, cfg config, d *aileronDaemon, fqn string, wantHosts int, key string, m *measure) {
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer c.CloseIdleConnections()
	var ids []string
	defer func() {
		for _, id := range ids {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodDelete, d.APIURL+"/v1/sessions/"+id, nil)
			req.Header.Set("Authorization", "Bearer "+d.AdminToken)
			if resp, err := c.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	var took []time.Duration
	for i := range cfg.sessionRuns + 1 {
		t0 := time.Now()
		id, hosts, err := createSessionAPI(ctx, c, d, fqn, "1h")
		el := time.Since(t0)
		if err != nil {
			m.addNote("%v", err)
			return
		}
		ids = append(ids, id)
		if hosts != wantHosts {
			m.addNote("the session has %d hosts, want %d", hosts, wantHosts)
			return
		}
		if i > 0 { // the first is a warm-up
			took = append(took, el)
		}
	}
	slices.Sort(took)
	med := took[len(took)/2]
	m.set(key, float64(med)/float64(time.Millisecond))
	m.addNote("%d sessions: min %.1f ms, max %.1f ms", len(took),
		float64(took[0])/float64(time.Millisecond), float64(took[len(took)-1])/float64(time.Millisecond))
}

func createSessionAPI(ctx context.Context, c *http.Client, d *aileronDaemon, fqn, ttl string) (string, int, error) {
	body := fmt.Sprintf(`{"connectors":[%q],"ttl":%q}`, fqn, ttl)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.APIURL+"/v1/sessions", strings.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Authorization", "Bearer "+d.AdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("creating a session: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", 0, fmt.Errorf("reading the session: %w", err)
	}
	if resp.StatusCode != http.StatusCreated {
		return "", 0, fmt.Errorf("creating a session: status %d: %s", resp.StatusCode, bytes.TrimSpace(raw))
	}
	var s createdSession
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", 0, fmt.Errorf("parsing the session: %w", err)
	}
	return s.ID, len(s.Hosts), nil
}

var nsPerOp = regexp.MustCompile(`(?m)^BenchmarkLeafIssue\S*\s+\d+\s+([0-9.]+) ns/op`)

// leafIssuance is (6b): one uncached leaf (key generation, signing,
// parsing). It runs the ca package's BenchmarkLeafIssue with `go test` when
// the module source and a Go toolchain are at hand, otherwise it times the
// ca package directly on one core.
func leafIssuance(ctx context.Context) measure {
	var m measure
	if root, ok := moduleRoot(); ok {
		if goBin, err := exec.LookPath("go"); err == nil {
			tctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(tctx, goBin, "test", "-run", "^$", "-bench", "^BenchmarkLeafIssue$",
				"-benchtime", "1000x", "-count", "1", "./ca/")
			cmd.Dir = root
			cmd.Env = testkit.CleanEnv()
			out, err := cmd.CombinedOutput()
			if mm := nsPerOp.FindSubmatch(out); err == nil && mm != nil {
				ns, _ := strconv.ParseFloat(string(mm[1]), 64)
				m.set("leaf_us", ns/1e3)
				m.addNote("go test -bench BenchmarkLeafIssue ./ca/")
				return m
			}
			m.addNote("go test -bench BenchmarkLeafIssue failed (%v); timed in process", err)
		}
	}
	us, err := leafInProcess()
	if err != nil {
		m.addNote("%v", err)
		return m
	}
	m.set("leaf_us", us)
	m.addNote("ca.New(51 hosts) - ca.New(1 host), per leaf, GOMAXPROCS=1")
	return m
}

// leafInProcess times ca.New with 51 and 1 hosts on one core; the
// difference per extra host is one leaf issuance.
func leafInProcess() (float64, error) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	timeNew := func(n int) (time.Duration, error) {
		hosts := make([]string, n)
		for i := range hosts {
			hosts[i] = fmt.Sprintf("h%03d.bench.test", i)
		}
		var runs []time.Duration
		for range 7 {
			t0 := time.Now()
			if _, err := ca.New(ca.Config{Hosts: hosts, Validity: time.Hour}); err != nil {
				return 0, fmt.Errorf("timing ca.New: %w", err)
			}
			runs = append(runs, time.Since(t0))
		}
		slices.Sort(runs)
		return runs[len(runs)/2], nil
	}
	one, err := timeNew(1)
	if err != nil {
		return 0, err
	}
	many, err := timeNew(51)
	if err != nil {
		return 0, err
	}
	return float64(many-one) / 50 / float64(time.Microsecond), nil
}

// moduleRoot finds the aileron-proxy module above the working directory.
func moduleRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		raw, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(raw, []byte("module github.com/aileron-dev/aileron-proxy\n")) {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}
