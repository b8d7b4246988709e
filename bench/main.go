// Command bench measures aileron-proxy side by side with a direct TLS
// connection, a stock goproxy MITM and, when installed, mitmproxy and squid
// with ssl-bump, in one run on one machine (issue 7).
//
// Every target reaches the same loopback HTTPS origin written for the
// harness (HTTP/1.1 and h2, ECDSA certificate, a small JSON GET and a large
// download generated on the fly); every proxy runs as its own process, so
// its RSS can be read from /proc. Scenarios are bounded by duration or
// count, ratios to direct in the same run are the headline, and the results
// are printed as Markdown and written as JSON (bench/results/latest.json).
//
//	go run ./bench -bin bin/aileron-proxy      # make bench
//	go run ./bench -serve-goproxy -upstream-ca ca.pem -ca-out goproxy-ca.pem
//
// See docs/bench.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if code, ok := childMode(os.Args[1:]); ok {
		os.Exit(code)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// childMode runs the harness binary as the origin or the goproxy baseline
// when args start with their flag; ok is false otherwise.
func childMode(args []string) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case serveOriginFlag:
		return runOrigin(args[1:]), true
	case serveGoproxyFlag:
		return runGoproxy(args[1:]), true
	}
	return 0, false
}

// cleanups run in reverse order, once, on every exit path.
type cleanups struct {
	mu  sync.Mutex
	fns []func()
}

func (c *cleanups) add(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, fn)
}

func (c *cleanups) run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// options are the harness flags.
type options struct {
	bin, compareBin string
	out, baseline   string
	targets         map[string]bool
	keep            bool
	scenarios       []string // scenario ids to run; empty runs all
	cfg             config
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{cfg: defaultConfig()}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bin, "bin", "", "aileron-proxy binary to benchmark (required; `make bench` builds bin/aileron-proxy)")
	fs.StringVar(&o.compareBin, "compare-bin", "", "a second aileron-proxy binary measured side by side as "+targetCompare+" (a change's before and after in one run)")
	fs.StringVar(&o.out, "out", filepath.Join("bench", "results", "latest.json"), "JSON results file")
	fs.StringVar(&o.baseline, "baseline", filepath.Join("bench", "results", "baseline.json"), "baseline results to compare ratios with (skipped when missing)")
	targets := fs.String("targets", strings.Join(allTargets, ","), "comma-separated targets to run")
	only := fs.String("scenarios", "", "comma-separated scenario ids to run, e.g. 1.c16,3 (default all: 1.c1,1.c16,2,3,4,5,6.session,6.leaf,7.ops,9.secrets,8.sessions-cpu,8.session-mem,8.create-p99,8.expiry)")
	fs.BoolVar(&o.keep, "keep", false, "keep the run directory (configs, logs, aileron home) and print its path")
	fs.DurationVar(&o.cfg.duration, "duration", o.cfg.duration, "length of each timed load (scenarios 1, 2, 4)")
	fs.IntVar(&o.cfg.rounds, "rounds", o.cfg.rounds, "interleaved rounds each timed load is split into (more rounds: shorter slices, less drift between targets)")
	downloadMiB := fs.Int("download-mib", int(o.cfg.downloadBytes>>20), "scenario (3) body size in MiB")
	fs.IntVar(&o.cfg.idleTunnels, "idle-tunnels", o.cfg.idleTunnels, "scenario (5) idle tunnels")
	fs.IntVar(&o.cfg.sessionRuns, "session-runs", o.cfg.sessionRuns, "sessions created by scenarios (6) and (7)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q; every option is a flag", fs.Args())
	}
	if o.bin == "" {
		return o, errors.New("-bin is required: pass the aileron-proxy binary, e.g. -bin bin/aileron-proxy (make bench builds it)")
	}
	if o.cfg.duration <= 0 || o.cfg.rounds <= 0 || *downloadMiB <= 0 || o.cfg.idleTunnels <= 0 || o.cfg.sessionRuns <= 0 {
		return o, errors.New("-duration, -rounds, -download-mib, -idle-tunnels and -session-runs must be positive")
	}
	o.cfg.downloadBytes = int64(*downloadMiB) << 20
	o.targets = map[string]bool{}
	for name := range strings.SplitSeq(*targets, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(allTargets, name) {
			return o, fmt.Errorf("-targets: unknown target %q; use some of %s", name, strings.Join(allTargets, ","))
		}
		o.targets[name] = true
	}
	for id := range strings.SplitSeq(*only, ",") {
		if id = strings.TrimSpace(id); id != "" {
			o.scenarios = append(o.scenarios, id)
		}
	}
	o.targets[targetDirect] = true // ratios need it
	o.targets[targetCompare] = o.compareBin != ""
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "error:", err)
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var cl cleanups
	defer cl.run()

	rep, err := runBench(ctx, opts, &cl, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	rep.writeMarkdown(stdout)
	rep.writeBaselineDiff(stdout, readReport(opts.baseline))
	if err := rep.writeJSON(opts.out); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nResults written to %s.\n", opts.out)
	return 0
}

// startTargets starts the origin and every selected target. A target that
// cannot start is reported as skipped with the reason; only the origin and
// direct are required.
func startTargets(ctx context.Context, opts options, dir string, cl *cleanups, progress io.Writer) (*origin, []*target, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("finding the harness binary to run the origin and goproxy: %w", err)
	}
	fmt.Fprintln(progress, "starting the origin")
	o, err := startOrigin(ctx, self, dir, cl)
	if err != nil {
		return nil, nil, err
	}
	targets := []*target{{name: targetDirect, roots: o.roots}}
	bin, err := filepath.Abs(opts.bin)
	if err != nil {
		return nil, nil, fmt.Errorf("resolving -bin: %w", err)
	}
	// aileron-proxy caps tunnels per session (256 by default): scenario (5)
	// spreads its tunnels over enough sessions.
	sessions := (opts.cfg.idleTunnels + 249) / 250
	starters := []struct {
		name  string
		start func() (*target, error)
	}{
		{targetAileron, func() (*target, error) { return startAileron(ctx, targetAileron, bin, dir, o, sessions, cl) }},
		{targetCompare, func() (*target, error) {
			b, err := filepath.Abs(opts.compareBin)
			if err != nil {
				return nil, fmt.Errorf("resolving -compare-bin: %w", err)
			}
			return startAileron(ctx, targetCompare, b, dir, o, sessions, cl)
		}},
		{targetGoproxy, func() (*target, error) { return startGoproxyTarget(ctx, self, dir, o, cl) }},
		{targetMitm, func() (*target, error) { return startMitmproxy(ctx, dir, o, cl) }},
		{targetSquid, func() (*target, error) { return startSquid(ctx, dir, o, cl) }},
	}
	for _, s := range starters {
		if !opts.targets[s.name] {
			continue
		}
		fmt.Fprintf(progress, "starting %s\n", s.name)
		t, err := s.start()
		if err != nil {
			fmt.Fprintf(progress, "  %s did not start: %v\n", s.name, err)
			t = &target{name: s.name, skipped: "skipped: did not start: " + firstErrLine(err)}
		}
		targets = append(targets, t)
	}
	return o, targets, nil
}

func firstErrLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// scenario is one of issue 7's scenarios and the metrics it reports.
type scenario struct {
	id, title string
	aileron   bool // run only against aileron-proxy (and -compare-bin)
	run       func(ctx context.Context, ts []*target, progress io.Writer) map[string]measure
	metrics   []metricDef
}

type metricDef struct {
	key, label string
	higher     bool
}

// perTarget runs fn for each target in turn.
func perTarget(fn func(ctx context.Context, t *target) measure) func(context.Context, []*target, io.Writer) map[string]measure {
	return func(ctx context.Context, ts []*target, progress io.Writer) map[string]measure {
		out := map[string]measure{}
		for _, t := range ts {
			if ctx.Err() != nil {
				break
			}
			fmt.Fprintf(progress, "  %s\n", t.name)
			out[t.name] = fn(ctx, t)
		}
		return out
	}
}

func scenarios(cfg config, o *origin) []scenario {
	rps := metricDef{"rps", "req/s", true}
	p50 := metricDef{"p50", "p50 ms", false}
	p99 := metricDef{"p99", "p99 ms", false}
	cpu := metricDef{"cpu_us", "proxy CPU µs/req", false}
	total := metricDef{"total_cpu_us", "total CPU µs/req", false}
	load := func(spec loadSpec) func(context.Context, []*target, io.Writer) map[string]measure {
		return func(ctx context.Context, ts []*target, progress io.Writer) map[string]measure {
			return runLoadRounds(ctx, cfg, o, ts, spec, progress)
		}
	}
	var list []scenario
	for _, n := range cfg.keepAliveClients {
		list = append(list, scenario{
			id: fmt.Sprintf("1.c%d", n), title: fmt.Sprintf("(1) keep-alive GET, %d client(s)", n),
			run:     load(loadSpec{clients: n, workers: n}),
			metrics: []metricDef{rps, p50, p99, cpu, total},
		})
	}
	return append(list,
		scenario{
			id: "2", title: fmt.Sprintf("(2) new CONNECT+TLS per request, %d clients", cfg.newConnClients),
			run:     load(loadSpec{opts: clientOpts{newConn: true}, clients: cfg.newConnClients, workers: cfg.newConnClients}),
			metrics: []metricDef{rps, p50, p99, cpu, total},
		},
		scenario{
			id: "3", title: fmt.Sprintf("(3) %d MiB download", cfg.downloadBytes>>20),
			run: func(ctx context.Context, ts []*target, progress io.Writer) map[string]measure {
				return runDownloadRounds(ctx, cfg, o, ts, progress)
			},
			metrics: []metricDef{{"mbps", "MB/s", true}, {"rss_growth", "peak RSS growth MiB", false}, {"cpu_s_per_gb", "proxy CPU s/GB", false}, {"total_cpu_s_per_gb", "total CPU s/GB", false}},
		},
		scenario{
			id: "4", title: fmt.Sprintf("(4) HTTP/2, %d streams on 1 connection", cfg.h2Streams),
			run:     load(loadSpec{opts: clientOpts{h2: true}, clients: 1, workers: cfg.h2Streams}),
			metrics: []metricDef{rps, cpu, total},
		},
		scenario{
			id: "5", title: fmt.Sprintf("(5) %d idle tunnels", cfg.idleTunnels),
			run:     scenarioIdle(cfg, o), // idle.go
			metrics: idleMetrics(),
		},
		scenario{
			id: "6.session", title: "(6) session with 100 hosts (API)", aileron: true,
			run:     perTarget(func(ctx context.Context, t *target) measure { return scenarioSessions(ctx, cfg, t) }),
			metrics: []metricDef{{"session_ms", "ms", false}},
		},
		scenario{
			id: "6.leaf", title: "(6) leaf issuance", aileron: true,
			run:     perTarget(func(ctx context.Context, _ *target) measure { return leafIssuance(ctx) }),
			metrics: []metricDef{{"leaf_us", "µs", false}},
		},
		scenario{
			id:      "7.ops",
			title:   fmt.Sprintf("(7) connector of %d vs %d operations, keep-alive GET, %d clients", opsLarge, opsSmall, opsClients),
			aileron: true,
			run: func(ctx context.Context, ts []*target, progress io.Writer) map[string]measure {
				return scenarioOpScale(ctx, cfg, o, ts, progress)
			},
			metrics: []metricDef{
				{"cpu_us_small", fmt.Sprintf("proxy CPU µs/req, %d ops", opsSmall), false},
				{"cpu_us_large", fmt.Sprintf("proxy CPU µs/req, %d ops", opsLarge), false},
				{"cpu_ratio", fmt.Sprintf("proxy CPU/req, %d ÷ %d ops", opsLarge, opsSmall), false},
				{"p50_small", fmt.Sprintf("p50 ms, %d ops", opsSmall), false},
				{"p50_large", fmt.Sprintf("p50 ms, %d ops", opsLarge), false},
				{"rps_small", fmt.Sprintf("req/s, %d ops", opsSmall), true},
				{"rps_large", fmt.Sprintf("req/s, %d ops", opsLarge), true},
				{"session_ms", fmt.Sprintf("session create ms, %d ops", opsLarge), false},
			},
		},
		scenario{
			id:      "9.secrets",
			title:   fmt.Sprintf("(9) session bound to %d secrets vs 1: %d MiB download, keep-alive GET with %d clients", secretCount, cfg.downloadBytes>>20, secretClients),
			aileron: true,
			run: func(ctx context.Context, ts []*target, progress io.Writer) map[string]measure {
				return scenarioSecretScale(ctx, cfg, o, ts, progress)
			},
			metrics: secretScaleMetrics(),
		},
	)
}

func runBench(ctx context.Context, opts options, cl *cleanups, progress io.Writer) (*report, error) {
	dir, err := os.MkdirTemp("", "aileron-bench-")
	if err != nil {
		return nil, fmt.Errorf("creating the run directory: %w", err)
	}
	if opts.keep {
		fmt.Fprintf(progress, "run directory (kept): %s\n", dir)
	} else {
		cl.add(func() { _ = os.RemoveAll(dir) })
	}
	rep := &report{Date: now(), Machine: describeMachine(), Config: configInfo{
		DurationS: opts.cfg.duration.Seconds(), Rounds: opts.cfg.rounds, KeepAliveClients: opts.cfg.keepAliveClients,
		NewConnClients: opts.cfg.newConnClients, DownloadBytes: opts.cfg.downloadBytes, DownloadRuns: opts.cfg.downloadRuns,
		H2Streams: opts.cfg.h2Streams, IdleTunnels: opts.cfg.idleTunnels, SessionRuns: opts.cfg.sessionRuns,
	}}
	rep.Machine.GitVersion = gitVersion(ctx)
	o, targets, err := startTargets(ctx, opts, dir, cl, progress)
	if err != nil {
		return nil, err
	}
	for _, name := range allTargets {
		if name != targetDirect && name != targetCompare && !opts.targets[name] {
			rep.Targets = append(rep.Targets, targetInfo{Name: name, Skipped: "skipped: not selected (-targets)"})
		}
	}
	var active []*target
	for _, t := range targets {
		switch {
		case t.name == targetAileron && t.version == "":
			t.version = "this tree " + rep.Machine.GitVersion + " (" + opts.bin + ")"
		case t.name == targetCompare:
			t.version = opts.compareBin
		}
		rep.Targets = append(rep.Targets, targetInfo{Name: t.name, Version: t.version, Skipped: t.skipped})
		if t.skipped == "" {
			active = append(active, t)
		}
	}
	sortTargets(rep.Targets)

	// (5) runs first, on proxies that have served only their warm-up: a Go
	// proxy reuses heap freed by earlier scenarios without growing its RSS,
	// which would understate the memory each idle tunnel holds.
	list, err := selectScenarios(append(scenarios(opts.cfg, o), sessionScaleScenarios(opts.cfg, o)...), opts.scenarios)
	if err != nil {
		return nil, err
	}
	rank := map[string]int{}
	for i, s := range list {
		rank[s.title] = i
	}
	slices.SortStableFunc(list, func(a, b scenario) int {
		return cmpBool(b.id == "5", a.id == "5")
	})
	measures := runScenarios(ctx, list, active, rep, progress)
	slices.SortStableFunc(rep.Rows, func(a, b row) int { return rank[a.Scenario] - rank[b.Scenario] })
	slices.SortStableFunc(rep.Notes, func(a, b note) int { return rank[a.Scenario] - rank[b.Scenario] })
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	for _, t := range active {
		if t.proc != nil && t.proc.exited() {
			rep.Notes = append(rep.Notes, note{Scenario: "run", Target: t.name, Note: fmt.Sprintf("the proxy exited during the run (%v)", t.proc.err)})
		}
	}
	addChecks(rep, measures)
	rep.Checks = append(rep.Checks, sessionScaleChecks(rep, opts.cfg.fleetSessions)...)
	return rep, nil
}

// runScenarios runs scenario-major (every target for a scenario, then the
// next), so drift on a shared machine hits all targets of a ratio alike.
func runScenarios(ctx context.Context, list []scenario, active []*target, rep *report, progress io.Writer) map[string]map[string]measure {
	all := map[string]map[string]measure{}
	for _, s := range list {
		if ctx.Err() != nil {
			return all
		}
		var ts []*target
		for _, t := range active {
			if !s.aileron || t.aileron != nil {
				ts = append(ts, t)
			}
		}
		fmt.Fprintln(progress, s.title)
		start := time.Now()
		ms := s.run(ctx, ts, progress)
		fmt.Fprintf(progress, "  %.1fs\n", time.Since(start).Seconds())
		all[s.id] = ms
		for _, t := range ts {
			if m := ms[t.name]; m.note != "" {
				rep.Notes = append(rep.Notes, note{Scenario: s.title, Target: t.name, Note: m.note})
			}
		}
		for _, md := range s.metrics {
			values := map[string]float64{}
			for _, t := range ts {
				if v, ok := ms[t.name].values[md.key]; ok {
					values[t.name] = v
				}
			}
			if len(values) > 0 {
				rep.addRow(s.id+"."+md.key, s.title, md.label, md.higher, values)
				for _, t := range ts {
					if vs, ok := ms[t.name].rounds[md.key]; ok {
						rep.Rows[len(rep.Rows)-1].setRounds(t.name, vs)
					}
				}
			}
		}
	}
	return all
}

func addChecks(rep *report, measures map[string]map[string]measure) {
	everyStream := func() bool {
		m := measures["4"][targetAileron]
		return m.values["audited_frac"] == 1
	}
	rep.Checks = []check{
		rep.ratioCheck("(1) req/s at 16 clients >= 0.6x direct", "1.c16.rps", 0.6, true, nil),
		rep.ratioCheck("(1) p50 at 1 client <= 2x direct p50", "1.c1.p50", 2, false, nil),
		rep.ratioCheck("(2) req/s with a new connection per request >= 0.6x direct", "2.rps", 0.6, true, nil),
		rep.ratioCheck("(3) download MB/s >= 0.7x direct", "3.mbps", 0.7, true, nil),
		rep.absCheck("(3) proxy peak RSS growth <= 32 MiB", "3.rss_growth", 32, " MiB"),
		rep.ratioCheck("(4) HTTP/2 req/s >= 0.5x direct, policy on every stream", "4.rps", 0.5, true, everyStream),
		rep.absCheck("(5) RSS per idle tunnel <= 100 KiB", "5.kib_per_tunnel", 100, " KiB"),
		// idle.go's checks follow here.
		rep.absCheck("(6) session with 100 hosts <= 25 ms", "6.session.session_ms", 25, " ms"),
		rep.absCheck("(6) leaf issuance <= 150 µs", "6.leaf.leaf_us", 150, " µs"),
		rep.absCheck("(7) proxy CPU/req with 1,000 operations <= 1.1x with 5", "7.ops.cpu_ratio", 1.1, "×"),
		rep.absCheck("(7) session with a 1,000-operation connector <= 25 ms", "7.ops.session_ms", 25, " ms"),
		rep.absCheck("(9) proxy CPU/GB, download with 1,000 secrets <= 1.25x with 1", "9.secrets.cpu_s_per_gb_ratio", 1.25, "×"),
		rep.absCheck("(9) proxy CPU/req, small GET with 1,000 secrets <= 1.25x with 1", "9.secrets.cpu_us_ratio", 1.25, "×"),
		// Issue 17: the proxy's own CPU against a bare goproxy, same run.
		rep.peerCheck("(17) proxy CPU/req, 1 client <= 0.8x goproxy", "1.c1.cpu_us", 0.8),
		rep.peerCheck("(17) proxy CPU/req, 16 clients <= 0.8x goproxy", "1.c16.cpu_us", 0.8),
		rep.peerCheck("(17) proxy CPU/req, new connection <= 0.8x goproxy", "2.cpu_us", 0.8),
		rep.peerCheck("(17) proxy CPU/GB, download <= 0.8x goproxy", "3.cpu_s_per_gb", 0.8),
		rep.peerCheck("(17) proxy CPU/req, HTTP/2 <= 0.8x goproxy", "4.cpu_us", 0.8),
		rep.bestPeerCheck("(17) req/s, 1 client >= best peer", "1.c1.rps"),
		rep.bestPeerCheck("(17) req/s, 16 clients >= best peer", "1.c16.rps"),
		rep.bestPeerCheck("(17) req/s, new connection >= best peer", "2.rps"),
		rep.bestPeerCheck("(17) download MB/s >= best peer", "3.mbps"),
		rep.bestPeerCheck("(17) HTTP/2 req/s >= best peer", "4.rps"),
		rep.peerCheck("(17) p50 at 1 client <= goproxy's", "1.c1.p50", 1),
		rep.absCheck("(17) proxy CPU, download <= 1.5 s/GB", "3.cpu_s_per_gb", 1.5, " s/GB"),
	}
	at := slices.IndexFunc(rep.Checks, func(c check) bool { return strings.HasPrefix(c.Name, "(5)") }) + 1
	rep.Checks = slices.Insert(rep.Checks, at, idleChecks(rep)...)
}

// cmpBool orders true before false when called as cmpBool(b, a).
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	default:
		return -1
	}
}

func sortTargets(ts []targetInfo) {
	slices.SortStableFunc(ts, func(a, b targetInfo) int {
		return slices.Index(allTargets, a.Name) - slices.Index(allTargets, b.Name)
	})
}

func gitVersion(ctx context.Context) string {
	root, ok := moduleRoot()
	if !ok {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "-C", root, "describe", "--always", "--dirty").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// selectScenarios keeps the scenarios whose id is in ids (all when ids is
// empty); an unknown id is an error naming the valid ones.
func selectScenarios(all []scenario, ids []string) ([]scenario, error) {
	if len(ids) == 0 {
		return all, nil
	}
	var valid []string
	for _, s := range all {
		valid = append(valid, s.id)
	}
	var list []scenario
	for _, id := range ids {
		i := slices.IndexFunc(all, func(s scenario) bool { return s.id == id })
		if i < 0 {
			return nil, fmt.Errorf("-scenarios: unknown scenario %q; use some of %s", id, strings.Join(valid, ","))
		}
		list = append(list, all[i])
	}
	return list, nil
}
