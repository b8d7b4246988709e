package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestIdleScenario runs scenario (5) with a few connections of each kind
// against aileron-proxy and goproxy: every kind is opened on every proxy
// (HTTP/1.1, HTTP/2 with a GET over h2, a WebSocket with an echoed
// message, each proxy restarted with GOGC=100), every figure is reported,
// and the targets are checked next to the table.
func TestIdleScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cfg := defaultConfig()
	cfg.idleTunnels = 4
	opts := options{bin: buildAileron(ctx, t), cfg: cfg, targets: map[string]bool{targetDirect: true, targetAileron: true, targetGoproxy: true}}
	var cl cleanups
	defer cl.run()
	var progress bytes.Buffer
	o, targets, err := startTargets(ctx, opts, t.TempDir(), &cl, &progress)
	if err != nil {
		t.Fatalf("starting targets: %v\n%s", err, progress.String())
	}
	list, err := selectScenarios(scenarios(cfg, o), []string{"5"})
	if err != nil {
		t.Fatal(err)
	}
	rep := &report{}
	measures := runScenarios(ctx, list, targets, rep, &progress)
	for _, name := range []string{targetAileron, targetGoproxy} {
		m := measures["5"][name]
		if strings.Contains(m.note, "opened") || strings.Contains(m.note, "did not start") || strings.Contains(m.note, "warm-up") {
			t.Errorf("%s: %s\n%s", name, m.note, progress.String())
		}
		for _, md := range idleMetrics() {
			if _, ok := m.values[md.key]; !ok {
				t.Errorf("%s: no %s (values %v, note %q)", name, md.key, m.values, m.note)
			}
		}
	}
	addChecks(rep, measures)
	var md bytes.Buffer
	rep.writeMarkdown(&md)
	if !strings.Contains(md.String(), "(5) RSS KiB per HTTP/1.1 tunnel, GOGC=100 <= 40 and below goproxy's") {
		t.Errorf("report has no scenario (5) target for HTTP/1.1 at GOGC=100:\n%s", md.String())
	}
}
