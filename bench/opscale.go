package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/aileron-dev/aileron-proxy/internal/testkit/specs"
)

// Scenario (7): the cost of a connector's size. Two synthetic GitHub-like
// connectors on their own host (so the other scenarios' host is unchanged),
// one of opsSmall operations and one of opsLarge, share their first
// operations; each aileron-proxy target gets a session on each and the same
// keep-alive load requests one of those shared operations through both, in
// interleaved rounds. Their proxy CPU per request, side by side, shows
// whether matching costs more with more operations.
const (
	opsHost       = "ops.bench.test"
	opsPathPrefix = "/repos/"
	// opsPath is the synthetic spec's GET /repos/{owner}/{repo}/issues: in
	// the large connector, many templates of its length share its first
	// literal or rank before it, so a matcher that scans them shows here.
	opsPath    = "/repos/octo/hello/issues"
	opsSmall   = 5
	opsLarge   = 1000
	opsClients = 4
)

// opsFQN is the FQN of the synthetic connector with n operations.
func opsFQN(n int) string { return "local://bench/ops" + strconv.Itoa(n) }

// opsSpec is the synthetic connector with n operations on the ops host, all
// with a bearer credential (the bench token), like the origin's connector.
func opsSpec(o *origin, n int) string {
	return string(specs.Synthetic(opsFQN(n), "ops"+strconv.Itoa(n), o.opsAuthority(), n))
}

// opsAuthority is host:port as clients name the origin for scenario (7).
func (o *origin) opsAuthority() string { return net.JoinHostPort(opsHost, strconv.Itoa(o.port)) }

// scenarioOpScale runs (7) on the aileron-proxy targets of ts: per target,
// a keep-alive load through a session on the small connector and one on the
// large, all interleaved, then the median session creation time with the
// large connector.
func scenarioOpScale(ctx context.Context, cfg config, o *origin, ts []*target, progress io.Writer) map[string]measure {
	out := map[string]measure{}
	type pair struct {
		t            *target
		small, large *target
		m            measure
	}
	var pairs []*pair
	var load []*target
	for _, t := range ts {
		p := &pair{t: t}
		pairs = append(pairs, p)
		if t.aileron == nil {
			p.m.addNote("n/a")
			continue
		}
		var err error
		if p.small, err = opsTarget(ctx, t, opsSmall); err == nil {
			p.large, err = opsTarget(ctx, t, opsLarge)
		}
		if err != nil {
			p.m.addNote("%v", err)
			continue
		}
		load = append(load, p.small, p.large)
	}
	u := "https://" + o.opsAuthority() + opsPath
	ms := runLoadRounds(ctx, cfg, o, load, loadSpec{clients: opsClients, workers: opsClients, url: u}, progress)
	for _, p := range pairs {
		if p.small != nil {
			small, large := ms[p.small.name], ms[p.large.name]
			for _, side := range []struct {
				suffix string
				m      measure
			}{{"_small", small}, {"_large", large}} {
				for _, k := range []string{"rps", "p50", "cpu_us"} {
					if v, ok := side.m.values[k]; ok {
						p.m.set(k+side.suffix, v)
					}
				}
			}
			if s, l := small.values["cpu_us"], large.values["cpu_us"]; s > 0 && l > 0 {
				p.m.set("cpu_ratio", l/s)
			}
			for _, n := range []struct {
				label string
				m     measure
			}{{strconv.Itoa(opsSmall) + " ops", small}, {strconv.Itoa(opsLarge) + " ops", large}} {
				if n.m.note != "" {
					p.m.addNote("%s: %s", n.label, n.m.note)
				}
			}
			fmt.Fprintf(progress, "  %s: sessions with the %d-operation connector\n", p.t.name, opsLarge)
			timeSessions(ctx, cfg, p.t.aileron, opsFQN(opsLarge), 1, "session_ms", &p.m)
		}
		out[p.t.name] = p.m
	}
	return out
}

// opsTarget creates a session of t on the synthetic connector with n
// operations and returns a target for the load that goes through it; the
// proxy process (and so its CPU) is t's.
func opsTarget(ctx context.Context, t *target, n int) (*target, error) {
	s, err := t.aileron.createSession(ctx, "--connector", opsFQN(n))
	if err != nil {
		return nil, err
	}
	ep, err := s.endpoint()
	if err != nil {
		return nil, err
	}
	return &target{name: fmt.Sprintf("%s, %d ops", t.name, n), proxyURL: ep.proxyURL, roots: ep.roots, proc: t.proc, auditHeader: true}, nil
}
