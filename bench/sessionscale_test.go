package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestSessionScaleScenarios runs the (8) scenarios against a real serve
// with a fleet of 40 sessions: every figure is produced, every check of
// the table is measured, and the expired sessions' directories are gone by
// the end of the expiry window.
func TestSessionScaleScenarios(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	cfg := defaultConfig()
	cfg.duration, cfg.rounds, cfg.maxRequests, cfg.fleetSessions = time.Second, 1, 200, 40
	opts := options{bin: buildAileron(ctx, t), cfg: cfg, targets: map[string]bool{targetDirect: true, targetAileron: true}}
	var cl cleanups
	defer cl.run()
	var progress bytes.Buffer
	o, targets, err := startTargets(ctx, opts, t.TempDir(), &cl, &progress)
	if err != nil {
		t.Fatalf("starting targets: %v\n%s", err, progress.String())
	}
	list := sessionScaleScenarios(cfg, o)
	rep := &report{}
	ms := runScenarios(ctx, list, targets, rep, &progress)
	want := map[string][]string{
		"8.sessions-cpu": {"cpu_us_1", "cpu_us_fleet", "cpu_ratio", "p99_1", "p99_fleet"},
		"8.session-mem":  {"kib_per_session", "create_per_s"},
		"8.create-p99":   {"create_p50", "create_p99"},
		"8.expiry":       {"p99_before", "p99_during", "p99_ratio", "max_during"},
	}
	for _, s := range list {
		if !s.aileron {
			t.Errorf("scenario %s runs against every target; it is for aileron-proxy only", s.id)
		}
		if _, ok := ms[s.id][targetDirect]; ok {
			t.Errorf("scenario %s ran against direct", s.id)
		}
		m := ms[s.id][targetAileron]
		for _, k := range want[s.id] {
			if m.values[k] <= 0 {
				t.Errorf("scenario %s: %s = %v, want > 0 (note: %s)", s.id, k, m.values[k], m.note)
			}
		}
		if strings.Contains(m.note, "error") || strings.Contains(m.note, "failed") && !strings.Contains(m.note, " 0 failed") {
			t.Errorf("scenario %s: %s", s.id, m.note)
		}
	}
	if left, ok := ms["8.expiry"][targetAileron].values["expired_dirs_left"]; !ok || left != 0 {
		t.Errorf("8.expiry: %v expired sessions' directories left after the window (reported: %v), want 0", left, ok)
	}
	for _, c := range sessionScaleChecks(rep, cfg.fleetSessions) {
		if !c.Measured {
			t.Errorf("check %q not measured", c.Name)
		}
	}
	if t.Failed() {
		t.Log(progress.String())
	}
}
