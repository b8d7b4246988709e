package proxy

import (
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// Label values of the tunnel gauge.
const (
	modeIntercept   = "intercept"
	modePassthrough = "passthrough"
)

// decisionReasons are every reason label the decisions counter may carry,
// built from the one list of each: policy's reasons, the proxy's codes
// (internal/contract) and the proxy's own allow reasons. Anything else is
// counted as "other", so cardinality stays bounded.
var decisionReasons = func() []string {
	labels := []string{modePassthrough, reasonApproved, reasonStreamAborted, reasonOther, reasonLearned}
	for _, r := range policy.Reasons() {
		labels = append(labels, r.String())
	}
	for _, c := range contract.ProxyCodes {
		labels = append(labels, c.String())
	}
	slices.Sort(labels)
	return slices.Compact(labels)
}()

// reasonApproved is the allow reason of a call a person approved;
// reasonOther counts reasons missing from decisionReasons.
const (
	reasonApproved = "approved"
	reasonOther    = "other"
)

// metrics are the proxy's collectors. Labels never carry hosts, sessions,
// paths or secrets.
type metrics struct {
	decisions       *prometheus.CounterVec
	allow, deny     map[string]prometheus.Counter
	tunnels         *prometheus.GaugeVec
	intercepted     prometheus.Gauge
	passthrough     prometheus.Gauge
	leafLookups     *prometheus.CounterVec
	leafOK, leafErr prometheus.Counter
	upstream        prometheus.Histogram
	upstreamErrors  *prometheus.CounterVec
	learned         prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, leafStats func() (uint64, uint64)) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aileron_proxy_decisions_total",
			Help: "Proxy decisions (CONNECTs and requests inside tunnels) by result and reason.",
		}, []string{"result", "reason"}),
		tunnels: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "aileron_proxy_open_tunnels",
			Help: "Open CONNECT tunnels by mode (intercept or passthrough).",
		}, []string{"mode"}),
		leafLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aileron_proxy_leaf_lookups_total",
			Help: "Session leaf certificates fetched for intercepted tunnels, by result.",
		}, []string{"result"}),
		upstream: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "aileron_proxy_upstream_latency_seconds",
			Help:    "Time from sending a request upstream to receiving its response headers.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aileron_proxy_upstream_errors_total",
			Help: "Upstream round trips that failed before a response, by error code.",
		}, []string{"code"}),
		learned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aileron_proxy_learned_requests_total",
			Help: "Requests of learn sessions forwarded without credentials and recorded (connector.proxy.learned).",
		}),
		allow: map[string]prometheus.Counter{},
		deny:  map[string]prometheus.Counter{},
	}
	for _, r := range decisionReasons {
		m.allow[r] = m.decisions.WithLabelValues("allow", r)
		m.deny[r] = m.decisions.WithLabelValues("deny", r)
	}
	m.intercepted = m.tunnels.WithLabelValues(modeIntercept)
	m.passthrough = m.tunnels.WithLabelValues(modePassthrough)
	m.leafOK = m.leafLookups.WithLabelValues("ok")
	m.leafErr = m.leafLookups.WithLabelValues("error")
	for _, c := range []contract.Code{contract.CodeUpstreamAddressRefused, contract.CodeUpstreamUnreachable, contract.CodeUpstreamTimeout, contract.CodeUpstreamEncoding} {
		m.upstreamErrors.WithLabelValues(c.String())
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.decisions, m.tunnels, m.leafLookups, m.upstream, m.upstreamErrors, m.learned}
	if leafStats != nil {
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "aileron_ca_leaves_issued_total",
				Help: "Leaf certificates issued by session CAs.",
			}, func() float64 { issued, _ := leafStats(); return float64(issued) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "aileron_ca_leaf_cache_hits_total",
				Help: "Leaf certificate requests served from a session CA's cache.",
			}, func() float64 { _, hits := leafStats(); return float64(hits) }),
		)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("registering proxy metrics: %w; give each proxy its own prometheus.Registry", err)
			}
			return nil, fmt.Errorf("registering proxy metrics: %w", err)
		}
	}
	return m, nil
}

// decision counts one decision; reason is a code from decisionReasons.
func (m *metrics) decision(allow bool, reason string) {
	set := m.deny
	if allow {
		set = m.allow
	}
	c, ok := set[reason]
	if !ok {
		c = set[reasonOther]
	}
	c.Inc()
}

func (m *metrics) tunnelGauge(mode string) prometheus.Gauge {
	if mode == modePassthrough {
		return m.passthrough
	}
	return m.intercepted
}
