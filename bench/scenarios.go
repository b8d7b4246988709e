package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

// config bounds every scenario.
type config struct {
	// duration is each target's total time under each timed load (scenarios
	// 1, 2 and 4), split over rounds.
	duration time.Duration
	// rounds interleave the targets: round r runs every target for
	// duration/rounds, starting at a different target each round, so drift
	// on a shared machine hits every target of a ratio alike.
	rounds int
	// maxRequests caps each target's requests per timed load (0: only the
	// duration bounds it).
	maxRequests int
	// keepAliveClients are the client counts of scenario (1).
	keepAliveClients []int
	// newConnClients run scenario (2) concurrently.
	newConnClients int
	// downloadBytes is scenario (3)'s body size; downloadRuns how many
	// downloads each target does (interleaved like rounds).
	downloadBytes int64
	downloadRuns  int
	// h2Streams are scenario (4)'s concurrent streams on one connection.
	h2Streams int
	// idleTunnels is scenario (5)'s count.
	idleTunnels int
	// sessionRuns is how many sessions scenario (6) creates.
	sessionRuns int
	// fleetSessions is scenario (8)'s live sessions.
	fleetSessions int
}

func defaultConfig() config {
	return config{
		duration:         6 * time.Second,
		rounds:           5,
		keepAliveClients: []int{1, 16},
		newConnClients:   4,
		downloadBytes:    100 << 20,
		downloadRuns:     10,
		h2Streams:        64,
		idleTunnels:      1000,
		sessionRuns:      15,
		fleetSessions:    defaultFleetSessions,
	}
}

// measure is one target's figures for one scenario.
type measure struct {
	values map[string]float64 // metric key -> value
	// rounds holds, for some metrics, the figure of each interleaved round
	// (0 where the round measured nothing), so a same-run ratio can be
	// taken round by round.
	rounds map[string][]float64
	note   string
}

func (m *measure) setRounds(key string, vs []float64) {
	if m.rounds == nil {
		m.rounds = map[string][]float64{}
	}
	m.rounds[key] = vs
}

func (m *measure) set(key string, v float64) {
	if m.values == nil {
		m.values = map[string]float64{}
	}
	m.values[key] = v
}

func (m *measure) addNote(format string, args ...any) {
	if m.note != "" {
		m.note += "; "
	}
	m.note += fmt.Sprintf(format, args...)
}

// warm sends one request per client so tunnels, leaves and upstream pools
// are in place before timing; h2 reports whether every answer came over
// HTTP/2.
func warm(ctx context.Context, clients []*http.Client, u string) (h2 bool, err error) {
	var wg sync.WaitGroup
	errs := make([]error, len(clients))
	h2s := make([]bool, len(clients))
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, h2s[i], errs[i] = get(ctx, c, u)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return false, fmt.Errorf("warming up: %w", err)
		}
	}
	return !slices.Contains(h2s, false), nil
}

// loadSpec is a timed load: clients (each its own transport, so its own
// connection or tunnel) shared by workers goroutines issuing small GETs.
type loadSpec struct {
	opts    clientOpts
	clients int
	workers int
	// url is what every request GETs; empty means the origin's small GET.
	url string
}

// loadState is one target's side of a timed load, accumulated over rounds.
type loadState struct {
	t        *target
	clients  []*http.Client
	dialers  []*countingDialer
	dials    int64 // after the warm-up
	res      loadResult
	cpu      time.Duration // the proxy's
	cpuOK    bool
	total    time.Duration // proxy + origin + client (this process)
	totalOK  bool
	injected int64
	// roundCPU is the proxy's CPU µs per request of each round (0 when
	// that round measured none).
	roundCPU []float64
	m        measure
	skip     bool
}

func (st *loadState) totalDials() int64 {
	var n int64
	for _, d := range st.dialers {
		n += d.dials.Load()
	}
	return n
}

// runLoadRounds runs spec against every target in interleaved rounds and
// reports req/s, p50, p99 and the proxy's CPU per request.
func runLoadRounds(ctx context.Context, cfg config, o *origin, ts []*target, spec loadSpec, progress io.Writer) map[string]measure {
	u := spec.url
	if u == "" {
		u = o.url(pathSmall)
	}
	states := make([]*loadState, len(ts))
	for i, t := range ts {
		st := &loadState{t: t, cpuOK: true, totalOK: true}
		states[i] = st
		for range spec.clients {
			c, d := newClient(t, spec.opts)
			st.clients = append(st.clients, c)
			st.dialers = append(st.dialers, d)
		}
		defer closeClients(st.clients)
		h2, err := warm(ctx, st.clients, u)
		switch {
		case err != nil:
			st.m.addNote("%v", err)
			st.skip = true
		case spec.opts.h2 && !h2:
			st.m.addNote("n/a: no HTTP/2 offered to the client")
			st.skip = true
		}
		st.dials = st.totalDials()
	}
	rounds := max(1, cfg.rounds)
	per := cfg.duration / time.Duration(rounds)
	maxPer := 0
	if cfg.maxRequests > 0 {
		maxPer = (cfg.maxRequests + rounds - 1) / rounds
	}
	for r := range rounds {
		fmt.Fprintf(progress, "  round %d/%d:", r+1, rounds)
		for i := range states {
			st := states[(i+r)%len(states)]
			if st.skip || ctx.Err() != nil {
				continue
			}
			fmt.Fprintf(progress, " %s", st.t.name)
			var before originStats
			if st.t.auditHeader {
				before = o.counters(ctx)
			}
			cpu := startCPU(st.t.pid())
			originCPU, selfCPU := startCPU(o.proc.pid()), startCPU(os.Getpid())
			res := runLoad(ctx, st.clients, u, spec.workers, per, maxPer)
			roundCPU := 0.0
			if used, ok := cpu.used(); ok {
				st.cpu += used
				st.total += used
				if res.requests > 0 && st.t.pid() != 0 {
					roundCPU = float64(used) / float64(time.Microsecond) / float64(res.requests)
				}
			} else {
				st.cpuOK = false
			}
			st.roundCPU = append(st.roundCPU, roundCPU)
			ou, ok1 := originCPU.used()
			su, ok2 := selfCPU.used()
			st.total += ou + su
			st.totalOK = st.totalOK && ok1 && ok2
			if st.t.auditHeader {
				st.injected += o.counters(ctx).Injected - before.Injected
			}
			st.res.merge(res)
		}
		fmt.Fprintln(progress)
	}
	out := map[string]measure{}
	for _, st := range states {
		m := st.m
		r := st.res
		if !st.skip {
			slices.Sort(r.latencies)
			if r.errors > 0 {
				m.addNote("%d errors (first: %v)", r.errors, r.firstErr)
			}
			if r.requests > 0 {
				m.set("rps", r.perSecond())
				m.set("p50", r.percentile(0.50))
				m.set("p99", r.percentile(0.99))
				if st.t.pid() != 0 && st.cpuOK {
					m.set("cpu_us", float64(st.cpu)/float64(time.Microsecond)/float64(r.requests))
					m.setRounds("cpu_us", st.roundCPU)
				}
				if st.totalOK && (st.t.pid() == 0 || st.cpuOK) {
					m.set("total_cpu_us", float64(st.total)/float64(time.Microsecond)/float64(r.requests))
				}
				if st.t.auditHeader {
					// The proxy decided (and audited) every request and
					// injected the credential into every one.
					m.set("audited_frac", float64(r.audited)/float64(r.requests))
					if r.audited != r.requests {
						m.addNote("only %d of %d responses carried X-Aileron-Audit-Id", r.audited, r.requests)
					}
					if st.injected < int64(r.requests) {
						m.addNote("credential injected on only %d of %d requests", st.injected, r.requests)
					}
				}
			}
			dials := st.totalDials() - st.dials
			switch {
			case spec.opts.newConn && dials < int64(r.requests):
				m.addNote("only %d connections for %d requests", dials, r.requests)
			case !spec.opts.newConn && dials != 0:
				m.addNote("%d new connections during the timed load, want 0", dials)
			}
			if spec.opts.h2 && r.h2 != r.requests {
				m.addNote("%d of %d responses over HTTP/2", r.h2, r.requests)
			}
		}
		out[st.t.name] = m
	}
	return out
}

// runDownloadRounds is (3): a large body streamed through one HTTP/1.1
// connection per target, cfg.downloadRuns times, interleaved; MB/s (best
// run), the proxy's peak RSS growth over its RSS just before each download
// (worst run) and its CPU time per GB.
func runDownloadRounds(ctx context.Context, cfg config, o *origin, ts []*target, progress io.Writer) map[string]measure {
	type state struct {
		t      *target
		c      *http.Client
		m      measure
		best   float64
		growth int64
		cpu    time.Duration
		cpuOK  bool
		total  time.Duration // proxy + origin + client (this process)
		bytes  int64
		// runCPU is the proxy's CPU s/GB of each run (0 when that run
		// measured none).
		runCPU []float64
		failed bool
	}
	states := make([]*state, len(ts))
	for i, t := range ts {
		c, _ := newClient(t, clientOpts{})
		defer c.CloseIdleConnections()
		st := &state{t: t, c: c, growth: -1 << 62, cpuOK: true}
		states[i] = st
		if _, err := warm(ctx, []*http.Client{c}, o.url(pathSmall)); err != nil {
			st.m.addNote("%v", err)
			st.failed = true
		}
	}
	u := o.url(pathDownload + strconv.FormatInt(cfg.downloadBytes, 10))
	for r := range max(1, cfg.downloadRuns) {
		fmt.Fprintf(progress, "  run %d/%d:", r+1, cfg.downloadRuns)
		for i := range states {
			st := states[(i+r)%len(states)]
			if st.failed || ctx.Err() != nil {
				continue
			}
			fmt.Fprintf(progress, " %s", st.t.name)
			pid := st.t.pid()
			var before int64
			var sampler *rssSampler
			hwmReset := false
			if pid != 0 {
				before, _ = rssKiB(pid)
				hwmReset = resetPeakRSS(pid)
				sampler = sampleRSS(pid, 10*time.Millisecond)
			}
			cpu := startCPU(pid)
			originCPU, selfCPU := startCPU(o.proc.pid()), startCPU(os.Getpid())
			dctx, cancel := context.WithTimeout(ctx, 120*time.Second)
			n, took, err := download(dctx, st.c, u)
			cancel()
			runCPU := 0.0
			if used, ok := cpu.used(); ok {
				st.cpu += used
				st.total += used
				if pid != 0 && err == nil && n > 0 {
					runCPU = used.Seconds() / (float64(n) / 1e9)
				}
			} else if pid != 0 {
				st.cpuOK = false
			}
			st.runCPU = append(st.runCPU, runCPU)
			ou, ok1 := originCPU.used()
			su, ok2 := selfCPU.used()
			st.total += ou + su
			st.cpuOK = st.cpuOK && ok1 && ok2
			if sampler != nil {
				peak := sampler.stop()
				if hwmReset {
					if hwm, err := procStatus(pid, "VmHWM"); err == nil && hwm > peak {
						peak = hwm
					}
				}
				st.growth = max(st.growth, peak-before)
			}
			switch {
			case err != nil:
				st.m.addNote("download failed: %v", err)
				st.failed = true
			case n != cfg.downloadBytes:
				st.m.addNote("downloaded %d bytes, want %d", n, cfg.downloadBytes)
				st.failed = true
			default:
				st.best = max(st.best, float64(n)/1e6/took.Seconds())
				st.bytes += n
			}
		}
		fmt.Fprintln(progress)
	}
	out := map[string]measure{}
	for _, st := range states {
		if !st.failed {
			st.m.set("mbps", st.best)
			if st.t.pid() != 0 {
				st.m.set("rss_growth", float64(st.growth)/1024)
				if st.cpuOK && st.bytes > 0 {
					st.m.set("cpu_s_per_gb", st.cpu.Seconds()/(float64(st.bytes)/1e9))
					st.m.setRounds("cpu_s_per_gb", st.runCPU)
				}
			}
			if st.cpuOK && st.bytes > 0 {
				st.m.set("total_cpu_s_per_gb", st.total.Seconds()/(float64(st.bytes)/1e9))
			}
		}
		out[st.t.name] = st.m
	}
	return out
}

// scenarioIdleTunnels is (5): n tunnels, each with one request done, held
// open and idle; the proxy's RSS growth per tunnel.
func scenarioIdleTunnels(ctx context.Context, cfg config, o *origin, t *target) measure {
	return measureIdle(ctx, cfg, o, t, openIdleH1) // idle.go
}
