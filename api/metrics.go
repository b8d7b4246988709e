package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the API's own series. Labels are bounded: route is a route
// pattern from the route table (or "unmatched"), code an HTTP status.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	proxied  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aileron_api_requests_total",
			Help: "Control API requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "aileron_api_request_duration_seconds",
			Help:    "Control API request latency by route pattern, including time held for approval.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"route"}),
		proxied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aileron_api_proxied_calls_total",
			Help: "Calls the API sent through the proxy, by source endpoint and result (proxied, denied, error, retried).",
		}, []string{"source", "result"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.proxied} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(route, method string, status int, d time.Duration) {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
	default:
		method = "other" // keep the label bounded
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

func (s *Server) serveMetrics(c echo.Context) error {
	s.metricsHandler.ServeHTTP(c.Response(), c.Request())
	return nil
}

func newMetricsHandler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
