package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSecretScaleScenario runs scenario (9) briefly against real serve
// processes: the session of the second daemon is bound to all 1,000
// secrets (startSecretDaemon refuses a session without one host per
// connector), both sessions carry the download and the GET load with every
// request decided, audited and injected, and the ratios are reported.
func TestSecretScaleScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := defaultConfig()
	cfg.duration, cfg.rounds, cfg.maxRequests = 2*time.Second, 2, 40
	cfg.downloadBytes, cfg.downloadRuns = 4<<20, 2
	opts := options{bin: buildAileron(ctx, t), cfg: cfg, targets: map[string]bool{targetDirect: true, targetAileron: true}}
	var cl cleanups
	defer cl.run()
	var progress bytes.Buffer
	o, targets, err := startTargets(ctx, opts, t.TempDir(), &cl, &progress)
	if err != nil {
		t.Fatalf("starting targets: %v\n%s", err, progress.String())
	}
	var s scenario
	for _, sc := range scenarios(cfg, o) {
		if sc.id == "9.secrets" {
			s = sc
		}
	}
	if s.run == nil || !s.aileron {
		t.Fatal("no aileron-only scenario 9.secrets")
	}
	rep := &report{}
	ms := runScenarios(ctx, []scenario{s}, targets, rep, &progress)
	m := ms["9.secrets"][targetAileron]
	if strings.Contains(m.note, "errors") || strings.Contains(m.note, "only") || strings.Contains(m.note, "download") {
		t.Errorf("scenario 9.secrets: %s\n%s", m.note, progress.String())
	}
	n := strconv.Itoa(secretCount)
	for _, k := range []string{"cpu_s_per_gb_1", "cpu_s_per_gb_" + n, "cpu_s_per_gb_ratio", "cpu_us_1", "cpu_us_" + n, "cpu_us_ratio", "rss_mib_1", "rss_mib_" + n} {
		if m.values[k] <= 0 {
			t.Errorf("scenario 9.secrets: %s = %v, want > 0 (values %v)\n%s", k, m.values[k], m.values, progress.String())
		}
	}
	if _, ok := ms["9.secrets"][targetDirect]; ok {
		t.Error("scenario 9.secrets ran against direct; it is for aileron-proxy only")
	}
	if _, ok := rep.row("9.secrets.cpu_us_ratio"); !ok {
		t.Errorf("no row 9.secrets.cpu_us_ratio in %+v", rep.Rows)
	}
}
