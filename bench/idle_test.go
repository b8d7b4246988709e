package main

import (
	"bytes"
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
	cfg := defaultConfig()
	cfg.idleTunnels = 4
	measures, rep, progress := runBriefly(t, 120*time.Second, cfg, []string{targetDirect, targetAileron, targetGoproxy}, "5")
	for _, name := range []string{targetAileron, targetGoproxy} {
		m := measures["5"][name]
		if strings.Contains(m.note, "opened") || strings.Contains(m.note, "did not start") || strings.Contains(m.note, "warm-up") {
			t.Errorf("%s: %s\n%s", name, m.note, progress)
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
