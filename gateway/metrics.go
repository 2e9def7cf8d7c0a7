package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lanefleet/lanefleet/metrics"
)

// gatewayMetrics are the gateway's collectors, on a registry of its own
// (no process-global one). Labels are the route's pattern, the method and
// the status: bounded by the route table; never a session key or token.
type gatewayMetrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	streams  prometheus.Gauge
	limited  *prometheus.CounterVec
}

func newMetrics() *gatewayMetrics {
	ns := metrics.Namespace
	m := &gatewayMetrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "gateway", Name: "requests_total",
			Help: "HTTP requests served, by route pattern, method and status code."}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: "gateway", Name: "request_duration_seconds",
			Help:    "Time to the response's headers (a stream's first byte), by route pattern.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"route"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: "gateway", Name: "open_streams",
			Help: "Server-sent event streams open now."}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "gateway", Name: "rate_limited_total",
			Help: "Requests refused with 429 by a token's rate or concurrency limit, by token name."}, []string{"token"}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.streams, m.limited,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// handler serves the registry.
func (m *gatewayMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Timeout: 10 * time.Second})
}

// observe records one request.
func (m *gatewayMetrics) observe(route, method string, code int, took time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(route).Observe(took.Seconds())
}
