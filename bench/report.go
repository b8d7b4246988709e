package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/atomicfile"
)

// report is what a run prints and writes (bench/results/latest.json).
type report struct {
	Date    string       `json:"date"`
	Machine machine      `json:"machine"`
	Config  configInfo   `json:"config"`
	Targets []targetInfo `json:"targets"`
	Rows    []row        `json:"rows"`
	Notes   []note       `json:"notes,omitempty"`
	Checks  []check      `json:"checks"`
}

type machine struct {
	NProc      int    `json:"nproc"`
	CPUModel   string `json:"cpu_model"`
	MemoryGiB  string `json:"memory_gib"`
	GoVersion  string `json:"go_version"`
	Kernel     string `json:"kernel"`
	OSArch     string `json:"os_arch"`
	LoadAvg    string `json:"loadavg_at_start"`
	GitVersion string `json:"git_version,omitempty"`
}

type configInfo struct {
	DurationS        float64 `json:"duration_s"`
	Rounds           int     `json:"rounds"`
	KeepAliveClients []int   `json:"keepalive_clients"`
	NewConnClients   int     `json:"newconn_clients"`
	DownloadBytes    int64   `json:"download_bytes"`
	DownloadRuns     int     `json:"download_runs"`
	H2Streams        int     `json:"h2_streams"`
	IdleTunnels      int     `json:"idle_tunnels"`
	SessionRuns      int     `json:"session_runs"`
}

type targetInfo struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Skipped string `json:"skipped,omitempty"`
}

// row is one metric of one scenario across targets. Ratios are target /
// direct in the same run.
type row struct {
	ID             string             `json:"id"`
	Scenario       string             `json:"scenario"`
	Metric         string             `json:"metric"`
	HigherIsBetter bool               `json:"higher_is_better"`
	Values         map[string]float64 `json:"values"`
	Ratios         map[string]float64 `json:"ratio_vs_direct,omitempty"`
	// PerRound is, for the metrics a same-run peer ratio is taken on, each
	// target's figure in each interleaved round (0: not measured).
	PerRound map[string][]float64 `json:"per_round,omitempty"`
}

func (rw *row) setRounds(target string, vs []float64) {
	if rw.PerRound == nil {
		rw.PerRound = map[string][]float64{}
	}
	rw.PerRound[target] = vs
}

type note struct {
	Scenario string `json:"scenario"`
	Target   string `json:"target"`
	Note     string `json:"note"`
}

// check is one of the targets (issues 7 and 17) for aileron-proxy.
type check struct {
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Limit    float64 `json:"limit"`
	Unit     string  `json:"unit"`
	Measured bool    `json:"measured"`
	Met      bool    `json:"met"`
	BestPeer string  `json:"best_peer,omitempty"`
	// RoundRatios are the per-round ratios a peer check's value is the
	// median of (empty when it is the ratio of the totals).
	RoundRatios []float64 `json:"round_ratios,omitempty"`
}

func describeMachine() machine {
	m := machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version(), OSArch: runtime.GOOS + "/" + runtime.GOARCH}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kib, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
				m.MemoryGiB = strconv.FormatFloat(kib/(1<<20), 'f', 1, 64)
			}
		}
	}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(raw))
	}
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(raw))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// fmtValue prints a figure with about three significant digits.
func fmtValue(v float64) string {
	switch a := max(v, -v); {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 0.1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// writeMarkdown prints the results table, the notes and the checks.
func (r *report) writeMarkdown(w io.Writer) {
	fmt.Fprintf(w, "\n## aileron-proxy bench, %s\n\n", r.Date)
	m := r.Machine
	fmt.Fprintf(w, "Machine: %d CPUs (%s), %s GiB, %s, kernel %s, %s, load %s at start.\n\n",
		m.NProc, m.CPUModel, m.MemoryGiB, m.GoVersion, m.Kernel, m.OSArch, m.LoadAvg)
	var cols []targetInfo
	for _, t := range r.Targets {
		if t.Skipped == "" {
			cols = append(cols, t)
		}
	}
	fmt.Fprint(w, "| scenario | metric |")
	for _, t := range cols {
		fmt.Fprintf(w, " %s |", t.Name)
	}
	fmt.Fprint(w, "\n|---|---|")
	for range cols {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, rw := range r.Rows {
		fmt.Fprintf(w, "| %s | %s |", rw.Scenario, rw.Metric)
		for _, t := range cols {
			v, ok := rw.Values[t.Name]
			cell := "–"
			if ok {
				cell = fmtValue(v)
				if ratio, ok := rw.Ratios[t.Name]; ok && t.Name != targetDirect {
					cell += fmt.Sprintf(" (%.2f×)", ratio)
				}
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "\n(×) is the ratio to direct in this run.")
	for _, t := range r.Targets {
		v := t.Version
		if v == "" {
			v = "-"
		}
		if t.Skipped != "" {
			fmt.Fprintf(w, "- %s: %s\n", t.Name, t.Skipped)
		} else {
			fmt.Fprintf(w, "- %s: %s\n", t.Name, v)
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w, "\nNotes:")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "- %s, %s: %s\n", n.Scenario, n.Target, n.Note)
		}
	}
	fmt.Fprintln(w, "\n### Targets (issues 7 and 17), aileron-proxy\n\n| target | measured | limit | result | best peer |\n|---|---:|---:|---|---|")
	for _, c := range r.Checks {
		val, res := "not measured", "not met"
		if c.Measured {
			val = fmtValue(c.Value) + c.Unit
		}
		if c.Met {
			res = "met"
		}
		bp := c.BestPeer
		if bp == "" {
			bp = "–"
		}
		fmt.Fprintf(w, "| %s | %s | %s%s | %s | %s |\n", c.Name, val, fmtValue(c.Limit), c.Unit, res, bp)
	}
	var rounds []string
	for _, c := range r.Checks {
		if len(c.RoundRatios) > 0 {
			parts := make([]string, len(c.RoundRatios))
			for i, v := range c.RoundRatios {
				parts[i] = fmt.Sprintf("%.2f", v)
			}
			rounds = append(rounds, fmt.Sprintf("- %s: median of %s", c.Name, strings.Join(parts, ", ")))
		}
	}
	if len(rounds) > 0 {
		fmt.Fprintln(w, "\nPer-round ratios to goproxy (each round: aileron-proxy's figure over goproxy's in the same round; the check takes their median):")
		for _, l := range rounds {
			fmt.Fprintln(w, l)
		}
	}
}

// writeBaselineDiff prints aileron-proxy's ratios next to the baseline's.
func (r *report) writeBaselineDiff(w io.Writer, base *report) {
	if base == nil {
		return
	}
	old := map[string]row{}
	for _, rw := range base.Rows {
		old[rw.ID] = rw
	}
	fmt.Fprintf(w, "\n### aileron-proxy vs the baseline (%s)\n\n| scenario | metric | ratio now | ratio in baseline |\n|---|---|---:|---:|\n", base.Date)
	for _, rw := range r.Rows {
		now, ok := rw.Ratios[targetAileron]
		if !ok {
			continue
		}
		then := "–"
		if o, ok := old[rw.ID]; ok {
			if v, ok := o.Ratios[targetAileron]; ok {
				then = fmt.Sprintf("%.2f×", v)
			}
		}
		fmt.Fprintf(w, "| %s | %s | %.2f× | %s |\n", rw.Scenario, rw.Metric, now, then)
	}
}

func (r *report) writeJSON(path string) error {
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding results: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	if err := atomicfile.WriteFile(path, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func readReport(path string) *report {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var r report
	if json.Unmarshal(raw, &r) != nil {
		return nil
	}
	return &r
}

// addRow records one metric; ratios are computed against direct.
func (r *report) addRow(id, scenario, metric string, higher bool, values map[string]float64) {
	rw := row{ID: id, Scenario: scenario, Metric: metric, HigherIsBetter: higher, Values: values}
	if d, ok := values[targetDirect]; ok && d > 0 {
		rw.Ratios = map[string]float64{}
		for name, v := range values {
			rw.Ratios[name] = v / d
		}
	}
	r.Rows = append(r.Rows, rw)
}

func (r *report) row(id string) (row, bool) {
	for _, rw := range r.Rows {
		if rw.ID == id {
			return rw, true
		}
	}
	return row{}, false
}

// ratioCheck checks aileron-proxy's ratio to direct on row id.
func (r *report) ratioCheck(name, id string, limit float64, atLeast bool, extra func() bool) check {
	c := check{Name: name, Limit: limit, Unit: "×"}
	rw, ok := r.row(id)
	if !ok {
		return c
	}
	v, ok := rw.Ratios[targetAileron]
	if !ok {
		return c
	}
	c.Value, c.Measured = v, true
	c.Met = (atLeast && v >= limit) || (!atLeast && v <= limit)
	if extra != nil && !extra() {
		c.Met = false
	}
	c.BestPeer = bestPeer(rw, true)
	return c
}

// absCheck checks an absolute aileron-proxy figure (at most limit).
func (r *report) absCheck(name, id string, limit float64, unit string) check {
	c := check{Name: name, Limit: limit, Unit: unit}
	rw, ok := r.row(id)
	if !ok {
		return c
	}
	v, ok := rw.Values[targetAileron]
	if !ok {
		return c
	}
	c.Value, c.Measured, c.Met = v, true, v <= limit
	c.BestPeer = bestPeer(rw, false)
	return c
}

// peerCheck checks aileron-proxy's figure on row id against goproxy's in
// the same run: at most factor times it (issue 17's CPU targets). When the
// row holds both targets' figures round by round, the value is the median
// of the per-round ratios (aileron-proxy's figure in a round over goproxy's
// in the same round), which a burst of load from elsewhere during one
// round cannot move; otherwise it is the ratio of the run's totals.
func (r *report) peerCheck(name, id string, factor float64) check {
	c := check{Name: name, Limit: factor, Unit: "× goproxy"}
	rw, ok := r.row(id)
	if !ok {
		return c
	}
	a, okA := rw.Values[targetAileron]
	g, okG := rw.Values[targetGoproxy]
	if !okA || !okG || g <= 0 {
		return c
	}
	c.Value, c.Measured = a/g, true
	if ratios := roundRatios(rw.PerRound[targetAileron], rw.PerRound[targetGoproxy]); len(ratios) > 0 {
		c.RoundRatios = ratios
		c.Value = median(ratios)
	}
	c.Met = c.Value <= factor
	c.BestPeer = bestPeer(rw, false)
	return c
}

// roundRatios divides a by b round by round, leaving out rounds where
// either measured nothing; nil when the series do not pair up.
func roundRatios(a, b []float64) []float64 {
	if len(a) == 0 || len(a) != len(b) {
		return nil
	}
	var out []float64
	for i := range a {
		if a[i] > 0 && b[i] > 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// median of vs (not empty); the mean of the middle two for an even count.
func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// bestPeerCheck checks that aileron-proxy's figure on row id is at least as
// good as the best measured peer's in the same run (issue 17); the limit is
// that peer's ratio to direct.
func (r *report) bestPeerCheck(name, id string) check {
	c := check{Name: name, Unit: "×"}
	rw, ok := r.row(id)
	if !ok {
		return c
	}
	a, okA := rw.Ratios[targetAileron]
	peer, _ := bestPeerOf(rw)
	best, found := rw.Ratios[peer] // the best value has the best ratio: same direct
	if !okA || !found {
		return c
	}
	c.Value, c.Limit, c.Measured = a, best, true
	c.Met = (rw.HigherIsBetter && a >= best) || (!rw.HigherIsBetter && a <= best)
	c.BestPeer = bestPeer(rw, true)
	return c
}

// bestPeerOf returns the measured peer with the best value on rw and that
// value; the name is empty when no peer was measured.
func bestPeerOf(rw row) (string, float64) {
	best, bestName := 0.0, ""
	for _, name := range []string{targetGoproxy, targetMitm, targetSquid} {
		v, ok := rw.Values[name]
		if !ok {
			continue
		}
		if bestName == "" || (rw.HigherIsBetter && v > best) || (!rw.HigherIsBetter && v < best) {
			best, bestName = v, name
		}
	}
	return bestName, best
}

// bestPeer names the best measured peer on a row and how aileron-proxy
// compares.
func bestPeer(rw row, ratio bool) string {
	bestName, best := bestPeerOf(rw)
	if bestName == "" {
		return ""
	}
	a, ok := rw.Values[targetAileron]
	verdict := "not beaten"
	if ok && ((rw.HigherIsBetter && a > best) || (!rw.HigherIsBetter && a < best)) {
		verdict = "beaten"
	}
	shown := fmtValue(best)
	if ratio {
		if r, ok := rw.Ratios[bestName]; ok {
			shown = fmt.Sprintf("%.2f×", r)
		}
	}
	return fmt.Sprintf("%s %s (%s)", bestName, shown, verdict)
}

func now() string { return time.Now().UTC().Format(time.RFC3339) }
