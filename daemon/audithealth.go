package daemon

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/audit"
)

// auditEpisodeLogger logs an audit log episode twice: when it becomes
// unavailable (error) and when it can be written again (warn), never per
// request. The writer calls it in order, from one goroutine at a time.
func auditEpisodeLogger(log *zap.Logger) func(audit.Status) {
	var since time.Time
	return func(st audit.Status) {
		if !st.Available {
			since = st.Since
			log.Error("audit log unavailable: refusing, with 503 audit_unavailable, every request and API call that would need an audit line until it can be written; free space under $AILERON_HOME/audit",
				zap.String("path", AuditFile), zap.Error(st.Err), zap.Uint64("write_errors", st.WriteErrors), zap.Uint64("events_lost", st.Lost))
			return
		}
		fields := []zap.Field{zap.Uint64("write_errors", st.WriteErrors), zap.Uint64("events_lost", st.Lost)}
		if !since.IsZero() {
			fields = append(fields, zap.Int64("unavailable_ms", st.Since.Sub(since).Milliseconds()))
		}
		log.Warn("audit log writable again: forwarding resumed", fields...)
	}
}

// auditCollectors export the audit log's health on /metrics.
func auditCollectors(w *audit.Writer) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "aileron_audit_write_errors_total",
			Help: "Failed writes, syncs and space reservations of the audit log.",
		}, func() float64 { return float64(w.Status().WriteErrors) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "aileron_audit_events_lost_total",
			Help: "Audit events that never reached the audit log.",
		}, func() float64 { return float64(w.Errors()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "aileron_audit_unavailable",
			Help: "1 while the audit log cannot be written: requests and API calls that would need an audit line get 503 audit_unavailable.",
		}, func() float64 {
			if w.Available() {
				return 0
			}
			return 1
		}),
	}
}
