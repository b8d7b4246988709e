package main

import (
	"strings"
	"testing"
	"time"
)

// TestSessionScaleScenarios runs the (8) scenarios against a real serve
// with a fleet of 40 sessions: every figure is produced, every check of
// the table is measured, and the expired sessions' directories are gone by
// the end of the expiry window.
func TestSessionScaleScenarios(t *testing.T) {
	cfg := defaultConfig()
	cfg.duration, cfg.rounds, cfg.maxRequests, cfg.fleetSessions = time.Second, 1, 200, 40
	ids := []string{"8.sessions-cpu", "8.session-mem", "8.create-p99", "8.expiry"}
	ms, rep, progress := runBriefly(t, 180*time.Second, cfg, []string{targetDirect, targetAileron}, ids...)
	want := map[string][]string{
		"8.sessions-cpu": {"cpu_us_1", "cpu_us_fleet", "cpu_ratio", "p99_1", "p99_fleet"},
		"8.session-mem":  {"kib_per_session", "create_per_s"},
		"8.create-p99":   {"create_p50", "create_p99"},
		"8.expiry":       {"p99_before", "p99_during", "p99_ratio", "max_during"},
	}
	for _, id := range ids {
		if _, ok := ms[id][targetDirect]; ok {
			t.Errorf("scenario %s ran against direct; it is for aileron-proxy only", id)
		}
		m := ms[id][targetAileron]
		for _, k := range want[id] {
			if m.values[k] <= 0 {
				t.Errorf("scenario %s: %s = %v, want > 0 (note: %s)", id, k, m.values[k], m.note)
			}
		}
		if strings.Contains(m.note, "error") || strings.Contains(m.note, "failed") && !strings.Contains(m.note, " 0 failed") {
			t.Errorf("scenario %s: %s", id, m.note)
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
		t.Log(progress)
	}
}
