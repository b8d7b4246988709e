package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the origin and goproxy children,
// exactly as the harness binary does.
func TestMain(m *testing.M) {
	if code, ok := childMode(os.Args[1:]); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestSmoke runs scenario (1) and (2) for a handful of requests against
// direct, aileron-proxy (a real serve process with a session, policy,
// credential injection and audit) and the goproxy baseline, then renders
// and round-trips the report. It keeps CI exercising the harness without
// the full run.
func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	bin := buildAileron(ctx, t)

	cfg := defaultConfig()
	cfg.duration = 5 * time.Second
	cfg.maxRequests = 20
	cfg.keepAliveClients = []int{1, 4}
	cfg.newConnClients = 2
	cfg.idleTunnels = 4
	opts := options{bin: bin, cfg: cfg, targets: map[string]bool{targetDirect: true, targetAileron: true, targetGoproxy: true}}

	var cl cleanups
	defer cl.run()
	var progress bytes.Buffer
	o, targets, err := startTargets(ctx, opts, dir, &cl, &progress)
	if err != nil {
		t.Fatalf("starting targets: %v\n%s", err, progress.String())
	}
	var names []string
	for _, tg := range targets {
		if tg.skipped != "" {
			t.Fatalf("%s %s\n%s", tg.name, tg.skipped, progress.String())
		}
		names = append(names, tg.name)
	}
	if got := strings.Join(names, ","); got != "direct,aileron-proxy,goproxy" {
		t.Fatalf("targets = %s, want direct,aileron-proxy,goproxy", got)
	}

	var list []scenario
	for _, s := range scenarios(cfg, o) {
		if s.id == "1.c1" || s.id == "1.c4" || s.id == "2" {
			list = append(list, s)
		}
	}
	rep := &report{Date: now(), Machine: describeMachine()}
	for _, tg := range targets {
		rep.Targets = append(rep.Targets, targetInfo{Name: tg.name, Version: tg.version})
	}
	measures := runScenarios(ctx, list, targets, rep, &progress)
	for _, id := range []string{"1.c1", "1.c4", "2"} {
		for _, name := range names {
			m := measures[id][name]
			if m.note != "" {
				t.Errorf("scenario %s, %s: %s", id, name, m.note)
			}
			if m.values["rps"] <= 0 || m.values["p50"] <= 0 {
				t.Errorf("scenario %s, %s: values = %v, want req/s and p50 > 0", id, name, m.values)
			}
		}
	}
	rw, ok := rep.row("1.c4.rps")
	if !ok {
		t.Fatalf("no row 1.c4.rps in %+v", rep.Rows)
	}
	if r, ok := rw.Ratios[targetAileron]; !ok || r <= 0 {
		t.Errorf("1.c4.rps ratios = %v, want an aileron-proxy ratio to direct", rw.Ratios)
	}
	if st := o.counters(ctx); st.Injected == 0 || st.Requests <= st.Injected {
		t.Errorf("origin counters = %+v: want credentialed requests from aileron-proxy and plain ones from the others", st)
	}

	// Idle tunnels through aileron-proxy spread over its sessions.
	var ail *target
	for _, tg := range targets {
		if tg.name == targetAileron {
			ail = tg
		}
	}
	if m := scenarioIdleTunnels(ctx, cfg, o, ail); strings.Contains(m.note, "opened") || !strings.Contains(m.note, "RSS") {
		t.Errorf("idle tunnels: note %q, want every tunnel opened and the RSS reported", m.note)
	} else if _, ok := m.values["kib_per_tunnel"]; !ok {
		t.Errorf("idle tunnels: values = %v, want kib_per_tunnel", m.values)
	}

	// The proxies' CPU per request is kept round by round, and the check
	// against goproxy is the median of the per-round ratios.
	cpuRow, ok := rep.row("1.c1.cpu_us")
	if !ok {
		t.Fatalf("no row 1.c1.cpu_us in %+v", rep.Rows)
	}
	for _, name := range []string{targetAileron, targetGoproxy} {
		if got := len(cpuRow.PerRound[name]); got != cfg.rounds {
			t.Errorf("1.c1.cpu_us per-round figures of %s: %d, want %d (%v)", name, got, cfg.rounds, cpuRow.PerRound)
		}
	}
	if _, ok := cpuRow.PerRound[targetDirect]; ok {
		t.Errorf("1.c1.cpu_us has per-round figures for direct, which has no proxy: %v", cpuRow.PerRound)
	}
	addChecks(rep, measures)
	if i := slices.IndexFunc(rep.Checks, func(c check) bool { return strings.HasPrefix(c.Name, "(17) proxy CPU/req, 1 client") }); i < 0 {
		t.Error("no (17) CPU/req check for 1 client")
	} else if c := rep.Checks[i]; !c.Measured || len(c.RoundRatios) == 0 || c.Value != median(c.RoundRatios) {
		t.Errorf("(17) CPU/req check for 1 client = %+v, want the median of its per-round ratios", c)
	}
	var md bytes.Buffer
	rep.writeMarkdown(&md)
	for _, want := range []string{"| scenario | metric | direct | aileron-proxy | goproxy |", "(1) req/s at 16 clients", "Per-round ratios to goproxy"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	// One figure per target, with the ratio to direct for the proxies.
	rowRE := regexp.MustCompile(`\| \(1\) keep-alive GET, 4 client\(s\) \| req/s \| [0-9.]+ \| [0-9.]+ \([0-9.]+×\) \| [0-9.]+ \([0-9.]+×\) \|\n`)
	if !rowRE.MatchString(md.String()) {
		t.Errorf("markdown has no req/s row with a figure for every target:\n%s", md.String())
	}
	out := filepath.Join(dir, "results", "latest.json")
	if err := rep.writeJSON(out); err != nil {
		t.Fatal(err)
	}
	back := readReport(out)
	if back == nil || len(back.Rows) != len(rep.Rows) || len(back.Checks) != len(rep.Checks) {
		t.Fatalf("reading %s back: %+v", out, back)
	}

	cl.run()
	for _, tg := range targets {
		if tg.proc != nil && !tg.proc.exited() {
			t.Errorf("%s still running after cleanup", tg.name)
		}
	}
	if !o.proc.exited() {
		t.Error("the origin is still running after cleanup")
	}
}

// buildAileron builds the aileron-proxy binary of this tree for a test.
func buildAileron(ctx context.Context, t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "aileron-proxy")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/aileron-proxy")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building aileron-proxy: %v\n%s", err, out)
	}
	return bin
}

// TestOpScaleScenario runs scenario (7) briefly against a real serve: both
// sessions (5 and 1,000 operations) carry the load with every request
// decided, audited and injected, and session creation with the large
// connector is timed.
func TestOpScaleScenario(t *testing.T) {
	cfg := defaultConfig()
	cfg.duration, cfg.rounds, cfg.maxRequests, cfg.sessionRuns = 2*time.Second, 2, 40, 2
	ms, rep, progress := runBriefly(t, 90*time.Second, cfg, []string{targetDirect, targetAileron}, "7.ops")
	m := ms["7.ops"][targetAileron]
	if strings.Contains(m.note, "errors") || strings.Contains(m.note, "only") || strings.Contains(m.note, "want") {
		t.Errorf("scenario 7.ops: %s\n%s", m.note, progress)
	}
	for _, k := range []string{"rps_small", "rps_large", "p50_small", "p50_large", "cpu_us_small", "cpu_us_large", "cpu_ratio", "session_ms"} {
		if m.values[k] <= 0 {
			t.Errorf("scenario 7.ops: %s = %v, want > 0 (values %v)", k, m.values[k], m.values)
		}
	}
	if _, ok := ms["7.ops"][targetDirect]; ok {
		t.Error("scenario 7.ops ran against direct; it is for aileron-proxy only")
	}
	if _, ok := rep.row("7.ops.cpu_ratio"); !ok {
		t.Errorf("no row 7.ops.cpu_ratio in %+v", rep.Rows)
	}
}

// TestPeerChecks checks issue 17's same-run checks on a hand-made report.
func TestPeerChecks(t *testing.T) {
	r := &report{}
	r.addRow("rps", "s", "req/s", true, map[string]float64{targetDirect: 20, targetAileron: 10, targetGoproxy: 8, targetSquid: 9})
	r.addRow("cpu", "s", "µs", false, map[string]float64{targetAileron: 40, targetGoproxy: 60, targetSquid: 45})
	if c := r.bestPeerCheck("rps", "rps"); !c.Measured || !c.Met || c.Limit != 9.0/20 || c.Value != 0.5 {
		t.Errorf("bestPeerCheck = %+v, want met against squid's 0.45", c)
	}
	r.Rows[0].Values[targetSquid], r.Rows[0].Ratios[targetSquid] = 11, 11.0/20
	if c := r.bestPeerCheck("rps", "rps"); c.Met {
		t.Errorf("bestPeerCheck = %+v, want not met against squid's 0.55", c)
	}
	if c := r.peerCheck("cpu", "cpu", 0.8); !c.Measured || !c.Met || c.Value != 40.0/60 {
		t.Errorf("peerCheck = %+v, want met (40 <= 0.8 x 60)", c)
	}
	if c := r.peerCheck("cpu", "cpu", 0.6); c.Met {
		t.Errorf("peerCheck = %+v, want not met (40 > 0.6 x 60)", c)
	}
	// Round by round: the median of the per-round ratios decides, not the
	// totals (here 40/60 overall, but 0.9 in three of five rounds).
	r.Rows[1].setRounds(targetAileron, []float64{45, 18, 45, 45, 30})
	r.Rows[1].setRounds(targetGoproxy, []float64{50, 60, 50, 50, 60})
	if c := r.peerCheck("cpu", "cpu", 0.8); !c.Measured || c.Met || c.Value != 0.9 || len(c.RoundRatios) != 5 {
		t.Errorf("peerCheck = %+v, want the median 0.9 of five round ratios, not met", c)
	}
	// A round one side did not measure is left out.
	r.Rows[1].setRounds(targetAileron, []float64{0, 30, 30, 45})
	r.Rows[1].setRounds(targetGoproxy, []float64{50, 60, 60, 50})
	if c := r.peerCheck("cpu", "cpu", 0.8); !c.Met || c.Value != 0.5 || len(c.RoundRatios) != 3 {
		t.Errorf("peerCheck = %+v, want the median 0.5 of three rounds, met", c)
	}
	// Series that do not pair up fall back to the totals.
	r.Rows[1].setRounds(targetGoproxy, []float64{50})
	if c := r.peerCheck("cpu", "cpu", 0.8); c.Value != 40.0/60 || c.RoundRatios != nil {
		t.Errorf("peerCheck = %+v, want the ratio of the totals", c)
	}
	if median([]float64{3, 1, 2, 10}) != 2.5 || median([]float64{7}) != 7 {
		t.Error("median of {3,1,2,10} != 2.5 or of {7} != 7")
	}
	if c := r.peerCheck("none", "missing", 0.8); c.Measured || c.Met {
		t.Errorf("peerCheck on a missing row = %+v, want unmeasured", c)
	}
}

// TestRoundsFlag checks -rounds: 5 by default, taken when positive,
// refused with the flag's name otherwise.
func TestRoundsFlag(t *testing.T) {
	var stderr bytes.Buffer
	if o, err := parseFlags([]string{"-bin", "x"}, &stderr); err != nil || o.cfg.rounds != 5 {
		t.Errorf("default rounds = %d, %v; want 5", o.cfg.rounds, err)
	}
	if o, err := parseFlags([]string{"-bin", "x", "-rounds", "12"}, &stderr); err != nil || o.cfg.rounds != 12 {
		t.Errorf("-rounds 12 = %d, %v", o.cfg.rounds, err)
	}
	if _, err := parseFlags([]string{"-bin", "x", "-rounds", "0"}, &stderr); err == nil || !strings.Contains(err.Error(), "-rounds") {
		t.Errorf("-rounds 0: err = %v, want one naming -rounds", err)
	}
}

// runBriefly is the smoke tests' run: it starts the targets named for cfg,
// runs the scenarios ids (of scenarios and sessionScaleScenarios) within
// timeout, and returns their measures, the report and the progress log.
func runBriefly(t *testing.T, timeout time.Duration, cfg config, targets []string, ids ...string) (map[string]map[string]measure, *report, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	want := map[string]bool{}
	for _, name := range targets {
		want[name] = true
	}
	opts := options{bin: buildAileron(ctx, t), cfg: cfg, targets: want}
	var cl cleanups
	defer cl.run()
	var progress bytes.Buffer
	o, active, err := startTargets(ctx, opts, t.TempDir(), &cl, &progress)
	if err != nil {
		t.Fatalf("starting targets: %v\n%s", err, progress.String())
	}
	list, err := selectScenarios(append(scenarios(cfg, o), sessionScaleScenarios(cfg, o)...), ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.run == nil {
			t.Fatalf("scenario %s has nothing to run", s.id)
		}
	}
	rep := &report{}
	ms := runScenarios(ctx, list, active, rep, &progress)
	return ms, rep, progress.String()
}
