package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Scenario (8): a fleet of sessions. Every sandbox is a session with its own
// CA, credentials and scope, so a daemon serving a fleet holds thousands of
// idle sessions while a few carry traffic. Per aileron-proxy target the
// scenarios share one fleet of config.fleetSessions (default
// defaultFleetSessions) sessions, created through the control API by the
// first of them that runs:
//
//   - 8.sessions-cpu: the (1) keep-alive load at fleetClients clients through
//     one session of the fleet's process and through a twin process of the
//     same binary holding one session, in interleaved rounds; proxy CPU per
//     request with the fleet over without.
//   - 8.session-mem: the proxy's RSS growth while the fleet is created, per
//     session (no tunnel to any of them).
//   - 8.create-p99: fleetCreateRuns more sessions created one at a time
//     while the fleet is live; their p50 and p99.
//   - 8.expiry: as many more sessions whose TTLs all end at the same
//     instant, while the same load runs; its p99 in the seconds after that
//     instant over its p99 with the fleet before they were created. A
//     session is created every expiryCreateEvery in both windows (a fleet
//     keeps starting sandboxes), and the expired sessions' directories left
//     after the window are counted.
const (
	defaultFleetSessions = 10000
	fleetClients         = 16
	fleetCreators        = 4 // concurrent POST /v1/sessions while building a fleet
	fleetCreateRuns      = 400
	expiryBefore         = 4 * time.Second
	expiryDuring         = 6 * time.Second
	expiryCreateEvery    = 250 * time.Millisecond
	// expiryMinTTL is the shortest TTL 8.expiry gives: a session must not
	// expire while the API is still writing its files.
	expiryMinTTL = 5 * time.Second
)

// sessionScale is the state the (8) scenarios share: one fleet per target.
type sessionScale struct {
	cfg    config
	o      *origin
	mu     sync.Mutex
	fleets map[string]*fleet
}

// fleet is one target's live sessions and what was measured
// while creating them.
type fleet struct {
	err       error
	rssBefore int64 // KiB, after a warm-up load
	rssAfter  int64 // KiB, after the fleet was created
	heap      int64 // go_memstats_heap_inuse_bytes growth, bytes
	created   int
	took      time.Duration // creating the fleet, fleetCreators at a time
}

// sessionScaleScenarios are the (8) scenarios.
func sessionScaleScenarios(cfg config, o *origin) []scenario {
	ss := &sessionScale{cfg: cfg, o: o, fleets: map[string]*fleet{}}
	fleetSessions := cfg.fleetSessions
	each := func(fn func(ctx context.Context, t *target, f *fleet, progress io.Writer) measure) func(context.Context, []*target, io.Writer) map[string]measure {
		return func(ctx context.Context, ts []*target, progress io.Writer) map[string]measure {
			out := map[string]measure{}
			for _, t := range ts {
				if ctx.Err() != nil {
					break
				}
				var m measure
				f := ss.fleet(ctx, t, progress)
				if f.err != nil {
					m.addNote("%v", f.err)
				} else {
					m = fn(ctx, t, f, progress)
				}
				out[t.name] = m
			}
			return out
		}
	}
	n := fmtCount(fleetSessions)
	return []scenario{
		{
			id: "8.sessions-cpu", title: fmt.Sprintf("(8) keep-alive GET, %d clients, 1 vs %s live sessions", fleetClients, n), aileron: true,
			run: each(ss.sessionsCPU),
			metrics: []metricDef{
				{"cpu_us_1", "proxy CPU µs/req, 1 session", false},
				{"cpu_us_fleet", "proxy CPU µs/req, " + n + " sessions", false},
				{"cpu_ratio", "proxy CPU/req, " + n + " ÷ 1 session", false},
				{"p99_1", "p99 ms, 1 session", false},
				{"p99_fleet", "p99 ms, " + n + " sessions", false},
			},
		},
		{
			id: "8.session-mem", title: fmt.Sprintf("(8) %s idle sessions (API, no tunnel)", n), aileron: true,
			run: each(ss.sessionMem),
			metrics: []metricDef{
				{"kib_per_session", "RSS KiB per session", false},
				{"heap_kib_per_session", "Go heap in use KiB per session", false},
				{"create_per_s", "sessions created per s (" + strconv.Itoa(fleetCreators) + " at a time)", true},
			},
		},
		{
			id: "8.create-p99", title: fmt.Sprintf("(8) session creation while %s are live", n), aileron: true,
			run: each(ss.createP99),
			metrics: []metricDef{
				{"create_p50", "p50 ms", false},
				{"create_p99", "p99 ms", false},
			},
		},
		{
			id: "8.expiry", title: fmt.Sprintf("(8) %s sessions expiring at once, keep-alive GET, %d clients", n, fleetClients), aileron: true,
			run: each(ss.expiry),
			metrics: []metricDef{
				{"p99_before", "p99 ms before", false},
				{"p99_during", "p99 ms during expiry", false},
				{"p99_ratio", "p99 during ÷ before", false},
				{"max_during", "max ms during expiry", false},
			},
		},
	}
}

// sessionScaleChecks are the (8) targets.
func sessionScaleChecks(rep *report, fleetSessions int) []check {
	n := fmtCount(fleetSessions)
	return []check{
		rep.absCheck("(8) proxy CPU/req with "+n+" sessions <= 1.1x with 1", "8.sessions-cpu.cpu_ratio", 1.1, "×"),
		rep.absCheck("(8) RSS per idle session <= 16 KiB", "8.session-mem.kib_per_session", 16, " KiB"),
		rep.absCheck("(8) session creation p99 with "+n+" live <= 25 ms", "8.create-p99.create_p99", 25, " ms"),
		rep.absCheck("(8) p99 during the expiry of "+n+" sessions <= 2x before", "8.expiry.p99_ratio", 2, "×"),
	}
}

func fmtCount(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// fleet returns t's fleet, measuring the baseline load and creating the
// sessions on first use.
func (ss *sessionScale) fleet(ctx context.Context, t *target, progress io.Writer) *fleet {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if f, ok := ss.fleets[t.name]; ok {
		return f
	}
	f := &fleet{}
	ss.fleets[t.name] = f
	// Warm up with the load, so the RSS before includes its buffers.
	fmt.Fprintf(progress, "  %s: warming up\n", t.name)
	warmCfg := ss.cfg
	warmCfg.duration, warmCfg.rounds = min(ss.cfg.duration, 2*time.Second), 1
	if w := ss.load(ctx, warmCfg, []*target{t}, progress)[t.name]; w.values["rps"] == 0 {
		f.err = fmt.Errorf("the warm-up load failed: %s", w.note)
		return f
	}
	heapBefore, _ := heapInuse(ctx, t.aileron)
	time.Sleep(time.Second) // let the load's garbage settle
	var err error
	if f.rssBefore, err = rssKiB(t.pid()); err != nil {
		f.err = err
		return f
	}
	fmt.Fprintf(progress, "  %s: creating %d sessions\n", t.name, ss.cfg.fleetSessions)
	start := time.Now()
	f.created, err = createMany(ctx, t.aileron, ss.cfg.fleetSessions, func(int) string { return "2h" }, nil)
	f.took = time.Since(start)
	if err != nil {
		f.err = fmt.Errorf("creating the fleet (%d created): %w", f.created, err)
		return f
	}
	time.Sleep(2 * time.Second)
	if f.rssAfter, err = rssKiB(t.pid()); err != nil {
		f.err = err
		return f
	}
	if heapAfter, err := heapInuse(ctx, t.aileron); err == nil && heapBefore > 0 {
		f.heap = heapAfter - heapBefore
	}
	fmt.Fprintf(progress, "  %s: %d sessions in %.1fs\n", t.name, f.created, f.took.Seconds())
	return f
}

// load runs the (1) keep-alive load at fleetClients clients on ts, in
// interleaved rounds.
func (ss *sessionScale) load(ctx context.Context, cfg config, ts []*target, progress io.Writer) map[string]measure {
	return runLoadRounds(ctx, cfg, ss.o, ts, loadSpec{clients: fleetClients, workers: fleetClients}, progress)
}

// sessionsCPU runs the load through t (with its fleet) and through a twin
// serve process of the same binary with one session, interleaved, so drift
// on a shared machine hits both alike.
func (ss *sessionScale) sessionsCPU(ctx context.Context, t *target, _ *fleet, progress io.Writer) measure {
	var m measure
	var cl cleanups
	defer cl.run()
	fmt.Fprintf(progress, "  %s: starting a twin with 1 session\n", t.name)
	runDir := filepath.Dir(filepath.Dir(t.aileron.home))
	twin, err := startAileron(ctx, t.name+"-1session", t.aileron.bin, runDir, ss.o, 1, &cl)
	if err != nil {
		m.addNote("starting the 1-session twin: %v", err)
		return m
	}
	twin.name = t.name + ", 1 session"
	ms := ss.load(ctx, ss.cfg, []*target{twin, t}, progress)
	b, with := ms[twin.name], ms[t.name]
	for _, kv := range [][2]string{{"cpu_us", "cpu_us_1"}, {"p99", "p99_1"}} {
		if v, ok := b.values[kv[0]]; ok {
			m.set(kv[1], v)
		}
	}
	for _, kv := range [][2]string{{"cpu_us", "cpu_us_fleet"}, {"p99", "p99_fleet"}} {
		if v, ok := with.values[kv[0]]; ok {
			m.set(kv[1], v)
		}
	}
	if one, many := b.values["cpu_us"], with.values["cpu_us"]; one > 0 && many > 0 {
		m.set("cpu_ratio", many/one)
	}
	if b.note != "" {
		m.addNote("1 session: %s", b.note)
	}
	if with.note != "" {
		m.addNote("%s sessions: %s", fmtCount(ss.cfg.fleetSessions), with.note)
	}
	m.addNote("interleaved with a twin process holding 1 session")
	return m
}

func (ss *sessionScale) sessionMem(_ context.Context, _ *target, f *fleet, _ io.Writer) measure {
	var m measure
	m.set("kib_per_session", float64(f.rssAfter-f.rssBefore)/float64(f.created))
	if f.heap > 0 {
		m.set("heap_kib_per_session", float64(f.heap)/1024/float64(f.created))
	}
	m.set("create_per_s", float64(f.created)/f.took.Seconds())
	m.addNote("RSS %d → %d KiB over %d sessions", f.rssBefore, f.rssAfter, f.created)
	return m
}

func (ss *sessionScale) createP99(ctx context.Context, t *target, _ *fleet, _ io.Writer) measure {
	var m measure
	var took []time.Duration
	n, err := createMany(ctx, t.aileron, min(fleetCreateRuns, ss.cfg.fleetSessions), func(int) string { return "2h" }, &took)
	if err != nil {
		m.addNote("after %d sessions: %v", n, err)
		return m
	}
	slices.Sort(took)
	at := func(p float64) float64 { return float64(took[int(float64(len(took)-1)*p)]) / float64(time.Millisecond) }
	m.set("create_p50", at(0.5))
	m.set("create_p99", at(0.99))
	m.addNote("%d sessions created one at a time; max %.1f ms", len(took), at(1))
	return m
}

// expiry creates fleetSessions sessions that all expire at one instant and
// measures the load's latency just before and across that instant.
func (ss *sessionScale) expiry(ctx context.Context, t *target, f *fleet, progress io.Writer) measure {
	var m measure
	d := t.aileron
	n := ss.cfg.fleetSessions
	clients := make([]*http.Client, fleetClients)
	for i := range clients {
		clients[i], _ = newClient(t, clientOpts{})
	}
	defer closeClients(clients)
	u := ss.o.url(pathSmall)
	if _, err := warm(ctx, clients, u); err != nil {
		m.addNote("%v", err)
		return m
	}
	// The baseline: the same load and churn with the fleet, before the
	// expiring sessions exist.
	fmt.Fprintf(progress, "  %s: load for %.1fs before the expiring sessions exist\n", t.name, expiryBefore.Seconds())
	c := startChurn(ctx, d)
	rb := runLoad(ctx, clients, u, fleetClients, expiryBefore, 0)
	c.stop()

	// Leave room to create them all at well below the fleet's pace: a
	// session created late gets expiryMinTTL and expires after the others.
	rate := float64(f.created) / f.took.Seconds()
	at := time.Now().Add(time.Duration(float64(n)/rate*1.6*float64(time.Second)) + 3*time.Second)
	fmt.Fprintf(progress, "  %s: creating %d sessions expiring at %s\n", t.name, n, at.Format("15:04:05.000"))
	var late atomic.Int64
	created, err := createMany(ctx, d, n, func(int) string {
		left := time.Until(at)
		if left < expiryMinTTL {
			late.Add(1)
			left = expiryMinTTL
		}
		return strconv.FormatInt(left.Milliseconds(), 10) + "ms"
	}, nil)
	if err != nil {
		m.addNote("after %d sessions: %v", created, err)
		return m
	}
	if l := late.Load(); l > 0 {
		m.addNote("%d sessions were created less than %s before the expiry instant and expire up to %s later", l, expiryMinTTL, expiryMinTTL)
	}
	dirsBefore := countDirs(filepath.Join(d.home, "sessions"))
	if w := time.Until(at.Add(-200 * time.Millisecond)); w > 0 {
		time.Sleep(w)
	}
	fmt.Fprintf(progress, "  %s: load for %.1fs across the expiry\n", t.name, expiryDuring.Seconds())
	c = startChurn(ctx, d)
	rd := runLoad(ctx, clients, u, fleetClients, expiryDuring, 0)
	createOK, createErrs := c.stop()
	dirsAfter := countDirs(filepath.Join(d.home, "sessions"))

	for _, r := range []struct {
		name string
		r    loadResult
	}{{"before", rb}, {"during", rd}} {
		if r.r.errors > 0 {
			m.addNote("%s: %d errors (first: %v)", r.name, r.r.errors, r.r.firstErr)
		}
		if r.r.requests == 0 {
			m.addNote("%s: no request completed", r.name)
			return m
		}
	}
	pb, pd := rb.percentile(0.99), rd.percentile(0.99)
	m.set("p99_before", pb)
	m.set("p99_during", pd)
	m.set("p99_ratio", pd/pb)
	m.set("max_during", rd.percentile(1))
	// The expired sessions' directories are removed as their expiry is
	// noticed; the sessions created meanwhile added theirs.
	left := dirsAfter - (dirsBefore - created + int(createOK))
	m.set("expired_dirs_left", float64(left))
	m.addNote("req/s %.0f before, %.0f during; %d of the %d expired sessions' directories left after the window (%d sessions created meanwhile, %d failed)",
		rb.perSecond(), rd.perSecond(), left, created, createOK, createErrs)
	return m
}

// churn creates a session every expiryCreateEvery until stopped, as a fleet
// keeps starting sandboxes.
type churn struct {
	done     chan struct{}
	wg       sync.WaitGroup
	ok, errs atomic.Int64
}

func startChurn(ctx context.Context, d *aileronDaemon) *churn {
	c := &churn{done: make(chan struct{})}
	c.wg.Go(func() {
		tick := time.NewTicker(expiryCreateEvery)
		defer tick.Stop()
		for {
			select {
			case <-c.done:
				return
			case <-tick.C:
				if _, err := createMany(ctx, d, 1, func(int) string { return "2h" }, nil); err != nil {
					c.errs.Add(1)
				} else {
					c.ok.Add(1)
				}
			}
		}
	})
	return c
}

// stop ends the churn and reports the sessions it created and the
// creations that failed.
func (c *churn) stop() (ok, failed int64) {
	close(c.done)
	c.wg.Wait()
	return c.ok.Load(), c.errs.Load()
}

// createMany creates n sessions of the bench connector through the control
// API, fleetCreators at a time (one at a time when took is set: each
// creation's time is appended to it). ttl gives the i-th session's TTL.
func createMany(ctx context.Context, d *aileronDaemon, n int, ttl func(i int) string, took *[]time.Duration) (int, error) {
	workers := fleetCreators
	if took != nil {
		workers = 1
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: workers}}
	defer c.CloseIdleConnections()
	var (
		next, done atomic.Int64
		mu         sync.Mutex
		firstErr   error
		wg         sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				_, _, err := createSessionAPI(ctx, c, d, benchFQN, ttl(i))
				el := time.Since(t0)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil && took != nil {
					*took = append(*took, el)
				}
				mu.Unlock()
				if err != nil {
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return int(done.Load()), firstErr
}

// heapInuse reads go_memstats_heap_inuse_bytes from the daemon's /metrics.
func heapInuse(ctx context.Context, d *aileronDaemon) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.APIURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading /metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("/metrics has no go_memstats_heap_inuse_bytes")
}

// countDirs returns how many entries dir holds (-1 when it cannot be read).
func countDirs(dir string) int {
	es, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	return len(es)
}
