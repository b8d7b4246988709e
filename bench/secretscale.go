package main

import (
	"github.com/aileron-dev/aileron-proxy/internal/testkit"

	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// Scenario (9): the cost of a large credential set. Each aileron-proxy
// target's binary runs twice more, side by side: once with the bench
// connector and its one secret, once with the bench connector and
// secretCount-1 further connectors, each with its own secretLen-byte secret
// in credentials.json. Each daemon gets one session on every active
// connector (`session create` without --connector), so the second session
// is bound to all secretCount secrets. The same loads as (1) and (3) then
// run through both sessions in interleaved rounds, and the proxy CPU of the
// large set is reported as a ratio to the small one's.
//
// Responses are scrubbed of the credential the proxy injected into the
// request (its secret and header value, in every encoding), not of every
// secret the session could use, so this measures what the other bindings
// cost a request: the resolver, the session's connectors in the policy
// decision, and the memory they hold. The scrubber's own scaling with many
// secrets in one scrub set is credentials' BenchmarkScrubberScale.
const (
	secretCount   = 1000
	secretLen     = 40
	secretClients = 4
)

// secretFQN is the FQN of the i-th extra connector of (9).
func secretFQN(i int) string { return fmt.Sprintf("local://bench/secret%04d", i) }

// secretSpec is the i-th extra connector: one bearer operation on its own
// host, which no request of the bench reaches.
func secretSpec(i int) string {
	return fmt.Sprintf(`{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": %q, "version": "1.0.0"},
  "tools": [{
    "name": "secret%04d",
    "description": "one of scenario 9's credentialed connectors",
    "operations": [
      {"name": "get", "method": "GET", "path": "/v1/items", "hosts": ["s%04d.secrets.bench.test"], "credential": "bearer"}
    ]
  }]
}`, secretFQN(i), i, i)
}

// secretValues returns n distinct secretLen-byte secrets from a token
// alphabet (with characters that base64 and URL escaping change), the same
// in every run.
func secretValues(n int) []string { return testkit.Secrets(n, secretLen, 9, benchToken) }

// writeSecretCredentials writes home's credentials.json (the documented
// format, stored sources): the bench connector's bearer token and one
// binding per extra secret.
func writeSecretCredentials(home string, extra []string) error {
	type source struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	}
	type binding struct {
		Connector string `json:"connector"`
		Kind      string `json:"kind"`
		Source    source `json:"source"`
	}
	f := struct {
		Version  int       `json:"version"`
		Bindings []binding `json:"bindings"`
	}{Version: 1}
	f.Bindings = append(f.Bindings, binding{benchFQN, "bearer", source{"stored", benchToken}})
	for i, s := range extra {
		f.Bindings = append(f.Bindings, binding{secretFQN(i + 1), "bearer", source{"stored", s}})
	}
	raw, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encoding credentials.json: %w", err)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", home, err)
	}
	p := filepath.Join(home, "credentials.json")
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	return nil
}

// installSpecs installs specs into home's connector store. Each install
// rescans the whole store, so a thousand installs into one store take
// minutes; instead each spec is installed (by the store's own Install, as
// `connector install` does) into an empty store of its own under stage,
// and the package directory it made, named by its digest, is moved into
// home's store. serve verifies every package when it loads the store, and
// List here checks that all of them are active.
func installSpecs(home, stage string, specs []string) error {
	st, err := policy.OpenStore(home)
	if err != nil {
		return err
	}
	pkgs := filepath.Join(st.Dir(), "sha256")
	if err := os.MkdirAll(pkgs, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", pkgs, err)
	}
	for i, spec := range specs {
		d := filepath.Join(stage, strconv.Itoa(i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
		p := filepath.Join(d, "aileron.connector.v1.json")
		if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
		one, err := policy.OpenStore(filepath.Join(d, "home"))
		if err != nil {
			return err
		}
		inst, err := one.Install(p, policy.InstallOptions{})
		if err != nil {
			return fmt.Errorf("installing %s: %w", p, err)
		}
		if err := os.Rename(inst.Dir, filepath.Join(pkgs, filepath.Base(inst.Dir))); err != nil {
			return fmt.Errorf("moving %s into the store: %w", inst.Spec.Connector.FQN, err)
		}
	}
	list, err := st.List()
	if err != nil {
		return err
	}
	active := 0
	for _, e := range list {
		if e.IsActive() {
			active++
		}
	}
	if active != len(specs) {
		return fmt.Errorf("the store holds %d active connectors, want %d", active, len(specs))
	}
	return nil
}

// startSecretDaemon starts bin with the bench connector and extra further
// credentialed connectors in a home of its own under dir, and returns a
// target for a session on all of them. The daemon is stopped by cl.
func startSecretDaemon(ctx context.Context, name, bin, dir string, o *origin, extra []string, cl *cleanups) (*target, error) {
	dir = filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	d := &aileronDaemon{bin: bin, home: filepath.Join(dir, "home")}
	specs := []string{benchSpec(o.authority())}
	for i := range extra {
		specs = append(specs, secretSpec(i+1))
	}
	if err := installSpecs(d.home, filepath.Join(dir, "stage"), specs); err != nil {
		return nil, err
	}
	if err := writeSecretCredentials(d.home, extra); err != nil {
		return nil, err
	}
	p, err := d.serve(ctx, name, dir, o, cl)
	if err != nil {
		return nil, err
	}
	s, err := d.createSession(ctx)
	if err != nil {
		return nil, err
	}
	// One host per connector: the session is bound to every secret.
	if len(s.Hosts) != len(specs) {
		return nil, fmt.Errorf("the session on every connector has %d hosts, want %d", len(s.Hosts), len(specs))
	}
	ep, err := s.endpoint()
	if err != nil {
		return nil, err
	}
	return &target{name: name, proxyURL: ep.proxyURL, roots: ep.roots, proc: p, auditHeader: true, aileron: d}, nil
}

// scenarioSecretScale runs (9) for each aileron-proxy target of ts.
func scenarioSecretScale(ctx context.Context, cfg config, o *origin, ts []*target, progress io.Writer) map[string]measure {
	out := map[string]measure{}
	extra := secretValues(secretCount - 1)
	for _, t := range ts {
		if ctx.Err() != nil {
			break
		}
		var m measure
		if t.aileron == nil {
			m.addNote("n/a")
			out[t.name] = m
			continue
		}
		out[t.name] = secretScaleFor(ctx, cfg, o, t, extra, progress)
	}
	return out
}

// secretScaleFor runs (9) with t's binary.
func secretScaleFor(ctx context.Context, cfg config, o *origin, t *target, extra []string, progress io.Writer) measure {
	var m measure
	var cl cleanups
	defer cl.run()
	// The run directory: t's home is <run dir>/<name>/home.
	dir := filepath.Join(filepath.Dir(filepath.Dir(t.aileron.home)), "secrets-"+t.name)
	fmt.Fprintf(progress, "  %s: starting with 1 secret and with %d (%d connectors)\n", t.name, secretCount, secretCount)
	t0 := time.Now()
	one, err := startSecretDaemon(ctx, t.name+", 1 secret", t.aileron.bin, dir, o, nil, &cl)
	if err != nil {
		m.addNote("1 secret: %v", err)
		return m
	}
	many, err := startSecretDaemon(ctx, fmt.Sprintf("%s, %d secrets", t.name, secretCount), t.aileron.bin, dir, o, extra, &cl)
	if err != nil {
		m.addNote("%d secrets: %v", secretCount, err)
		return m
	}
	fmt.Fprintf(progress, "  set up in %.1fs\n", time.Since(t0).Seconds())
	pair := []*target{one, many}
	dl := runDownloadRounds(ctx, cfg, o, pair, progress)
	small := runLoadRounds(ctx, cfg, o, pair, loadSpec{clients: secretClients, workers: secretClients}, progress)
	for _, side := range []struct {
		suffix string
		t      *target
	}{{"_1", one}, {"_" + strconv.Itoa(secretCount), many}} {
		for _, r := range []struct {
			ms  map[string]measure
			key string
		}{{dl, "cpu_s_per_gb"}, {dl, "mbps"}, {small, "cpu_us"}, {small, "rps"}} {
			if v, ok := r.ms[side.t.name].values[r.key]; ok {
				m.set(r.key+side.suffix, v)
			}
		}
		if n := dl[side.t.name].note; n != "" {
			m.addNote("download, %s: %s", side.t.name, n)
		}
		if n := small[side.t.name].note; n != "" {
			m.addNote("small GET, %s: %s", side.t.name, n)
		}
	}
	ratio := func(key string) {
		a, okA := m.values[key+"_1"]
		b, okB := m.values[key+"_"+strconv.Itoa(secretCount)]
		if okA && okB && a > 0 {
			m.set(key+"_ratio", b/a)
		}
	}
	ratio("cpu_s_per_gb")
	ratio("cpu_us")
	if kib, err := rssKiB(one.pid()); err == nil {
		m.set("rss_mib_1", float64(kib)/1024)
	}
	if kib, err := rssKiB(many.pid()); err == nil {
		m.set("rss_mib_"+strconv.Itoa(secretCount), float64(kib)/1024)
	}
	return m
}

// secretScaleMetrics are (9)'s rows.
func secretScaleMetrics() []metricDef {
	n := strconv.Itoa(secretCount)
	return []metricDef{
		{"cpu_s_per_gb_1", "proxy CPU s/GB, 1 secret", false},
		{"cpu_s_per_gb_" + n, "proxy CPU s/GB, " + n + " secrets", false},
		{"cpu_s_per_gb_ratio", "proxy CPU/GB, " + n + " ÷ 1 secrets", false},
		{"cpu_us_1", "proxy CPU µs/req, 1 secret", false},
		{"cpu_us_" + n, "proxy CPU µs/req, " + n + " secrets", false},
		{"cpu_us_ratio", "proxy CPU/req, " + n + " ÷ 1 secrets", false},
		{"mbps_1", "download MB/s, 1 secret", true},
		{"mbps_" + n, "download MB/s, " + n + " secrets", true},
		{"rps_1", "req/s, 1 secret", true},
		{"rps_" + n, "req/s, " + n + " secrets", true},
		{"rss_mib_1", "proxy RSS MiB after, 1 secret", false},
		{"rss_mib_" + n, "proxy RSS MiB after, " + n + " secrets", false},
	}
}
